"""The effect log (seed 000) on the memory and SQLite stores: run once per signature, replay
the cached result, fail closed on unknown outcomes, approval before Irreversible calls, LIFO
undo of a failed session, one winner in a race, nothing half-written on a fault."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import machines.store.memory as memory_store
import machines.store.sql as sql_store
from machines.errors import ContextError, InvalidStateTransition, MachinesError
from machines.store import RecordExists, Row, Store, StoreError, open_store
from machines.store.records import encode
from machines.systems.effectlog import (
    MACHINE,
    EffectAwaitingApproval,
    EffectClosed,
    EffectLog,
    EffectNotFound,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectStillExecuting,
    UndoStep,
)
from machines.systems.exactly_once import Classifier, not_sent
from tests.conftest import FakeClock


class Counter:
    """A tool call that counts its runs and returns (or raises) what it is given."""

    def __init__(self, result: Any = "ok", error: BaseException | None = None) -> None:
        self.result = result
        self.error = error
        self.runs = 0

    def __call__(self) -> Any:
        self.runs += 1
        if self.error is not None:
            raise self.error
        return self.result


def _open(kind: str, path: Path) -> Store:
    return open_store("memory://") if kind == "memory" else open_store(f"sqlite:///{path}")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = _open(request.param, tmp_path / "e.db")
    yield opened
    opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log(store: Store, clock: FakeClock) -> EffectLog:
    return EffectLog(store, clock=clock, worker="w1")


def moves_of(log: EffectLog, key: str) -> list[tuple[str, str, str, str]]:
    return [(e.source, e.dest, e.trigger, e.actor) for e in log.history(key)]


def assert_consistent(log: EffectLog, key: str) -> Row:
    """The row and its history agree: every event a legal step from the one before, no
    gaps, as many events as moves, and the last one ends in the row's state."""
    row = log.effect(key)
    assert row is not None
    spec = log.store.specs()[MACHINE]
    state = spec.initial
    events = log.history(key)
    for seq, event in enumerate(events, start=1):
        assert (event.seq, event.source) == (seq, state)
        assert spec.step(state, event.trigger, actor=event.actor, **row.context) == event.dest
        state = event.dest
    assert len(events) == row.moves
    assert state == row.state
    return row


def unknown_failure(log: EffectLog, key: str, *, tool: str, session: str) -> None:
    """Leave ``key`` executing: its run raised an error that proves nothing."""
    with pytest.raises(EffectOutcomeUnknown):
        log.call(key, Counter(error=TimeoutError("no answer")), tool=tool, session=session)


# -- safe and unknown tiers ----------------------------------------------------------------


def test_safe_tier_runs_directly_and_leaves_no_row(log: EffectLog, store: Store) -> None:
    fn = Counter(result={"n": 1})
    assert log.call("read:1", fn, tier="safe", session="s") == {"n": 1}
    assert log.call("read:1", fn, tier="safe", session="s") == {"n": 1}
    assert fn.runs == 2  # never logged, so never deduplicated either
    assert log.effect("read:1") is None
    with store.transaction() as tx:
        assert tx.scope(MACHINE, "s") == []


def test_a_tier_outside_the_spec_is_refused_before_anything_runs(log: EffectLog) -> None:
    fn = Counter()
    with pytest.raises(ContextError, match="bogus"):
        log.call("x", fn, tier="bogus")
    assert fn.runs == 0
    assert log.effect("x") is None


def test_a_signature_keeps_its_tier_tool_and_session(log: EffectLog) -> None:
    """Outsider batch 17 (b14): a call under a signature registered for another tool ran,
    and the row kept the first tool, whose compensation the saga would then run."""
    log.call("x", Counter(), tool="t", session="s1")
    fn = Counter()
    with pytest.raises(RecordExists):
        log.call("x", fn, tier="irreversible", tool="t", session="s1")
    with pytest.raises(RecordExists):
        log.call("x", fn, tool="t", session="s2")
    for other in ("refund", None):
        with pytest.raises(RecordExists, match="is registered for tool 't'"):
            log.call("x", fn, tool=other, session="s1")
    log.call("x", fn, tool="t", session="s1")  # the same tool: replayed
    assert fn.runs == 0


