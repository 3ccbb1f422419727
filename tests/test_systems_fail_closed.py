"""The systems fail closed on what their users hand them: results, errors, classifiers,
keys and sessions (issue 13 items 10-13), on every store.

Each test is written as an outsider would attack: the effect returns something JSON would
change, raises an exception whose ``__str__`` raises, the classifier itself raises. The
promise: the key ends parked at once (never ``in_flight`` with a dead holder), the caller
gets a typed error, and nothing runs the effect again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from machines.errors import EffectFailed, EffectIndeterminate, MachinesError
from machines.store import Store
from machines.systems import (
    EffectLog,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectStillExecuting,
    ExactlyOnce,
    TransferEngine,
    Verdict,
    not_sent,
)
from tests.garbage import posing_as


class Unprintable(Exception):
    """An upstream error whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of the upstream's error")


class Upstream:
    """Counts the calls that really reached it, and answers what the test says."""

    def __init__(self, answer: Callable[[], Any]) -> None:
        self.calls = 0
        self._answer = answer

    def __call__(self) -> Any:
        self.calls += 1
        return self._answer()


def state_of(store: Store, machine: str, key: str) -> str | None:
    with store.transaction() as tx:
        row = tx.get(machine, key)
    return None if row is None else row.state


def _raise(error: BaseException) -> Callable[[], Any]:
    def answer() -> Any:
        raise error

    return answer


def _classifier_that_raises(error: BaseException) -> Verdict:
    raise LookupError("the classifier itself failed")


def _classifier_that_answers_garbage(error: BaseException) -> Verdict:
    return "failed"  # type: ignore[return-value]  # a str, not a Verdict


UNFAITHFUL = [(1, 2), {1: "a"}, {"a": (1,)}, {"k", "v"}, 10**5000, float("nan"), "a\x00b"]


@pytest.mark.parametrize("result", UNFAITHFUL, ids=lambda r: type(r).__name__)
def test_a_result_json_would_change_is_parked_never_replayed(store: Store, result: Any) -> None:
    """issue 13 items 10 and 11: `run(key, lambda: (1, 2))` replayed `[1, 2]`, `{1: "a"}`
    replayed `{"1": "a"}`, and 10**5000 left the key in_flight behind a raw ValueError.
    Such a result is parked at once (the spec's `unstorable-result`)."""
    eo = ExactlyOnce(store)
    upstream = Upstream(lambda: result)
    with pytest.raises(EffectIndeterminate, match="cannot be stored"):
        eo.run("k", upstream)
    assert state_of(store, "outcome", "k") == "indeterminate"
    with pytest.raises(EffectIndeterminate):
        eo.run("k", upstream)
    assert upstream.calls == 1


@pytest.mark.parametrize(
    ("classify", "expected"),
    [
        (not_sent(Unprintable), "failed"),  # provably not sent, its message unreadable
        (not_sent(), "indeterminate"),  # unknown, its message unreadable
        (_classifier_that_raises, "indeterminate"),
        (_classifier_that_answers_garbage, "indeterminate"),
    ],
    ids=["failed-unprintable", "unknown-unprintable", "classifier-raises", "classifier-garbage"],
)
def test_a_settle_that_cannot_read_the_error_still_settles_at_once(
    store: Store, classify: Callable[[BaseException], Verdict], expected: str
) -> None:
    """issue 13 item 11: an exception whose `__str__` raises, or a classifier that raises,
    left the key in_flight (callers got EffectInProgress until the lease ran out)."""
    eo = ExactlyOnce(store, classify=classify)
    upstream = Upstream(_raise(Unprintable()))
    with pytest.raises(EffectFailed if expected == "failed" else EffectIndeterminate) as told:
        eo.run("k", upstream)
    assert "could not be read" in str(told.value) or expected == "indeterminate"
    assert state_of(store, "outcome", "k") == expected
    with pytest.raises(type(told.value)):
        eo.run("k", upstream)
    assert upstream.calls == 1


def test_a_decided_result_must_come_back_unchanged(store: Store) -> None:
    """issue 13 item 10: a person's decided result is replayed like any result."""
    eo = ExactlyOnce(store)
    with pytest.raises(EffectIndeterminate):
        eo.run("k", _raise(TimeoutError("sent, no answer")))
    with pytest.raises(MachinesError, match="cannot be stored"):
        eo.decide("k", landed=True, by="alice", reason="the bank says so", result=(1, 2))
    assert state_of(store, "outcome", "k") == "indeterminate"


