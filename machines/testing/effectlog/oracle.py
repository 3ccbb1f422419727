"""The oracle of ``EffectLogSuite``: what the suite saw, judged by its rules.

The suite is the world around the log under test: the upstream tools, the compensations,
the human and every caller. ``Observer`` keeps what that world saw -- each run and each
send of a signature's tool, each compensation, each human decision the log accepted or
refused, and what each caller was told -- and derives from that alone what every signature
may still do. It never asks the log what it thinks: what the log reports about itself (its
history, its own ``check``) is judged against this, never the other way round.

A broken rule is recorded as a ``RuleBroken`` whose message starts with the rule's name;
the suite raises the first one after the step, so one bug gives one report, under the name
of the first promise it broke.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from machines.errors import message_of
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.testing.effectlog.rules import (
    CANCELLATIONS,
    IRREVERSIBLE,
    POLICIES,
    RULES,
    RUNS_AGAIN,
    Call,
    Told,
)
from machines.testing.faults import NotSent
from machines.testing.verdict import (
    RuleBroken,
    as_told,
    chain_problem,
    moves_of,
    promised,
    same_value,
    show_chain,
)


class Status(enum.Enum):
    IDLE = "idle"  # nothing took effect: never called, or provably not sent
    COMMITTED = "committed"  # a caller was told its result
    UNKNOWN = "unknown"  # it may have taken effect; nobody was told a result
    REJECTED = "rejected"


@dataclass
class Attempt:
    """One caller's call of the log, as the suite saw it."""

    signature: str
    label: str
    runs: int = 0
    sent: bool = False
    returned: bool = False
    value: Any = None
    raised: list[BaseException] = field(default_factory=list)
    fault: bool = False
    """The suite made one of the log's writes fail (or die) during this call."""
    troubled: bool = False
    """Something went wrong on purpose after the send (no answer, a failed write, ...)."""


@dataclass
class Belief:
    """What the suite knows about one signature, from what it saw alone."""

    call: Call
    status: Status = Status.IDLE
    result: Any = None
    why: str = ""
    cancelled: bool = False
    approved: bool = False
    approvals: int = 0
    waiting: bool = False
    """A caller was told it waits for a human, and nothing has run since."""
    not_sent: bool = False
    """Its last run's tool proved nothing was sent (NotSent)."""
    undo: str | None = None  # None | done | failed | died
    saga_passed: bool = False
    running: int = 0
    sends: int = 0
    sent_at: int | None = None
    first_called: int | None = None
    undos: int = 0
    history: tuple[tuple[str, str, str, str], ...] = ()
    journal: list[str] = field(default_factory=list)

    @property
    def unknown_rule(self) -> str:
        return "cancelled-stays-unknown" if self.cancelled else "unknown-stays-unknown"

    def allowed_states(self) -> frozenset[str | None]:
        """The states of the bundled definition the log may report for what was seen."""
        if self.status is Status.IDLE:
            return frozenset({"approved"}) if self.approved else frozenset({None, "pending"})
        if self.status is Status.COMMITTED:
            return frozenset({"committed"})
        if self.status is Status.REJECTED:
            return frozenset({"rejected"})
        if self.undo == "done":
            return frozenset({"compensated"})
        if self.undo == "failed":
            return frozenset({"compensation_failed"})
        if self.undo == "died":
            return frozenset({"executing", "compensating", "compensated", "compensation_failed"})
        if self.saga_passed:
            return frozenset({"executing", "compensating", "compensation_failed"})
        return frozenset({"executing"})


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {message_of(error, 120)}"


