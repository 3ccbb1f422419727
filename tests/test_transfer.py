"""TransferEngine on memory and SQLite, with fake venues scripted per node: the seed's
scenarios end where the spec says, every move is a legal audited event, and a transfer is
never failed (nor its reservation released) while money may be on its way."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

import machines
from machines.errors import InvalidArgument, InvalidStateTransition, MachinesError
from machines.spec import MachineSpec
from machines.spec.loader import load
from machines.spec.states import NodeState, RequestState
from machines.store import Store, open_store
from machines.systems.transfer import (
    CallbackFailed,
    Executor,
    ManualGate,
    ObserveAnswer,
    PlanError,
    PlanNode,
    PrepareAnswer,
    SubmitAnswer,
    TransferConfigError,
    TransferEngine,
    TransferRefused,
    UnknownTransfer,
)
from machines.systems.transfer.policy import NODE_MOVES, REQUEST_CALLS
from machines.testing.transfer.suite import plan_node as node
from tests.conftest import FakeClock

Answer = str | BaseException
STARTED = {"submitting", "submitted", "observing", "unknown", "completed"}


class Crash(BaseException):
    """The process dies inside an executor call (nothing in the engine catches it)."""


class FakeVenue:
    """Answers scripted per node and call; the last answer repeats, an exception is raised.
    Unscripted calls succeed (prepare: submit, submit: accepted, observe: completed)."""

    DEFAULTS: Mapping[str, Answer] = {
        "prepare": "submit",
        "submit": "accepted",
        "observe": "completed",
    }

    def __init__(self, script: Mapping[str, Mapping[str, Sequence[Answer]]] | None = None) -> None:
        self.script = {
            n: {c: list(a) for c, a in calls.items()} for n, calls in (script or {}).items()
        }
        self.calls: list[tuple[str, str]] = []

    def _answer(self, call: str, node: PlanNode) -> str:
        self.calls.append((call, node.name))
        queue = self.script.get(node.name, {}).get(call)
        answer = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else self.DEFAULTS[call]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def prepare(self, node: PlanNode) -> PrepareAnswer:
        return cast(PrepareAnswer, self._answer("prepare", node))

    def submit(self, node: PlanNode) -> SubmitAnswer:
        return cast(SubmitAnswer, self._answer("submit", node))

    def observe(self, node: PlanNode) -> ObserveAnswer:
        return cast(ObserveAnswer, self._answer("observe", node))

    def count(self, call: str, node: str) -> int:
        return self.calls.count((call, node))


class Recorder:
    """Every callback, in order: (name, request id, payload)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Mapping[str, Any]]] = []

    def callbacks(self) -> dict[str, Any]:
        names = ("frontier_advanced", "request_completed", "request_failed", "request_attention")
        return {name: self._for(name) for name in names}

    def _for(self, name: str) -> Any:
        return lambda request_id, payload: self.events.append((name, request_id, payload))

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.events]


CEX = [
    node("withdraw", "action", True),
    node("withdraw_observe", "observe", False, "withdraw"),
    node("deposit_observe", "observe", False, "withdraw_observe"),
]


def engine_for(
    store: Store,
    venue: FakeVenue,
    recorder: Recorder | None = None,
    **options: Any,
) -> TransferEngine:
    executors: dict[str, Executor] = {"venue": venue, "gate": ManualGate()}
    callbacks = recorder.callbacks() if recorder else None
    return TransferEngine(store, executors, callbacks, engine_id="engine-1", **options)


def approved(engine: TransferEngine, request_id: str, plan: Sequence[Mapping[str, Any]]) -> None:
    """Request ``request_id`` submitted with ``plan`` and approved, not started."""
    engine.submit(request_id, plan)
    engine.validate(request_id)
    engine.request_approval(request_id)
    engine.approve(request_id, by="alice")


def executing(engine: TransferEngine, request_id: str, plan: Sequence[Mapping[str, Any]]) -> None:
    approved(engine, request_id, plan)
    assert engine.start(request_id) == RequestState.EXECUTING


def drive(engine: TransferEngine, request_id: str, steps: int = 12) -> RequestState:
    """Step a fixed number of times: ``run`` returns as soon as nothing moves, which a
    pending observation causes; a real engine would call it again later."""
    for _ in range(steps):
        engine.step(request_id)
    return RequestState(engine.request(request_id).state)


def states(engine: TransferEngine, request_id: str) -> dict[str, str]:
    return {name: n.state.value for name, n in engine.nodes(request_id).items()}


def events(store: Store, machine: str, key: str) -> list[Any]:
    with store.transaction() as tx:
        return tx.history(machine, key)


def snapshot(store: Store, request_id: str) -> list[tuple[str, int, int]]:
    """(key, version, history length) of the request and every node: any write shows."""
    with store.transaction() as tx:
        rows = [tx.get("request", request_id), *tx.scope("node", request_id)]
        return [(r.key, r.version, len(tx.history(r.machine, r.key))) for r in rows if r]


def assert_audited(store: Store, engine: TransferEngine, request_id: str) -> None:
    """Every history replays legally from the initial state through ``spec.step`` with its
    recorded actor and context, ends at the row's state, and names who moved (``by``)."""
    specs = store.specs()
    keys = [("request", request_id)] + [
        ("node", f"{request_id}/{n}") for n in engine.nodes(request_id)
    ]
    for machine, key in keys:
        spec, state = specs[machine], specs[machine].initial
        for seq, event in enumerate(events(store, machine, key), start=1):
            assert (event.seq, event.source) == (seq, state), f"{key}: broken chain at {seq}"
            assert event.actor in spec.actors, f"{key}: unknown actor {event.actor}"
            assert (
                spec.step(event.source, event.trigger, actor=event.actor, **event.context)
                == event.dest
            )
            assert event.detail and isinstance(event.detail.get("by"), str) and event.detail["by"]
            state = event.dest
        with store.transaction() as tx:
            row = tx.get(machine, key)
        assert row is not None and row.state == state


