"""The exhaustive explorer: the search itself, the transfer and exactly-once models, their
verdicts on the bundled and the seed's rules, and that the engine never reaches a state
the transfer model did not (so what the explorer proves is about the engine)."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import cast

import pytest
from hypothesis.stateful import invariant

from machines.cli import main
from machines.errors import MachinesError
from machines.explore import Exploration, ProgressBar, build_model, explore, scopes_of
from machines.explore.outcome import SCOPES as OUTCOME_SCOPES
from machines.explore.outcome import OutcomeModel
from machines.explore.transfer import TransferModel
from machines.explore.transfer_plans import SCOPES, steps_of
from machines.explore.worlds import World
from machines.spec.loader import load
from machines.testing.profiles import hunting, run_suite, scaled
from machines.testing.transfer.suite import PLANS, ReferenceTransfer, TransferSuite
from tests.conftest import Document, SpecCopy

# -- the search ----------------------------------------------------------------------------


class Ladder:
    """A toy model: 0 -> 1 -> ... -> 9 -> 10 (bad), plus a shortcut 0 -> 20 -> 21 -> 10
    (bad) found later in successor order; BFS must report the 3-move path."""

    name, scope, flag_floor = "ladder", "toy", 100

    def initial(self) -> Sequence[int]:
        return [0]

    def successors(self, state: int) -> list[int]:
        return [state for _, state in self.moves(state)]

    def moves(self, state: int) -> list[tuple[str, int]]:
        if state < 10:
            nxt = [(f"up to {state + 1}", state + 1 if state + 1 < 10 else 110)]
            if state == 0:
                nxt.append(("shortcut", 20))
            return nxt
        if state == 20:
            return [("on", 21)]
        if state == 21:
            return [("down", 110)]
        return []

    def canonical(self, state: int) -> int:
        return state

    def breaches(self, state: int) -> list[tuple[str, str]]:
        return [("bad", "reached 10")]

    def describe(self, state: int) -> str:
        return f"rung {state}"


def test_breadth_first_reports_the_shortest_trace() -> None:
    result = explore(Ladder())
    assert result.complete
    (violation,) = result.violations
    assert violation.trace == ("start: rung 0", "shortcut", "on", "down")
    assert violation.moves == 3
    assert "shortest trace (3 moves)" in violation.render()


def test_a_bound_stops_the_search_and_says_it_was_not_exhausted() -> None:
    model = TransferModel(load("request"), load("node"), SCOPES["gated"], scope="gated")
    result = explore(model, max_states=100)
    assert not result.complete
    assert 100 <= result.states < explore(model).states
    assert "not exhausted" in result.summary()


def test_the_progress_bar_writes_only_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet, loud = io.StringIO(), Terminal()
    for out in (quiet, loud):
        bar = ProgressBar(out, "toy")
        explore(Ladder(), progress=bar)
        bar.done()
    assert quiet.getvalue() == ""
    assert "states/s" in loud.getvalue() and "depth" in loud.getvalue()


# -- the transfer model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_rules() -> dict[str, Exploration]:
    return {
        scope: explore(TransferModel(load("request"), load("node"), plan, scope=scope))
        for scope, plan in SCOPES.items()
    }


def test_the_default_rules_hold_in_every_transfer_scope(
    default_rules: dict[str, Exploration],
) -> None:
    for scope, result in default_rules.items():
        assert result.complete, scope
        assert result.violations == [], (scope, [v.render() for v in result.violations])
        assert result.states > len(SCOPES[scope]) * 10, scope


@pytest.mark.parametrize("scope", ["parallel", "gated", "wide"])
def test_the_seed_rules_leave_a_request_executing_with_money_in_flight(scope: str) -> None:
    """qtg-v3 derives failed beside a sent withdrawal; the guard refuses it, so the
    request stays executing with a decision left unapplied (finding
    qtg-fails-with-money-in-flight)."""
    model = TransferModel(load("request"), load("node"), SCOPES[scope], scope=scope, rules="qtg-v3")
    result = explore(model)
    assert [v.invariant for v in result.violations] == ["derivation-consistency"]
    (violation,) = result.violations
    assert "request executing" in violation.state
    assert "=failed" in violation.state and "(sent)" in violation.state
    assert "derived failed" in violation.trace[-1]
    assert violation.moves <= 9


def test_the_recorded_finding_quotes_the_explorers_trace() -> None:
    model = TransferModel(load("request"), load("node"), SCOPES["gated"], rules="qtg-v3")
    (violation,) = explore(model).violations
    finding = next(f for f in load("request").findings if f.id == "qtg-fails-with-money-in-flight")
    text = " ".join(finding.resolution.split())
    assert f"machines explore transfer --rules qtg-v3 finds it in {violation.moves} moves" in text


def test_symmetry_merges_twins_and_keeps_the_verdicts() -> None:
    def run(symmetry: bool, rules: str | None = None) -> Exploration:
        plan = SCOPES["parallel"]  # withdraw_a and withdraw_b are interchangeable
        model = TransferModel(load("request"), load("node"), plan, rules=rules, symmetry=symmetry)
        return explore(model)

    merged, full = run(True), run(False)
    assert merged.states < full.states
    assert merged.violations == full.violations == []
    seed_merged, seed_full = run(True, "qtg-v3"), run(False, "qtg-v3")
    assert [v.invariant for v in seed_merged.violations] == ["derivation-consistency"]
    assert [v.moves for v in seed_merged.violations] == [v.moves for v in seed_full.violations]


def test_three_interchangeable_nodes_are_sorted_as_a_group() -> None:
    triple = steps_of(
        [{"name": f"withdraw_{x}", "kind": "action", "has_side_effect": True} for x in "abc"]
    )
    request, node = load("request"), load("node")
    merged = TransferModel(request, node, triple)
    full = TransferModel(request, node, triple, symmetry=False)
    assert len(merged.groups) == 1 and not merged.pairs
    merged_run, full_run = explore(merged), explore(full)
    assert merged_run.states < full_run.states
    assert merged_run.violations == full_run.violations == []
    seed = explore(TransferModel(request, node, triple, rules="qtg-v3"))
    seed_full = explore(TransferModel(request, node, triple, rules="qtg-v3", symmetry=False))
    assert [v.invariant for v in seed.violations] == ["derivation-consistency"]
    assert [v.moves for v in seed.violations] == [v.moves for v in seed_full.violations]


def test_the_trace_names_the_nodes_that_really_moved_under_symmetry() -> None:
    """Twins are merged into one representative; the printed trace is replayed on real
    states, so each move names the node that moved and the last state matches it."""
    model = TransferModel(load("request"), load("node"), SCOPES["parallel"], rules="qtg-v3")
    (violation,) = explore(model).violations
    moved_to_failed = [line for line in violation.trace if "--> failed" in line]
    failed_node = moved_to_failed[-1].split(":")[0]
    assert f"{failed_node}=failed" in violation.state


def test_a_plan_naming_an_unknown_predecessor_is_refused() -> None:
    plan = steps_of([{"name": "a", "kind": "action", "has_side_effect": True, "after": ["b"]}])
    with pytest.raises(Exception, match="node 'a' waits for"):
        TransferModel(load("request"), load("node"), plan)


# -- the engine stays inside the explored space ---------------------------------------------


@cache
def explored(plan: str) -> tuple[TransferModel, frozenset[int]]:
    """Every state of ``plan`` the model reaches, without symmetry (states as stored)."""
    model = TransferModel(load("request"), load("node"), steps_of(PLANS[plan]), symmetry=False)
    seen = set(model.initial())
    frontier = set(seen)
    while frontier:
        frontier = {n for s in frontier for n in model.successors(s)} - seen
        seen |= frontier
    return model, frozenset(seen)


class TransferWithinTheModel(TransferSuite):
    @invariant()
    def every_state_the_engine_reaches_was_explored(self) -> None:
        store = cast(ReferenceTransfer, self.adapter).store
        with store.transaction() as tx:
            for request, plan in self.plans.items():
                row = tx.get("request", request)
                if row is None:
                    continue
                nodes = tx.scope("node", request)
                model, seen = explored(plan)
                state = model.encode(
                    row.state,
                    {n.data["name"]: n.state for n in nodes},
                    [n.data["name"] for n in nodes if "sent" in n.data],
                )
                assert state in seen, f"unexplored: {model.describe(state)} (plan {plan})"


def test_the_engine_never_reaches_a_state_the_explorer_did_not() -> None:
    run_suite(TransferWithinTheModel, scaled(150, 60))


def test_the_conformance_check_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide every explored state in which a request executes: the suite must notice the
    engine getting there."""
    original = explored

    @cache
    def without_execution(plan: str) -> tuple[TransferModel, frozenset[int]]:
        model, seen = original(plan)
        return model, frozenset(s for s in seen if "request executing" not in model.describe(s))

    monkeypatch.setitem(globals(), "explored", without_execution)
    quick = hunting(10, 10)
    with pytest.raises(AssertionError, match=r"unexplored: request executing"):
        run_suite(TransferWithinTheModel, quick)