@pytest.mark.parametrize("first", ["compensable", "irreversible"])
def test_a_logged_signature_asked_for_as_safe_is_refused_before_anything_runs(
    log: EffectLog, first: str
) -> None:
    """Outsider batch 45 (a 16): a charge whose outcome was unknown, asked for again as
    ``safe``, ran a second time (a safe call skips the log); ``irreversible`` was refused.
    A safe call under a signature the log holds is ``RecordExists``, and nothing runs."""
    if first == "compensable":
        unknown_failure(log, "charge-7", tool="charge", session="s1")
    else:
        with pytest.raises(EffectAwaitingApproval):
            log.call("charge-7", Counter(), tier=first, tool="charge", session="s1")
    again = Counter()
    with pytest.raises(RecordExists, match=f"registered as a '{first}' call.*nothing ran"):
        log.call("charge-7", again, tier="safe", tool="charge", session="s1")
    assert again.runs == 0


# -- compensable: run once, replay ---------------------------------------------------------


def test_first_call_runs_once_and_commits_its_result(log: EffectLog) -> None:
    fn = Counter(result={"charge": "ch_1", "amount": 5})
    assert log.call("charge:1", fn, tool="charge", session="s") == {"charge": "ch_1", "amount": 5}
    assert fn.runs == 1
    row = assert_consistent(log, "charge:1")
    assert (row.state, row.scope, dict(row.context)) == ("committed", "s", {"tier": "compensable"})
    assert row.data["result"] == {"charge": "ch_1", "amount": 5}
    assert (row.data["tool"], row.data["runs"], row.data["replay_count"]) == ("charge", 1, 0)
    assert [e.detail["worker"] for e in log.history("charge:1") if e.detail] == ["w1", "w1"]


def test_replay_serves_the_cached_result_and_counts_it_without_a_state_change(
    log: EffectLog, clock: FakeClock
) -> None:
    fn = Counter(result=[1, "two", None])
    log.call("sig", fn)
    before = log.effect("sig")
    clock.now = 2000.0
    assert log.call("sig", Counter(result="other")) == [1, "two", None]
    clock.now = 3000.5
    assert log.call("sig", fn) == [1, "two", None]
    assert fn.runs == 1
    row = assert_consistent(log, "sig")
    assert before is not None and row.version == before.version + 2
    assert (row.data["replay_count"], row.data["last_replayed_at"]) == (2, 3000.5)
    assert moves_of(log, "sig") == [
        ("pending", "executing", "execute", "proxy"),
        ("executing", "committed", "commit", "proxy"),
    ]


# -- failures: provable, unknown, interrupted ----------------------------------------------


@pytest.mark.parametrize(
    "classify",
    [not_sent(ConnectionRefusedError), not_sent(retry=(ConnectionRefusedError,))],
    ids=["failed", "retry"],
)
def test_provable_failure_resets_to_pending_and_the_next_call_runs_again(
    store: Store, classify: Callable[[BaseException], Any]
) -> None:
    log = EffectLog(store, classify=classify, worker="w1")
    refused = ConnectionRefusedError("upstream refused the connection")
    with pytest.raises(ConnectionRefusedError) as raised:
        log.call("sig", Counter(error=refused))
    assert raised.value is refused  # the original exception, re-raised
    row = assert_consistent(log, "sig")
    assert row.state == "pending"
    assert row.data["error"] == {
        "type": "ConnectionRefusedError",
        "message": "upstream refused the connection",
    }
    history = log.history("sig")
    secret = history[-1].detail["secret"]  # the run's own, which its start's proof hashes
    assert hashlib.sha256(secret.encode()).hexdigest() == history[-2].detail["proof"]
    assert history[-1].detail == {
        "worker": "w1",
        "reason": "the call provably did not take effect",
        "error": dict(row.data["error"]),
        "secret": secret,
    }
    retry = Counter(result=7)
    assert log.call("sig", retry) == 7
    assert retry.runs == 1
    row = assert_consistent(log, "sig")
    assert (row.state, row.data["runs"], row.data["error"]) == ("committed", 2, None)
    assert [m[2] for m in moves_of(log, "sig")] == ["execute", "fail", "execute", "commit"]