def request_dests(store: Store, request_id: str) -> list[str]:
    return [e.dest for e in events(store, "request", request_id)]


# -- the seed's scenarios -------------------------------------------------------------------


def test_happy_path_cex_plan_completes_and_consumes_the_reservation(store: Store) -> None:
    venue, recorder = FakeVenue(), Recorder()
    engine = engine_for(store, venue, recorder)
    executing(engine, "r1", CEX)
    assert engine.run("r1") == RequestState.COMPLETED
    row = engine.request("r1")
    assert row.data["reservation"] == "consumed"
    assert row.data["current_frontier"] == []
    assert set(states(engine, "r1").values()) == {"completed"}
    withdraw = [(e.trigger, e.actor) for e in events(store, "node", "r1/withdraw")]
    assert withdraw == [
        ("wake", "planner"),
        ("prepare", "executor"),
        ("submit", "executor"),
        ("accept", "executor"),
        ("complete", "observer"),  # the first observation was final: no observing
    ]
    assert recorder.names == ["frontier_advanced"] * 3 + ["request_completed"]
    frontiers = [p["frontier"] for name, _, p in recorder.events if name == "frontier_advanced"]
    assert frontiers == [["withdraw"], ["withdraw_observe"], ["deposit_observe"]]
    assert recorder.events[-1][2]["reservation"] == "consumed"
    assert venue.count("submit", "withdraw") == 1
    assert_audited(store, engine, "r1")


def test_join_wakes_only_after_every_branch_completed(store: Store) -> None:
    venue = FakeVenue({"slow": {"observe": ["pending"] * 4 + ["completed"]}})
    engine = engine_for(store, venue)
    plan = [
        node("withdraw", "action", True),
        node("slow", "observe", False, "withdraw"),
        node("fast", "observe", False, "withdraw"),
        node("join", "observe", False, "slow", "fast"),
    ]
    executing(engine, "r2", plan)
    join_waited_for_slow = False
    for _ in range(20):  # a pending observation moves nothing, so step past it
        engine.step("r2")
        now = states(engine, "r2")
        if now["join"] != "blocked":
            assert now["slow"] == now["fast"] == "completed"
        join_waited_for_slow |= now["fast"] == "completed" and now["join"] == "blocked"
    assert join_waited_for_slow
    assert engine.request("r2").state == RequestState.COMPLETED
    assert_audited(store, engine, "r2")


def test_failure_after_money_moved_escalates_and_holds_the_reservation(store: Store) -> None:
    venue, recorder = FakeVenue({"deposit_observe": {"observe": ["failed"]}}), Recorder()
    engine = engine_for(store, venue, recorder)
    executing(engine, "r3", CEX)
    assert engine.run("r3") == RequestState.MANUAL_INTERVENTION
    assert engine.request("r3").data["reservation"] == "held"
    assert recorder.names[-1] == "request_attention"
    escalation = events(store, "request", "r3")[-1]
    assert (escalation.trigger, escalation.actor) == ("escalate", "system")
    assert (
        escalation.detail is not None and escalation.detail["rule"] == "stopped-after-money-moved"
    )
    assert escalation.context["side_effects"] == "started"
    # resuming cannot undo a failed node: the derivation escalates again at once
    assert engine.resume("r3", by="carol") == RequestState.MANUAL_INTERVENTION
    with pytest.raises(TransferRefused, match="evidence"):
        engine.confirm_completed("r3", by="carol", evidence=" ")
    done = engine.confirm_completed("r3", by="carol", evidence="deposit found in the ledger")
    assert done == RequestState.COMPLETED
    assert engine.request("r3").data["reservation"] == "consumed"
    assert recorder.names[-1] == "request_completed"
    assert "failed" not in request_dests(store, "r3")
    assert_audited(store, engine, "r3")


@pytest.mark.parametrize(
    ("script", "never_called"),
    [
        ({"prepare": [RuntimeError("insufficient balance")]}, "submit"),
        ({"submit": ["failed"]}, "observe"),
    ],
    ids=["prepare-raises", "venue-refuses"],
)
def test_failure_before_money_moved_fails_and_releases(
    store: Store, script: dict[str, list[Answer]], never_called: str
) -> None:
    venue, recorder = FakeVenue({"withdraw": script}), Recorder()
    engine = engine_for(store, venue, recorder)
    executing(engine, "r4", CEX)
    assert engine.run("r4") == RequestState.FAILED
    assert engine.request("r4").data["reservation"] == "released"
    assert recorder.names[-1] == "request_failed"
    assert venue.count(never_called, "withdraw") == 0
    assert states(engine, "r4") == {
        "withdraw": "failed",
        "withdraw_observe": "blocked",
        "deposit_observe": "blocked",
    }
    last = events(store, "node", "r4/withdraw")[-1]
    assert last.detail is not None and last.detail["evidence"].startswith(next(iter(script)))
    failure = events(store, "request", "r4")[-1]
    assert (failure.trigger, failure.context["side_effects"]) == ("fail", "none")
    assert_audited(store, engine, "r4")