@pytest.mark.parametrize(
    ("answer", "classify", "raised"),
    [
        (lambda: 10**5000, not_sent(), EffectNotRecorded),
        (lambda: (1, 2), not_sent(), EffectNotRecorded),
        (_raise(Unprintable()), not_sent(), EffectOutcomeUnknown),
        (_raise(TimeoutError("x")), _classifier_that_raises, EffectOutcomeUnknown),
        (_raise(TimeoutError("x")), _classifier_that_answers_garbage, EffectOutcomeUnknown),
    ],
    ids=["huge-int", "tuple", "unprintable", "classifier-raises", "classifier-garbage"],
)
def test_the_effect_log_keeps_an_unknown_outcome_and_says_so(
    store: Store,
    answer: Callable[[], Any],
    classify: Callable[[BaseException], Verdict],
    raised: type[Exception],
) -> None:
    """issue 13 item 11 (effect log): such a run left the effect `executing` behind a raw
    error, and later callers were told it was still running. The caller gets a typed
    error, the effect stays `executing` (never run again) and says why its outcome is
    unknown."""
    log = EffectLog(store, classify=classify)
    upstream = Upstream(answer)
    with pytest.raises(raised):
        log.call("sig", upstream)
    row = log.effect("sig")
    assert row is not None and row.state == "executing"
    assert row.data["unknown_outcome"]["reason"]
    with pytest.raises(EffectStillExecuting, match="ended with an unknown outcome"):
        log.call("sig", upstream)
    assert upstream.calls == 1


GARBAGE_KEYS = [None, 42, 4.2, b"k", ("k",), ["k"], "", "\ud800", "a\x00b", "k" * 5000]


@pytest.mark.parametrize("key", GARBAGE_KEYS, ids=lambda k: type(k).__name__)
def test_a_key_that_is_not_a_key_runs_nothing(store: Store, key: Any) -> None:
    """issue 13 item 12: `run(None, f)` twice on SQLite ran `f` twice; a list key or a
    lone surrogate raised raw errors. A bad key is refused before anything runs."""
    eo, log = ExactlyOnce(store), EffectLog(store)
    upstream = Upstream(lambda: {"ok": True})
    for _ in range(2):
        with pytest.raises(MachinesError):
            eo.run(key, upstream)
        with pytest.raises(MachinesError):
            log.call(key, upstream)
    assert upstream.calls == 0
    with store.transaction() as tx:
        assert tx.rows("outcome") == [] and tx.rows("effect") == []


def test_a_number_and_its_text_are_not_one_key(store: Store) -> None:
    """issue 13 item 12: `42` and `"42"` were one key on SQLite and two in memory."""
    eo = ExactlyOnce(store)
    assert eo.run("42", lambda: "text") == "text"
    with pytest.raises(MachinesError):
        eo.run(42, lambda: "number")  # type: ignore[arg-type]
    assert eo.run("42", lambda: "again") == "text"


@pytest.mark.parametrize("session", [None, 42, "", ["s"]], ids=repr)
def test_compensate_takes_a_session_on_every_store(store: Store, session: Any) -> None:
    """issue 13 item 13: `compensate(None, {})` undid the unscoped effects in memory and
    nothing on SQL. A session must be named, the same way on every store."""
    log = EffectLog(store)
    log.call("sig", lambda: {"ok": True})  # an effect of no session
    with pytest.raises(MachinesError, match="session"):
        log.compensate(session, {})
    row = log.effect("sig")
    assert row is not None and row.state == "committed"


@pytest.mark.parametrize(
    "build",
    [
        lambda s: ExactlyOnce(s, retries=-1),
        lambda s: ExactlyOnce(s, retries=True),
        lambda s: ExactlyOnce(s, retries="3"),
        lambda s: ExactlyOnce(s, lease_seconds=float("nan")),
        lambda s: ExactlyOnce(s, lease_seconds="30"),
        lambda s: ExactlyOnce(s, classify=None),
        lambda s: ExactlyOnce(s, on_indeterminate=["gate"]),
        lambda s: ExactlyOnce(s, worker=42),
        # outsider batch 45 (a 17): refused only at the first run, as the data's fault
        lambda s: ExactlyOnce(s, worker="a\x00b"),
        lambda s: EffectLog(s, worker="\ud800"),
        lambda s: EffectLog(s, worker="w" * 1001),
        lambda s: ExactlyOnce(s, retries=10**30),
        lambda s: EffectLog(s).call("sig", dict, tool="t" * 1001),
        lambda s: ExactlyOnce(object()),
        lambda s: EffectLog(s, clock="now"),
        lambda s: EffectLog(None),
        # outsider batch 19 (b01): raw TypeError / ValueError, or pairs taken as a mapping
        lambda s: TransferEngine(s, {}, engine_id="a\x00b"),  # batch 46 (c 11)
        lambda s: TransferEngine(s, {}, engine_id="\ud800"),
        lambda s: TransferEngine(s, {}, 5),
        lambda s: TransferEngine(s, {}, "ab"),
        lambda s: TransferEngine(s, {}, b"xy"),
        lambda s: TransferEngine(s, {}, {"on_failed"}),
        lambda s: TransferEngine(s, {}, [("on_failed", print)]),
        lambda s: TransferEngine(s, {}, iter([("on_failed", print)])),
        lambda s: TransferEngine(s, {}, {1: print}),
    ],
)
def test_a_system_built_with_bad_options_refuses_at_once(
    store: Store, build: Callable[[Store], object]
) -> None:
    with pytest.raises(MachinesError):
        build(store)