def test_unknown_failure_stays_executing_and_never_runs_again(log: EffectLog) -> None:
    timeout = TimeoutError("read timed out after sending")
    with pytest.raises(EffectOutcomeUnknown) as raised:
        log.call("sig", Counter(error=timeout))
    assert raised.value.__cause__ is timeout
    assert raised.value.error_type == "TimeoutError"
    assert "sig" in str(raised.value) and "executing" in str(raised.value)
    row = assert_consistent(log, "sig")
    assert (row.state, row.data["result"]) == ("executing", None)
    later = Counter()
    with pytest.raises(EffectStillExecuting) as again:
        log.call("sig", later)
    assert type(again.value) is EffectStillExecuting
    assert (again.value.runner, again.value.started_at) == ("w1", 1000.0)
    assert later.runs == 0
    assert moves_of(log, "sig") == [("pending", "executing", "execute", "proxy")]


def test_an_error_the_classifier_does_not_list_is_unknown(store: Store) -> None:
    log = EffectLog(store, classify=not_sent(ConnectionRefusedError))
    with pytest.raises(EffectOutcomeUnknown):
        log.call("sig", Counter(error=ValueError("bad gateway body")))
    assert assert_consistent(log, "sig").state == "executing"


def test_an_interrupt_propagates_and_leaves_the_outcome_unknown(log: EffectLog) -> None:
    with pytest.raises(KeyboardInterrupt):
        log.call("sig", Counter(error=KeyboardInterrupt()))
    assert assert_consistent(log, "sig").state == "executing"


# -- irreversible: approval ----------------------------------------------------------------


def test_irreversible_waits_for_a_human_then_runs_once(log: EffectLog) -> None:
    fn = Counter(result="wired")
    for _ in range(3):
        with pytest.raises(EffectAwaitingApproval, match="'wire:1' is pending approval"):
            log.call("wire:1", fn, tier="irreversible", tool="wire", session="s")
    assert fn.runs == 0
    assert assert_consistent(log, "wire:1").state == "pending"  # registered despite the raise
    approved = log.approve("wire:1", by="alice", reason="checked the beneficiary")
    assert approved.state == "approved"
    assert log.history("wire:1")[-1].detail == {"by": "alice", "reason": "checked the beneficiary"}
    assert log.call("wire:1", fn, tier="irreversible", tool="wire", session="s") == "wired"
    assert log.call("wire:1", fn, tier="irreversible", tool="wire", session="s") == "wired"
    assert fn.runs == 1
    assert_consistent(log, "wire:1")
    assert moves_of(log, "wire:1") == [
        ("pending", "approved", "approve", "human"),
        ("approved", "executing", "resume", "proxy"),
        ("executing", "committed", "commit", "proxy"),
    ]


def test_rejected_irreversible_never_runs(log: EffectLog) -> None:
    fn = Counter()
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire:1", fn, tier="irreversible")
    log.reject("wire:1", by="bob", reason="unknown beneficiary")
    with pytest.raises(EffectRejected, match="rejected by bob") as raised:
        log.call("wire:1", fn, tier="irreversible")
    assert raised.value.by == "bob"
    with pytest.raises(InvalidStateTransition):
        log.approve("wire:1", by="alice")
    assert fn.runs == 0
    assert assert_consistent(log, "wire:1").state == "rejected"


def test_a_failed_irreversible_run_needs_a_fresh_approval(store: Store) -> None:
    log = EffectLog(store, classify=not_sent(ConnectionRefusedError))
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire:1", Counter(), tier="irreversible")
    log.approve("wire:1", by="alice")
    with pytest.raises(ConnectionRefusedError):
        log.call("wire:1", Counter(error=ConnectionRefusedError("down")), tier="irreversible")
    fn = Counter()
    with pytest.raises(EffectAwaitingApproval, match="approval is consumed") as raised:
        log.call("wire:1", fn, tier="irreversible")
    assert raised.value.last_error == {"type": "ConnectionRefusedError", "message": "down"}
    assert fn.runs == 0
    log.approve("wire:1", by="alice", reason="upstream is back")
    assert log.call("wire:1", fn, tier="irreversible") == "ok"
    assert [m[2] for m in moves_of(log, "wire:1")] == [
        "approve",
        "resume",
        "fail",
        "approve",
        "resume",
        "commit",
    ]