def test_unknown_side_effect_beside_a_failure_is_never_failed(store: Store) -> None:
    venue = FakeVenue(
        {
            "withdraw": {"submit": [TimeoutError("no answer from the exchange")]},
            "balance_check": {"observe": ["pending", "pending", "pending", "failed"]},
        }
    )
    recorder = Recorder()
    engine = engine_for(store, venue, recorder)
    plan = [
        node("withdraw", "action", True),
        node("balance_check", "observe", False),
        node("deposit_observe", "observe", False, "withdraw", "balance_check"),
    ]
    executing(engine, "r5", plan)
    assert engine.run("r5") == RequestState.EXECUTING  # balance_check still pending
    assert drive(engine, "r5") == RequestState.MANUAL_INTERVENTION
    assert states(engine, "r5")["withdraw"] == "unknown"
    assert states(engine, "r5")["balance_check"] == "failed"
    assert engine.request("r5").data["reservation"] == "held"
    assert "request_failed" not in recorder.names
    assert events(store, "request", "r5")[-1].detail["rule"] == "stopped-with-money-in-flight"
    lost = events(store, "node", "r5/withdraw")[-1]
    assert (lost.trigger, lost.dest) == ("lose_track", "unknown")
    assert "TimeoutError" in lost.detail["evidence"]
    assert drive(engine, "r5") == RequestState.MANUAL_INTERVENTION  # nothing touches unknown
    assert venue.count("submit", "withdraw") == 1
    assert engine.reconcile("r5", "withdraw", "completed", by="recon-7") == NodeState.COMPLETED
    assert engine.resume("r5", by="carol") == RequestState.MANUAL_INTERVENTION
    settled = engine.confirm_failed("r5", by="carol", evidence="withdrawal returned by hand")
    assert settled == RequestState.FAILED
    assert request_dests(store, "r5").count("failed") == 1  # only the operator's decision
    assert_audited(store, engine, "r5")


def test_money_in_flight_is_still_followed_in_manual_intervention(store: Store) -> None:
    venue = FakeVenue(
        {
            "withdraw": {"observe": ["pending", "pending", "completed"]},
            "check": {"observe": ["pending", "failed"]},
        }
    )
    engine = engine_for(store, venue)
    plan = [node("withdraw", "action", True), node("check", "observe", False)]
    executing(engine, "r18", plan)
    engine.step("r18")
    engine.step("r18")
    engine.step("r18")
    assert states(engine, "r18") == {"withdraw": "observing", "check": "failed"}
    assert engine.request("r18").state == RequestState.MANUAL_INTERVENTION
    assert drive(engine, "r18") == RequestState.MANUAL_INTERVENTION
    assert states(engine, "r18")["withdraw"] == "completed"  # watched to the end
    assert [e.trigger for e in events(store, "request", "r18")][-1] == "escalate"
    assert engine.request("r18").data["reservation"] == "held"
    assert_audited(store, engine, "r18")


@pytest.mark.parametrize(
    ("evidence", "final", "reservation"),
    [
        ("submitted", RequestState.COMPLETED, "consumed"),
        ("completed", RequestState.COMPLETED, "consumed"),
        ("failed", RequestState.FAILED, "released"),
    ],
)
def test_reconciliation_is_the_way_out_of_unknown(
    store: Store, evidence: str, final: RequestState, reservation: str
) -> None:
    venue = FakeVenue({"withdraw": {"submit": [ConnectionResetError("dropped")]}})
    engine = engine_for(store, venue)
    executing(engine, "r6", CEX)
    assert engine.run("r6") == RequestState.EXECUTING  # unknown awaits reconciliation
    assert states(engine, "r6")["withdraw"] == "unknown"
    with pytest.raises(InvalidStateTransition, match="side_effects"):
        engine.cancel("r6", by="bob")
    engine.reconcile("r6", "withdraw", evidence, by="recon-7")
    assert engine.run("r6") == final
    assert engine.request("r6").data["reservation"] == reservation
    assert venue.count("submit", "withdraw") == 1
    out = [e for e in events(store, "node", "r6/withdraw") if e.source == "unknown"]
    assert [(e.actor, e.detail["by"]) for e in out] == [("reconciler", "recon-7")]
    assert_audited(store, engine, "r6")


def test_reconcile_is_refused_outside_unknown_and_writes_nothing(store: Store) -> None:
    engine = engine_for(store, FakeVenue())
    executing(engine, "r7", CEX)
    engine.step("r7")  # withdraw: ready -> preparing; the rest blocked
    before = snapshot(store, "r7")
    for name in ("withdraw", "deposit_observe"):
        with pytest.raises(InvalidStateTransition, match="reconcile_completed"):
            engine.reconcile("r7", name, "completed", by="recon-7")
    with pytest.raises(TransferRefused, match="submitted, completed, failed"):
        engine.reconcile("r7", "withdraw", "probably", by="recon-7")
    with pytest.raises(UnknownTransfer, match="no node 'ghost'"):
        engine.reconcile("r7", "ghost", "completed", by="recon-7")
    assert snapshot(store, "r7") == before


@pytest.mark.parametrize(
    ("kind", "gate_moves"),
    [
        ("action", [("prepare", "executor"), ("submit", "executor"), ("complete", "executor")]),
        ("observe", [("start_observing", "observer"), ("complete", "observer")]),
    ],
)
def test_manual_gate_waits_for_an_operator_then_runs_on(
    store: Store, kind: str, gate_moves: list[tuple[str, str]]
) -> None:
    venue, recorder = FakeVenue(), Recorder()
    engine = engine_for(store, venue, recorder)
    plan = [
        node("withdraw", "action", True),
        node("manual_confirm", kind, False, "withdraw", executor="gate"),
        node("deposit_observe", "observe", False, "manual_confirm"),
    ]
    executing(engine, "r8", plan)
    assert engine.run("r8") == RequestState.WAITING_MANUAL_ACTION
    assert engine.request("r8").data == {
        **engine.request("r8").data,
        "reservation": "held",
        "current_frontier": ["manual_confirm"],
    }
    assert recorder.names[-1] == "request_attention"
    assert engine.step("r8") == []  # step never passes a gate
    # resume alone changes nothing: the gate is still ready and nothing else runs
    assert engine.resume("r8", by="dana") == RequestState.WAITING_MANUAL_ACTION
    before = snapshot(store, "r8")
    with pytest.raises(TransferRefused, match="not a manual gate"):
        engine.complete_manual("r8", "deposit_observe", by="dana")
    for silent in ("\u200b", "\u2800"):  # batch 37 (a B1): who passed it must say so
        with pytest.raises(TransferRefused, match="'by' must be a text with a letter"):
            engine.complete_manual("r8", "manual_confirm", by=silent)
    assert snapshot(store, "r8") == before
    assert engine.complete_manual("r8", "manual_confirm", by="dana") == RequestState.EXECUTING
    gate = events(store, "node", "r8/manual_confirm")
    assert [(e.trigger, e.actor) for e in gate] == [("wake", "planner"), *gate_moves]
    did = "did the action of manual_confirm"
    assert gate[1].detail == {
        "by": "engine-1",
        "approved_by": "dana",
        "reason": did,
        "side_effect": False,  # what the engine read then, kept where no write reaches
    }
    assert states(engine, "r8")["deposit_observe"] == "ready"
    assert engine.run("r8") == RequestState.COMPLETED
    resumed = [e for e in events(store, "request", "r8") if e.trigger == "resume"]
    assert [e.detail["by"] for e in resumed] == ["dana", "dana"]
    assert_audited(store, engine, "r8")


