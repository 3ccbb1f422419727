"""The named invariants hold on real runs of the reference systems, and each one catches
a snapshot broken on purpose (the breakage is built by hand, not by the code under test)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

import machines
from machines.checks.invariants import PREDICATES, check_invariants
from machines.checks.snapshots import Entity, Snapshot, snapshot
from machines.spec import MachineSpec
from machines.store import Store
from machines.systems import EffectLog, ExactlyOnce, TransferEngine
from tests.hand_built import entity, event

SPECS: dict[str, MachineSpec] = {
    n: machines.load(n) for n in ("effect", "outcome", "node", "request")
}


def snap(*entities: Entity, runs: dict[tuple[str, str], int] | None = None) -> Snapshot:
    return Snapshot(
        MappingProxyType({(e.machine, e.key): e for e in entities}), MappingProxyType(runs or {})
    )


def breached(s: Snapshot, previous: Snapshot | None = None) -> set[str]:
    return {b.invariant for b in check_invariants(SPECS, s, previous)}


class Venue:
    def prepare(self, node: Any) -> str:
        return "submit"

    def submit(self, node: Any) -> str:
        return "completed"

    def observe(self, node: Any) -> str:
        return "completed"


def test_real_runs_keep_every_invariant(store: Store) -> None:
    runs: dict[tuple[str, str], int] = {}

    def counted(machine: str, key: str, value: Any) -> Any:
        runs[(machine, key)] = runs.get((machine, key), 0) + 1
        return value

    eo = ExactlyOnce(store)
    eo.run("k1", lambda: counted("outcome", "k1", 1))
    eo.run("k1", lambda: counted("outcome", "k1", 2))
    with pytest.raises(machines.EffectIndeterminate):
        eo.run("k2", lambda: (counted("outcome", "k2", 0), 1 / 0))
    eo.reclaim("k2", by="alice", reason="idempotent")
    eo.run("k2", lambda: counted("outcome", "k2", 3))
    log = EffectLog(store)
    log.call("sig", lambda: counted("effect", "sig", "ok"), tier="compensable", session="s")
    log.call("sig", lambda: counted("effect", "sig", "again"), tier="compensable", session="s")
    engine = TransferEngine(store, {"venue": Venue()})
    engine.submit(
        "r1", [{"name": "withdraw", "kind": "action", "has_side_effect": True, "executor": "venue"}]
    )
    engine.validate("r1")
    engine.request_approval("r1")
    engine.approve("r1", by="op")
    engine.start("r1")
    engine.run("r1")
    first = snapshot(store, runs)
    assert {e.state for e in first.of("request")} == {"completed"}
    assert check_invariants(SPECS, first) == []
    assert check_invariants(SPECS, snapshot(store, runs), first) == []


def test_every_invariant_has_a_breaking_test() -> None:
    assert set(PREDICATES) == {
        "terminal-final",
        "append-only-history",
        "fail-closed-indeterminate",
        "exactly-once",
        "tier-discipline",
        "no-auto-terminal-money-in-flight",
        "derivation-consistency",
        "completion-means-done",
    }


def test_terminal_final() -> None:
    e = entity(
        "outcome",
        "k",
        "in_flight",
        [
            event("outcome", "k", 1, "in_flight", "succeeded", "succeed", "worker"),
            event("outcome", "k", 2, "succeeded", "in_flight", "reclaim", "caller"),
        ],
        data={"result": 1},
    )
    assert "terminal-final" in breached(snap(e))


@pytest.mark.parametrize("damage", ["gap", "wrong-start", "illegal", "state-mismatch"])
def test_append_only_history(damage: str) -> None:
    ok = [event("outcome", "k", 1, "in_flight", "indeterminate", "park", "worker")]
    if damage == "gap":
        ok = [ok[0]._replace(seq=2)]
    elif damage == "wrong-start":
        ok = [ok[0]._replace(source="succeeded")]
    elif damage == "illegal":
        ok = [ok[0]._replace(actor="caller")]
    state = "succeeded" if damage == "state-mismatch" else "indeterminate"
    assert "append-only-history" in breached(snap(entity("outcome", "k", state, ok)))


def test_append_only_history_across_snapshots() -> None:
    park = event("outcome", "k", 1, "in_flight", "indeterminate", "park", "worker")
    before = snap(entity("outcome", "k", "indeterminate", [park]))
    rewritten = snap(entity("outcome", "k", "indeterminate", [park._replace(at=5.0)]))
    assert "append-only-history" in breached(rewritten, before)
    assert "append-only-history" in breached(snap(), before)  # the entity vanished


def test_fail_closed_indeterminate() -> None:
    park = event("outcome", "k", 1, "in_flight", "indeterminate", "park", "worker")
    silent = event("outcome", "k", 2, "indeterminate", "in_flight", "reclaim", "caller")
    assert "fail-closed-indeterminate" in breached(
        snap(entity("outcome", "k", "in_flight", [park, silent]))
    )
    said = silent._replace(detail=MappingProxyType({"by": "a", "reason": "b"}))
    assert breached(snap(entity("outcome", "k", "in_flight", [park, said]))) == set()


def test_exactly_once() -> None:
    done = event("outcome", "k", 1, "in_flight", "succeeded", "succeed", "worker")
    row = entity("outcome", "k", "succeeded", [done], data={"result": 1})
    assert breached(snap(row, runs={("outcome", "k"): 1})) == set()
    assert "exactly-once" in breached(snap(row, runs={("outcome", "k"): 2}))
    assert "exactly-once" in breached(snap(replace(row, data=MappingProxyType({}))))
    execute = event(
        "effect", "s", 1, "pending", "executing", "execute", "proxy", {"tier": "compensable"}
    )
    effect = entity("effect", "s", "executing", [execute], context={"tier": "compensable"})
    assert "exactly-once" in breached(snap(effect, runs={("effect", "s"): 2}))


def test_tier_discipline() -> None:
    approve = event(
        "effect", "s", 1, "pending", "approved", "approve", "human", {"tier": "compensable"}
    )
    sneaky = entity("effect", "s", "approved", [approve], context={"tier": "compensable"})
    assert "tier-discipline" in breached(snap(sneaky))
    assert "tier-discipline" in breached(
        snap(entity("effect", "t", "pending", [], context={"tier": "safe"}))
    )


def test_no_auto_terminal_money_in_flight() -> None:
    ctx = {"kind": "action"}
    node_events = [
        event("node", "r/w", 1, "blocked", "ready", "wake", "planner", ctx),
        event("node", "r/w", 2, "ready", "preparing", "prepare", "executor", ctx),
        event("node", "r/w", 3, "preparing", "submitting", "submit", "executor", ctx),
        event("node", "r/w", 4, "submitting", "unknown", "lose_track", "executor", ctx),
    ]
    withdraw = entity(
        "node",
        "r/w",
        "unknown",
        node_events,
        context=ctx,
        scope="r",
        data={"name": "w", "has_side_effect": True},
    )
    request_events = [
        event("request", "r", 1, "received", "validated", "validate", "system"),
        event("request", "r", 2, "validated", "pending_approval", "request_approval", "system"),
        event("request", "r", 3, "pending_approval", "approved", "approve", "operator"),
        event("request", "r", 4, "approved", "executing", "start", "system"),
        event("request", "r", 5, "executing", "failed", "fail", "system", {"side_effects": "none"}),
    ]
    failed = entity("request", "r", "failed", request_events)
    assert "no-auto-terminal-money-in-flight" in breached(snap(withdraw, failed))
    guessed = [
        *node_events,
        event("node", "r/w", 5, "unknown", "failed", "reconcile_failed", "executor", ctx),
    ]
    assert "no-auto-terminal-money-in-flight" in breached(
        snap(replace(withdraw, state="failed", history=tuple(guessed)))
    )


def test_derivation_consistency() -> None:
    ctx = {"kind": "observe"}
    done = entity(
        "node",
        "r/o",
        "completed",
        [
            event("node", "r/o", 1, "blocked", "ready", "wake", "planner", ctx),
            event("node", "r/o", 2, "ready", "observing", "start_observing", "observer", ctx),
            event("node", "r/o", 3, "observing", "completed", "complete", "observer", ctx),
        ],
        context=ctx,
        scope="r",
        data={"name": "o", "has_side_effect": False},
    )
    stuck = entity(
        "request",
        "r",
        "executing",
        [
            event("request", "r", 1, "received", "validated", "validate", "system"),
            event("request", "r", 2, "validated", "pending_approval", "request_approval", "system"),
            event("request", "r", 3, "pending_approval", "approved", "approve", "operator"),
            event("request", "r", 4, "approved", "executing", "start", "system"),
        ],
    )
    assert "derivation-consistency" in breached(snap(done, stuck))
