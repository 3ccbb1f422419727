"""A stateful Hypothesis suite for any effect log (seed 000's UndoLog), behind an adapter.

Seven call signatures in two sessions: compensable ones with and without a registered
compensation, and in each session an irreversible one that needs a human. The suite calls
them with tools that return, fail provably, time out after sending, are cancelled or
interrupted after sending, die before or after sending, meet a failing store write, return
a result that cannot be cached, meet a duplicate caller, or are called just after a
restart; a human approves or rejects (from another process: the suite restarts the log
after each decision, so only a durable decision counts); a failed session is compensated
(working, failing, or dying mid-saga).

The suite is the world around the log: it is the upstream (every run and send of each
tool), the compensations, the human and every caller, and it judges the log after every
step by what it saw alone (``machines.testing.effectlog.oracle``; each rule has a stable
name in ``RULES``, ``machines.testing.effectlog.rules``, that a failure starts with):

- a signature takes effect upstream at most once, ever (``at-most-once``);
- an irreversible call runs only right after a human approved it, once per approval
  (``approval``);
- a result a caller was told is replayed to every later caller, and nothing runs
  (``replay``);
- a call whose outcome is unknown is never run again, only compensated
  (``unknown-stays-unknown``), also when its caller was cancelled or interrupted
  (``cancelled-stays-unknown``);
- the saga undoes newest first, only unknown effects of its session, each once
  (``saga-newest-first``, ``saga-only-unknown``, ``saga-once``, ``saga-completes``);
- the history the log exposes, if any, is a legal chain of the bundled ``effect``
  definition and agrees with what was seen (``history-chain``, ``history-agrees``).

The adapter's own ``check()`` is an extra, never the oracle. Point the suite at your own
log: subclass ``EffectLogAdapter`` (every method is required) and ``EffectLogSuite``::

    class MyLogSuite(EffectLogSuite):
        def make_adapter(self) -> EffectLogAdapter:
            return MyLogAdapter()

    TestMyLog = MyLogSuite.TestCase
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from machines.errors import MachinesError, storable_text
from machines.spec.jsonvalue import describe
from machines.store import open_store
from machines.store.records import Row
from machines.systems.effectlog import EffectLog
from machines.systems.exactly_once import not_sent
from machines.testing._harness.stores import FaultyStore, Specs, StoreWatch
from machines.testing.contract import Adapter, check_adapter, chosen_policies, unknown_settings
from machines.testing.coverage import Coverage
from machines.testing.effectlog.oracle import Attempt, Observer
from machines.testing.effectlog.rules import (
    CANCELLATIONS,
    POLICIES,
    RULES,
    TROUBLE,
    Behaviour,
    Call,
    Saga,
    Told,
    told_kind,
)
from machines.testing.faults import Fault, NotSent, SimulatedCrash
from machines.testing.recorded import RecordedSuite, Step, recorded
from machines.testing.verdict import Move, RuleBroken, bundled

__all__ = [
    "CALLS",
    "POLICIES",
    "RULES",
    "Behaviour",
    "Call",
    "EffectLogAdapter",
    "EffectLogSuite",
    "Move",
    "NotSent",
    "ReferenceEffectLog",
    "RuleBroken",
    "Saga",
    "SimulatedCrash",
]

CALLS = {
    "charge-1": Call("compensable", "charge", "s1"),
    "book-1": Call("compensable", "book", "s1"),
    "notify-1": Call("compensable", "notify", "s1"),  # no compensation registered
    "wire-1": Call("irreversible", "wire", "s1"),
    "charge-2": Call("compensable", "charge", "s2"),
    "book-2": Call("compensable", "book", "s2"),
    "wire-2": Call("irreversible", "wire", "s2"),
}
SESSIONS = ("s1", "s2")
COMPENSATED_TOOLS = ("charge", "book")
CAUGHT = (SimulatedCrash, *CANCELLATIONS, Exception)
"""What a call of the log may end in, as the suite sees it (anything else propagates)."""


class EffectLogAdapter(Adapter):
    """What the suite needs from an effect log. Every method is required: a subclass that
    leaves one out fails at its ``class`` statement, naming the method and its duty."""

    @abc.abstractmethod
    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        """Run ``fn`` under ``signature`` at most once, ever, and return what it returned;
        give every later caller that very result without running anything; or refuse.

        ``call`` holds the signature's tier (``compensable`` or ``irreversible``), tool and
        session. Raise, with the errors of ``machines.systems.effectlog``:
        ``fn``'s own ``NotSent`` unchanged (it proves nothing was sent: the signature may
        run again, an irreversible one after a fresh approval); ``EffectOutcomeUnknown``
        (or ``fn``'s own error or cancellation, unchanged) when ``fn`` raised anything
        else, and never run it again; ``EffectNotRecorded`` when its result could not be
        stored; ``EffectStillExecuting`` while another caller runs it or its outcome is
        unknown; ``EffectAwaitingApproval``, ``EffectRejected``, ``EffectClosed``; any
        ``MachinesError`` when your storage failed. The suite may call ``call`` again from
        inside ``fn`` (a duplicate caller): hold no non-reentrant lock around ``fn``."""

    @abc.abstractmethod
    def approve(self, signature: str) -> None:
        """A human approves the irreversible call ``signature`` that waits for approval:
        the next call runs it, once. Refuse anything else with a ``MachinesError``."""

    @abc.abstractmethod
    def reject(self, signature: str) -> None:
        """A human rejects the irreversible call ``signature`` that waits for approval: it
        never runs. Refuse anything else with a ``MachinesError``."""

    @abc.abstractmethod
    def compensate(self, session: str, compensations: Mapping[str, Callable[[str], None]]) -> None:
        """Undo the failed ``session``: for each of its compensable effects whose outcome
        is unknown, newest first, run ``compensations[tool](signature)``, each at most once,
        ever; an effect whose tool has none is left for a person. A compensation that
        raises has failed: record it, do not run it again."""

    @abc.abstractmethod
    def history(self, signature: str) -> Sequence[Move] | None:
        """The state changes your log recorded for ``signature``, oldest first, as ``Move``s
        (or objects with the same four attributes) named as in the bundled ``effect``
        definition; ``None`` if your log keeps no such history (the suite then judges by
        what it sees alone)."""

    @abc.abstractmethod
    def fail_next_write(self, how: Fault | None) -> None:
        """Make your log's next durable write fail as a database does (``"error"``: raise
        your storage's error) or die there (``"crash"``: raise ``SimulatedCrash``, which
        nothing may catch); ``None`` clears it. A log without durable writes may do
        nothing."""

    @abc.abstractmethod
    def restart(self) -> None:
        """The process restarts (it died with ``SimulatedCrash``, or was redeployed):
        drop everything your log keeps only in memory and reopen it from its durable
        storage, as a new process would. A log that keeps nothing in memory may do
        nothing."""

    @abc.abstractmethod
    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        """Problems your implementation finds in itself, given how often each
        (``"effect"``, signature) was sent upstream; ``[]`` if it checks nothing. An extra:
        the suite's verdict never rests on it."""