def test_signatures_come_from_the_signer(store: Store) -> None:
    venue = FakeVenue({"withdraw": {"prepare": ["sign"]}})
    engine = engine_for(store, venue)
    executing(engine, "r9", CEX)
    assert engine.run("r9") == RequestState.EXECUTING
    assert states(engine, "r9")["withdraw"] == "awaiting_signature"
    assert engine.sign("r9", "withdraw", by="hsm-1") == NodeState.SUBMITTED  # sent at once
    assert engine.run("r9") == RequestState.COMPLETED
    signed = [e for e in events(store, "node", "r9/withdraw") if e.trigger == "sign"]
    assert [(e.actor, e.detail["by"]) for e in signed] == [("signer", "hsm-1")]
    assert_audited(store, engine, "r9")


def test_refused_signature_fails_safely(store: Store) -> None:
    venue, recorder = FakeVenue({"withdraw": {"prepare": ["sign"]}}), Recorder()
    engine = engine_for(store, venue, recorder)
    executing(engine, "r10", CEX)
    engine.run("r10")
    engine.refuse_signature("r10", "withdraw", by="hsm-1", reason="limit exceeded")
    assert engine.request("r10").state == RequestState.FAILED
    assert engine.request("r10").data["reservation"] == "released"
    assert recorder.names[-1] == "request_failed"
    assert_audited(store, engine, "r10")


def test_unsent_work_is_abandoned_once_the_plan_cannot_finish(store: Store) -> None:
    """A failure beside a side-effect node still being signed: the derivation waits, the
    engine abandons the unsigned node (nothing was sent), and the transfer fails safely."""
    venue = FakeVenue({"withdraw": {"prepare": ["sign"]}, "balance_check": {"observe": ["failed"]}})
    engine = engine_for(store, venue)
    plan = [node("withdraw", "action", True), node("balance_check", "observe", False)]
    executing(engine, "r11", plan)
    engine.step("r11")
    engine.step("r11")
    assert states(engine, "r11") == {"withdraw": "awaiting_signature", "balance_check": "failed"}
    assert engine.request("r11").state == RequestState.EXECUTING  # stopped-while-preparing-money
    assert engine.run("r11") == RequestState.FAILED
    assert engine.request("r11").data["reservation"] == "released"
    abandoned = events(store, "node", "r11/withdraw")[-1]
    assert "abandoned" in abandoned.detail["evidence"]
    assert venue.count("submit", "withdraw") == 0
    with pytest.raises(TransferRefused, match="failed"):
        engine.sign("r11", "withdraw", by="hsm-1")
    assert_audited(store, engine, "r11")


def test_cancel_before_money_moves_releases_everything(store: Store) -> None:
    venue, recorder = FakeVenue(), Recorder()
    engine = engine_for(store, venue, recorder)
    executing(engine, "r12", CEX)
    engine.step("r12")  # withdraw preparing: nothing sent yet
    assert engine.cancel("r12", by="bob", reason="customer asked") == RequestState.CANCELLED
    assert set(states(engine, "r12").values()) == {"cancelled", "failed"}
    assert states(engine, "r12")["withdraw"] == "failed"  # abandoned while preparing
    assert engine.request("r12").data["reservation"] == "released"
    assert engine.request("r12").data["current_frontier"] == []
    assert recorder.names[-1] == "request_failed"
    assert engine.run("r12") == RequestState.CANCELLED
    assert venue.calls == []
    assert_audited(store, engine, "r12")


def test_cancel_is_refused_once_a_side_effect_started(store: Store) -> None:
    venue = FakeVenue({"withdraw": {"observe": ["pending"]}})
    engine = engine_for(store, venue)
    executing(engine, "r13", CEX)
    engine.run("r13")
    assert states(engine, "r13")["withdraw"] == "observing"
    before = snapshot(store, "r13")
    with pytest.raises(InvalidStateTransition, match="side_effects"):
        engine.cancel("r13", by="bob")
    assert snapshot(store, "r13") == before
    assert engine.request("r13").data["reservation"] == "held"


# -- the request's own lifecycle ------------------------------------------------------------


def test_double_moves_are_refused_and_write_nothing(store: Store) -> None:
    engine = engine_for(store, FakeVenue())
    engine.submit("r14", CEX)
    engine.validate("r14")
    engine.request_approval("r14")
    assert engine.approve("r14", by="alice") == RequestState.APPROVED
    before = snapshot(store, "r14")
    with pytest.raises(InvalidStateTransition, match="approve"):
        engine.approve("r14", by="alice")
    with pytest.raises(InvalidStateTransition, match="resume"):
        engine.resume("r14", by="alice")
    assert snapshot(store, "r14") == before
    assert engine.start("r14") == RequestState.EXECUTING
    before = snapshot(store, "r14")
    with pytest.raises(InvalidStateTransition, match="start"):
        engine.start("r14")
    for silent in ("", "\u200b", "\U0001d159"):  # batch 35: who must say something
        with pytest.raises(TransferRefused, match="'by' must be a text with a letter or a digit"):
            engine.cancel("r14", by=silent)
    assert snapshot(store, "r14") == before


