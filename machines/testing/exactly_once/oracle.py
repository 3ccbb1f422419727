"""The exactly-once suite's oracle: what the upstream received and what every caller was
told, judged by the suite alone.

The implementation under test is never asked whether it kept its promises. The suite's
fake upstream records every send with the claim it belongs to (a claim is the first call
of a key, or the first call after an accepted reclaim), and the suite records every answer
it got (a result, a typed failure, indeterminate, in progress, a crash, an interrupt). That
record lives outside the implementation, so no simulated crash or restart loses it. Each
observation is judged as it arrives against ``RULES``; the first broken rule is kept and
reported (``RuleBroken``, its message starting with the rule's name) after the step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.registry import judged_by, policies_of
from machines.testing.exactly_once.seen import SETTLED, KeyRecord, Phase, Send
from machines.testing.exactly_once.seen import CallSeen as CallSeen
from machines.testing.exactly_once.seen import StopRun as StopRun
from machines.testing.exactly_once.seen import Told as Told
from machines.testing.verdict import (
    RuleBroken,
    chain_problem,
    first_difference,
    moves_of,
    promised,
    same_value,
    show_chain,
)

RULES: Mapping[str, str] = judged_by("exactly-once suite")
"""Every rule the suite judges, by the name its failure message starts with (what each
promises: ``machines.spec.registry``)."""
POLICIES: frozenset[str] = policies_of("exactly-once suite")
"""The rules that are this package's policies, not guarantees: judged unless a suite
leaves them out (``ExactlyOnceSuite.policies``)."""
INTERRUPTED = "interrupted-parks"
FAILURE_KEPT = "failure-replayed"

ATTEMPTS = 20
"""How many starts of its effect the suite lets one call make: a retry loop with no bound
would hold the user's CI (and the suite's record) for ever."""

TRANSCRIPT = 14
"""How many of the last observations a failure report shows."""


@dataclass
class Oracle:
    """The upstream's record, the callers' answers and the verdict, for one run."""

    keys: Iterable[str]
    lease: float
    clock: float = 0.0
    upstream: list[Send] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    broken: RuleBroken | None = None
    records: dict[str, KeyRecord] = field(init=False)
    calls: int = 0
    policies: frozenset[str] = POLICIES

    def __post_init__(self) -> None:
        self.records = {key: KeyRecord() for key in self.keys}

    # -- observations -------------------------------------------------------------------

    def begin(self, key: str, worker: str, behaviour: str, faulted: bool = False) -> CallSeen:
        """A call starts (``faulted``: its first write is made to fail)."""
        self.calls += 1
        call = CallSeen(self.calls, key, worker, behaviour, fault_armed=faulted)
        self.note(f"call {call.number} ({worker}) of {key}: {behaviour}")
        return call

    def invoked(self, call: CallSeen) -> None:
        """The effect of ``call`` starts (raises ``StopRun`` once a rule is broken)."""
        call.invocations += 1
        self.note(f"  call {call.number}: the effect starts (attempt {call.invocations})")
        if call.invocations >= ATTEMPTS:
            self.breaks(
                "bounded-retries",
                f"call {call.number} started the effect of {call.key} {ATTEMPTS} times",
            )
        if self.broken is None:
            self._invoked(call, self.records[call.key])
        if self.broken is not None:
            raise StopRun()

    def sent(self, call: CallSeen) -> dict[str, int]:
        """The effect of ``call`` sends: the upstream records it and answers."""
        record = self.records[call.key]
        record.sends += 1
        call.sent = True
        answer = {"value": len(self.upstream) + 1}
        self.upstream.append(Send(call.key, record.claim, call.number, answer))
        record.answer = answer
        self.note(f"  call {call.number}: sent #{record.sends} of claim {record.claim}")
        if record.sends > 1:
            self.breaks(
                "one-send-per-claim",
                f"{call.key} was sent {record.sends} times in claim {record.claim}",
            )
        return dict(answer)

    def raised(self, call: CallSeen, *, after_send: bool, interrupt: bool) -> None:
        call.effect_raised = True
        call.raised_after_send |= after_send
        call.interrupted |= interrupt

    def answered(self, call: CallSeen, told: Told) -> None:
        """``call`` returned or raised: judge what its caller was told."""
        self.note(f"  call {call.number}: told {told.describe()}")
        if self.broken is None:
            self._answered(call, self.records[call.key], told)

    def reclaimed(self, key: str, refusal: Told | None) -> None:
        """A caller asked to reclaim ``key``; ``refusal`` is how it was refused, if it was."""
        self.note(f"reclaim {key}: {'accepted' if refusal is None else refusal.describe()}")
        if self.broken is None:
            self._left(key, "reclaim", refusal, None)

    def decided(self, key: str, landed: bool, result: Any, refusal: Told | None) -> None:
        """A person decided ``key`` landed (with ``result``) or did not."""
        verdict = "landed" if landed else "did not land"
        outcome = "accepted" if refusal is None else refusal.describe()
        self.note(f"decide {key} {verdict}: {outcome}")
        if self.broken is None:
            self._left(key, "decision", refusal, (landed, result))

    def history(self, key: str, moves: object, spec: MachineSpec) -> None:
        """Judge the history the adapter exposes for ``key`` (None: it exposes none). A
        chain that is not legal breaks ``legal-history``; one that disagrees with what the
        callers were told breaks the rule that told them (its own record shows the promise
        is already broken, before any later caller finds out)."""
        if self.broken is None and moves is not None:
            problem = _history_problem(self.records[key], key, moves, spec)
            if problem is not None:
                self.breaks(*problem)

    def note(self, line: str) -> None:
        self.seen.append(line)

    def breaks(self, rule: str, message: str) -> None:
        """Keep the first broken rule (later ones follow from it, or are judged on a record
        it already made wrong)."""
        if self.broken is None:
            shown = "\n".join(f"    {line}" for line in self.seen[-TRANSCRIPT:])
            self.broken = RuleBroken(
                rule,
                f"{message}\n  {promised(rule, RULES[rule])}\n  what the suite saw last:\n{shown}",
            )

    def verdict(self) -> None:
        """Raise the first broken rule, if any: the suite's one place of failure, so that
        one bug gives one report however many rules it then breaks."""
        if self.broken is not None:
            raise self.broken

    # -- judging ------------------------------------------------------------------------

    def _expired(self, record: KeyRecord) -> bool:
        return self.clock > record.lease_until

    def _invoked(self, call: CallSeen, record: KeyRecord) -> None:
        key, phase = call.key, record.phase
        if call.raised_after_send:
            self.breaks(
                "no-retry-after-send",
                f"call {call.number} started the effect of {key} again after it raised having sent",
            )
        elif phase is Phase.PARKED:
            self.breaks(record.parked_by, f"the effect of parked {key} started again")
        elif phase is Phase.FAILED and record.freed:
            self._fresh_claim(call, record)  # the key was freed: a new claim
        elif phase is Phase.FAILED:  # decided "did not land" too: nothing landed
            self.breaks(FAILURE_KEPT, f"the effect of failed {key} started again")
        elif phase in SETTLED:
            rule = "explicit-exit" if record.decided else "replay-identical"
            self.breaks(rule, f"the effect of {phase.value} {key} started again")
        elif record.holder == call.number:
            return  # the holder retries after an error that proved nothing was sent
        elif phase in (Phase.RUNNING, Phase.HELD) and record.sends > 0:
            if self._expired(record):
                self.breaks(
                    "expired-lease-parks",
                    f"call {call.number} started the effect of {key} again after its "
                    f"holder's lease expired",
                )
            else:
                self.breaks(
                    "one-send-per-claim",
                    f"call {call.number} started the effect of {key} while call "
                    f"{record.holder} held claim {record.claim}",
                )
        else:
            record.phase, record.holder = Phase.RUNNING, call.number
            record.lease_until = self.clock + self.lease

    def _fresh_claim(self, call: CallSeen, record: KeyRecord) -> None:
        record.claim, record.sends, record.answer, record.error = record.claim + 1, 0, None, None
        record.unsent_trouble = False
        record.phase, record.holder, record.freed = Phase.RUNNING, call.number, False
        record.decided = False
        record.lease_until = self.clock + self.lease

    def _answered(self, call: CallSeen, record: KeyRecord, told: Told) -> None:
        problem = self._answer_problem(call, record, told)
        if problem is not None:
            rule, what = problem
            self.breaks(rule, f"call {call.number} ({call.worker}) of {call.key} {what}")

    def _answer_problem(
        self, call: CallSeen, record: KeyRecord, told: Told
    ) -> tuple[str, str] | None:
        kind, phase = told.kind, record.phase
        holder = record.holder == call.number
        if holder and record.sends == 0 and call.troubled:
            record.unsent_trouble = True
        if kind == "crashed":
            if holder:
                record.phase, record.holder = Phase.HELD, None
            return None
        if kind == "failed" and call.sent and phase not in SETTLED:  # interrupted or not
            return "failed-means-not-sent", (
                f"was told {told.describe()} although its effect sent in claim {record.claim}"
            )
        if kind == "unavailable" and call.sent:  # interrupted or not (batch 46, a 6)
            return "failed-means-not-sent", (
                f"was told {told.describe()} after its effect sent in claim "
                f"{record.claim}: a caller whose effect may have landed is told indeterminate"
            )
        if kind == "unavailable" and not call.fault_armed:  # batch 46, a 1 and a 2
            if phase in SETTLED:
                return self._replay_problem(record, told)
            return "typed-answer", (
                f"was told {told.describe()}, though no write of this call was made to fail: "
                "a StoreError says the store failed, and nothing failed"
            )
        if kind == "unavailable" and not call.interrupted:
            if holder:  # its claim may stand, with its lease, until it runs out
                record.phase, record.holder = Phase.HELD, None
            return None
        if kind == "untyped" or (kind == "interrupted" and not call.interrupted):
            return "typed-answer", f"raised {told.shown()}"
        if INTERRUPTED not in self.policies and call.interrupted:
            return self._interrupted_held(record, told, holder)
        if kind == "interrupted" or (kind == "indeterminate" and call.interrupted):
            if phase is not Phase.PARKED or record.parked_by != INTERRUPTED:
                self._park(record, INTERRUPTED)
            return None
        if phase is Phase.PARKED:
            if kind == "indeterminate":
                return None
            return record.parked_by, f"was told {told.describe()} although {call.key} is parked"
        if call.interrupted:
            return INTERRUPTED, f"was interrupted, yet told {told.describe()}"
        if phase in SETTLED:
            return self._replay_problem(record, told)
        if kind == "in progress":
            return self._in_progress_problem(call, record, holder)
        if kind == "indeterminate":
            if phase is Phase.FREE and call.invocations == 0:
                return "explicit-exit", "was told indeterminate without running, after a reclaim"
            if phase is Phase.RUNNING and not holder and not self._expired(record):
                return "indeterminate-has-cause", (
                    f"was told indeterminate while call {record.holder} held a live lease and "
                    "nothing had failed (a person would be sent to settle a call that may yet "
                    "succeed)"
                )
            # outsider batch 45 (a 1): an executor that parked its clean successes passed
            if phase is Phase.RUNNING and holder and not (call.troubled or self._expired(record)):
                return "indeterminate-has-cause", (
                    "was told indeterminate though its own effect returned, no write "
                    "failed and its lease was live (a person would be sent to settle a "
                    "call that succeeded)"
                )
            self._park(record, "indeterminate-stays")
            return None
        if kind == "failed":
            if call.invocations == 0 and call.fault_armed and record.sends == 0:
                return None  # its claim never landed: the key stays as it was
            if record.sends > 0:
                return "failed-means-not-sent", (
                    f"was told {told.describe()} although claim {record.claim} sent"
                )
            if call.invocations == 0 and not record.unsent_trouble:  # batch 46, a 3
                return "failed-has-cause", (
                    f"was told {told.describe()}, though its effect never ran, no write "
                    "failed and no earlier failure or decision was recorded"
                )
            record.phase, record.holder, record.error = Phase.FAILED, None, told.value
            record.freed = FAILURE_KEPT not in self.policies
            return None
        if record.sends == 1 and same_value(told.value, record.answer):
            record.phase, record.holder, record.result = Phase.SUCCEEDED, None, told.value
            return None
        upstream = describe(record.answer) if record.sends else "nothing (no send)"
        return "result-from-upstream", (
            f"was given {told.describe()}; the upstream answered {upstream} in claim {record.claim}"
        )

    def _interrupted_held(
        self, record: KeyRecord, told: Told, holder: bool
    ) -> tuple[str, str] | None:
        """An interrupted caller's answer when the suite leaves ``interrupted-parks`` out:
        the executor may park the key at once (it says indeterminate, which then stays) or
        keep the caller's lease until it expires, as a holder that died would; the
        guarantees judge the rest (nothing sent again in the claim, a failure only when
        nothing was sent)."""
        if told.kind == "indeterminate":
            self._park(record, "indeterminate-stays")
            return None
        if told.kind == "interrupted":
            if holder and record.phase is Phase.RUNNING:
                record.phase, record.holder = Phase.HELD, None
            return None
        if told.kind == "failed" and record.sends > 0:
            return "failed-means-not-sent", (
                f"was interrupted and told {told.describe()} although claim {record.claim} sent"
            )
        if told.kind == "failed":
            record.phase, record.holder, record.error = Phase.FAILED, None, told.value
            record.freed = FAILURE_KEPT not in self.policies
            return None
        if told.kind == "in progress":
            return "in-progress-means-held", "was told its own interrupted run is in progress"
        if record.sends == 1 and same_value(told.value, record.answer):
            record.phase, record.holder, record.result = Phase.SUCCEEDED, None, told.value
            return None
        return "result-from-upstream", (
            f"was interrupted inside the effect, yet given {told.describe()}"
        )

    def _replay_problem(self, record: KeyRecord, told: Told) -> tuple[str, str] | None:
        if record.freed and told.kind == "failed" and record.error is None:
            record.error = told.value  # decided "did not land": its first replay fixes it
        if record.freed and not (told.kind == "failed" and same_value(told.value, record.error)):
            return _freed_problem(told)
        if record.phase is Phase.SUCCEEDED and told.kind == "result":
            if same_value(told.value, record.result):
                return None
        elif record.phase is Phase.FAILED and told.kind == "failed":
            if record.error is None:  # decided "did not land": its first replay fixes it
                record.error = told.value
                return None
            if same_value(told.value, record.error):
                return None
        acknowledged = (
            f"result {describe(record.result)}"
            if record.phase is Phase.SUCCEEDED
            else f"failure {describe(record.error)}"
        )
        how = "decided" if record.decided else "given to an earlier caller"
        rule = "explicit-exit" if record.decided else "replay-identical"
        return rule, f"was told {told.describe()}; the {acknowledged} was {how}"

    def _in_progress_problem(
        self, call: CallSeen, record: KeyRecord, holder: bool
    ) -> tuple[str, str] | None:
        if holder:
            return "in-progress-means-held", "was told its own finished run is in progress"
        if record.phase in (Phase.RUNNING, Phase.HELD):
            if self._expired(record):
                return "expired-lease-parks", "was told in progress after the lease expired"
            return None
        if record.phase is Phase.FREE:
            return "explicit-exit", "was told in progress after a reclaim, with no holder"
        return "in-progress-means-held", f"was told in progress, but {call.key} had no holder"

    def _park(self, record: KeyRecord, rule: str) -> None:
        record.phase, record.holder, record.parked_by = Phase.PARKED, None, rule

    def _left(
        self, key: str, what: str, refusal: Told | None, decision: tuple[bool, Any] | None
    ) -> None:
        record = self.records[key]
        phase = record.phase
        if refusal is not None and refusal.kind == "untyped":
            self.breaks("typed-answer", f"the {what} of {key} raised {refusal.shown()}")
        elif refusal is not None:
            if phase is Phase.PARKED and record.parked_by == INTERRUPTED:
                self.breaks(
                    INTERRUPTED,
                    f"the {what} of {key} was refused: the interrupted call left it unparked",
                )
            elif phase is Phase.PARKED:
                self.breaks("explicit-exit", f"the {what} of parked {key} was refused")
        elif phase is Phase.HELD and not self._expired(record):
            # its holder may still send and record: only a parked key is left by a person
            # (outsider batch 26: a decision on a key whose holder's lease was live passed)
            self.breaks(
                "explicit-exit",
                f"the {what} of {key} was accepted while its holder's lease was live "
                f"(until {record.lease_until:g}, now {self.clock:g})",
            )
        elif phase in (Phase.PARKED, Phase.HELD):
            if decision is None:
                record.claim, record.sends, record.answer = record.claim + 1, 0, None
                record.unsent_trouble = False
                record.phase, record.holder = Phase.FREE, None
            else:
                landed, result = decision
                record.phase = Phase.SUCCEEDED if landed else Phase.FAILED
                record.result, record.error = (result, None) if landed else (None, None)
                record.decided, record.holder = True, None
                record.freed = not landed and FAILURE_KEPT not in self.policies
        elif not (phase is Phase.FREE and decision is None):  # a second reclaim changes nothing
            self.breaks("explicit-exit", f"the {what} of {key} was accepted while {phase.value}")


def _history_problem(
    record: KeyRecord, key: str, moves: object, spec: MachineSpec
) -> tuple[str, str] | None:
    """The rule ``moves`` breaks as ``key``'s history, and how, given what callers were told."""
    chain = moves_of(moves)
    if chain is None:
        return "legal-history", (
            f"history({key!r}) gave {describe(moves)}, not a list of moves with str source, "
            "trigger, dest and actor (or None)"
        )
    if record.freed and chain[: len(record.moves)] != record.moves:
        record.moves = ()  # a key freed after its failure: a new chain, judged from its start
    if chain[: len(record.moves)] != record.moves:
        was, now = show_chain(record.moves), show_chain(chain)
        where = first_difference(chain, record.moves)
        rule = FAILURE_KEPT if record.phase is Phase.FAILED else "legal-history"
        return rule, f"the history of {key} was rewritten ({where}): {was} became {now}"
    record.moves = chain
    problem = chain_problem(chain, spec)
    if problem is not None:
        return "legal-history", (
            f"the history of {key} is not a chain of the bundled '{spec.name}' definition: "
            f"{problem}: {show_chain(chain)}"
        )
    state = chain[-1].dest if chain else spec.initial
    if record.phase is Phase.NEW and chain:
        return "legal-history", f"{key} was never called, yet its history has {len(chain)} move(s)"
    expected = _STANDS[record.phase] + ((spec.initial,) if record.freed else ())
    if state in expected:
        return None
    return _rule_behind(record), (
        f"the history of {key} ends in {state}, but what its callers were told says "
        f"{' or '.join(expected)} ({record.phase.value})"
    )


