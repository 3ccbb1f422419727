"""A stateful Hypothesis suite for any effect log (seed 000's UndoLog), behind an adapter.

Four call signatures in two sessions: compensable ones with and without a registered
compensation, and an irreversible one that needs a human. The suite calls them with
effects that return, fail provably, time out, die before or after sending, hit a
failing store write, return a result that cannot be cached, or meet a duplicate caller;
a human approves or rejects; a failed session is compensated (working, failing, or
dying mid-saga). It keeps its own model of every signature and checks after every step:

- an effect took effect upstream at most once per signature, ever;
- an irreversible effect ran only right after a human approved it;
- a committed signature replays its very result and runs nothing;
- a call whose outcome is unknown is never run again, only compensated;
- the saga compensates newest first, only effects whose outcome is unknown, each once;
- the implementation's state of every signature is the one the model expects.

Point it at your own log: subclass ``EffectLogSuite`` and override ``make_adapter``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from machines.errors import MachinesError
from machines.store import open_store
from machines.store.records import Row
from machines.systems.effectlog import (
    EffectAwaitingApproval,
    EffectClosed,
    EffectLog,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectStillExecuting,
)
from machines.systems.exactly_once import not_sent
from machines.testing.coverage import Coverage
from machines.testing.faults import (
    Fault,
    FaultyStore,
    NotSent,
    SimulatedCrash,
    Specs,
    StoreWatch,
)


class Call(NamedTuple):
    tier: str
    tool: str
    session: str


CALLS = {
    "charge-1": Call("compensable", "charge", "s1"),
    "notify-1": Call("compensable", "notify", "s1"),  # no compensation registered
    "wire-1": Call("irreversible", "wire", "s1"),
    "charge-2": Call("compensable", "charge", "s2"),
}
SESSIONS = ("s1", "s2")
COMPENSATED_TOOLS = ("charge",)


class Behaviour(enum.Enum):
    RETURN = "returns a value"
    NOT_SENT = "fails before sending"
    TIMEOUT = "times out after sending"
    CRASH_AT_CLAIM = "the process dies while the call is registered"
    CRASH_AFTER_SENDING = "dies after sending, before the result is stored"
    STORE_FAILS_AFTER = "runs, then the store write fails"
    UNSTORABLE = "returns a result that cannot be cached"
    DUPLICATE_DURING = "runs while a duplicate caller arrives"


class Saga(enum.Enum):
    WORKS = "every compensation works"
    FAILS = "every compensation fails"
    DIES = "the process dies inside the first compensation"


class EffectLogAdapter:
    """What the suite needs from an effect log (override every method for your own)."""

    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        """Run ``fn`` under ``signature`` (at most once) or replay / refuse with the
        errors of ``machines.systems.effectlog``."""
        raise NotImplementedError

    def approve(self, signature: str) -> None:
        raise NotImplementedError

    def reject(self, signature: str) -> None:
        raise NotImplementedError

    def compensate(self, session: str, compensations: Mapping[str, Callable[[str], None]]) -> None:
        """Undo ``session`` newest first; ``compensations`` maps tools to undo actions
        that get the signature."""
        raise NotImplementedError

    def state(self, signature: str) -> str | None:
        """The spec state the signature is in (None: never registered)."""
        raise NotImplementedError

    def fail_next_write(self, how: Fault | None) -> None:
        """Fail (``"error"``) or kill (``"crash"``) the next store write; None clears."""

    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        """Implementation-specific problems, given upstream runs per ("effect", key)."""
        return []


@dataclass
class ReferenceEffectLog(EffectLogAdapter):
    """``machines.systems.EffectLog`` on a faulty memory (or given) store."""

    url: str = "memory://"
    coverage: Coverage | None = None
    specs: Specs = None
    store: FaultyStore = field(init=False)
    watch: StoreWatch = field(init=False)
    log: EffectLog = field(init=False)

    def __post_init__(self) -> None:
        self.store = FaultyStore(open_store(self.url, self.specs))
        self.watch = StoreWatch(self.store, self.coverage)
        self.log = EffectLog(self.store, classify=not_sent(NotSent), worker="suite")

    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        return self.log.call(signature, fn, tier=call.tier, tool=call.tool, session=call.session)

    def approve(self, signature: str) -> None:
        self.log.approve(signature, by="suite-human", reason="looks right")

    def reject(self, signature: str) -> None:
        self.log.reject(signature, by="suite-human", reason="looks wrong")

    def compensate(self, session: str, compensations: Mapping[str, Callable[[str], None]]) -> None:
        def on_row(action: Callable[[str], None]) -> Callable[[Row], None]:
            return lambda row: action(row.key)

        self.log.compensate(session, {tool: on_row(a) for tool, a in compensations.items()})

    def state(self, signature: str) -> str | None:
        row = self.log.effect(signature)
        return None if row is None else row.state

    def fail_next_write(self, how: Fault | None) -> None:
        self.store.pending = how

    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        return self.watch.check(runs)


@dataclass
class _Model:
    """What the suite believes about one signature."""

    state: str | None = None  # None: never registered
    runs: int = 0
    result: Any = None
    compensations: int = 0


class EffectLogSuite(RuleBasedStateMachine):
    """Subclass and override ``make_adapter`` to test your own effect log."""

    def make_adapter(self) -> EffectLogAdapter:
        return ReferenceEffectLog()

    def __init__(self) -> None:
        super().__init__()
        self.adapter = self.make_adapter()
        self.model = {signature: _Model() for signature in CALLS}
        self.registered: dict[str, list[str]] = {session: [] for session in SESSIONS}
        self.counter = 0

    @initialize()
    def fresh(self) -> None:
        """A fresh log per run (the adapter is built in ``__init__``)."""

    # -- calls ---------------------------------------------------------------------------

    @rule(signature=st.sampled_from(sorted(CALLS)), behaviour=st.sampled_from(Behaviour))
    def call(self, signature: str, behaviour: Behaviour) -> None:
        spec, model = CALLS[signature], self.model[signature]
        before = model.state
        ran: list[bool] = []

        def effect() -> Any:
            ran.append(True)
            assert before in (None, "pending", "approved"), f"{signature} ran from {before}"
            if spec.tier == "irreversible":
                assert before == "approved", f"{signature} ran without an approval"
            if behaviour is Behaviour.NOT_SENT:
                raise NotSent("refused before sending")
            model.runs += 1
            self.counter += 1
            if behaviour is Behaviour.TIMEOUT:
                raise TimeoutError("sent, no answer")
            if behaviour is Behaviour.CRASH_AFTER_SENDING:
                self.adapter.fail_next_write("crash")
            if behaviour is Behaviour.STORE_FAILS_AFTER:
                self.adapter.fail_next_write("error")
            if behaviour is Behaviour.UNSTORABLE:
                return ("a", "tuple")
            if behaviour is Behaviour.DUPLICATE_DURING:
                try:
                    self.adapter.call(signature, lambda: _fail("a duplicate ran"), spec)
                except EffectStillExecuting:
                    pass
                else:
                    raise AssertionError(f"{signature}: a duplicate was not refused")
            return {"value": self.counter}

        if behaviour is Behaviour.CRASH_AT_CLAIM:
            self.adapter.fail_next_write("crash")
        try:
            value = self.adapter.call(signature, effect, spec)
        except SimulatedCrash:
            self._crashed(signature, behaviour, ran)
            return
        except NotSent:
            assert behaviour is Behaviour.NOT_SENT and ran, f"{signature}: NotSent unexplained"
            self._settle(signature, "pending")
            return
        except EffectOutcomeUnknown:
            assert behaviour is Behaviour.TIMEOUT and ran, f"{signature}: unknown unexplained"
            self._settle(signature, "executing")
            return
        except EffectNotRecorded:
            expected = (Behaviour.STORE_FAILS_AFTER, Behaviour.UNSTORABLE)
            assert behaviour in expected and ran, f"{signature}: not recorded unexplained"
            self._settle(signature, "executing")
            return
        except EffectAwaitingApproval:
            assert spec.tier == "irreversible" and before in (None, "pending")
            self._settle(signature, "pending")
            return
        except EffectStillExecuting:
            assert before == "executing", f"{signature}: 'still executing' from {before}"
            return
        except EffectRejected:
            assert before == "rejected", f"{signature}: 'rejected' from {before}"
            return
        except EffectClosed:
            assert before in ("compensating", "compensated", "compensation_failed")
            return
        finally:
            self.adapter.fail_next_write(None)
        if before == "committed":
            assert not ran and value == model.result, f"{signature}: the replay changed"
            return
        assert ran and behaviour in (Behaviour.RETURN, Behaviour.DUPLICATE_DURING)
        model.result = value
        self._settle(signature, "committed")

    def _crashed(self, signature: str, behaviour: Behaviour, ran: list[bool]) -> None:
        if behaviour is Behaviour.CRASH_AT_CLAIM:
            assert not ran, f"{signature}: ran although the claim died"
            return  # the registration died with the process: nothing changed
        assert behaviour is Behaviour.CRASH_AFTER_SENDING and ran
        self._settle(signature, "executing")

    def _settle(self, signature: str, state: str) -> None:
        if self.model[signature].state is None:
            self.registered[CALLS[signature].session].append(signature)
        self.model[signature].state = state

    # -- human decisions -----------------------------------------------------------------

    @rule(signature=st.sampled_from(sorted(CALLS)), approve=st.booleans())
    def human_decides(self, signature: str, approve: bool) -> None:
        model = self.model[signature]
        legal = model.state == "pending" and CALLS[signature].tier == "irreversible"
        try:
            (self.adapter.approve if approve else self.adapter.reject)(signature)
        except MachinesError:
            assert not legal, f"{signature}: a legal decision was refused"
            return
        assert legal, f"{signature}: decided from {model.state}"
        model.state = "approved" if approve else "rejected"

    # -- the saga ------------------------------------------------------------------------

    @rule(session=st.sampled_from(SESSIONS), saga=st.sampled_from(Saga))
    def compensate(self, session: str, saga: Saga) -> None:
        expected: list[str] = []
        for signature in reversed(self.registered[session]):
            model = self.model[signature]
            if model.state == "executing" and CALLS[signature].tier == "compensable":
                expected.append(signature)
        called: list[str] = []

        def undo(signature: str) -> None:
            called.append(signature)
            assert self.model[signature].state == "executing", f"{signature}: not unknown"
            self.model[signature].compensations += 1
            if saga is Saga.FAILS:
                raise RuntimeError("the refund API is down")
            if saga is Saga.DIES:
                self.adapter.fail_next_write("crash")

        actions = {tool: undo for tool in COMPENSATED_TOOLS}
        died = False
        try:
            self.adapter.compensate(session, actions)
        except SimulatedCrash:
            died = True
        finally:
            self.adapter.fail_next_write(None)
        for signature in expected:
            model = self.model[signature]
            if CALLS[signature].tool not in COMPENSATED_TOOLS:
                model.state = "compensation_failed"  # nothing registered to undo it
            elif signature not in called:
                assert died, f"{signature}: the saga skipped it"
                break  # the saga died before reaching it: left executing
            elif died:
                model.state = "compensating"  # its undo ran; the record of it died
                break
            else:
                model.state = "compensated" if saga is Saga.WORKS else "compensation_failed"
        in_order = [s for s in expected if CALLS[s].tool in COMPENSATED_TOOLS]
        assert called == in_order[: len(called)], f"{session}: undid {called}, not {in_order}"

    # -- checked after every step --------------------------------------------------------

    @invariant()
    def at_most_once(self) -> None:
        for signature, model in self.model.items():
            assert model.runs <= 1, f"{signature} took effect {model.runs} times"
            assert model.compensations <= 1, f"{signature} compensated {model.compensations}x"

    @invariant()
    def states_agree(self) -> None:
        for signature, model in self.model.items():
            got = self.adapter.state(signature)
            assert got == model.state, f"{signature} is {got}, expected {model.state}"

    @invariant()
    def implementation_is_consistent(self) -> None:
        runs = {("effect", s): m.runs for s, m in self.model.items() if m.state is not None}
        problems = self.adapter.check(runs)
        assert not problems, "\n".join(problems)


def _fail(message: str) -> Any:
    raise AssertionError(message)