def test_refused_decisions_write_nothing(log: EffectLog, store: Store) -> None:
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire:1", Counter(), tier="irreversible")
    log.approve("wire:1", by="alice")
    approved = log.effect("wire:1")
    with pytest.raises(InvalidStateTransition, match="approved"):
        log.approve("wire:1", by="alice")  # double approval
    with pytest.raises(InvalidStateTransition):
        log.reject("wire:1", by="bob")  # too late to reject
    assert log.effect("wire:1") == approved
    assert len(log.history("wire:1")) == 1

    with store.transaction() as tx:  # a Compensable effect, still pending
        tx.insert(MACHINE, "refund:1", context={"tier": "compensable"})
    pending = log.effect("refund:1")
    with pytest.raises(InvalidStateTransition, match="tier"):
        log.approve("refund:1", by="alice")
    assert log.effect("refund:1") == pending and log.history("refund:1") == []

    with store.transaction() as tx:  # an Irreversible one, approved by a non-human
        tx.insert(MACHINE, "wire:2", context={"tier": "irreversible"})
    for actor in ("proxy", "engine", "saga"):
        with pytest.raises(InvalidStateTransition, match="actor"), store.transaction() as tx:
            row = tx.get(MACHINE, "wire:2")
            assert row is not None
            tx.move(row, "approve", actor=actor)
    assert log.history("wire:2") == []

    with pytest.raises(EffectNotFound, match="nope"):
        log.approve("nope", by="alice")
    with pytest.raises(MachinesError, match="by="):
        log.approve("wire:2", by=" ")
    assert log.effect("wire:2") is not None and log.history("wire:2") == []


def test_an_irreversible_effect_never_executes_without_approval(
    log: EffectLog, store: Store
) -> None:
    """Try every trigger by every actor, in every order up to three moves, except a human's
    approval: no path reaches executing, and every refusal writes nothing."""
    spec = store.specs()[MACHINE]
    attempts = sorted(
        {(t.trigger, actor) for t in spec.transitions for actor in t.actors}
        - {("approve", "human")}
    )
    frontier: list[tuple[tuple[str, str], ...]] = [()]
    tried = 0
    for _ in range(3):
        grown = []
        for path in frontier:
            for trigger, actor in attempts:
                key = f"irr:{tried}"
                tried += 1
                with store.transaction() as tx:
                    row, _ = tx.insert(MACHINE, key, context={"tier": "irreversible"})
                    for step_trigger, step_actor in path:
                        row = tx.move(row, step_trigger, actor=step_actor)
                try:
                    with store.transaction() as tx:
                        row = tx.move(row, trigger, actor=actor)
                except InvalidStateTransition:
                    assert log.effect(key) == row
                    assert len(log.history(key)) == len(path)
                    continue
                assert row.state != "executing"
                grown.append((*path, (trigger, actor)))
        frontier = grown
    assert tried > len(attempts)  # some paths did go on (reject, replay) and were tried again
    fn = Counter()
    for _ in range(3):
        with pytest.raises(EffectAwaitingApproval):
            log.call("wire", fn, tier="irreversible")
    assert fn.runs == 0
    assert log.history("wire") == []


# -- the saga ------------------------------------------------------------------------------