class Observer:
    """Everything the suite saw, per signature, and the breaches it found."""

    def __init__(self, calls: Mapping[str, Call], policies: frozenset[str] = POLICIES) -> None:
        self.beliefs = {signature: Belief(call) for signature, call in calls.items()}
        self.breaches: list[RuleBroken] = []
        self.left_out = POLICIES - policies
        self.step = 0

    # -- recording -------------------------------------------------------------------------

    def next_step(self) -> None:
        self.step += 1

    def note(self, signature: str, event: str) -> None:
        self.beliefs[signature].journal.append(f"step {self.step}: {event}")

    def breach(self, rule: str, signature: str | None, what: str) -> None:
        if rule in self.left_out:
            return  # a policy the suite's user chose not to keep
        lines = [
            f"{rule}: {signature + ': ' if signature else ''}{what}",
            f"  {promised(rule, RULES[rule])}",
        ]
        belief = self.beliefs.get(signature) if signature is not None else None
        if belief is not None and belief.journal:
            lines.append(f"  what the suite saw of {signature}:")
            lines.extend(f"    {event}" for event in belief.journal)
        self.breaches.append(RuleBroken(rule, "\n".join(lines)))

    def first(self) -> RuleBroken | None:
        return self.breaches[0] if self.breaches else None

    # -- a caller's call -------------------------------------------------------------------

    def calling(self, signature: str, label: str) -> Attempt:
        belief = self.beliefs[signature]
        if belief.first_called is None:
            belief.first_called = self.step
        self.note(signature, f"called ({label})")
        return Attempt(signature, label)

    def ran(self, attempt: Attempt) -> None:
        """The log invoked the tool: judged before anything is sent."""
        signature, belief = attempt.signature, self.beliefs[attempt.signature]
        attempt.runs += 1
        self.note(signature, "its tool ran" if attempt.runs == 1 else "its tool ran AGAIN")
        if belief.status is Status.COMMITTED:
            self.breach("replay", signature, "its tool ran although a caller was told its result")
        elif belief.status is Status.UNKNOWN:
            self.breach(
                belief.unknown_rule,
                signature,
                f"its tool ran again although its outcome is unknown ({belief.why})",
            )
        elif belief.status is Status.REJECTED:
            self.breach("approval", signature, "its tool ran although a human rejected it")
        elif belief.sends:
            self.breach(
                "at-most-once",
                signature,
                f"its tool ran again after it was sent at step {belief.sent_at}, before any "
                "caller was told the outcome (a retry after a send)",
            )
        elif belief.running and attempt.runs == 1:
            self.breach(
                "at-most-once",
                signature,
                "a second caller ran its tool while the first caller's run was in flight",
            )
        if belief.call.tier == IRREVERSIBLE and belief.status is Status.IDLE:
            if not belief.approved:
                again = (
                    " (its last approval was used by an earlier run)" if belief.approvals else ""
                )
                self.breach("approval", signature, f"it ran without a fresh approval{again}")
            belief.approved = False
        belief.waiting = False
        if attempt.runs == 1:
            belief.running += 1

    def sent(self, attempt: Attempt) -> None:
        belief = self.beliefs[attempt.signature]
        attempt.sent = True
        belief.sends += 1
        self.note(attempt.signature, "its tool sent the call upstream")
        if belief.sends > 1:
            self.breach(
                "at-most-once",
                attempt.signature,
                f"it took effect upstream {belief.sends} times (first at step {belief.sent_at})",
            )
        else:
            belief.sent_at = self.step

    def raising(self, attempt: Attempt, error: BaseException) -> BaseException:
        attempt.raised.append(error)
        return error

    def returned(self, attempt: Attempt, value: Any) -> None:
        attempt.returned, attempt.value = True, as_told(value)

    def told(self, attempt: Attempt, kind: Told, value: Any = None, error: Any = None) -> None:
        """The log answered the caller: judge the answer and learn from it (a copy of
        ``value``: the log may change the object it handed out)."""
        value = as_told(value)
        signature, belief = attempt.signature, self.beliefs[attempt.signature]
        said = describe(value) if kind is Told.VALUE else _error(error) if error else kind.value
        self.note(signature, f"the caller was told {said}")
        if attempt.runs:
            belief.running -= 1
        if kind is Told.CRASHED:
            if attempt.sent:
                self._unknown(belief, "the process died after it was sent", cancelled=False)
            return
        excused = kind is Told.FAILED and attempt.fault
        if belief.running and not attempt.runs:  # a duplicate caller while a run is on
            if kind is Told.VALUE:
                self.breach("replay", signature, f"a duplicate caller was told {said} mid-run")
            elif kind is not Told.UNKNOWN and not excused:
                self.breach("told-truth", signature, f"a duplicate caller was told {said}")
        elif belief.status is Status.COMMITTED:
            if not (kind is Told.VALUE and same_value(value, belief.result)) and not excused:
                self.breach(
                    "replay",
                    signature,
                    f"a caller was told {describe(belief.result)}; this caller was told {said}",
                )
        elif belief.status is Status.UNKNOWN:
            if kind not in (Told.UNKNOWN, Told.CLOSED) and not excused:
                self.breach(
                    belief.unknown_rule,
                    signature,
                    f"its outcome is unknown ({belief.why}), yet a caller was told {said}",
                )
        elif belief.status is Status.REJECTED:
            if kind is not Told.REJECTED and not excused:
                self.breach(
                    "told-truth", signature, f"a human rejected it; a caller was told {said}"
                )
        else:
            self._told_idle(attempt, belief, kind, value, said)

    def _told_idle(
        self, attempt: Attempt, belief: Belief, kind: Told, value: Any, said: str
    ) -> None:
        signature = attempt.signature
        if kind is Told.VALUE:
            if not (attempt.sent and attempt.returned and same_value(value, attempt.value)):
                self.breach("replay", signature, f"a caller was told {said}, which no run returned")
            belief.status, belief.result = Status.COMMITTED, value
            return
        if attempt.sent:
            # "it could not be recorded" (a MachinesError) is an answer after a send only
            # when the suite made a write fail (batch 25: a log said EffectFailed after a
            # timeout, which the suite took for a storage failure)
            explained = (
                attempt.troubled and kind in (Told.UNKNOWN, Told.TOOL_ERROR, Told.CANCELLED)
            ) or (kind is Told.FAILED and attempt.fault)
            if not explained:
                self.breach(
                    "told-truth",
                    signature,
                    f"its tool was sent{' and returned' if attempt.returned else ''}, yet a "
                    f"caller was told {said}",
                )
            cancelled = kind is Told.CANCELLED or any(
                isinstance(e, CANCELLATIONS) for e in attempt.raised
            )
            self._unknown(belief, f"step {self.step}: {attempt.label}", cancelled)
            return
        if kind is Told.NOT_SENT and attempt.raised and isinstance(attempt.raised[-1], NotSent):
            belief.waiting = belief.call.tier == IRREVERSIBLE
            belief.not_sent = True
            return
        if kind in (Told.NOT_SENT, Told.CLOSED) and belief.not_sent and not attempt.runs:
            # the log kept the proven failure: a policy's choice (batch 31), not a lie
            told = f"a caller was told {said}; its tool had proved nothing was sent"
            self.breach(RUNS_AGAIN, signature, told)
            return
        if kind is Told.AWAITING and belief.call.tier == IRREVERSIBLE and not belief.approved:
            belief.waiting = True
            return
        if kind is Told.FAILED and attempt.fault:
            return
        why = {
            Told.AWAITING: " (a human approved it and it has not run since)"
            if belief.approved
            else " (a compensable call needs no approval)",
            Told.UNKNOWN: " although nothing was sent",
        }.get(kind, "")
        self.breach("told-truth", signature, f"a caller was told {said}{why}")
        if kind is Told.UNKNOWN:
            self._unknown(belief, "a caller was told so", cancelled=False)

    def _unknown(self, belief: Belief, why: str, cancelled: bool) -> None:
        belief.status, belief.why, belief.cancelled = Status.UNKNOWN, why, cancelled
        belief.approved = belief.waiting = False

    # -- a human's decision ----------------------------------------------------------------

    def decided(self, signature: str, approve: bool, accepted: bool) -> None:
        belief = self.beliefs[signature]
        verb = "approved" if approve else "rejected"
        self.note(signature, f"a human {verb} it: {'accepted' if accepted else 'refused'}")
        # a call waits once a caller was told so (outsider batch 45, a 10: a log that let a
        # human approve a call nobody had asked for passed)
        waits = belief.call.tier == IRREVERSIBLE and belief.status is Status.IDLE
        if accepted and not (waits and belief.waiting):
            state = belief.status.value if not waits else "not asked for by any caller yet"
            self.breach(
                "decisions",
                signature,
                f"the log accepted a human who {verb} a {belief.call.tier} call that is {state}",
            )
        elif (
            not accepted
            and waits
            and belief.waiting
            and not belief.approved
            # a log that keeps a proven failure (the policy left out) closes the call for
            # good, and may refuse a decision on it (outsider batch 46, a 14)
            and not (belief.not_sent and RUNS_AGAIN in self.left_out)
        ):
            self.breach(
                "decisions", signature, f"the log refused a human who {verb} a waiting call"
            )
        elif accepted and approve:
            belief.approved = True
            belief.approvals += 1
        elif accepted:
            belief.status, belief.approved, belief.waiting = Status.REJECTED, False, False

    # -- the saga --------------------------------------------------------------------------

    def saga_matters(self) -> bool:
        """Whether a saga can go wrong: some session has an effect whose outcome is unknown
        and another that ran (so there is an order to keep and a choice to make)."""
        ran: dict[str, list[Status]] = {}
        for b in self.beliefs.values():
            if b.status in (Status.UNKNOWN, Status.COMMITTED):
                ran.setdefault(b.call.session, []).append(b.status)
        return any(len(s) > 1 and Status.UNKNOWN in s for s in ran.values())

    def candidates(self, session: str, compensated_tools: Iterable[str]) -> list[str]:
        """The effects a saga of ``session`` must undo: unknown, compensable, not undone,
        with a compensation for their tool."""
        tools = set(compensated_tools)
        return [
            signature
            for signature, b in self.beliefs.items()
            if b.call.session == session
            and b.call.tier != IRREVERSIBLE
            and b.call.tool in tools
            and b.status is Status.UNKNOWN
            and b.undo is None
        ]

    def undoing(self, signature: str, session: str, earlier: Sequence[str]) -> None:
        """The saga of ``session`` runs the compensation of ``signature``, after undoing
        ``earlier`` in this saga."""
        belief = self.beliefs[signature]
        belief.undos += 1
        self.note(signature, f"the saga of {session} undid it")
        if belief.undos > 1:
            self.breach("saga-once", signature, f"the saga undid it {belief.undos} times")
        elif belief.call.session != session:
            self.breach(
                "saga-only-unknown",
                signature,
                f"the saga of {session} undid an effect of {belief.call.session}",
            )
        elif belief.status is not Status.UNKNOWN:
            what = {
                Status.COMMITTED: "a committed effect (a caller was told its result)",
                Status.IDLE: "an effect that did not take effect",
                Status.REJECTED: "an effect a human rejected",
            }[belief.status]
            self.breach("saga-only-unknown", signature, f"the saga undid {what}")
        for before in earlier:
            older = self.beliefs[before]
            if (
                older.sent_at is not None
                and belief.first_called is not None
                and older.sent_at < belief.first_called
            ):
                self.breach(
                    "saga-newest-first",
                    signature,
                    f"the saga undid {before} (sent at step {older.sent_at}) before it "
                    f"(first called at step {belief.first_called}): oldest first",
                )

    def saga_ended(
        self, session: str, must: Sequence[str], undone: Sequence[str], how: str, failing: bool
    ) -> None:
        """The saga ended: ``how`` is "returned", "raised" (a compensation it ran failed),
        "stopped" (it raised with nothing failing) or "died"."""
        for signature in undone:
            self.beliefs[signature].undo = (
                "died" if how == "died" else "failed" if failing else "done"
            )
        for b in self.beliefs.values():
            if b.call.session == session and b.status is Status.UNKNOWN:
                b.saga_passed = True
        if how in ("returned", "stopped"):
            ended = "returned" if how == "returned" else "raised, with nothing failing,"
            for signature in must:
                if signature not in undone:
                    why = self.beliefs[signature].why
                    self.note(signature, f"the saga of {session} {ended} without undoing it")
                    self.breach(
                        "saga-completes",
                        signature,
                        f"the saga of {session} {ended} without undoing it, although its "
                        f"outcome is unknown ({why})",
                    )

    # -- what the log says about itself ----------------------------------------------------

    def history(self, signature: str, moves: object, spec: MachineSpec) -> None:
        """Judge the history the log exposes for ``signature`` (None: it exposes none)."""
        if moves is None:
            return
        chain = moves_of(moves)
        if chain is None:
            self.breach(
                "contract",
                signature,
                f"history() returned {describe(moves)}, not a list of moves with str "
                "source, trigger, dest and actor (or None)",
            )
            return
        belief = self.beliefs[signature]
        problem = chain_problem(chain, spec, {"tier": belief.call.tier})
        if problem is None and chain[: len(belief.history)] != belief.history:
            problem = "an earlier part of it was rewritten or removed"
        if problem is not None:
            self.breach("history-chain", signature, f"its history {problem}: {show_chain(chain)}")
            return
        belief.history = chain
        state = chain[-1][2] if chain else None
        if state not in belief.allowed_states():
            allowed = " or ".join(sorted(str(s) for s in belief.allowed_states()))
            self.breach(
                "history-agrees",
                signature,
                f"its history ends in {state}; from what the suite saw it is {allowed}",
            )