# -- the exactly-once model ----------------------------------------------------------------------


def test_the_executor_protocol_keeps_its_promises_in_every_outcome_scope() -> None:
    for scope in OUTCOME_SCOPES:
        result = explore(OutcomeModel(load("outcome"), OUTCOME_SCOPES[scope]))
        assert result.complete and result.violations == [], scope
        assert result.states > 100


def _take_over_expired_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken protocol: an expired lease is taken over instead of parked (the effect
    runs again), so the search reaches flagged worlds."""
    from machines.explore.outcome import _set
    from machines.explore.worlds import CLAIMED, Worker

    original = OutcomeModel._claim

    def take_over(self: OutcomeModel, world: World, w: int, k: int) -> tuple[str, World] | None:
        key = world.keys[k]
        if key.row == "in_flight" and key.owner and key.expired:
            after = key._replace(owner=w + 1, expired=False, landed=False)
            return "takes over the expired lease", _set(world, k, after, w, Worker(k + 1, CLAIMED))
        return original(self, world, w, k)

    monkeypatch.setattr(OutcomeModel, "_claim", take_over)


def test_the_outcome_model_catches_a_claim_that_takes_over_an_expired_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the protocol on purpose: an expired lease is taken over (the effect runs
    again) instead of parked. The explorer must find the double run."""
    _take_over_expired_leases(monkeypatch)
    result = explore(OutcomeModel(load("outcome"), OUTCOME_SCOPES["small"]))
    assert "exactly-once" in [v.invariant for v in result.violations]
    violation = next(v for v in result.violations if v.invariant == "exactly-once")
    assert any("takes over the expired lease" in line for line in violation.trace)
    assert "ran 2x" in violation.state