def test_arguments_are_checked_before_a_key_is_claimed(store: Store) -> None:
    """A non-callable `fn` used to claim the key and then park it forever."""
    eo, log = ExactlyOnce(store), EffectLog(store)
    with pytest.raises(MachinesError, match="fn must be callable"):
        eo.run("k", 42)  # type: ignore[arg-type]
    with pytest.raises(MachinesError, match="fn must be callable"):
        log.call("sig", None)  # type: ignore[arg-type]
    with pytest.raises(MachinesError, match="limit"):
        eo.park_expired(limit="5")  # type: ignore[arg-type]
    with pytest.raises(MachinesError, match="landed"):
        eo.decide("k", landed="yes", by="a", reason="b")  # type: ignore[arg-type]
    with pytest.raises(MachinesError, match="by"):
        eo.reclaim("k", by=None, reason="b")  # type: ignore[arg-type]
    with store.transaction() as tx:
        assert tx.rows("outcome") == [] and tx.rows("effect") == []


@pytest.mark.parametrize("silent", ["", " ", "\u200b", "\U0001d159", "\u303f\u1806", "--"])
def test_a_persons_decision_that_says_nothing_is_refused_before_it_is_written(
    store: Store, silent: str
) -> None:
    """Outsider batch 35 (a D): ``decide`` took a ``by`` and a ``reason`` that draw nothing
    (U+1D159, a musical null notehead) and wrote them; only the audit named the decision
    afterwards, and not even that for the notehead. Who and why must say something, as the
    audit reads them, before anything is written."""
    eo, log = ExactlyOnce(store), EffectLog(store)
    for decision in (
        lambda: eo.decide("k", landed=False, by=silent, reason="checked the ledger"),
        lambda: eo.decide("k", landed=False, by="ann", reason=silent),
        lambda: eo.reclaim("k", by=silent, reason="safe to repeat"),
        lambda: eo.reclaim("k", by="ann", reason=silent),
        lambda: log.approve("wire", by=silent),
    ):
        with pytest.raises(MachinesError, match="a letter or a digit"):
            decision()
    with store.transaction() as tx:
        assert tx.rows("outcome") == [] and tx.rows("effect") == []


def test_a_clock_that_fails_is_a_typed_error_and_claims_nothing(store: Store) -> None:
    def broken() -> float:
        raise OSError("no time")

    upstream = Upstream(lambda: 1)
    with pytest.raises(MachinesError, match="clock raised OSError"):
        ExactlyOnce(store, clock=broken).run("k", upstream)
    with pytest.raises(MachinesError, match="clock must return"):
        ExactlyOnce(store, clock=lambda: float("inf")).run("k", upstream)
    assert upstream.calls == 0 and state_of(store, "outcome", "k") is None


def test_the_first_caller_gets_what_every_replay_gets(store: Store) -> None:
    """A result equal to its JSON but of another type (a `StrEnum`, a read-only mapping)
    is handed to every caller, the first one included, as stored: one value for all."""
    from types import MappingProxyType

    from tests.garbage import StrEnumValue

    eo, log = ExactlyOnce(store), EffectLog(store)
    for run in (lambda f: eo.run("k", f), lambda f: log.call("sig", f)):
        told = [run(lambda: MappingProxyType({"state": StrEnumValue.IN_FLIGHT})) for _ in "ab"]
        assert told[0] == told[1] == {"state": "in_flight"}
        assert type(told[0]) is type(told[1]) is dict
        assert type(told[0]["state"]) is type(told[1]["state"]) is str