@pytest.mark.parametrize(
    ("decision", "final"),
    [
        ("fail_validation", RequestState.FAILED),
        ("reject", RequestState.REJECTED),
        ("expire", RequestState.EXPIRED),
        ("fail_before_start", RequestState.FAILED),
    ],
)
def test_requests_stopped_before_execution_release_their_reservation(
    store: Store, decision: str, final: RequestState
) -> None:
    recorder = Recorder()
    engine = engine_for(store, FakeVenue(), recorder)
    engine.submit("r15", CEX)
    if decision == "fail_validation":
        reached = engine.validate("r15", problems=["destination address malformed"])
    else:
        engine.validate("r15")
        engine.request_approval("r15")
        if decision == "reject":
            reached = engine.reject("r15", by="alice")
        elif decision == "expire":
            reached = engine.expire("r15")
        else:
            engine.approve("r15", by="alice")
            reached = engine.fail_before_start("r15", reason="venue in maintenance")
    assert reached == final
    assert engine.request("r15").data["reservation"] == "released"
    assert recorder.names == ["request_failed"]
    assert events(store, "request", "r15")[-1].trigger == decision
    assert set(states(engine, "r15").values()) == {"blocked"}
    assert_audited(store, engine, "r15")


def test_submitting_the_same_plan_twice_is_a_no_op(store: Store) -> None:
    engine = engine_for(store, FakeVenue())
    assert engine.submit("r16", CEX) == RequestState.RECEIVED
    engine.validate("r16")
    before = snapshot(store, "r16")
    assert engine.submit("r16", CEX) == RequestState.VALIDATED
    assert snapshot(store, "r16") == before
    with pytest.raises(PlanError, match="different plan"):
        engine.submit("r16", CEX[:1])


def test_a_failing_callback_is_reported_after_the_commit(store: Store) -> None:
    seen: list[str] = []

    def broken(request_id: str, payload: Mapping[str, Any]) -> None:
        raise RuntimeError("dashboard down")

    def completed(request_id: str, payload: Mapping[str, Any]) -> None:
        seen.append(request_id)

    callbacks = {"frontier_advanced": broken, "request_completed": completed}
    engine = TransferEngine(store, {"venue": FakeVenue()}, callbacks, engine_id="engine-1")
    engine.submit("r19", CEX[:1])
    engine.validate("r19")
    engine.request_approval("r19")
    engine.approve("r19", by="alice")
    with pytest.raises(CallbackFailed, match=r"frontier_advanced .*dashboard down"):
        engine.start("r19")
    assert engine.request("r19").state == RequestState.EXECUTING  # committed all the same
    assert engine.run("r19") == RequestState.COMPLETED
    assert seen == ["r19"]


# -- plans that cannot run ------------------------------------------------------------------

BAD_PLANS: dict[str, tuple[list[Any], str]] = {
    "cycle": (
        [
            node("a", "action", True, "c"),
            node("b", "observe", False, "a"),
            node("c", "observe", False, "b"),
        ],
        "cycle: .*a -> b -> c",
    ),
    "self-loop": ([node("a", "action", True, "a")], "cycle: a -> a"),
    "dangling-edge": ([node("a", "action", True, "ghost")], "node 'a' runs after 'ghost'"),
    "duplicate-name": (
        [node("a", "action", True), node("a", "observe", False)],
        "node 'a' is defined 2",
    ),
    "unknown-executor": (
        [node("a", "action", True, executor="upbit")],
        "node 'a': unknown executor 'upbit'",
    ),
    "unknown-key": (
        [{**node("a", "action", True), "retries": 3}],
        "node 'a': unknown key 'retries'",
    ),
    "missing-field": (
        [{"name": "a", "kind": "action", "executor": "venue"}],
        "node 'a': missing 'has_side_effect'",
    ),
    "bad-kind": ([node("a", "signer", True)], "node 'a': kind 'signer'"),
    "empty": ([], "empty"),
}


@pytest.mark.parametrize("case", list(BAD_PLANS))
def test_bad_plans_are_refused_before_anything_is_written(store: Store, case: str) -> None:
    plan, message = BAD_PLANS[case]
    engine = engine_for(store, FakeVenue())
    with pytest.raises(PlanError, match=message):
        engine.submit("bad", plan)
    with store.transaction() as tx:
        assert tx.get("request", "bad") is None
        assert tx.scope("node", "bad") == []


def test_plan_error_lists_every_problem() -> None:
    engine = engine_for(open_store("memory://"), FakeVenue())
    plan = [{"name": "a/b", "kind": "action"}, node("c", "observe", "yes")]  # type: ignore[arg-type]
    with pytest.raises(PlanError) as caught:
        engine.submit("r/1", plan)
    assert len(caught.value.problems) == 5
    assert "request id 'r/1'" in str(caught.value)


def test_bad_configuration_is_refused_at_construction() -> None:
    store = open_store("memory://")
    with pytest.raises(TransferConfigError, match="unknown callback 'request_done'"):
        TransferEngine(store, {}, {"request_done": lambda rid, payload: None})

    class Half:
        def prepare(self, node: PlanNode) -> PrepareAnswer:
            return "submit"

        def submit(self, node: PlanNode) -> SubmitAnswer:
            return "completed"

    with pytest.raises(TransferConfigError, match=r"executor 'half' \(Half\) lacks observe;"):
        TransferEngine(store, {"half": Half()})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "bad",
    [
        {"store": None},
        {"executors": None},
        {"executors": [1, 2]},
        {"executors": {1: None}},
        {"submit_timeout": "300"},
        {"submit_timeout": None},
        {"submit_timeout": float("nan")},
        {"submit_timeout": float("inf")},
        {"submit_timeout": True},
        {"submit_timeout": 0},
        {"engine_id": 42},
        {"engine_id": "   "},
    ],
    ids=repr,
)
def test_garbage_at_the_engines_construction_is_a_typed_error(bad: dict[str, Any]) -> None:
    """Outsider batch 17 (b11): garbage raised AttributeError or TypeError, or was taken
    as given (a NaN submit_timeout declared a running submit unknown at once; inf never)."""
    arguments: dict[str, Any] = {"store": open_store("memory://"), "executors": {}, **bad}
    store, executors = arguments.pop("store"), arguments.pop("executors")
    with pytest.raises(MachinesError):
        TransferEngine(store, executors, **arguments)