@dataclass
class ReferenceEffectLog(EffectLogAdapter):
    """``machines.systems.EffectLog`` on a faulty memory (or given) store; its ``check``
    judges the store by the named invariants and records the edges it took."""

    url: str = "memory://"
    coverage: Coverage | None = None
    specs: Specs = None
    store: FaultyStore = field(init=False)
    watch: StoreWatch = field(init=False)
    log: EffectLog = field(init=False)

    def __post_init__(self) -> None:
        self.store = FaultyStore(open_store(self.url, self.specs))
        self.watch = StoreWatch(self.store, self.coverage)
        self.restart()

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

    def history(self, signature: str) -> Sequence[Move] | None:
        return [Move(e.source, e.trigger, e.dest, e.actor) for e in self.log.history(signature)]

    def fail_next_write(self, how: Fault | None) -> None:
        self.store.pending = how

    def restart(self) -> None:
        self.log = EffectLog(self.store, classify=not_sent(NotSent), worker="suite")

    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        return self.watch.check(runs)


SIGNATURES = st.sampled_from(sorted(CALLS))


def _signatures(tier: str, session: str | None = None) -> st.SearchStrategy[str]:
    return st.sampled_from(
        sorted(s for s, c in CALLS.items() if c.tier == tier and session in (None, c.session))
    )


IRREVERSIBLE_CALLS = _signatures("irreversible")
DECIDED = st.one_of(IRREVERSIBLE_CALLS, SIGNATURES)
"""Decisions mostly on the irreversible call, sometimes on one that must refuse them."""
APPROVALS = st.sampled_from((True, True, False))
"""A human approves twice as often as they reject (a rejection ends the call's life)."""
BEHAVIOURS = st.sampled_from((Behaviour.RETURN, Behaviour.NOT_SENT, *Behaviour))
"""Every behaviour; a plain result and a provable failure (the paths that free or settle a
signature) twice as often as the rest."""
BEHAVIOURS_IRREVERSIBLE = st.sampled_from((Behaviour.NOT_SENT, Behaviour.RETURN, *Behaviour))
"""The same, with the provable failure first: it is what sends an approved call back for a
fresh approval."""


