"""Fuzz the reference systems' public calls with garbage of every type (issue 13).

Two promises, for ``ExactlyOnce``, ``EffectLog`` and ``TransferEngine``:

- **Arguments.** Any call with any one argument replaced by garbage either does what it
  documents or raises a ``MachinesError``; and when a call is refused for its arguments
  (``InvalidArgument``, ``UnstorableValue``, a store's refusal), the store is unchanged.
- **What user code hands back.** Whatever an effect returns or raises, whatever a
  classifier answers and whatever an executor answers or raises, the caller gets a value
  or a ``MachinesError``, the key is never left ``in_flight`` by a finished call, nothing
  runs twice, and a replay tells every later caller the same thing.

They run on memory and SQLite (a fresh store per example); the PostgreSQL store keeps the
same promises through the same code, which ``tests/test_store_fuzz.py`` fuzzes directly.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from machines.errors import EffectError, InvalidArgument, MachinesError
from machines.spec.jsonvalue import UnstorableValue
from machines.store import Store, StoreError, open_store
from machines.systems import EffectLog, ExactlyOnce, Verdict
from machines.systems.transfer import ManualGate, TransferEngine
from machines.testing.profiles import scaled
from machines.testing.transfer.suite import plan_node
from tests.garbage import garbage

FUZZ = settings(scaled(60), suppress_health_check=[HealthCheck.too_slow])
KINDS = ("memory", "sqlite")

Snapshot = dict[str, list[tuple[Any, ...]]]


@contextmanager
def fresh_store(kind: str) -> Iterator[Store]:
    if kind == "memory":
        store = open_store("memory://")
        yield store
        store.close()
        return
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{Path(folder) / 'fuzz.db'}")
        try:
            yield store
        finally:
            store.close()


def snapshot(store: Store) -> Snapshot:
    """Every row and every history of every machine, as plain tuples."""
    out: Snapshot = {}
    with store.transaction() as tx:
        for machine in store.specs():
            rows = tx.rows(machine)
            out[machine] = [
                (r.key, r.state, dict(r.data), r.version, tuple(tx.history(machine, r.key)))
                for r in rows
            ]
    return out


def refused_for_its_arguments(error: BaseException) -> bool:
    """A refusal that must leave the store as it was (not a system's verdict on a key)."""
    return isinstance(error, InvalidArgument | UnstorableValue | StoreError) or (
        isinstance(error, MachinesError) and not isinstance(error, EffectError)
    )


def call_and_judge(store: Store, call: Callable[[], object]) -> None:
    before = snapshot(store)
    try:
        call()
    except MachinesError as error:
        if refused_for_its_arguments(error):
            assert snapshot(store) == before, f"{type(error).__name__} changed the store"


# -- ExactlyOnce -----------------------------------------------------------------------------

ONE_DEFAULT = {"key": "k1", "fn": lambda: {"ok": 1}, "by": "ops", "reason": "checked"}


def _exactly_once_calls(eo: ExactlyOnce, args: dict[str, Any]) -> dict[str, Callable[[], object]]:
    return {
        "run": lambda: eo.run(args["key"], args["fn"]),
        "reclaim": lambda: eo.reclaim(args["key"], by=args["by"], reason=args["reason"]),
        "decide": lambda: eo.decide(
            args["key"],
            landed=args["landed"],
            by=args["by"],
            reason=args["reason"],
            result=args["result"],
        ),
        "outcome": lambda: eo.outcome(args["key"]),
        "park_expired": lambda: eo.park_expired(limit=args["limit"]),
    }


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(
    method=st.sampled_from(["run", "reclaim", "decide", "outcome", "park_expired"]),
    argument=st.sampled_from(["key", "fn", "by", "reason", "landed", "result", "limit"]),
    value=garbage(extra=("k1", "k2", "ops", "")),
)
def test_exactly_once_refuses_garbage_arguments_and_changes_nothing(
    kind: str, method: str, argument: str, value: Any
) -> None:
    with fresh_store(kind) as store:
        eo = ExactlyOnce(store)
        eo.run("k1", lambda: {"ok": 1})
        with suppress(MachinesError):
            eo.run("k2", _timeout)
        args = {**ONE_DEFAULT, "landed": False, "result": None, "limit": 5, argument: value}
        call_and_judge(store, _exactly_once_calls(eo, args)[method])


def _timeout() -> None:
    raise TimeoutError("sent, no answer")


class _Unprintable(str):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


@pytest.mark.parametrize(
    "key",
    [10**5000, {"a": 10**5000}, _Unprintable("k1"), "x" * 5000],
    ids=["huge-int", "dict-of-huge-int", "unprintable-str", "long-str"],
)
@pytest.mark.parametrize("landed", [True, False])
def test_a_persons_decision_on_a_key_no_store_holds_is_refused_before_it_is_named(
    key: Any, landed: bool
) -> None:
    """Outsider batch 44 (a B1): ``decide(landed=True)`` named the key in a message before
    checking it, so a huge int or a str whose ``__str__`` raises escaped raw."""
    with fresh_store("memory") as store:
        eo = ExactlyOnce(store)
        for call in (
            lambda: eo.decide(key, landed=landed, by="ops", reason="checked", result=None),
            lambda: eo.reclaim(key, by="ops", reason="checked"),
        ):
            before = snapshot(store)
            with pytest.raises(MachinesError):
                call()
            assert snapshot(store) == before


@pytest.mark.parametrize(
    "option",
    ["classify", "retries", "lease_seconds", "on_indeterminate", "clock", "worker", "store"],
)
@FUZZ
@given(value=garbage())
def test_exactly_once_refuses_garbage_options(option: str, value: Any) -> None:
    store = open_store("memory://")
    try:
        ExactlyOnce(**{"store": store, option: value})
    except MachinesError:
        return


class Answer:
    """An effect's answer: a value to return, or an exception to raise (with garbage in
    its message, or a ``__str__`` that raises)."""

    def __init__(self, value: Any, raises: bool) -> None:
        self.value, self.raises, self.calls = value, raises, 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.raises:
            raise _GarbageError(self.value)
        return self.value


class _GarbageError(Exception):
    def __init__(self, payload: Any) -> None:
        super().__init__(payload)
        self.payload = payload

    def __str__(self) -> str:
        return self.payload if isinstance(self.payload, str) else object.__repr__(self.payload)


VERDICTS = st.one_of(st.sampled_from(list(Verdict)), garbage())


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(
    value=garbage(extra=({"ok": 1}, [1, 2], "done")),
    raises=st.booleans(),
    verdict=VERDICTS,
    classifier_raises=st.booleans(),
)
def test_whatever_an_effect_hands_back_the_key_settles_and_replays_the_same(
    kind: str, value: Any, raises: bool, verdict: Any, classifier_raises: bool
) -> None:
    def classify(error: BaseException) -> Verdict:
        if classifier_raises:
            raise RuntimeError("the classifier failed")
        return verdict  # type: ignore[no-any-return]

    with fresh_store(kind) as store:
        eo = ExactlyOnce(store, classify=classify, retries=1)
        answer = Answer(value, raises)
        first = _told(lambda: eo.run("k", answer))
        row = eo.outcome("k")
        assert row is not None and row.state != "in_flight", "a finished call left it in_flight"
        calls = answer.calls
        assert calls in (1, 2)  # one retry at most, and only on a RETRY verdict
        second = _told(lambda: eo.run("k", answer))
        assert answer.calls == calls, "a settled key ran again"
        assert second == first or (first[0] == "value" and second[0] == "value")
        if first[0] == "value":
            assert second[1] == first[1] and type(second[1]) is type(first[1])


def _told(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a caller was told: ("value", v) or the error's type. Besides ``MachinesError``
    only the effect's own error may come through, as the effect log documents for an error
    its classifier says proves the call did not happen."""
    try:
        return "value", call()
    except (MachinesError, _GarbageError) as error:
        return type(error).__name__, None


# -- EffectLog -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(
    method=st.sampled_from(["call", "approve", "reject", "compensate", "effect", "history"]),
    argument=st.sampled_from(["signature", "fn", "tier", "tool", "session", "by", "reason"]),
    value=garbage(extra=("s1", "s2", "compensable", "irreversible", "safe", "t", "sess")),
)
def test_effect_log_refuses_garbage_arguments_and_changes_nothing(
    kind: str, method: str, argument: str, value: Any
) -> None:
    with fresh_store(kind) as store:
        log = EffectLog(store)
        log.call("s1", lambda: {"ok": 1}, tool="t", session="sess")
        with suppress(MachinesError):
            log.call("s2", lambda: None, tier="irreversible", tool="t", session="sess")
        args: dict[str, Any] = {
            "signature": "s2",
            "fn": lambda: {"ok": 2},
            "tier": "compensable",
            "tool": "t",
            "session": "sess",
            "by": "alice",
            "reason": "fine",
            argument: value,
        }
        calls: dict[str, Callable[[], object]] = {
            "call": lambda: log.call(
                args["signature"], args["fn"], args["tier"], args["tool"], args["session"]
            ),
            "approve": lambda: log.approve(args["signature"], by=args["by"], reason=args["reason"]),
            "reject": lambda: log.reject(args["signature"], by=args["by"], reason=args["reason"]),
            "compensate": lambda: log.compensate(args["session"], {"t": args["fn"]}),
            "effect": lambda: log.effect(args["signature"]),
            "history": lambda: log.history(args["signature"]),
        }
        call_and_judge(store, calls[method])


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(value=garbage(extra=({"ok": 1}, "done")), raises=st.booleans(), verdict=VERDICTS)
def test_whatever_a_tool_hands_back_the_log_never_runs_it_twice(
    kind: str, value: Any, raises: bool, verdict: Any
) -> None:
    with fresh_store(kind) as store:
        log = EffectLog(store, classify=lambda error: verdict)
        answer = Answer(value, raises)
        first = _told(lambda: log.call("sig", answer))
        row = log.effect("sig")
        assert row is not None and row.state in ("committed", "executing", "pending")
        again = _told(lambda: log.call("sig", answer))
        if row.state == "pending":  # provably not sent: a later call may run it again
            assert answer.calls <= 2
            return
        assert answer.calls == 1, "a settled or unknown effect ran again"
        if first[0] == "value":
            assert again == first and type(again[1]) is type(first[1])


# -- TransferEngine --------------------------------------------------------------------------


class GarbageVenue:
    """An executor that answers garbage, or raises it."""

    def __init__(self, value: Any, raises: bool) -> None:
        self.value, self.raises = value, raises

    def _answer(self, node: object) -> Any:
        if self.raises:
            raise _GarbageError(self.value)
        return self.value

    prepare = submit = observe = _answer


PLAN = [plan_node("withdraw", "action", True, executor="venue")]


def _engine(store: Store, venue: object) -> TransferEngine:
    return TransferEngine(
        store,
        {"venue": venue, "gate": ManualGate()},
        engine_id="engine-1",  # type: ignore[dict-item]
    )


def _executing(engine: TransferEngine) -> None:
    engine.submit("r1", PLAN)
    engine.validate("r1")
    engine.request_approval("r1")
    engine.approve("r1", by="alice")
    engine.start("r1")


TRANSFER_METHODS = [
    "submit",
    "approve",
    "cancel",
    "step",
    "run",
    "sign",
    "retry",
    "skip",
    "reconcile",
    "complete_manual",
    "request",
    "nodes",
]


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(
    method=st.sampled_from(TRANSFER_METHODS),
    argument=st.sampled_from(["request_id", "node", "by", "reason", "plan", "evidence", "steps"]),
    value=garbage(extra=("r1", "withdraw", "manual_x", "completed", "alice")),
)
def test_transfer_engine_refuses_garbage_arguments_and_changes_nothing(
    kind: str, method: str, argument: str, value: Any
) -> None:
    with fresh_store(kind) as store:
        engine = _engine(store, GarbageVenue("accepted", raises=False))
        _executing(engine)
        a: dict[str, Any] = {
            "request_id": "r1",
            "node": "withdraw",
            "by": "alice",
            "reason": "because",
            "plan": PLAN,
            "evidence": "completed",
            "steps": 3,
            argument: value,
        }
        calls: dict[str, Callable[[], object]] = {
            "submit": lambda: engine.submit(a["request_id"], a["plan"]),
            "approve": lambda: engine.approve(a["request_id"], by=a["by"], reason=a["reason"]),
            "cancel": lambda: engine.cancel(a["request_id"], by=a["by"], reason=a["reason"]),
            "step": lambda: engine.step(a["request_id"]),
            "run": lambda: engine.run(a["request_id"], max_steps=a["steps"]),
            "sign": lambda: engine.sign(a["request_id"], a["node"], by=a["by"]),
            "retry": lambda: engine.retry(a["request_id"], a["node"], reason=a["reason"]),
            "skip": lambda: engine.skip(a["request_id"], a["node"], by=a["by"], reason=a["reason"]),
            "reconcile": lambda: engine.reconcile(
                a["request_id"], a["node"], a["evidence"], by=a["by"]
            ),
            "complete_manual": lambda: engine.complete_manual(
                a["request_id"], a["node"], by=a["by"]
            ),
            "request": lambda: engine.request(a["request_id"]),
            "nodes": lambda: engine.nodes(a["request_id"]),
        }
        call_and_judge(store, calls[method])


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(
    value=garbage(extra=("accepted", "completed", "failed", "unknown", "sign")),
    raises=st.booleans(),
)
def test_an_executor_answering_garbage_never_breaks_the_engine(
    kind: str, value: Any, raises: bool
) -> None:
    """A user's executor is user code: whatever it answers or raises, the engine records
    it as evidence and moves the node by the spec (unknown when in doubt), never a raw
    error and never money marked failed while it may be moving."""
    with fresh_store(kind) as store:
        engine = _engine(store, GarbageVenue(value, raises))
        _executing(engine)
        with suppress(MachinesError):
            engine.run("r1", max_steps=5)
        states = {name: node.state for name, node in engine.nodes("r1").items()}
        request = engine.request("r1")
        if states["withdraw"] in ("submitting", "submitted", "observing", "unknown"):
            assert request.state not in ("failed", "cancelled"), (states, request.state)