@pytest.mark.parametrize("problems", [5, "abc", b"xy", [1], [""], None])
def test_validation_problems_are_a_list_of_texts(store: Store, problems: Any) -> None:
    engine = engine_for(store, FakeVenue())
    engine.submit("r-v", CEX)
    with pytest.raises(MachinesError, match="problem"):
        engine.validate("r-v", problems=problems)
    assert engine.request("r-v").state == "received"


# -- crashes and the invariant over every script ---------------------------------------------


def test_a_submit_that_never_reported_back_goes_unknown_and_is_never_resent(store: Store) -> None:
    clock = FakeClock()
    venue = FakeVenue({"withdraw": {"submit": [Crash(), "accepted"]}})
    engine = engine_for(store, venue, clock=clock, submit_timeout=60)
    executing(engine, "r17", CEX)
    engine.step("r17")
    with pytest.raises(Crash):
        engine.step("r17")  # prepared, marked sent, and the process dies inside submit()
    assert states(engine, "r17")["withdraw"] == "submitting"
    restarted = engine_for(store, venue, clock=clock, submit_timeout=60)
    assert restarted.step("r17") == []  # the call might still be out
    clock.now += 61
    assert [m.dest for m in restarted.step("r17")] == ["unknown"]
    assert restarted.run("r17") == RequestState.EXECUTING
    assert venue.count("submit", "withdraw") == 1
    assert_audited(store, restarted, "r17")


SUBMIT_ANSWERS: list[Answer] = ["accepted", "completed", "failed", "unknown", TimeoutError(), "?"]
OBSERVE_ANSWERS: list[Answer] = ["completed", "failed", "unknown", ValueError("garbled")]
WITHDRAW_SCRIPTS: list[dict[str, list[Answer]]] = [
    {"prepare": [RuntimeError("preflight")]},
    {"prepare": ["maybe"]},
    *(
        {"submit": [submit], "observe": [observe]}
        for submit, observe in itertools.product(SUBMIT_ANSWERS, OBSERVE_ANSWERS)
    ),
]
CHECK_SCRIPTS: list[list[Answer]] = [
    ["completed"],
    ["failed"],
    ["pending", "pending", "pending", "failed"],
]


def test_never_failed_or_released_while_money_may_be_moving(store: Store) -> None:
    """Every combination of venue answers on a two-branch plan: after every step, a
    request that is failed or released its reservation has no side-effect node that
    started, and the request histories enter failed only with side_effects=none."""
    outcomes = set()
    for index, (withdraw, check) in enumerate(itertools.product(WITHDRAW_SCRIPTS, CHECK_SCRIPTS)):
        venue = FakeVenue({"withdraw": withdraw, "check": {"observe": check}})
        engine = engine_for(store, venue)
        rid = f"p{index}"
        plan = [
            node("withdraw", "action", True),
            node("check", "observe", False),
            node("deposit", "observe", False, "withdraw", "check"),
        ]
        executing(engine, rid, plan)
        for _ in range(10):
            engine.step(rid)
            row, nodes = engine.request(rid), engine.nodes(rid)
            if row.state in ("failed", "cancelled") or row.data["reservation"] == "released":
                assert not [n for n in nodes.values() if n.has_side_effect and n.state in STARTED]
        for event in events(store, "request", rid):
            if event.dest == "failed":
                assert event.context["side_effects"] == "none"
        outcomes.add(row.state)
    assert outcomes == {"completed", "failed", "manual_intervention", "executing"}


def test_a_busy_venue_sends_the_node_back_to_ready_then_it_runs(store: Store) -> None:
    venue = FakeVenue({"withdraw": {"prepare": ["retry", "submit"]}})
    engine = engine_for(store, venue)
    executing(engine, "r30", CEX)
    engine.step("r30")  # ready -> preparing
    engine.step("r30")  # prepare() says retry
    assert states(engine, "r30")["withdraw"] == "ready"
    assert drive(engine, "r30") == RequestState.COMPLETED
    assert venue.count("submit", "withdraw") == 1
    assert [e.trigger for e in events(store, "node", "r30/withdraw")][:4] == [
        "wake",
        "prepare",
        "retry",
        "prepare",
    ]
    assert_audited(store, engine, "r30")


def test_an_expired_signature_request_is_retried_not_sent(store: Store) -> None:
    venue = FakeVenue({"withdraw": {"prepare": ["sign", "submit"]}})
    engine = engine_for(store, venue)
    executing(engine, "r31", CEX)
    engine.run("r31")
    assert engine.retry("r31", "withdraw", reason="signature request expired") == NodeState.READY
    assert drive(engine, "r31") == RequestState.COMPLETED
    assert venue.count("submit", "withdraw") == 1
    with pytest.raises(InvalidStateTransition):  # completed: nothing to retry
        engine.retry("r31", "withdraw", reason="again")
    assert_audited(store, engine, "r31")


def test_a_skipped_node_counts_as_done_for_its_successors(store: Store) -> None:
    plan = [
        node("fx_quote", "observe", False),
        node("withdraw", "action", True, "fx_quote"),
    ]
    venue = FakeVenue()
    engine = engine_for(store, venue)
    executing(engine, "r32", plan)
    with pytest.raises(TransferRefused, match="reason"):
        engine.skip("r32", "withdraw", by="planner-1", reason="")
    assert engine.skip("r32", "fx_quote", by="planner-1", reason="same currency") == "skipped"
    assert states(engine, "r32") == {"fx_quote": "skipped", "withdraw": "ready"}
    assert drive(engine, "r32") == RequestState.COMPLETED
    assert venue.count("observe", "fx_quote") == 0
    with pytest.raises(TransferRefused, match="completed"):
        engine.skip("r32", "withdraw", by="planner-1", reason="late")
    assert_audited(store, engine, "r32")