class EffectLogSuite(RecordedSuite):
    """Subclass and override ``make_adapter`` to test your own effect log. ``policies``:
    the rules of this package's choosing judged besides the guarantees (``POLICIES``, all
    by default; ``saga-newest-first``)."""

    policies: ClassVar[frozenset[str]] = POLICIES
    stray: ClassVar[str] = "contract"

    def make_adapter(self) -> EffectLogAdapter:
        return ReferenceEffectLog()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown_settings(cls, "EffectLogSuite")
        cls.policies = chosen_policies(cls, cls.policies, POLICIES)

    @classmethod
    def tour(cls) -> list[list[Step]]:
        """Every behaviour of every kind of call and what can meet it next, once
        (``machines.testing.effectlog.tour``); ``run()`` takes it before the dice."""
        from machines.testing.effectlog.tour import tour_runs

        return tour_runs()

    def __init__(self) -> None:
        super().__init__()
        adapter = self.make_adapter()
        check_adapter(adapter, EffectLogAdapter)
        self.adapter = adapter
        self.seen = Observer(CALLS, self.policies)
        self.judge = bundled("effect")  # the bundled definition, whatever the log runs on
        self.counter = 0

    # -- calls ---------------------------------------------------------------------------

    @rule(signature=_signatures("compensable", "s1"), behaviour=BEHAVIOURS)
    @recorded
    def call(self, signature: str, behaviour: Behaviour) -> None:
        """A caller calls a compensable signature of s1 (of s2, or the irreversible one, in
        the rules below: one rule each, so that each is called as often)."""
        self.seen.next_step()
        self._call(signature, behaviour.value, behaviour)

    @rule(signature=_signatures("compensable", "s2"), behaviour=BEHAVIOURS)
    @recorded
    def call_in_s2(self, signature: str, behaviour: Behaviour) -> None:
        self.seen.next_step()
        self._call(signature, behaviour.value, behaviour)

    @rule(signature=IRREVERSIBLE_CALLS, behaviour=BEHAVIOURS_IRREVERSIBLE)
    @recorded
    def call_irreversible(self, signature: str, behaviour: Behaviour) -> None:
        self.seen.next_step()
        self._call(signature, behaviour.value, behaviour)

    def _call(self, signature: str, label: str, behaviour: Behaviour) -> None:
        if behaviour is Behaviour.AFTER_RESTART:
            self._ask("restart")  # a deploy: only what the log made durable remains
        attempt = self.seen.calling(signature, label)
        if behaviour is Behaviour.CRASH_AT_CLAIM:
            self._arm(attempt, "crash")
        elif behaviour is Behaviour.CLAIM_FAILS:
            self._arm(attempt, "error")
        crashed = False
        try:
            value = self.adapter.call(
                signature, lambda: self._tool(attempt, behaviour), CALLS[signature]
            )
        except CAUGHT as error:
            kind = told_kind(error, attempt.raised, attempt.fault)
            if kind is None:
                self.seen.breach(
                    "contract",
                    signature,
                    f"call raised {type(error).__name__}, which is none of the answers the "
                    "contract allows (see EffectLogAdapter.call)",
                )
            else:
                self.seen.told(attempt, kind, error=error)
            crashed = kind is Told.CRASHED
        else:
            self.seen.told(attempt, Told.VALUE, value=value)
        finally:
            self._ask("fail_next_write", None)
        if crashed:
            self._ask("restart")

    def _tool(self, attempt: Attempt, behaviour: Behaviour) -> Any:
        """The upstream tool: what it does, and what the suite sees of it."""
        self.seen.ran(attempt)
        if behaviour is Behaviour.NOT_SENT:
            raise self.seen.raising(attempt, NotSent("refused before sending"))
        self.seen.sent(attempt)
        self.counter += 1
        attempt.troubled = attempt.troubled or behaviour in TROUBLE
        if behaviour is Behaviour.TIMEOUT:
            raise self.seen.raising(attempt, TimeoutError("sent; no answer came back"))
        if behaviour is Behaviour.CANCELLED:
            raise self.seen.raising(attempt, asyncio.CancelledError())
        if behaviour is Behaviour.INTERRUPTED:
            raise self.seen.raising(attempt, KeyboardInterrupt())
        if behaviour is Behaviour.CRASH_AFTER_SENDING:
            self._arm(attempt, "crash")
        elif behaviour is Behaviour.STORE_FAILS_AFTER:
            self._arm(attempt, "error")
        elif behaviour in (Behaviour.DUPLICATE_DURING, Behaviour.CLAIM_FAILS):
            # a log that runs the tool although its claim did not land (outsider batch 45,
            # a 11) meets a second caller meanwhile
            self._call(attempt.signature, "by a duplicate caller, while it runs", Behaviour.RETURN)
        value: Any = ("a", "tuple") if behaviour is Behaviour.UNSTORABLE else {"n": self.counter}
        self.seen.returned(attempt, value)
        return value

    def _arm(self, attempt: Attempt | None, how: Fault) -> None:
        ok, _ = self._ask("fail_next_write", how)
        if ok and attempt is not None:
            attempt.fault = attempt.troubled = True

    def _ask(self, method: str, *args: Any) -> tuple[bool, Any]:
        """Call an adapter method; an error it has no right to raise breaks the contract."""
        try:
            return True, getattr(self.adapter, method)(*args)
        except Exception as error:
            self.seen.breach("contract", None, f"{method}() raised {type(error).__name__}")
            return False, None

    # -- human decisions -----------------------------------------------------------------

    @rule(signature=DECIDED, approve=APPROVALS)
    @recorded
    def human_decides(self, signature: str, approve: bool) -> None:
        self.seen.next_step()
        try:
            (self.adapter.approve if approve else self.adapter.reject)(signature)
        except MachinesError:
            self.seen.decided(signature, approve, accepted=False)
        except Exception as error:
            verb = "approve" if approve else "reject"
            self.seen.breach(
                "contract",
                signature,
                f"{verb}() raised {type(error).__name__}; refuse with a MachinesError",
            )
        else:
            self.seen.decided(signature, approve, accepted=True)
        self._ask("restart")  # the dashboard is another process: a decision must be durable

    # -- the saga ------------------------------------------------------------------------

    @precondition(lambda self: self.seen.saga_matters())
    @rule(session=st.sampled_from(SESSIONS), saga=st.sampled_from(Saga))
    @recorded
    def compensate(self, session: str, saga: Saga) -> None:
        self.seen.next_step()
        must = self.seen.candidates(session, COMPENSATED_TOOLS)
        undone: list[str] = []
        failure = RuntimeError("the refund API is down")

        def undo(signature: str) -> None:
            if type(signature) is not str or signature not in CALLS:
                self.seen.breach(
                    "contract", None, f"a compensation was given {describe(signature)}"
                )
                return
            self.seen.undoing(signature, session, undone)
            undone.append(signature)
            if saga is Saga.FAILS:
                raise failure
            if saga is Saga.DIES:
                self._arm(None, "crash")

        how = "returned"
        try:
            self.adapter.compensate(session, {tool: undo for tool in COMPENSATED_TOOLS})
        except SimulatedCrash:
            how = "died"
        except Exception as error:
            how = "raised"
            if not isinstance(error, MachinesError) and error is not failure:
                self.seen.breach(
                    "contract",
                    None,
                    f"compensate() raised {type(error).__name__}; a failed compensation is "
                    "recorded, or reported as a MachinesError",
                )
        finally:
            self._ask("fail_next_write", None)
        if how == "raised" and not (saga is Saga.FAILS and undone):
            how = "stopped"  # nothing it ran failed: no excuse for stopping short (batch 25)
        self.seen.saga_ended(session, must, undone, how, failing=saga is Saga.FAILS)
        if how == "died":
            self._ask("restart")

    # -- judged after every step ---------------------------------------------------------

    @invariant()
    def judged(self) -> None:
        """Raise the first rule the log broke, from this one place: one report per bug."""
        if self.seen.first() is None:
            self._cross_check()
        broken = self.seen.first()
        if broken is not None:
            raise broken

    def _cross_check(self) -> None:
        """What the log says about itself, judged against what the suite saw."""
        for signature in CALLS:
            ok, moves = self._ask("history", signature)
            if ok:
                self.seen.history(signature, moves, self.judge)
        runs = {("effect", s): b.sends for s, b in self.seen.beliefs.items()}
        ok, problems = self._ask("check", runs)
        if not ok:
            return
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            self.seen.breach("contract", None, f"check() returned {describe(problems)}")
        elif problems:
            self.seen.breach("adapter-check", None, "; ".join(map(storable_text, problems)))