def test_compensate_undoes_executing_effects_newest_first(log: EffectLog) -> None:
    log.call("a", Counter(result="charged"), tool="refund", session="s1")
    unknown_failure(log, "b", tool="refund", session="s1")
    unknown_failure(log, "c", tool="flaky", session="s1")
    unknown_failure(log, "d", tool="refund", session="s1")
    unknown_failure(log, "other-session", tool="refund", session="s2")
    committed = log.effect("a")
    called: list[tuple[str, str]] = []

    def refund(row: Row) -> None:
        called.append((row.key, row.state))

    def flaky(row: Row) -> None:
        called.append((row.key, row.state))
        raise ConnectionError("refund API down")

    retrying = EffectLog(log.store, worker="w1", classify=not_sent(retry=(ConnectionError,)))
    report = retrying.compensate("s1", {"refund": refund, "flaky": flaky}, retries=2)

    assert called == [("d", "compensating")] + [("c", "compensating")] * 3 + [("b", "compensating")]
    assert [(step.signature, step.state) for step in report] == [
        ("d", "compensated"),
        ("c", "compensation_failed"),
        ("b", "compensated"),
        ("a", "committed"),
    ]
    assert report[1] == UndoStep("c", "compensation_failed", report[1].reason)
    assert "3 attempt(s)" in report[1].reason and "refund API down" in report[1].reason
    assert "committed-cannot-be-undone" in report[3].reason
    assert log.effect("a") == committed  # untouched
    assert assert_consistent(log, "other-session").state == "executing"  # another session
    for key in "abcd":
        assert_consistent(log, key)
    assert moves_of(log, "c")[1:] == [
        ("executing", "compensating", "compensate", "saga"),
        ("compensating", "compensation_failed", "compensation_exhausted", "saga"),
    ]
    failed = log.effect("c")
    assert failed is not None
    assert failed.data["compensation"]["attempts"] == 3
    assert failed.data["compensation"]["error"] == "ConnectionError: refund API down"


def test_compensate_fails_closed_and_leaves_what_it_cannot_undo(store: Store) -> None:
    log = EffectLog(store, classify=not_sent(ConnectionRefusedError))
    unknown_failure(log, "no-undo", tool="email", session="s")
    with pytest.raises(ConnectionRefusedError):
        log.call("never-ran", Counter(error=ConnectionRefusedError()), tool="t", session="s")
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire", Counter(), tier="irreversible", tool="wire", session="s")
    ran: list[str] = []
    report = log.compensate("s", {"wire": lambda row: ran.append(row.key)})
    assert ran == []
    by_key = {step.signature: step for step in report}
    assert [step.signature for step in report] == ["wire", "never-ran", "no-undo"]
    assert by_key["no-undo"].state == "compensation_failed"
    assert "no compensation is registered for tool 'email'" in by_key["no-undo"].reason
    assert by_key["never-ran"].state == "pending"
    assert by_key["wire"].state == "pending" and "irreversible" in by_key["wire"].reason
    for step in report:
        assert_consistent(log, step.signature)
    again = log.compensate("s", {})
    assert [(s.signature, s.state) for s in again] == [(s.signature, s.state) for s in report]
    with pytest.raises(EffectClosed, match="'no-undo' is 'compensation_failed'"):
        log.call("no-undo", Counter(), tool="email", session="s")
    with pytest.raises(MachinesError, match="retries"):
        log.compensate("s", {}, retries=-1)


def test_a_saga_interrupted_mid_compensation_leaves_a_consistent_record(log: EffectLog) -> None:
    unknown_failure(log, "a", tool="refund", session="s")
    unknown_failure(log, "b", tool="refund", session="s")

    def crash(row: Row) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        log.compensate("s", {"refund": crash})
    assert assert_consistent(log, "b").state == "compensating"
    assert assert_consistent(log, "a").state == "executing"  # never reached
    done: list[str] = []
    report = log.compensate("s", {"refund": lambda row: done.append(row.key)})
    assert done == ["a"]  # b's compensation may have run: it is not run a second time
    assert [(s.signature, s.state) for s in report] == [
        ("b", "compensating"),
        ("a", "compensated"),
    ]
    fn = Counter()
    with pytest.raises(EffectClosed, match="compensated"):
        log.call("a", fn, tool="refund", session="s")
    assert fn.runs == 0


