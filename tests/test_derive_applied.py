"""Applying the derived request state is written once (``Deriver.derived_move``) and the
engine, the explorer and the derivation check all decide by it (issue 15).

The function is checked against the spec read naively (every transition, its actors and
its guard); then each consumer is checked to do exactly what the function says, under the
default rules (every derived state applies) and under the seed's rules ``qtg-v3`` (some
derived states are no legal move, and the request must stay where it is).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

import machines
from machines.derive import DerivedMove, Deriver, NodeKind, Signature
from machines.derive.proof import check_derivation
from machines.explore.transfer import TransferModel
from machines.explore.transfer_plans import SCOPES
from machines.spec import MachineSpec
from machines.spec.loader import definition_paths, read_definition
from machines.store import open_store
from machines.systems.reliance import standing_for_a_buggy_implementation
from machines.systems.transfer import ManualGate, TransferEngine
from machines.testing.transfer.suite import plan_node as node
from tests.conftest import Document, SpecCopy
from tests.test_transfer import FakeVenue, drive, executing

REQUEST = machines.load("request")
NODE = machines.load("node")
RULE_SETS = tuple(REQUEST.derivation.rule_sets) if REQUEST.derivation else ()
Call = tuple[str, Signature, DerivedMove | None]


def plans(alphabet_kinds: Sequence[NodeKind], most: int) -> Iterator[tuple[NodeKind, ...]]:
    for size in range(most + 1):
        yield from itertools.combinations_with_replacement(alphabet_kinds, size)


def naive_move(deriver: Deriver, state: str, sig: Signature) -> tuple[str, str] | str | None:
    """The spec read literally: ``None`` (nothing to apply), ``"stuck"`` (the derived state
    is no move of the derivation's actor under the nodes' context) or (trigger, dest)."""
    derivation = deriver.derivation
    result = deriver.decide(sig).result
    if state not in derivation.applied_in or result is None or result == state:
        return None
    context = deriver.context(sig)
    for t in REQUEST.transitions:
        if (
            t.source == state
            and t.dest == result
            and derivation.actor in t.actors
            and all(context.get(var) in allowed for var, allowed in t.when.items())
        ):
            return t.trigger, t.dest
    return "stuck"


def as_naive(move: DerivedMove | None) -> tuple[str, str] | str | None:
    if move is None:
        return None
    if move.trigger is None:
        assert move.dest is None
        return "stuck"
    assert move.dest is not None
    return move.trigger, move.dest


@pytest.mark.parametrize("rules", RULE_SETS)
def test_the_derived_move_is_the_spec_read_naively(rules: str) -> None:
    deriver = Deriver.build(REQUEST, NODE, rules)
    seen: set[tuple[str, Signature]] = set()
    for plan in plans(deriver.alphabet.kinds, 2):
        sig = deriver.alphabet.signature(plan)
        for state in REQUEST.states:
            if (state, sig) in seen:
                continue
            seen.add((state, sig))
            move = deriver.derived_move(state, sig)
            assert as_naive(move) == naive_move(deriver, state, sig), (state, plan)
            if move is not None:
                assert move.decision == deriver.decide(sig)
                assert dict(move.context) == deriver.context(sig)
                assert deriver.derived_move(state, sig) is move  # memoised


def test_the_seed_rules_have_derived_states_that_are_no_legal_move() -> None:
    """Otherwise the consumers' agreement on a refused move would go untested."""
    deriver = Deriver.build(REQUEST, NODE, "qtg-v3")
    stuck = [
        plan
        for plan in plans(deriver.alphabet.kinds, 2)
        if as_naive(deriver.derived_move("executing", deriver.alphabet.signature(plan))) == "stuck"
    ]
    assert stuck


# -- the engine -----------------------------------------------------------------------------


@contextmanager
def recorded(deriver: Deriver) -> Iterator[list[Call]]:
    calls: list[Call] = []
    decide = deriver.derived_move

    def spy(state: str, sig: Signature) -> DerivedMove | None:
        move = decide(state, sig)
        calls.append((state, sig, move))
        return move

    deriver.derived_move = spy  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del deriver.derived_move


def derivation_moves(engine: TransferEngine, request_id: str) -> list[tuple[str, str, str]]:
    with engine.store.transaction() as tx:
        history = tx.history("request", request_id)
    return [
        (e.trigger, e.dest, e.detail["rule"])
        for e in history
        if e.detail is not None and "rule" in e.detail
    ]


PLAN = [node("withdraw", "action", True), node("observe", "observe", False, "withdraw")]
PARALLEL = [node("withdraw_sent", "action", True), node("withdraw_refused", "action", True)]
GATED = [
    node("withdraw", "action", True),
    node("manual_review", "action", False, "withdraw", executor="gate"),
]

SCENARIOS: dict[str, tuple[Sequence[dict[str, Any]], dict[str, dict[str, list[Any]]]]] = {
    "completes": (PLAN, {}),
    "fails": (PLAN, {"withdraw": {"submit": ["failed"]}}),
    "loses track": (PLAN, {"withdraw": {"submit": ["unknown"]}}),
    "waits at a gate": (GATED, {}),
    "fails beside money in flight": (
        PARALLEL,
        {"withdraw_refused": {"submit": ["failed"]}, "withdraw_sent": {"observe": ["pending"]}},
    ),
}


def run_engine(
    specs: dict[str, MachineSpec] | None, plan: Sequence[dict[str, Any]], script: Any
) -> tuple[TransferEngine, list[Call]]:
    store = open_store("memory://", specs)
    venue = FakeVenue(script)
    with standing_for_a_buggy_implementation():  # the seed's rule set, on purpose
        engine = TransferEngine(store, {"venue": venue, "gate": ManualGate()}, engine_id="engine-1")
    with recorded(engine.deriver) as calls:
        executing(engine, "r1", plan)
        drive(engine, "r1")
    return engine, calls