class LyingText(str):
    """A text whose own ``strip`` says there is something in it."""

    def strip(self, chars: str | None = None) -> str:
        return "someone"


def test_a_text_that_lies_about_itself_is_judged_by_its_characters(store: Store) -> None:
    """Outsider batch 19 (b04): a ``str`` subclass whose ``strip`` lies passed the checks
    of who decides and why: a reclaim was stored with ``by=''`` and ``reason=''``, which
    the audit then flagged as the system's own breach. Each person's call judges (and
    stores) the characters themselves."""
    from machines.errors import InvalidArgument
    from machines.systems import TransferEngine
    from machines.systems.transfer.errors import TransferRefused

    def sent() -> None:
        raise TimeoutError("sent, no answer")

    eo = ExactlyOnce(store, worker="w")
    with pytest.raises(EffectIndeterminate):
        eo.run("k1", sent)
    for call in (
        lambda: eo.reclaim("k1", by=LyingText(""), reason="checked"),
        lambda: eo.reclaim("k1", by="ops", reason=LyingText("\t")),
        lambda: eo.decide("k1", landed=False, by=LyingText("  "), reason="checked"),
    ):
        with pytest.raises(InvalidArgument):
            call()
    eo.reclaim("k1", by=LyingText("ops"), reason=LyingText("checked upstream"))
    with store.transaction() as tx:
        detail = tx.history("outcome", "k1")[-1].detail
    assert detail is not None and type(detail["by"]) is str and detail["by"] == "ops"
    log = EffectLog(store, worker="w")
    with pytest.raises(MachinesError):
        log.call("s", lambda: 1, tier="irreversible", tool="t")
    with pytest.raises(InvalidArgument):
        log.approve("s", by=LyingText(" "))
    with pytest.raises(TransferRefused):  # refused before the request is looked for
        TransferEngine(store, {}).reject("t1", by=LyingText(" "))


def test_a_decision_on_a_key_never_run_is_a_typed_not_found(store: Store) -> None:
    """Outsider batch 19 (b03): ``decide`` and ``reclaim`` on an unknown key raised a bare
    ``MachinesError``; the effect log and the engine raise one a caller can catch."""
    from machines.systems import EffectNotFound

    eo = ExactlyOnce(store, worker="w")
    with pytest.raises(EffectNotFound, match="no effect is recorded under key 'nope'"):
        eo.decide("nope", landed=False, by="ops", reason="checked")
    with pytest.raises(LookupError):
        eo.reclaim("nope", by="ops", reason="checked")


class LyingTier(str):
    """A tier that equals anything it is compared with."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


class LyingCount(int):
    """A count whose comparisons say it is in any range."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False


def test_what_is_checked_is_what_is_used(store: Store) -> None:
    """Outsider batch 20 (b01, b04): ``EffectLog.call`` checked the tier's characters and
    then compared the caller's object with 'safe', which a lying ``__eq__`` passed: the
    call ran outside the log each time (three runs, no row). A count's lying comparisons
    passed its bounds (``retries=-5``). The plain text and number are what is used."""
    from machines.errors import InvalidArgument

    log = EffectLog(store, worker="w")
    ran: list[int] = []
    for _ in range(3):
        assert log.call("sig", lambda: ran.append(1) or "done", tier=LyingTier("compensable")) == (
            "done"
        )
    assert ran == [1]
    row = log.effect("sig")
    assert row is not None and row.context["tier"] == "compensable"
    with pytest.raises(InvalidArgument, match="retries"):
        ExactlyOnce(store, retries=LyingCount(-5))
    with pytest.raises(InvalidArgument, match="retries"):
        log.compensate("s", {}, retries=LyingCount(10**9))


def test_a_callback_that_cannot_be_shown_is_still_refused_typed(store: Store) -> None:
    """Outsider batch 20 (b14): the refusal of a callback that is not callable showed it
    with ``repr``, so one whose ``__repr__`` raised let a raw RuntimeError out."""
    from machines.systems.transfer.errors import TransferConfigError

    class Unshowable:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    with pytest.raises(TransferConfigError, match="not callable"):
        TransferEngine(store, {}, {"request_failed": Unshowable()})


class PosingAsGate(str):
    """A node name that says it starts with anything."""

    def startswith(self, *args: object) -> bool:
        return True


class SignedAsSomeoneElse(str):
    """A name that formats as another person's."""

    def __format__(self, spec: str) -> str:
        return "mallory"


EqualToEverything = posing_as("completed")