def test_a_run_still_going_is_not_undone_under_it(log: EffectLog) -> None:
    """The session failed while the call was still running. The saga used to compensate
    it there and then, and the charge landed after the refund (outsider batch 23: the
    customer stayed charged, the effect read compensated, the audit said OK). A call this
    process is still running is left alone: the call commits its result, and the step
    says why nothing was undone."""
    undone: list[str] = []
    steps: list[Any] = []

    def slow_charge() -> str:
        steps.extend(log.compensate("s", {"charge": lambda row: undone.append(row.key)}))
        return "charged late"

    assert log.call("sig", slow_charge, tool="charge", session="s") == "charged late"
    assert undone == []
    ((signature, state, reason),) = [(s.signature, s.state, s.reason) for s in steps]
    assert (signature, state) == ("sig", "executing") and "still running in this process" in reason
    row = assert_consistent(log, "sig")
    assert (row.state, row.data["result"]) == ("committed", "charged late")


# -- races ---------------------------------------------------------------------------------


def race(log: EffectLog, signature: str, threads: int) -> tuple[int, list[object]]:
    """``threads`` callers released together on one signature: (runs of the call, what
    each caller got: the result or the ``EffectStillExecuting`` it raised)."""
    runs = 0
    lock = threading.Lock()
    barrier = threading.Barrier(threads)
    outcomes: list[object] = []

    def charge() -> dict[str, str]:
        nonlocal runs
        with lock:
            runs += 1
        time.sleep(0.02)
        return {"charged": signature}

    def racer() -> None:
        barrier.wait()
        try:
            outcome: object = log.call(signature, charge, tool="charge", session="s")
        except EffectStillExecuting as busy:
            outcome = busy
        with lock:
            outcomes.append(outcome)

    pool = [threading.Thread(target=racer) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return runs, outcomes


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_racing_callers_run_the_effect_exactly_once(kind: str, tmp_path: Path) -> None:
    """Every racer gets the one result or ``EffectStillExecuting`` (it lost the claim while
    the winner was still running); nobody runs the call a second time."""
    # Not closed: SQLiteStore.close() from this thread raises on the racers' connections.
    log = EffectLog(_open(kind, tmp_path / "race.db"))
    for signature in ("race:1", "race:2", "race:3"):
        runs, outcomes = race(log, signature, threads=6)
        assert runs == 1
        assert len(outcomes) == 6
        busy = [o for o in outcomes if isinstance(o, EffectStillExecuting)]
        results = [o for o in outcomes if not isinstance(o, EffectStillExecuting)]
        assert results and all(r == {"charged": signature} for r in results)
        assert all(type(b) is EffectStillExecuting for b in busy)
        row = assert_consistent(log, signature)
        assert (row.state, row.data["runs"], row.data["replay_count"]) == (
            "committed",
            1,
            len(results) - 1,
        )
        never = Counter()
        assert log.call(signature, never, tool="charge", session="s") == {"charged": signature}
        assert never.runs == 0


# -- nothing half-written ------------------------------------------------------------------


@pytest.mark.parametrize("result", [object(), (1, 2), {1: "a"}, float("nan")])
def test_an_unstorable_result_is_not_lost_silently(log: EffectLog, result: Any) -> None:
    with pytest.raises(EffectNotRecorded, match="'sig' ran but") as raised:
        log.call("sig", Counter(result=result))
    assert raised.value.result is result
    row = assert_consistent(log, "sig")
    assert (row.state, row.data["result"]) == ("executing", None)
    fn = Counter()
    with pytest.raises(EffectStillExecuting):
        log.call("sig", fn)
    assert fn.runs == 0


def inject_write_fault(
    monkeypatch: pytest.MonkeyPatch, when: Callable[[Mapping[str, Any]], bool]
) -> None:
    """Make every store fail to encode a row's data when ``when`` says so (a move is one
    statement on both databases, so the fault comes before it)."""

    def faulty(value: Mapping[str, Any] | None, *where: str) -> str:
        if value and "runs" in value and when(value):  # a row's data, not a detail
            raise StoreError("disk full (injected)")
        return encode(value, *where)

    monkeypatch.setattr(memory_store, "encode", faulty)
    monkeypatch.setattr(sql_store, "encode", faulty)  # every write, both databases


def test_a_failed_commit_write_rolls_back_the_whole_move(
    log: EffectLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    inject_write_fault(monkeypatch, lambda value: value.get("result") == "poison")
    with pytest.raises(EffectNotRecorded, match="disk full") as raised:
        log.call("sig", Counter(result="poison"))
    assert raised.value.result == "poison"
    row = assert_consistent(log, "sig")
    assert (row.state, row.moves, row.data["result"]) == ("executing", 1, None)


def test_a_failed_claim_write_registers_nothing_and_runs_nothing(
    log: EffectLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    inject_write_fault(monkeypatch, lambda value: value.get("runner") is not None)
    fn = Counter()
    with pytest.raises(StoreError, match="disk full"):
        log.call("sig", fn)
    assert fn.runs == 0
    assert log.effect("sig") is None and log.history("sig") == []


def test_a_failed_reset_write_leaves_the_effect_executing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EffectLog(store, classify=not_sent(ConnectionRefusedError))
    inject_write_fault(monkeypatch, lambda value: value.get("error") is not None)
    refused = ConnectionRefusedError("down")
    with pytest.raises(EffectNotRecorded, match="ConnectionRefusedError could not") as raised:
        log.call("sig", Counter(error=refused))
    assert raised.value.__cause__ is not None
    assert raised.value.__cause__.__context__ is refused
    assert assert_consistent(log, "sig").state == "executing"


def test_a_failed_saga_write_leaves_the_effect_compensating(
    log: EffectLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown_failure(log, "a", tool="refund", session="s")
    inject_write_fault(
        monkeypatch, lambda value: "finished_at" in (value.get("compensation") or {})
    )
    with pytest.raises(StoreError, match="disk full"):
        log.compensate("s", {"refund": lambda row: None})
    row = assert_consistent(log, "a")
    assert (row.state, row.moves) == ("compensating", 2)


@pytest.mark.parametrize(
    ("classify", "attempts"),
    [(None, 1), (not_sent(TimeoutError), 1), (not_sent(retry=(TimeoutError,)), 4)],
    ids=["fail closed", "failed before sending", "retried before sending"],
)
def test_an_undo_that_may_have_been_sent_is_never_sent_again(
    log: EffectLog, classify: Classifier | None, attempts: int
) -> None:
    """Outsider batch 19 (b02): ``compensate(retries=3)`` ran a refund 4 times after
    TimeoutErrors: a refund that timed out may have been paid, so each retry could pay it
    again. An attempt is retried only when the log's classifier says it was not sent."""
    unknown_failure(log, "b", tool="refund", session="s1")
    paid: list[str] = []

    def refund(row: Row) -> None:
        paid.append(row.key)
        raise TimeoutError("the bank did not answer")

    saga = log if classify is None else EffectLog(log.store, worker="w1", classify=classify)
    (step,) = saga.compensate("s1", {"refund": refund}, retries=3)
    assert (step.state, len(paid)) == ("compensation_failed", attempts)
    assert f"{attempts} attempt(s)" in step.reason
    assert ("may have been sent" in step.reason) is (classify is None)


def test_an_undo_that_is_never_awaited_is_never_recorded_as_done(log: EffectLog) -> None:
    """Outsider batch 20 (b02): an ``async def`` compensation returned a coroutine that
    compensate never awaited, and the effect ended ``compensated`` though no refund ran. An
    async function is refused before anything moves; a plain one that returns an awaitable
    ends ``compensation_failed``, saying the undo did not run."""
    import asyncio

    from machines.errors import InvalidArgument

    unknown_failure(log, "b", tool="refund", session="s1")
    refunded: list[str] = []

    async def refund(row: Row) -> None:
        refunded.append(row.key)

    with pytest.raises(InvalidArgument, match="async function"):
        log.compensate("s1", {"refund": refund})
    assert assert_consistent(log, "b").state == "executing"

    def deferred(row: Row) -> object:
        return refund(row)

    (step,) = log.compensate("s1", {"refund": deferred})
    assert step.state == "compensation_failed" and "the undo did not run" in step.reason
    assert refunded == []
    future: asyncio.Future[None] = asyncio.new_event_loop().create_future()
    unknown_failure(log, "c", tool="refund", session="s2")
    (step,) = log.compensate("s2", {"refund": lambda row: future})
    assert step.state == "compensation_failed"