def test_the_outcome_model_catches_an_unfenced_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fence, a holder whose claim was parked and reclaimed writes over the
    new claim: a caller is told an outcome the key then loses."""
    from machines.explore.outcome import _set_key, _set_worker

    def unfenced(
        self: OutcomeModel, world: World, w: int, k: int, trigger: str, outcome: str, name: str
    ) -> Iterator[tuple[str, World]]:
        key = world.keys[k]
        moved = self._move(key._replace(row="in_flight"), trigger, "worker")
        assert moved is not None
        idle = _set_worker(world, w, type(world.workers[w])())
        after = moved._replace(owner=0, expired=False, told=outcome)
        yield f"{name}: records {trigger} without a fence", _set_key(idle, k, after)

    monkeypatch.setattr(OutcomeModel, "_record", unfenced)
    result = explore(OutcomeModel(load("outcome"), OUTCOME_SCOPES["small"]))
    assert "acknowledged-outcome-kept" in [v.invariant for v in result.violations]


def test_a_late_holder_finishes_after_a_reclaim_and_is_fenced_off() -> None:
    """The path of finding reclaim-does-not-stop-a-late-holder, replayed move by move."""
    model = OutcomeModel(load("outcome"), OUTCOME_SCOPES["small"], symmetry=False)
    path = [
        "w1 calls run(k1): claims it (insert, lease)",
        "the lease on k1 expires",
        "w2 calls run(k1): finds the lease expired and parks it",
        "a caller reclaims k1",
        "w2 calls run(k1): takes the reclaimed key",
        "w2 on k1: the effect fails before sending",
        "w1 on k1: the effect returns",
        "w2 on k1: records fail; the caller is told failed",
        "w1 on k1: the write is fenced off (the claim was lost)",
    ]
    (state,) = model.initial()
    for label in path:
        state = dict(model.moves(state))[label]
        assert state < model.flag_floor, label
    assert model.describe(state).startswith("k1: failed, ran 1x, 1 reclaim(s), caller told failed")


def test_keys_and_workers_are_a_symmetry() -> None:
    merged = explore(OutcomeModel(load("outcome"), OUTCOME_SCOPES["small"]))
    full = explore(OutcomeModel(load("outcome"), OUTCOME_SCOPES["small"], symmetry=False))
    assert merged.states < full.states
    assert merged.violations == full.violations == []


def _reachable(model: OutcomeModel, limit: int) -> list[int]:
    """The first ``limit`` states the search would visit, breadth first."""
    seen = dict.fromkeys(model.initial())
    frontier = list(seen)
    while frontier and len(seen) < limit:
        following = []
        for state in frontier:
            for nxt in model.successors(state):
                if nxt not in seen:
                    seen[nxt] = None
                    following.append(nxt)
        frontier = following
    return list(seen)


def _least_relabelling(world: World) -> World:
    """A world's canonical form by its definition: of every relabelling of keys and
    workers, the one whose (keys, workers) tuples compare least."""
    from itertools import permutations

    from machines.explore.worlds import Key, Worker

    best: World | None = None
    for kp in permutations(range(len(world.keys))):
        for wp in permutations(range(len(world.workers))):
            keys: list[Key] = [Key()] * len(kp)
            for i, key in enumerate(world.keys):
                keys[kp[i]] = key._replace(owner=wp[key.owner - 1] + 1) if key.owner else key
            workers: list[Worker] = [Worker()] * len(wp)
            for j, w in enumerate(world.workers):
                workers[wp[j]] = w._replace(key=kp[w.key - 1] + 1) if w.key else w
            renamed = World(tuple(keys), tuple(workers), world.flags)
            if best is None or (renamed.keys, renamed.workers) < (best.keys, best.workers):
                best = renamed
    assert best is not None
    return best


@pytest.mark.parametrize(
    ("scope", "symmetry", "broken", "limit"),
    [
        ("small", True, False, 10_000),
        ("small", False, False, 10_000),
        ("small", True, True, 10_000),
        ("default", True, False, 3_000),
        ("default", True, True, 3_000),
    ],
)
def test_the_compiled_successors_are_the_protocols_moves(
    scope: str, symmetry: bool, broken: bool, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``successors`` runs moves compiled to int deltas; ``moves`` (every trace) runs the
    protocol on records. On every state the search visits they must agree, move by move,
    and each canonical form must be the least relabelling of the world, by definition."""
    if broken:
        _take_over_expired_leases(monkeypatch)
    model = OutcomeModel(load("outcome"), OUTCOME_SCOPES[scope], symmetry=symmetry)
    states = _reachable(model, limit)
    flagged = 0
    for state in states:
        raws = [raw for _, raw in model.moves(state)]
        assert model.successors(state) == [model.canonical(raw) for raw in raws]
        for raw in raws:
            flagged += raw >= model.flag_floor
            world = model.packing.decode(raw)
            expected = _least_relabelling(world) if symmetry else world
            assert model.packing.decode(model.canonical(raw)) == expected
    assert (flagged > 0) == broken