def test_skipping_is_refused_outside_execution(store: Store) -> None:
    engine = engine_for(store, FakeVenue())
    engine.submit("r33", CEX)
    before = snapshot(store, "r33")
    with pytest.raises(TransferRefused, match="received"):
        engine.skip("r33", "withdraw", by="planner-1", reason="not needed")
    assert snapshot(store, "r33") == before


def test_a_ready_node_of_a_doomed_plan_is_abandoned_not_left_ready(store: Store) -> None:
    venue = FakeVenue({"withdraw": {"prepare": ["sign"]}, "check": {"observe": ["failed"]}})
    engine = engine_for(store, venue)
    plan = [
        node("quote", "observe", False),
        node("convert", "action", False, "quote"),
        node("withdraw", "action", True),
        node("check", "observe", False),
    ]
    executing(engine, "r34", plan)
    engine.step("r34")
    engine.step("r34")
    assert states(engine, "r34") == {
        "quote": "completed",
        "convert": "ready",  # woken as check failed: it must never run
        "withdraw": "awaiting_signature",
        "check": "failed",
    }
    assert engine.run("r34") == RequestState.FAILED
    assert states(engine, "r34")["convert"] == "failed"
    abandoned = events(store, "node", "r34/convert")[-1]
    assert (abandoned.source, abandoned.actor) == ("ready", "executor")
    assert "abandoned" in abandoned.detail["evidence"]
    assert venue.count("prepare", "convert") == 0
    assert_audited(store, engine, "r34")


def test_a_pending_first_observation_starts_watching(store: Store) -> None:
    venue = FakeVenue({"withdraw": {"observe": ["pending", "failed"]}})
    engine = engine_for(store, venue)
    executing(engine, "r35", CEX)
    drive(engine, "r35")
    triggers = [e.trigger for e in events(store, "node", "r35/withdraw")]
    assert triggers == ["wake", "prepare", "submit", "accept", "start_observing", "fail"]
    assert venue.count("observe", "withdraw") == 2
    assert engine.request("r35").state == RequestState.FAILED  # the venue said: not moved
    assert_audited(store, engine, "r35")


def test_a_node_move_outside_the_policy_is_refused_and_writes_nothing(store: Store) -> None:
    """The node machine allows an operator to cancel a blocked node, but the engine does
    that only as part of cancelling the whole request (transfer.policy): a cancel of one
    node while the request executes would strand the plan, so it is refused."""
    engine = engine_for(store, FakeVenue())
    executing(engine, "r30", CEX)
    before = snapshot(store, "r30")
    blocked = next(name for name, state in states(engine, "r30").items() if state == "blocked")
    with (
        pytest.raises(TransferRefused, match=r"dispatch mode.*by cancel as operator"),
        engine._session("r30") as s,
    ):
        s.move_node(s.node(blocked), "cancel", "operator", {"by": "mallory"})
    assert snapshot(store, "r30") == before


def test_every_request_call_of_the_policy_is_an_engine_method() -> None:
    """The explorer lets people and callers make exactly the REQUEST_CALLS moves; each must
    be something the engine's API really offers, and every API move must be listed."""
    spec_triggers = {t.trigger for t in load("request").transitions}
    assert spec_triggers >= set(REQUEST_CALLS)
    methods = {"fail_validation": "validate"}  # validate(problems=...) fails the request
    assert all(callable(getattr(TransferEngine, methods.get(n, n))) for n in REQUEST_CALLS)
    derived = spec_triggers - set(REQUEST_CALLS)
    assert derived and not any(hasattr(TransferEngine, name) for name in derived)


def test_the_policy_only_names_moves_the_node_machine_has() -> None:
    node_spec = load("node")
    edges = {(t.source, t.trigger) for t in node_spec.transitions}
    for move in NODE_MOVES:
        assert (move.source, move.trigger) in edges, move
        assert any(
            move.actor in t.actors
            for t in node_spec.transitions
            if (t.source, t.trigger) == (move.source, move.trigger)
        ), move


@pytest.mark.parametrize(
    "reading",
    [lambda: "1700000000", lambda: float("nan"), lambda: 10**400, lambda: True, lambda: 1 / 0],
)
def test_a_clock_that_lies_is_a_typed_error_and_sends_nothing(
    store: Store, reading: Callable[[], Any]
) -> None:
    """issue 15: the engine's clock was used unchecked (a string stamped into node data, a
    raw TypeError from the submit timeout); it is now checked by the one clock checker the
    runtime, the stores and the other systems use."""
    venue = FakeVenue()
    engine = engine_for(store, venue, clock=reading)
    executing(engine, "r-clock", CEX)
    with pytest.raises(MachinesError, match="TransferEngine: the clock"):
        drive(engine, "r-clock")
    assert venue.count("submit", "withdraw") == 0
    assert "sent" not in engine.nodes("r-clock")["withdraw"].data


def test_one_clock_checker_serves_every_owner_of_a_clock() -> None:
    """The runtime, the stores and the three systems read an injected clock through
    ``machines.runtime.history.checked_clock``; nothing else in the package calls one."""
    import ast

    package = Path(machines.__file__).resolve().parent
    users, readers = set(), []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
            if name == "checked_clock":
                users.add(path.relative_to(package).as_posix())
            if name == "clock" and isinstance(call.func, ast.Name):
                readers.append(f"{path.relative_to(package)}:{call.lineno}")
    assert {
        "runtime/entity.py",
        "runtime/history.py",
        "store/__init__.py",
        "systems/exactly_once.py",
        "systems/effectlog.py",
        "systems/transfer/engine.py",
    } <= users
    assert readers and all(r.startswith("runtime/history.py:") for r in readers), readers