def seed_rules_specs(spec_copy: SpecCopy) -> dict[str, MachineSpec]:
    def seed_rules(doc: Document) -> None:
        doc["derivation"]["default"] = "qtg-v3"

    spec_copy.edit("request", seed_rules)
    return {s.name: s for s in map(read_definition, definition_paths(spec_copy.path))}


def check_engine(engine: TransferEngine, calls: list[Call]) -> list[DerivedMove]:
    """The engine asked the function after every change of an executing request and made
    exactly the moves it returned, with the rule that decided them."""
    assert calls
    applied = [m for _, _, m in calls if m is not None and m.trigger is not None]
    expected = [(m.trigger, m.dest, m.decision.rule) for m in applied]
    assert derivation_moves(engine, "r1") == expected
    return [m for _, _, m in calls if m is not None and m.trigger is None]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_engine_makes_the_derived_moves(scenario: str) -> None:
    engine, calls = run_engine(None, *SCENARIOS[scenario])
    assert check_engine(engine, calls) == []  # the default rules never get stuck


def test_the_engine_leaves_a_request_where_the_derived_move_is_refused(
    spec_copy: SpecCopy,
) -> None:
    plan, script = SCENARIOS["fails beside money in flight"]
    engine, calls = run_engine(seed_rules_specs(spec_copy), plan, script)
    stuck = check_engine(engine, calls)
    assert stuck and {m.decision.result for m in stuck} == {"failed"}
    assert engine.request("r1").state == "executing"


# -- the explorer ---------------------------------------------------------------------------


def explored(model: TransferModel) -> set[int]:
    seen = set(model.initial())
    frontier = set(seen)
    while frontier:
        frontier = {n for s in frontier for n in model.successors(s)} - seen
        seen |= frontier
    return seen


@pytest.mark.parametrize("rules", RULE_SETS)
@pytest.mark.parametrize("scope", ["withdraw", "parallel", "gated"])
def test_the_explorer_settles_as_the_derived_move(scope: str, rules: str) -> None:
    model = TransferModel(REQUEST, NODE, SCOPES[scope], rules=rules, symmetry=False)
    deriver = Deriver.build(REQUEST, NODE, rules)
    stuck_flag = model.flag["derivation-consistency"]
    executing = model.r_index["executing"]
    checked = refused = 0
    pres = {pre for state in explored(model) for pre in model._pre_states(state, None)}
    for state in pres:
        if state & model.r_mask != executing or state & stuck_flag:
            continue
        awake = state + model._plan_info(state).wake
        triples = [
            (step.name, model.n_names[(awake >> sh) & model.n_mask], step.side_effect)
            for step, sh in zip(model.plan, model.shift, strict=True)
        ]
        move = deriver.derived_move(
            "executing", deriver.alphabet.signature(deriver.kinds_of(triples))
        )
        settled = model._settle(state)
        dest = model.r_names[settled & model.r_mask]
        if move is None:
            assert (dest, settled & stuck_flag) == ("executing", 0)
        elif move.trigger is None:
            assert (dest, bool(settled & stuck_flag)) == ("executing", True)
            refused += 1
        else:
            assert (dest, settled & stuck_flag) == (move.dest, 0)
        checked += 1
    assert checked
    if rules == "qtg-v3" and scope != "withdraw":
        assert refused  # the seed's rules fail a transfer with money in flight
    if rules != "qtg-v3":
        assert not refused


# -- the derivation check -------------------------------------------------------------------


@pytest.mark.parametrize("rules", RULE_SETS)
def test_the_proof_judges_consistency_by_the_derived_move(rules: str) -> None:
    """``derivation-consistency`` is broken by exactly the plans whose derived move is
    refused from a state the derivation is applied in."""
    deriver = Deriver.build(REQUEST, NODE, rules)
    applied_in = deriver.derivation.applied_in

    def refused(plan: tuple[NodeKind, ...]) -> bool:
        sig = deriver.alphabet.signature(plan)
        return any(as_naive(deriver.derived_move(s, sig)) == "stuck" for s in applied_in)

    expected = sum(1 for plan in plans(deriver.alphabet.kinds, 2) if refused(plan))
    report = check_derivation(REQUEST, NODE, max_nodes=2)
    (result,) = [r for r in report.results if r.name == rules]
    found = {c.invariant: c for c in result.counterexamples}
    if expected == 0:
        assert "derivation-consistency" not in found
    else:
        assert found["derivation-consistency"].plans == expected
        assert refused(found["derivation-consistency"].nodes)
    assert (rules == "qtg-v3") == (expected > 0)


def test_every_consumer_asks_the_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the three consumers reaches ``Deriver.derived_move`` (none has its own)."""
    calls: list[str] = []
    original: Callable[[Deriver, str, Signature], DerivedMove | None] = Deriver.derived_move

    def counted(self: Deriver, state: str, sig: Signature) -> DerivedMove | None:
        calls.append(state)
        return original(self, state, sig)

    monkeypatch.setattr(Deriver, "derived_move", counted)
    run_engine(None, *SCENARIOS["completes"])
    assert calls, "the engine"
    calls.clear()
    explored(TransferModel(REQUEST, NODE, SCOPES["withdraw"]))
    assert calls, "the explorer"
    calls.clear()
    check_derivation(REQUEST, NODE, max_nodes=1)
    assert calls, "the derivation check"