def test_a_compiled_move_may_change_only_its_own_worker_and_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled moves rest on each move changing only the worker that makes it and the
    key it calls: a protocol that breaks that is refused, not explored wrongly."""
    from machines.explore.worlds import Worker

    original = OutcomeModel._claim

    def meddle(self: OutcomeModel, world: World, w: int, k: int) -> tuple[str, World] | None:
        claimed = original(self, world, w, k)
        if claimed is None:
            return None
        label, after = claimed
        others = tuple(Worker(0, "unsure") if j != w else x for j, x in enumerate(after.workers))
        return label, after._replace(workers=others)

    monkeypatch.setattr(OutcomeModel, "_claim", meddle)
    with pytest.raises(MachinesError, match="changes another worker or key"):
        explore(OutcomeModel(load("outcome"), OUTCOME_SCOPES["small"]))


# -- mutated definitions and the command ------------------------------------------------------


def _cancel_any_time_and_say_nothing(doc: Document) -> None:
    """A careless change that lets an operator cancel with money in flight and, to keep
    ``machines check`` quiet, deletes the rule that forbids it from the same definition."""
    edge = next(t for t in doc["transitions"] if t["trigger"] == "cancel")
    del edge["when"]
    doc["invariants"] = [
        rule for rule in doc["invariants"] if rule["id"] != "cancel-only-before-money-moves"
    ]


def test_the_explorer_judges_a_mutant_by_the_bundled_definitions(spec_copy: SpecCopy) -> None:
    """issue 14 item 4: a mutant that drops the cancel guard *and* its own
    ``cancel-only-before-money-moves`` rule judges itself innocent; judged by the bundled
    definitions (``judged_by_bundled=True``, what ``machines mutate`` asks for) the
    explorer finds the cancellation with money in flight. Fails when the bundled judge is
    not passed to the model."""
    spec_copy.edit("request", _cancel_any_time_and_say_nothing)
    by_itself = build_model("transfer", "withdraw", spec_dir=spec_copy.path)
    assert explore(by_itself).violations == []  # the blind spot the bundled judge closes
    judged = build_model("transfer", "withdraw", spec_dir=spec_copy.path, judged_by_bundled=True)
    violations = explore(judged).violations
    assert [v.invariant for v in violations] == ["cancel-only-before-money-moves"]
    (violation,) = violations
    assert "cancel (operator): request executing -> cancelled" in violation.trace[-1]
    assert "(sent)" in violation.state


def test_machines_mutate_catches_the_self_excusing_mutant_with_the_explorer(
    spec_copy: SpecCopy,
) -> None:
    """issue 14 item 4: the mutation check's explorer stage judges by the bundled
    definitions, so the same mutant dies there, not only (slowly) in the suite."""
    from machines.mutation.catalog import explore_mutant

    spec_copy.edit("request", _cancel_any_time_and_say_nothing)
    mutation = type("M", (), {"machine": "request"})()
    found = explore_mutant(mutation, spec_copy.path)  # type: ignore[arg-type]
    assert found is not None and "cancel-only-before-money-moves" in found


def test_explore_command_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["explore", "transfer", "--scope", "withdraw", "--scope", "gated"]) == 0
    out = capsys.readouterr().out
    assert "OK: 2 of 2 scope(s) exhausted" in out and "states/s" in out
    assert main(["explore", "transfer", "--scope", "gated", "--rules", "qtg-v3"]) == 1
    out = capsys.readouterr().out
    assert "derivation-consistency" in out and "shortest trace" in out and "FAILED" in out
    assert main(["explore", "transfer", "--scope", "nope"]) == 2
    assert "scopes: " in capsys.readouterr().err
    assert main(["explore", "transfer", "--rules", "nope"]) == 2
    assert "no derivation rule set 'nope'" in capsys.readouterr().err
    assert main(["explore", "exactly-once", "--rules", "qtg-v3"]) == 2
    assert main(["explore", "exactly-once", "--scope", "small"]) == 0
    assert main(["explore", "transfer", "--spec-dir", str(tmp_path)]) == 2


def test_every_scope_a_system_names_can_be_built() -> None:
    for system in ("transfer", "exactly-once"):
        every, default = scopes_of(system)
        assert set(default) <= set(every)
        for scope in every:
            assert build_model(system, scope).initial()