def test_a_node_kind_the_engine_cannot_dispatch_is_refused_in_the_plan(tmp_path: Path) -> None:
    """Outsider batch 17 (b09): a node definition with a kind of its own (an addition the
    reliance check leaves to the owner) was accepted in a plan, and run() then raised a
    raw LookupError. A plan naming a kind the engine has no first move for is a
    PlanError, nothing written."""
    import yaml

    from machines.spec.loader import bundled_spec_dir, load

    doc = yaml.safe_load((bundled_spec_dir() / "node.yaml").read_text(encoding="utf-8"))
    doc["context"]["kind"]["values"].append("magic")
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    store = open_store("memory://", [load(tmp_path / "node.yaml"), load("request")])
    engine = engine_for(store, FakeVenue())
    with pytest.raises(PlanError, match="kind 'magic' is not one of action, observe"):
        engine.submit("r-magic", [node("m", "magic", False)])
    with pytest.raises(UnknownTransfer):
        engine.request("r-magic")


def _node_with(tmp_path: Path, tagged: bool, evidence: bool) -> MachineSpec:
    """The bundled node definition and an owner's state where a sent withdrawal may be
    parked, reached by the automatic executor from the sent states, left for failed."""
    import yaml

    from machines.spec.loader import bundled_spec_dir

    doc = yaml.safe_load((bundled_spec_dir() / "node.yaml").read_text(encoding="utf-8"))
    doc["states"]["parked_at_venue"] = {"description": "The venue asked us to wait."}
    if tagged:
        doc["states"]["parked_at_venue"]["tags"] = ["effect-started"]
    drop = {"trigger": "drop", "source": "parked_at_venue", "dest": "failed"}
    if evidence:
        drop["evidence"] = "the venue says it gave the money back"
    doc["transitions"] += [
        {
            "trigger": "hold",
            "source": ["submitting", "submitted", "observing"],
            "dest": "parked_at_venue",
            "actor": "executor",
            "description": "parked",
        },
        {**drop, "actor": "executor", "description": "dropped"},
    ]
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return load(tmp_path / "node.yaml")


@pytest.mark.parametrize(
    ("tagged", "evidence", "says"),
    [
        (False, False, "'hold' from 'submitting' (the effect may have happened) leads to"),
        (True, False, "'drop' from 'parked_at_venue' (the effect may have happened)"),
        (True, True, "the derivation of a request's state from its nodes is not safe"),
    ],
    ids=["untagged", "tagged-no-evidence", "tagged-with-evidence"],
)
def test_a_node_definition_that_hides_money_in_flight_is_refused(
    tmp_path: Path, tagged: bool, evidence: bool, says: str
) -> None:
    """Outsider batch 30 (a 1): a node state of the owner's, untagged, reached by the
    automatic executor from the sent states, made a withdrawal the venue accepted count as
    idle: a failed sibling released the reservation with the money out, and the audit and
    machines check said OK. Tagged, the executor reached failed through it with no
    evidence, around the bundled rule that names the states. The engine now refuses a
    move that forgets an effect without evidence, and a pair whose derivation machines
    check cannot prove."""
    store = open_store("memory://", [_node_with(tmp_path, tagged, evidence), load("request")])
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        engine_for(store, FakeVenue())


def test_a_node_in_a_state_of_the_owners_is_a_typed_error(tmp_path: Path) -> None:
    """Outsider batch 30 (a 2): a node the owner's own code moved to a state the store's
    definition adds made engine.nodes() raise a raw ValueError."""
    import yaml

    from machines.spec.loader import bundled_spec_dir
    from machines.systems.transfer.errors import TransferError

    doc = yaml.safe_load((bundled_spec_dir() / "node.yaml").read_text(encoding="utf-8"))
    doc["states"]["on_hold"] = {"description": "Held by the owner before it is ready."}
    doc["transitions"].append(
        {"trigger": "hold", "source": "blocked", "dest": "on_hold", "actor": "operator",
         "description": "The owner holds it."}
    )  # fmt: skip
    doc["transitions"].append(
        {"trigger": "release", "source": "on_hold", "dest": "blocked", "actor": "operator",
         "description": "The owner lets it go on."}
    )  # fmt: skip
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    store = open_store("memory://", [load(tmp_path / "node.yaml"), load("request")])
    engine = engine_for(store, FakeVenue())
    engine.submit("r1", [node("a", "action", True), node("b", "action", True, "a")])
    with store.transaction() as tx:
        row = tx.get("node", "r1/b")
        assert row is not None
        tx.move(row, "hold", actor="operator")
    with pytest.raises(TransferError, match="node 'b' of request 'r1' is in 'on_hold'"):
        engine.nodes("r1")


class LyingId(str):
    """A request id whose formatting, text and equality are not its characters."""

    def __format__(self, spec: str) -> str:
        return "victim"

    def __str__(self) -> str:
        raise RuntimeError("boom")

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 1


def test_a_request_id_is_used_as_the_text_it_holds(store: Store) -> None:
    """Outsider batch 38 (b A4): a ``str`` subclass id whose ``__format__`` said another
    name made the request ``r`` with its node under ``victim/w``: ``r`` was refused ever
    after, ``victim`` could never be submitted, and the audit called the engine's own write
    a forgery; one whose ``__str__`` raised ended ``request()`` in a raw error."""
    engine = engine_for(store, FakeVenue())
    plan = [node("w", "action", True)]
    assert engine.submit(LyingId("r"), plan) == RequestState.RECEIVED
    assert engine.validate("r") == RequestState.VALIDATED
    assert engine.request(LyingId("r")).key == "r"
    assert [n.request_id for n in engine.nodes(LyingId("r")).values()] == ["r"]
    assert engine.submit("victim", plan) == RequestState.RECEIVED
    with store.transaction() as tx:
        assert sorted(row.key for row in tx.rows("node")) == ["r/w", "victim/w"]
