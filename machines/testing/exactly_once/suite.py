"""A stateful Hypothesis suite for any exactly-once executor, behind an adapter.

The suite calls keys with effects that return, fail before sending, time out after sending,
are cancelled or interrupted, or die mid-write; it expires leases on a fake clock, calls
duplicates and other keys while an effect runs, restarts the process, and makes callers'
reclaims and people's decisions. It judges by what it observes alone (see
``machines.testing.exactly_once.oracle``): its fake upstream records every send with the
claim it belongs to, and it records what every caller was told. After every step it
reports the first broken rule of ``RULES`` (at most one send per claim, no retry after a
send, indeterminate stays indeterminate, replays are identical, an interrupted caller
parks the key, ...), then judges the history the adapter exposes against the bundled
``outcome`` definition, and only then asks the adapter's own ``check()``.

Point it at your own implementation::

    class MyExecutorSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return MyAdapter(...)

    TestMyExecutor = MyExecutorSuite.TestCase

The reference adapter (``ReferenceAdapter``) runs ``machines.systems.ExactlyOnce`` on a
store wrapped by ``FaultyStore``; its ``check()`` adds the named invariants of its snapshots.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from machines.errors import (
    EffectFailed,
    EffectIndeterminate,
    EffectInProgress,
    MachinesError,
    message_of,
    storable_text,
)
from machines.spec.jsonvalue import describe
from machines.store import open_store
from machines.store.records import StoreError
from machines.systems.exactly_once import ExactlyOnce, not_sent
from machines.testing._harness.stores import FaultyStore, Specs, StoreWatch
from machines.testing.contract import (
    Adapter,
    check_adapter,
    chosen_policies,
    chosen_seconds,
    unknown_settings,
)
from machines.testing.coverage import Coverage
from machines.testing.exactly_once.oracle import (
    POLICIES,
    RULES,
    CallSeen,
    Oracle,
    StopRun,
    Told,
)
from machines.testing.exactly_once.steps import (
    KEYS,
    LEASE,
    MACHINE,
    Action,
    Behaviour,
    Call,
    Decide,
    Reclaim,
    Restart,
    Wait,
)
from machines.testing.exactly_once.tour import take_tour
from machines.testing.faults import Fault, NotSent, SimulatedCrash
from machines.testing.verdict import Move, RuleBroken, as_told, bundled

__all__ = [
    "KEYS",
    "LEASE",
    "POLICIES",
    "RULES",
    "Behaviour",
    "ExactlyOnceAdapter",
    "ExactlyOnceSuite",
    "Fault",
    "Move",
    "NotSent",
    "ReferenceAdapter",
    "RuleBroken",
    "SimulatedCrash",
    "StoreError",
]


class ExactlyOnceAdapter(Adapter):
    """What the suite needs from an exactly-once executor under test: every method is
    required (a class missing one fails when it is defined, naming it)."""

    @abc.abstractmethod
    def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any:
        """Run ``effect`` for ``key`` as ``worker`` and return its result (or the recorded
        one, equal and of the same JSON shape), or raise ``EffectFailed`` (it provably did
        not happen), ``EffectIndeterminate`` (parked) or ``EffectInProgress`` (another
        worker's lease is live), or ``StoreError`` when your store failed before the effect
        sent anything (a claim write that did not land: nothing ran, nothing was recorded).
        Translate your executor's own exceptions into these; anything else breaks
        ``typed-answer``, and a ``StoreError`` after the effect sent breaks
        ``failed-means-not-sent`` (a caller whose effect may have landed is told
        indeterminate).

        The effect raises ``NotSent`` when it provably sent nothing (your executor's proof
        of "not sent"; any other error may have been sent). An interrupt it raises
        (``KeyboardInterrupt``, ``asyncio.CancelledError``) may pass through;
        ``SimulatedCrash`` and every other ``BaseException`` must (the process died, or
        the suite stops the run). The effect may call ``run`` again for the same or another
        key before it returns, as another thread or process would."""

    @abc.abstractmethod
    def reclaim(self, key: str) -> None:
        """A caller declares ``key``'s effect safe to repeat: accept it only when the key is
        parked (the next ``run`` then executes the effect under a fresh claim), otherwise
        refuse with a ``MachinesError``."""

    @abc.abstractmethod
    def decide(self, key: str, landed: bool, result: Any) -> None:
        """A person answers "did it land?" for parked ``key``: every later ``run`` returns
        ``result`` (``landed``) or raises ``EffectFailed``; refuse with a ``MachinesError``
        when the key is not parked."""

    @abc.abstractmethod
    def advance_clock(self, seconds: float) -> None:
        """Move the executor's clock forward: leases are at most ``LEASE`` seconds of it."""

    @abc.abstractmethod
    def fail_next_write(self, how: Fault | None) -> None:
        """Make the executor's next durable write fail before it lands: ``"error"`` as the
        database fails (a store error), ``"crash"`` as the process dies (raise
        ``SimulatedCrash``); None clears it.

        A system with no store of its own writes an explicit no-op here; the suite then
        cannot test crashes and failed writes (both just run normally)."""

    @abc.abstractmethod
    def restart(self) -> None:
        """The process died (after a ``SimulatedCrash``, or between calls): start afresh on
        the same durable storage, losing everything kept only in memory (caches, pending
        writes, locks, open transactions).

        A system that keeps nothing in memory writes an explicit no-op; one that keeps
        everything in memory must drop it all, or the suite cannot see a result
        acknowledged before it was durable."""

    @abc.abstractmethod
    def history(self, key: str) -> Sequence[Move] | None:
        """``key``'s recorded moves, oldest first, as ``Move(source, trigger, dest, actor)``
        in the names of the ``outcome`` machine (empty for a key never moved): judged
        against the bundled definition and against what the callers were told after every
        step. Return None if your executor keeps no history (the suite then judges by its
        own observation alone)."""

    @abc.abstractmethod
    def check(self) -> list[str]:
        """Implementation-specific consistency problems (empty when none): an extra check
        after the suite's own, never a substitute for it."""


@dataclass
class ReferenceAdapter(ExactlyOnceAdapter):
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
            classify=not_sent(retry=(NotSent,)),
            retries=1,
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

    def restart(self) -> None:
        """Reopen a store that lives outside the process; a memory store is the durable
        database of this simulation, and the executor keeps nothing between calls."""
        if not self.url.startswith("memory:"):
            self.store.close()
            self.store = FaultyStore(open_store(self.url, self.specs))
            self.watch.store = self.store

    def history(self, key: str) -> list[Move]:
        with self.store.transaction() as tx:
            return [Move(e.source, e.trigger, e.dest, e.actor) for e in tx.history(MACHINE, key)]

    def check(self) -> list[str]:
        return self.watch.check()


_FAULTS: dict[Behaviour, Fault] = {
    Behaviour.CRASH_AFTER_SENDING: "crash",
    Behaviour.STORE_FAILS_AFTER: "error",
    Behaviour.CLAIM_FAILS_THEN_DIES: "crash",
}
"""The behaviours that make the executor's next durable write fail, and how."""
_FIRST_WRITES: dict[Behaviour, Fault] = {
    Behaviour.CLAIM_FAILS: "error",
    Behaviour.CLAIM_FAILS_DUPLICATE: "error",
    Behaviour.CLAIM_DIES: "crash",
    Behaviour.CLAIM_FAILS_THEN_DIES: "error",
}
"""The behaviours whose call's first durable write (its claim) fails, and how (outsider
batch 45, a 6: an executor that ran its effect unclaimed when that write failed passed;
batch 46, a 4: one that guarded such a run in memory alone, lost when the process died)."""


_KEY = st.sampled_from(KEYS)
ACTIONS: st.SearchStrategy[Action] = st.one_of(
    st.builds(Call, key=_KEY, behaviour=st.sampled_from(Behaviour)),
    st.builds(Wait, seconds=st.sampled_from([1.0, LEASE + 1])),
    st.just(Restart()),
    st.builds(Reclaim, key=_KEY),
    st.builds(Decide, key=_KEY, landed=st.booleans()),
)
"""What one step does. They are the argument of one rule rather than five rules: with
several rules, Hypothesis's swarm testing draws which rules are enabled inside the first
step, so the shrinker cannot delete that step without changing what every later one means,
and counterexamples kept a needless leading step (``time_passes(1.0)`` in the earlier
suite, the simplest rule whose precondition held)."""


class ExactlyOnceSuite(RuleBasedStateMachine):
    """Subclass and override ``make_adapter`` to test your own executor.

    ``policies`` are the rules of this package's choosing that the suite judges besides
    the guarantees (``POLICIES``, all by default): an executor that safely chooses
    otherwise leaves one out, say ``interrupted-parks`` to keep an interrupted caller's
    lease until it expires instead of parking the key at once, or ``failure-replayed`` to
    free a key whose failure proved nothing was sent."""

    policies: ClassVar[frozenset[str]] = POLICIES
    lease_seconds: ClassVar[float] = LEASE
    """Your executor's lease, in seconds of the clock the adapter moves: at most ``LEASE``.
    The suite judges reclaims, decisions and "in progress" by it (outsider batch 45, a 9:
    an executor with a short lease and a sweeper was failed by the 30 s it assumed)."""

    def make_adapter(self) -> ExactlyOnceAdapter:
        return ReferenceAdapter()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown_settings(cls, "ExactlyOnceSuite")
        cls.policies = chosen_policies(cls, cls.policies, POLICIES)
        cls.lease_seconds = chosen_seconds(cls, "lease_seconds", cls.lease_seconds, most=LEASE)

    @classmethod
    def run(cls, settings: Settings | None = None) -> None:
        """Take the tour (``machines.testing.exactly_once.tour``: every kind of call and
        every next step it can meet, once, in a second or two), then the random runs under
        the active profile (or ``settings``). The tour's report is the few steps of the
        run that broke a rule. ``TestCase`` runs the random runs alone."""
        take_tour(cls, cls.__name__)
        run_state_machine_as_test(cls, settings=settings)

    def __init__(self) -> None:
        super().__init__()
        adapter = self.make_adapter()
        check_adapter(adapter, ExactlyOnceAdapter)
        self.adapter = adapter
        lease = chosen_seconds(type(self), "lease_seconds", self.lease_seconds, most=LEASE)
        self.oracle = Oracle(KEYS, lease, policies=self.policies)  # set after the class, too

    # -- the one rule -------------------------------------------------------------------

    @rule(action=ACTIONS)
    def step(self, action: Action) -> None:
        """Every step is one rule whose argument says what happens: a single rule leaves
        Hypothesis nothing to switch on or off, so it can delete every step that does not
        matter from a counterexample (see ``ACTIONS``)."""
        if isinstance(action, Call):
            if self._call(action.key, action.behaviour, "worker") == "crashed":
                self._obey("restart()", self.adapter.restart)
            # a fault the call left unused dies with it
            self._obey("fail_next_write(None)", lambda: self.adapter.fail_next_write(None))
        elif isinstance(action, Wait):
            self._pass(action.seconds)
        elif isinstance(action, Restart):
            self.oracle.note("the process restarts")
            self._obey("restart()", self.adapter.restart)
        elif isinstance(action, Reclaim):
            key = action.key
            self.oracle.reclaimed(key, _refusal(lambda: self.adapter.reclaim(key)))
        else:
            key, landed, result = action.key, action.landed, {"decided": action.key}
            refusal = _refusal(lambda: self.adapter.decide(key, landed, result))
            self.oracle.decided(key, landed, result, refusal)

    @invariant()
    def promises_kept(self) -> None:
        """The suite's one check: its own verdict first, then the exposed history, then
        the adapter's ``check()``; the first broken rule is raised from one place."""
        oracle = self.oracle
        for key in KEYS:
            if oracle.broken is None:
                try:
                    moves = self.adapter.history(key)
                except Exception as error:
                    oracle.breaks("legal-history", f"history({key!r}) raised {_what(error)}")
                else:
                    oracle.history(key, moves, bundled(MACHINE))
        if oracle.broken is None:
            problems = _problems(self.adapter.check)
            if problems:
                oracle.breaks("adapter-check", "; ".join(problems))
        oracle.verdict()

    # -- calls and effects ----------------------------------------------------------------

    def _pass(self, seconds: float) -> None:
        self.oracle.clock += seconds
        self.oracle.note(f"{seconds:g} s pass")
        self._obey(f"advance_clock({seconds:g})", lambda: self.adapter.advance_clock(seconds))

    def _obey(self, what: str, act: Callable[[], None]) -> bool:
        """Run one of the adapter's plain duties; one that raises breaks ``typed-answer``
        (the suite cannot go on as if it had been done)."""
        try:
            act()
        except Exception as error:
            self.oracle.breaks("typed-answer", f"{what} raised {_what(error)}")
            return False
        return True

    def _call(self, key: str, behaviour: Behaviour, worker: str) -> str:
        first_write = _FIRST_WRITES.get(behaviour)
        call = self.oracle.begin(key, worker, behaviour.value, first_write is not None)
        if first_write is not None and not self._obey(
            f"fail_next_write({first_write!r})", lambda: self.adapter.fail_next_write(first_write)
        ):
            return "untyped"
        told = _told(lambda: self.adapter.run(key, self._effect(call, behaviour), worker))
        self.oracle.answered(call, told)
        return told.kind

    def _during(self, key: str, worker: str) -> None:
        """A caller arrives while an effect runs (inside it, as another thread would)."""
        if self._call(key, Behaviour.RETURN, worker) == "crashed":
            raise SimulatedCrash()  # the whole process died, the running effect with it
        if self.oracle.broken is not None:
            raise StopRun()

    def _effect(self, call: CallSeen, behaviour: Behaviour) -> Callable[[], Any]:
        oracle, adapter = self.oracle, self.adapter

        def effect() -> Any:
            oracle.invoked(call)
            if behaviour is Behaviour.NOT_SENT or (
                behaviour is Behaviour.FLAKY and call.invocations == 1
            ):
                call.effect_raised = True
                raise NotSent("refused before sending")
            if behaviour is Behaviour.CANCELLED:
                oracle.raised(call, after_send=False, interrupt=True)
                raise asyncio.CancelledError()
            answer = oracle.sent(call)
            if behaviour is Behaviour.TIMEOUT:
                oracle.raised(call, after_send=True, interrupt=False)
                raise TimeoutError("sent, no answer")
            if behaviour is Behaviour.INTERRUPTED:
                oracle.raised(call, after_send=True, interrupt=True)
                raise KeyboardInterrupt()
            if behaviour is Behaviour.CANCELLED_AFTER_SENDING:
                oracle.raised(call, after_send=True, interrupt=True)
                raise asyncio.CancelledError()
            if behaviour in _FAULTS:
                how = _FAULTS[behaviour]
                call.fault_armed = True
                if not self._obey(
                    f"fail_next_write({how!r})", lambda: adapter.fail_next_write(how)
                ):
                    raise StopRun()
            elif behaviour in (Behaviour.DUPLICATE_DURING, Behaviour.CLAIM_FAILS_DUPLICATE):
                self._during(call.key, "duplicate")
            elif behaviour is Behaviour.OTHER_KEY_DURING:
                self._during(KEYS[(KEYS.index(call.key) + 1) % len(KEYS)], "other")
            elif behaviour is Behaviour.TAKEN_OVER:
                self._pass(LEASE + 1)
                self._during(call.key, "takeover")
            return answer

        return effect


def _told(run: Callable[[], Any]) -> Told:
    """What a caller of ``run`` was told."""
    try:
        return Told("result", as_told(run()))
    except SimulatedCrash:
        return Told("crashed")
    except StopRun:
        return Told("untyped", "the suite stopped the run")
    except (KeyboardInterrupt, asyncio.CancelledError) as interrupt:
        return Told("interrupted", type(interrupt).__name__)
    except EffectFailed as failed:  # a subclass of the user's may not have set them
        return Told("failed", (_said(failed, "error_type"), _said(failed, "error_message")))
    except EffectIndeterminate:
        return Told("indeterminate")
    except EffectInProgress:
        return Told("in progress")
    except StoreError as failed:
        return Told("unavailable", type(failed).__name__)
    except Exception as error:
        return Told("untyped", _what(error))


def _said(error: EffectFailed, field: str) -> str:
    """What a failure says in ``field``, as text; one that cannot be read says so (it is
    still the failure the caller was told, which is what the rules judge)."""
    try:
        value = getattr(error, field)
    except Exception as unreadable:
        return f"<{field} unreadable: {_what(unreadable)}>"
    return value if type(value) is str else describe(value)


def _problems(check: Callable[[], object]) -> list[str]:
    """What the adapter's ``check()`` reports, each problem cut short; a result that is not
    a list of text, or a check that raises, is itself the problem."""
    try:
        problems = check()
        if not isinstance(problems, list | tuple):
            return [f"check() returned {describe(problems)}, not a list of problems"]
        return [storable_text(p, 300) if isinstance(p, str) else describe(p) for p in problems]
    except Exception as error:
        return [f"check() raised {_what(error)}"]


def _refusal(act: Callable[[], None]) -> Told | None:
    """None if ``act`` was accepted; how it was refused otherwise."""
    try:
        act()
    except MachinesError as refused:
        return Told("failed", (type(refused).__name__, message_of(refused, 200)))
    except Exception as error:
        return Told("untyped", _what(error))
    return None


def _what(error: BaseException) -> str:
    """An exception the implementation raised, for a report: its type and (safe) message."""
    return f"{type(error).__name__}: {message_of(error, 200)}"
