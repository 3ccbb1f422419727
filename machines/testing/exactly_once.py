"""A stateful Hypothesis suite for any exactly-once executor, behind an adapter.

The suite calls keys with effects that return, fail provably, time out after sending, or
die mid-write; it expires leases on a fake clock, calls duplicates while an effect runs,
and makes caller and operator decisions. After every step it checks the promises of seed
004 against a model it keeps itself (so it can judge implementations that are not built
on this package's store):

- every key's effect ran upstream at most once, plus once per accepted reclaim;
- a succeeded key replays the very result it recorded, a failed key the very error;
- a key the executor could not settle is indeterminate, and stays so until an explicit
  reclaim or decision: no call ever runs its effect again on a guess.

Point it at your own implementation::

    class MyExecutorSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return MyAdapter(...)

    TestMyExecutor = MyExecutorSuite.TestCase

The reference adapter (``ReferenceAdapter``) runs ``machines.systems.ExactlyOnce`` on a
store wrapped by ``FaultyStore`` and also checks the named invariants on its snapshots.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from machines.errors import EffectFailed, EffectIndeterminate, EffectInProgress, MachinesError
from machines.store import open_store
from machines.systems.exactly_once import ExactlyOnce, not_sent
from machines.testing.coverage import Coverage
from machines.testing.faults import (
    Fault,
    FaultyStore,
    NotSent,
    SimulatedCrash,
    Specs,
    StoreWatch,
)

KEYS = ("k1", "k2", "k3")
LEASE = 30.0


class Behaviour(enum.Enum):
    RETURN = "returns a value"
    NOT_SENT = "fails before sending"
    TIMEOUT = "times out after sending"
    CRASH_AFTER_SENDING = "dies after sending"
    STORE_FAILS_AFTER = "runs, then the store write fails"
    DUPLICATE_DURING = "runs while a duplicate caller arrives"
    TAKEN_OVER = "stalls past its lease and another worker takes the key"


class ExactlyOnceAdapter(Protocol):
    """What the suite needs from an exactly-once executor under test."""

    def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any:
        """Run ``effect`` for ``key`` as ``worker``; raise EffectFailed / EffectIndeterminate
        / EffectInProgress as the executor decides."""

    def reclaim(self, key: str) -> None: ...

    def decide(self, key: str, landed: bool, result: Any) -> None: ...

    def advance_clock(self, seconds: float) -> None: ...

    def fail_next_write(self, how: Fault | None) -> None:
        """Make the next store write raise a store error (``"error"``) or kill the process
        (``"crash"``: raise ``SimulatedCrash``); None clears it. Implementations without a
        store may ignore it."""

    def check(self) -> list[str]:
        """Implementation-specific consistency problems (empty when none)."""


@dataclass
class ReferenceAdapter:
    """``machines.systems.ExactlyOnce`` on a faulty memory (or given) store, fake clock."""

    url: str = "memory://"
    coverage: Coverage | None = None
    specs: Specs = None
    now: float = 1_000.0
    store: FaultyStore = field(init=False)
    watch: StoreWatch = field(init=False)

    def __post_init__(self) -> None:
        self.store = FaultyStore(open_store(self.url, self.specs))
        self.watch = StoreWatch(self.store, self.coverage)

    def _executor(self, worker: str) -> ExactlyOnce:
        return ExactlyOnce(
            self.store,
            classify=not_sent(NotSent),
            lease_seconds=LEASE,
            clock=lambda: self.now,
            worker=worker,
        )

    def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any:
        return self._executor(worker).run(key, effect)

    def reclaim(self, key: str) -> None:
        self._executor("caller").reclaim(key, by="suite", reason="declared safe to repeat")

    def decide(self, key: str, landed: bool, result: Any) -> None:
        self._executor("gate").decide(
            key, landed=landed, by="suite", reason="decided", result=result
        )

    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    def fail_next_write(self, how: Fault | None) -> None:
        self.store.pending = how

    def check(self) -> list[str]:
        return self.watch.check()


@dataclass
class _Key:
    """What the suite knows about one key, independent of the implementation."""

    runs: int = 0
    allowed: int = 1  # 1 + accepted reclaims
    outcome: str = "new"  # new | running | succeeded | failed | indeterminate
    result: Any = None
    error: tuple[str, str] | None = None
    crashed_at: float | None = None


class ExactlyOnceSuite(RuleBasedStateMachine):
    """Subclass and override ``make_adapter`` to test your own executor."""

    def make_adapter(self) -> ExactlyOnceAdapter:
        return ReferenceAdapter()

    def __init__(self) -> None:
        super().__init__()
        self.adapter: ExactlyOnceAdapter = self.make_adapter()
        self.keys = {key: _Key() for key in KEYS}
        self.clock = 0.0
        self.counter = 0

    @initialize()
    def fresh(self) -> None:
        """A fresh system per run (the adapter is built in ``__init__``)."""

    # -- effects ------------------------------------------------------------------------

    def _effect(self, key: str, behaviour: Behaviour) -> Callable[[], Any]:
        state = self.keys[key]

        def effect() -> Any:
            if behaviour is Behaviour.NOT_SENT:
                raise NotSent("refused before sending")
            state.runs += 1  # from here on, it happened upstream
            self.counter += 1
            if behaviour is Behaviour.TIMEOUT:
                raise TimeoutError("sent, no answer")
            if behaviour is Behaviour.CRASH_AFTER_SENDING:
                self.adapter.fail_next_write("crash")
            if behaviour is Behaviour.STORE_FAILS_AFTER:
                self.adapter.fail_next_write("error")
            if behaviour is Behaviour.DUPLICATE_DURING:
                try:
                    self.adapter.run(key, lambda: _fail("a duplicate ran"), "duplicate")
                except EffectInProgress:
                    pass
                else:
                    raise AssertionError(f"{key}: a duplicate was not refused while running")
            if behaviour is Behaviour.TAKEN_OVER:
                self.adapter.advance_clock(LEASE + 1)
                self.clock += LEASE + 1
                try:
                    self.adapter.run(key, lambda: _fail("a takeover ran"), "other")
                except EffectIndeterminate:
                    pass  # the other worker found the lease expired and parked the key
                else:
                    raise AssertionError(f"{key}: an expired lease was not parked")
            return {"value": self.counter}

        return effect

    @rule(key=st.sampled_from(KEYS), behaviour=st.sampled_from(Behaviour))
    def call(self, key: str, behaviour: Behaviour) -> None:
        state = self.keys[key]
        runs_before, outcome_before = state.runs, state.outcome
        try:
            value = self.adapter.run(key, self._effect(key, behaviour), "worker")
        except SimulatedCrash:
            state.outcome, state.crashed_at = "running", self.clock
            return
        except EffectInProgress:
            assert outcome_before == "running", f"{key}: in progress, but it was {outcome_before}"
            assert state.runs == runs_before
            return
        except EffectFailed as failed:
            got = (failed.error_type, failed.error_message)
            if outcome_before == "failed":
                assert state.runs == runs_before
                assert state.error in (None, got), f"{key}: replayed a different error"
                state.error = got
            else:
                assert state.runs == runs_before, f"{key}: failed although the effect ran"
                state.outcome, state.error = "failed", got
            return
        except EffectIndeterminate:
            if outcome_before in ("indeterminate", "running"):
                assert state.runs == runs_before, f"{key}: a parked key ran again"
            state.outcome = "indeterminate"
            return
        if outcome_before == "succeeded":
            assert value == state.result and state.runs == runs_before, f"{key}: replay changed"
        else:
            assert outcome_before in ("new", "reclaimed"), f"{key}: ran from {outcome_before}"
            assert state.runs == runs_before + 1
            state.outcome, state.result = "succeeded", value

    @rule(seconds=st.sampled_from([1.0, LEASE + 1]))
    def time_passes(self, seconds: float) -> None:
        self.clock += seconds
        self.adapter.advance_clock(seconds)

    @precondition(lambda self: any(k.outcome == "indeterminate" for k in self.keys.values()))
    @rule(key=st.sampled_from(KEYS))
    def caller_reclaims(self, key: str) -> None:
        state = self.keys[key]
        try:
            self.adapter.reclaim(key)
        except MachinesError:
            assert state.outcome != "indeterminate", f"{key}: reclaim refused while parked"
            return
        assert state.outcome == "indeterminate", f"{key}: reclaimed from {state.outcome}"
        state.outcome, state.allowed = "reclaimed", state.allowed + 1

    @precondition(lambda self: any(k.outcome == "indeterminate" for k in self.keys.values()))
    @rule(key=st.sampled_from(KEYS), landed=st.booleans())
    def operator_decides(self, key: str, landed: bool) -> None:
        state = self.keys[key]
        try:
            self.adapter.decide(key, landed, {"decided": key})
        except MachinesError:
            assert state.outcome != "indeterminate", f"{key}: decision refused while parked"
            return
        assert state.outcome == "indeterminate", f"{key}: decided from {state.outcome}"
        if landed:
            state.outcome, state.result = "succeeded", {"decided": key}
        else:
            state.outcome, state.error = "failed", None

    @invariant()
    def ran_at_most_once_per_claim(self) -> None:
        for key, state in self.keys.items():
            assert state.runs <= state.allowed, f"{key} ran {state.runs}x, allowed {state.allowed}"

    @invariant()
    def implementation_is_consistent(self) -> None:
        problems = self.adapter.check()
        assert not problems, "\n".join(problems)


def _fail(message: str) -> Any:
    raise AssertionError(message)