def test_a_persons_texts_are_used_as_checked(store: Store) -> None:
    """Outsider batch 21 (b04, b18): ``complete_manual`` asked the caller's node name
    whether it ``startswith`` the gate prefix (a lying one "completed manually" a
    withdrawal), ``decide`` and ``cancel`` formatted the caller's ``by`` into what they
    store, and ``reconcile`` looked its evidence up by the caller's ``__eq__``/``__hash__``
    (an unknown node marked completed with 'failed' recorded). The checked plain texts are
    what is used."""
    from machines.systems.transfer.errors import TransferRefused
    from machines.testing.transfer.suite import plan_node
    from tests.test_transfer import FakeVenue, engine_for, executing

    engine = engine_for(store, FakeVenue())
    executing(engine, "t", [plan_node("withdraw", "action", True)])
    with pytest.raises(TransferRefused, match="not a manual gate"):
        engine.complete_manual("t", PosingAsGate("withdraw"), by="olga", drive=False)
    assert engine.nodes("t")["withdraw"].state == "ready"

    eo = ExactlyOnce(store, worker="w")
    with pytest.raises(EffectIndeterminate):
        eo.run("k", lambda: (_ for _ in ()).throw(TimeoutError("sent")))
    eo.decide("k", landed=False, by=SignedAsSomeoneElse("olga"), reason="the bank says no")
    row = eo.outcome("k")
    assert row is not None and row.data["error"]["message"].startswith("olga decided")

    venue = FakeVenue({"withdraw": {"submit": [TimeoutError("no answer")]}})
    engine = engine_for(store, venue)
    executing(engine, "u", [plan_node("withdraw", "action", True)])
    for _ in range(4):
        engine.step("u")
    assert engine.nodes("u")["withdraw"].state == "unknown"
    engine.reconcile("u", "withdraw", EqualToEverything("failed"), by="venue-records")
    assert engine.nodes("u")["withdraw"].state == "failed"


class ReadsOtherwise(dict):  # type: ignore[type-arg]
    """Compensations whose ``items`` and ``get`` disagree."""

    def get(self, key: object, default: object = None) -> object:
        raise RuntimeError("get was asked")


def test_what_compensate_checks_is_what_it_runs(store: Store) -> None:
    """Outsider batch 21 (b01, b02): compensate checked the mapping's items() and ran what
    its get() returned: one whose get raised let a RuntimeError out after the effect had
    moved to compensating (stuck there), and one whose items() were empty ended the undo
    as tried. An async function where a plain one is called (an effect, a classifier, an
    undo) ran nothing and was recorded as run; it is refused before anything moves."""
    from machines.errors import InvalidArgument

    log = EffectLog(store, worker="w")
    upstream = Upstream(lambda: (_ for _ in ()).throw(TimeoutError("sent")))
    with pytest.raises(EffectOutcomeUnknown):
        log.call("sig", upstream, tool="refund", session="s")
    refunded: list[str] = []
    steps = log.compensate("s", ReadsOtherwise(refund=lambda row: refunded.append(row.key)))
    assert [(s.signature, s.state) for s in steps] == [("sig", "compensated")]
    assert refunded == ["sig"]

    async def charge() -> str:
        return "charged"

    class AsyncCall:
        async def __call__(self) -> str:
            return "charged"

    for call in (
        lambda: ExactlyOnce(store, worker="w").run("k", charge),
        lambda: ExactlyOnce(store, worker="w").run("k", AsyncCall()),
        lambda: log.call("sig-2", charge),
        lambda: ExactlyOnce(store, classify=charge),
        lambda: log.compensate("s", {"refund": charge}),
    ):
        with pytest.raises(InvalidArgument, match="async function"):
            call()
    with store.transaction() as tx:
        assert tx.get("outcome", "k") is None and tx.get("effect", "sig-2") is None


class LyingSeconds(int):
    def __abs__(self) -> int:
        return 0

    def __float__(self) -> float:
        return float("nan")


def test_a_clock_reading_is_judged_as_the_number_it_is(store: Store) -> None:
    """Outsider batch 21 (b03): the clock check asked the reading's own ``abs`` and
    ``float``, so an int subclass could give a move a NaN time or raise OverflowError."""
    from machines.errors import MachinesError

    log = EffectLog(store, worker="w", clock=lambda: LyingSeconds(10**400))
    with pytest.raises(MachinesError, match="clock"):
        log.call("sig", lambda: 1)
    log = EffectLog(store, worker="w", clock=lambda: LyingSeconds(1_700_000_000))
    assert log.call("sig", lambda: 1) == 1
    row = log.effect("sig")
    assert row is not None and row.data["started_at"] == 1_700_000_000.0