_STANDS: Mapping[Phase, tuple[str, ...]] = {
    Phase.NEW: ("in_flight",),
    Phase.FREE: ("in_flight",),
    Phase.RUNNING: ("in_flight",),
    Phase.HELD: ("in_flight", "indeterminate"),
    Phase.PARKED: ("indeterminate",),
    Phase.SUCCEEDED: ("succeeded",),
    Phase.FAILED: ("failed",),
}
"""Where the implementation's history may stand, given what the callers were told."""


def _rule_behind(record: KeyRecord) -> str:
    """The rule that makes the callers' answers bind the key's state."""
    if record.phase is Phase.PARKED:
        return record.parked_by
    if record.phase is Phase.FREE or record.decided:
        return "explicit-exit"
    if record.phase in SETTLED:
        return _kept_by(record.phase)
    return "legal-history"


def _freed_problem(told: Told) -> tuple[str, str] | None:
    """What a caller of a key freed after its failure (``failure-replayed`` left out) may
    be told without the effect running: the failure again (judged before); nothing else
    has a cause."""
    if told.kind == "failed":
        return (
            "replay-identical",
            f"was told {told.describe()}, another failure, though nothing ran",
        )
    if told.kind == "result":
        return "result-from-upstream", f"was given {told.describe()}, though nothing ran since"
    if told.kind == "in progress":
        return "in-progress-means-held", "was told in progress, though nothing ran since"
    return "indeterminate-has-cause", f"was told {told.describe()}, though nothing ran since"


def _kept_by(phase: Phase) -> str:
    """The rule that keeps a settled key where it is: a result by a guarantee, a failure
    (nothing landed) by a policy (``failure-replayed``)."""
    return FAILURE_KEPT if phase is Phase.FAILED else "replay-identical"
