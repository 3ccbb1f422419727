"""The request derivation: the seed's examples, the two rule sets, and the exhaustive check.

A naive interpreter of the rule data, written here independently of ``machines.derive``'s
bit-mask evaluation, must agree with it on random plans; the money invariants are restated
here from the seed rather than taken from ``machines.derive.proof``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import machines
from machines.derive import derive_request_state
from machines.derive.proof import DerivationReport, check_derivation
from machines.derive.rules import Alphabet
from machines.errors import InvalidNodeState, MachinesError
from machines.spec import Clause, RuleSet
from machines.spec.states import NodeState, RequestState
from machines.testing.profiles import scaled

REQUEST = machines.load("request")
NODE = machines.load("node")
NODE_STATES = list(NODE.states)
MONEY_MAY_HAVE_MOVED = {"submitting", "submitted", "observing", "unknown", "completed"}
NODE_TERMINAL = {"completed", "failed", "cancelled", "skipped"}

Node = tuple[str, str, bool]

nodes_strategy = st.lists(
    st.tuples(
        st.sampled_from(["withdraw", "deposit_observe", "manual_confirm", "manual_x", "bridge"]),
        st.sampled_from(NODE_STATES),
        st.booleans(),
    ),
    max_size=8,
)


def naive_derive(rule_set: RuleSet, nodes: list[Node]) -> str | None:
    """The rule data read literally: first rule whose clauses all hold wins."""

    def matches(clause: Clause, node: Node) -> bool:
        name, state, side_effect = node
        n = clause.nodes
        return (
            (n.states is None or state in n.states)
            and (n.side_effect is None or n.side_effect == side_effect)
            and (n.manual is None or n.manual == name.startswith("manual_"))
        )

    def holds(clause: Clause) -> bool:
        hits = [matches(clause, node) for node in nodes]
        return {"any": any(hits), "all": all(hits), "none": not any(hits)}[clause.quantifier]

    for rule in rule_set.rules:
        if all(holds(c) for c in rule.when):
            return rule.result
    return None


class TestSeedExamples:
    """The worked examples of seed 003, under both rule sets."""

    @pytest.mark.parametrize("rules", [None, "qtg-v3"])
    def test_money_left_then_deposit_failed_needs_a_person(self, rules: str | None) -> None:
        nodes = [("withdraw", "completed", True), ("deposit_observe", "failed", False)]
        assert derive_request_state(nodes, rules) is RequestState.MANUAL_INTERVENTION

    @pytest.mark.parametrize("rules", [None, "qtg-v3"])
    def test_withdrawal_failed_before_money_left_is_a_safe_failure(self, rules: str | None) -> None:
        nodes = [("withdraw", "failed", True), ("withdraw_observe", "blocked", False)]
        assert derive_request_state(nodes, rules) is RequestState.FAILED

    @pytest.mark.parametrize("rules", [None, "qtg-v3"])
    def test_everything_done_completes(self, rules: str | None) -> None:
        nodes = [("withdraw", "completed", True), ("x", "skipped", False)]
        assert derive_request_state(nodes, rules) is RequestState.COMPLETED

    @pytest.mark.parametrize("rules", [None, "qtg-v3"])
    def test_in_progress_is_no_change(self, rules: str | None) -> None:
        nodes = [
            ("withdraw", "completed", True),
            ("withdraw_observe", "completed", False),
            ("deposit_observe", "observing", False),
        ]
        assert derive_request_state(nodes, rules) is None

    @pytest.mark.parametrize("rules", [None, "qtg-v3"])
    def test_manual_gate_waits_only_when_nothing_runs(self, rules: str | None) -> None:
        gate = ("manual_confirm", "ready", False)
        assert derive_request_state([gate, ("a", "blocked", False)], rules) is (
            RequestState.WAITING_MANUAL_ACTION
        )
        assert derive_request_state([gate, ("a", "submitted", True)], rules) is None

    @pytest.mark.parametrize("rules", [None, "qtg-v3"])
    def test_unknown_alone_waits_for_reconciliation(self, rules: str | None) -> None:
        assert derive_request_state([("withdraw", "unknown", True)], rules) is None


class TestWhereTheRuleSetsDiffer:
    def test_seed_fails_the_transfer_while_money_is_unknown(self) -> None:
        nodes = [("withdraw", NodeState.UNKNOWN, True), ("other_leg", NodeState.FAILED, False)]
        assert derive_request_state(nodes, "qtg-v3") is RequestState.FAILED
        assert derive_request_state(nodes) is RequestState.MANUAL_INTERVENTION

    def test_seed_fails_the_transfer_while_a_parallel_withdrawal_is_submitted(self) -> None:
        nodes = [("withdraw_a", "submitted", True), ("withdraw_b", "failed", True)]
        assert derive_request_state(nodes, "qtg-v3") is RequestState.FAILED
        assert derive_request_state(nodes) is RequestState.MANUAL_INTERVENTION

    def test_seed_never_settles_a_cancelled_plan(self) -> None:
        nodes = [("withdraw", "cancelled", True), ("observe", "skipped", False)]
        assert derive_request_state(nodes, "qtg-v3") is None
        assert derive_request_state(nodes) is RequestState.FAILED

    def test_default_waits_while_money_is_being_signed(self) -> None:
        nodes = [("withdraw", "awaiting_signature", True), ("check", "failed", False)]
        assert derive_request_state(nodes) is None


class TestInputValidation:
    def test_unknown_node_state_is_refused(self) -> None:
        with pytest.raises(InvalidNodeState, match="'done' is not a node state"):
            derive_request_state([("withdraw", "done", True)])

    @pytest.mark.parametrize("bad", [("withdraw", "ready"), ("withdraw", "ready", "yes"), 7])
    def test_malformed_node_is_refused(self, bad: object) -> None:
        with pytest.raises(InvalidNodeState):
            derive_request_state([bad])  # type: ignore[list-item]

    def test_unknown_rule_set_is_refused(self) -> None:
        with pytest.raises(MachinesError, match="no derivation rule set 'qtg-v4'"):
            derive_request_state([], "qtg-v4")

    def test_empty_plan_completes(self) -> None:
        assert derive_request_state([]) is RequestState.COMPLETED


@settings(scaled(400))
@given(nodes=nodes_strategy, rules=st.sampled_from(["money-safe", "qtg-v3"]))
def test_compiled_derivation_agrees_with_a_literal_reading_of_the_rules(
    nodes: list[Node], rules: str
) -> None:
    assert REQUEST.derivation is not None
    expected = naive_derive(REQUEST.derivation.rule_sets[rules], nodes)
    got = derive_request_state(nodes, rules)
    assert (None if got is None else str(got)) == expected


@settings(scaled(400))
@given(nodes=nodes_strategy)
def test_default_rules_keep_the_money_promises(nodes: list[Node]) -> None:
    result = derive_request_state(nodes)
    money_moving = any(se and state in MONEY_MAY_HAVE_MOVED for _, state, se in nodes)
    if money_moving:
        assert result not in (RequestState.FAILED, RequestState.CANCELLED)
    if all(state in NODE_TERMINAL for _, state, _ in nodes):
        assert result is not None
    if result is RequestState.COMPLETED:
        assert all(state in ("completed", "skipped") for _, state, _ in nodes)
    if result is not None:
        side_effects = "started" if money_moving else "none"
        assert REQUEST.allows("executing", str(result), side_effects=side_effects)


@pytest.fixture(scope="module")
def report() -> DerivationReport:
    return check_derivation(REQUEST, NODE, max_nodes=5)


class TestExhaustiveCheck:
    def test_every_multiset_up_to_five_nodes_is_enumerated(self, report: DerivationReport) -> None:
        kinds = len(NODE.states) * 2 * 2  # state x has_side_effect x manual gate
        expected = sum(math.comb(kinds + k - 1, k) for k in range(6))
        assert report.kinds == kinds
        assert report.plans == expected

    def test_verdicts_extend_to_every_plan_size(self, report: DerivationReport) -> None:
        assert report.closed

    def test_default_rule_set_breaks_nothing(self, report: DerivationReport) -> None:
        (money_safe,) = [r for r in report.results if r.name == "money-safe"]
        assert money_safe.counterexamples == ()

    def test_seed_rule_set_breaks_exactly_what_its_findings_record(
        self, report: DerivationReport
    ) -> None:
        (qtg,) = [r for r in report.results if r.name == "qtg-v3"]
        assert REQUEST.derivation is not None
        recorded = set(REQUEST.derivation.rule_sets["qtg-v3"].known_violations)
        assert {c.invariant for c in qtg.counterexamples} == recorded
        smallest = {c.invariant: c for c in qtg.counterexamples}
        assert [k[0] for k in smallest["derivation-settles"].nodes] == ["cancelled"]
        money = smallest["no-auto-terminal-money-in-flight"]
        assert len(money.nodes) == 2 and money.decision.result == "failed"


def test_an_enumeration_is_made_once_per_process_and_only_for_the_same_kinds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plans of one alphabet are enumerated once: a second check of the same
    definitions gets the same report without enumerating, and a node definition with
    other kinds or a larger bound is enumerated afresh."""
    from machines.derive import proof

    monkeypatch.setattr(proof, "_ENUMERATED", {})
    made: list[int] = []
    plans = proof._plans

    def counted(*args):  # type: ignore[no-untyped-def]
        made.append(args[3])
        return plans(*args)

    monkeypatch.setattr(proof, "_plans", counted)
    first = check_derivation(REQUEST, NODE, max_nodes=3)
    again = check_derivation(REQUEST, NODE, max_nodes=3)
    assert made == [3]
    assert (again.plans, again.signatures, again.results) == (
        first.plans,
        first.signatures,
        first.results,
    )
    check_derivation(REQUEST, NODE, max_nodes=4)
    assert made == [3, 4]
    blind = Alphabet(NODE, [])  # no predicate: every kind looks alike
    witness, count, total = proof._enumerate(blind, 3, None)
    assert made == [3, 4, 3]
    assert list(count.values()) == [total] and len(witness) == 1


def test_the_plain_reading_of_the_context_agrees_with_the_compiled_one() -> None:
    """``Derivation.implied_context`` (what a migration reads of a request's nodes) gives
    the context the deriver's bit masks give, for every plan of up to two node kinds."""
    import itertools

    from machines.derive.rules import Deriver
    from machines.spec.loader import load

    request = load("request")
    deriver = Deriver.build(request, load("node"))
    assert request.derivation is not None
    kinds = deriver.alphabet.kinds
    plans = [(), *((k,) for k in kinds), *itertools.combinations(kinds, 2)]
    seen = set()
    for plan in plans:
        expected = deriver.context(deriver.alphabet.signature(plan))
        assert request.derivation.implied_context(plan) == expected, plan
        seen.add(tuple(expected.values()))
    assert len(seen) > 1  # both values of side_effects were met
