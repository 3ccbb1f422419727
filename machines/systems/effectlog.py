"""The effect log (seed 000, UndoLog): intercept tool calls, run each at most once per call
signature, replay cached results, hold Irreversible calls for a human, undo a failed
session's Compensable calls newest first.

Life of a call signature, on the ``effect`` machine (one row per signature, its history
written by the store in the same transaction as every state change):

1. **Tier.** ``safe`` calls run directly and never enter the log (finding
   ``safe-tier-outside-the-machine``). ``compensable`` and ``irreversible`` calls are
   registered ``pending`` under their signature before anything runs; any other tier is
   refused by the spec (``ContextError``).
2. **Claim.** In the same transaction as the registration, a Compensable ``pending`` call
   moves ``execute`` and an ``approved`` Irreversible call moves ``resume``: both land in
   ``executing``, so of many concurrent callers exactly one claims the run. An Irreversible
   call still ``pending`` stays there and its caller gets ``EffectAwaitingApproval``
   until a human calls ``approve`` or ``reject``.
3. **Run and settle.** A returned value is stored with ``commit``; it must survive JSON
   unchanged, because every replay returns it. An exception the classifier says proves the
   call did not take effect moves ``fail`` (back to ``pending``, the error recorded) and is
   re-raised; a later call runs it again (an Irreversible one only after a fresh approval).
   Any other exception -- the default classifier trusts none, and a classifier that
   raises proves nothing -- leaves the effect ``executing``: the outcome is unknown,
   nothing here runs it again, and a failed session's saga may compensate it
   (``EffectOutcomeUnknown``). So does a result that cannot be stored or a store write
   that fails (``EffectNotRecorded``). Either way the log writes on the effect why its run
   ended unknown (``unknown_outcome``), at once, so that a later caller is told that, not
   "still running".
4. **Replay.** A call whose signature is ``committed`` runs nothing and returns the cached
   result; the replay is counted on the record (``replay_count``, ``last_replayed_at``)
   without a state change, because one record per signature can never take the table's
   ``pending -> replayed`` edge (finding ``replay-vs-unique-signature``).
5. **Undo.** ``compensate(session, ...)`` walks the session's effects newest first and runs
   the compensation of each Compensable effect left ``executing`` (the only state the saga
   may compensate from; committed work cannot be undone, finding
   ``committed-cannot-be-undone``). Every move is its own transaction, so a crash mid-saga
   leaves each effect in a state its history explains.

Every other state refuses to run with a typed error; nothing is ever run twice on a guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from machines.errors import EffectError, message_of
from machines.runtime.history import Clock, TransitionEvent, checked_clock
from machines.spec.jsonvalue import as_stored, describe
from machines.store.records import (
    RecordExists,
    Row,
    StaleWrite,
    Store,
    StoreError,
    Transaction,
)
from machines.systems import arguments
from machines.systems.arguments import MAX_RETRIES
from machines.systems.effectlog_errors import (
    EffectAwaitingApproval,
    EffectClosed,
    EffectNotFound,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectRewritten,
    EffectStillExecuting,
    rewritten,
    still_executing,
)
from machines.systems.effectlog_runs import (
    NOTE_PROOF,
    PROCESS,
    PROOF,
    SECRET,
    Claim,
    new_secret,
    over,
    running,
    unproven,
    unproven_end,
)
from machines.systems.effectlog_saga import (
    COMPENSABLE,
    MACHINE,
    SAFE,
    Compensation,
    UndoStep,
    this_process,
    undo,
)
from machines.systems.exactly_once import process_identity
from machines.systems.reliance import require_bundled_move
from machines.systems.verdicts import Classifier, Verdict, fail_closed, verdict_of

__all__ = [
    "COMPENSABLE",
    "MACHINE",
    "MAX_RETRIES",
    "SAFE",
    "Compensation",
    "EffectAwaitingApproval",
    "EffectClosed",
    "EffectLog",
    "EffectNotFound",
    "EffectNotRecorded",
    "EffectOutcomeUnknown",
    "EffectRejected",
    "EffectRewritten",
    "EffectStillExecuting",
    "UndoStep",
]
"""The errors are defined in ``effectlog_errors`` and raised here, where callers import them."""

REPLAY_COUNT, LAST_REPLAYED = "replay_count", "last_replayed_at"
"""A committed effect's annotations: how often its result was replayed, and when last."""

DECIDE_ATTEMPTS = 64
"""How often one call reads its row again after a concurrent call wrote it first (each
loss is another call's win, so the calls make progress) before the last loss is raised."""

T = TypeVar("T")


@dataclass(frozen=True)
class _Replay:
    value: Any


# -- the log -------------------------------------------------------------------------------


class EffectLog:
    """``EffectLog(store).call(signature, fn, tier=..., tool=..., session=...)``: ``fn``
    runs at most once per signature; later calls replay the cached result or get a typed
    error that says why nothing ran."""

    def __init__(
        self,
        store: Store,
        *,
        classify: Classifier = fail_closed,
        clock: Clock = time.time,
        worker: str | None = None,
    ) -> None:
        self.store = arguments.store_with(store, MACHINE, "EffectLog")
        self.classify = arguments.function(classify, "classify")
        self.clock = checked_clock(clock, "EffectLog", consequence="nothing was written")
        self.worker = arguments.optional_name(worker, "worker", "EffectLog") or process_identity()

    # -- the intercept path ----------------------------------------------------------------

    def call(
        self,
        signature: str,
        fn: Callable[[], T],
        tier: str = COMPENSABLE,
        tool: str | None = None,
        session: str | None = None,
    ) -> T:
        """Run ``fn`` under ``signature`` at most once; replay or refuse otherwise.

        A signature belongs to one tier, one tool and one session: asking for it with another
        raises ``RecordExists``. A ``safe`` call is refused so once the log holds the
        signature; it writes nothing, so one racing the first logged call of the same
        signature is not fenced by it (keep a signature to one tier)."""
        signature = arguments.text(signature, "signature")
        arguments.function(fn, "fn")
        tier = arguments.text(tier, "tier")  # what is checked is what is used: plain texts
        tool = arguments.optional_name(tool, "tool", "EffectLog")
        session = arguments.optional_text(session, "session")
        if tier == SAFE:
            self._never_logged(signature)
            return fn()
        claim = self._claim(signature, tier, tool, session)
        if isinstance(claim, _Replay):
            return cast(T, claim.value)
        return self._run(claim, fn)

    # -- the human decisions on Irreversible calls -----------------------------------------

    def approve(self, signature: str, *, by: str, reason: str = "", seen: int | None = None) -> Row:
        """A human approves a pending Irreversible call; the next ``call`` runs it.
        ``seen``: the row version the person decided on (``StaleWrite`` if it moved)."""
        return self._decide(signature, "approve", by, reason, seen)

    def reject(self, signature: str, *, by: str, reason: str = "", seen: int | None = None) -> Row:
        """A human rejects a pending Irreversible call; it never runs. ``seen`` as for
        ``approve``."""
        return self._decide(signature, "reject", by, reason, seen)

    # -- the saga --------------------------------------------------------------------------

    def compensate(
        self, session: str, compensations: Mapping[str, Compensation], *, retries: int = 0
    ) -> list[UndoStep]:
        """Undo a failed session newest first; one ``UndoStep`` per effect, in that order.

        Each Compensable effect left ``executing`` moves ``compensate``, then its tool's
        compensation runs (at most 1 + ``retries`` attempts) and it ends ``compensated``
        or ``compensation_failed``. A failed attempt is tried again only when the log's
        classifier says it was not sent (``Verdict.RETRY``): an undo is an effect too, and
        a refund that timed out may have been paid. An effect whose tool has no
        compensation fails closed: it ends ``compensation_failed`` (a person must repair
        it) without anything run. Every other effect is left as it is, with the reason in
        its step."""
        session = arguments.text(session, "session")
        compensations = arguments.functions(compensations, "compensations")
        arguments.count(retries, "retries", most=MAX_RETRIES)
        with self.store.transaction() as tx:
            signatures = [row.key for row in tx.scope(MACHINE, session)]
        return [
            undo(self.store, key, session, compensations, retries, self.classify, self._now)
            for key in reversed(signatures)
        ]

    # -- reading ---------------------------------------------------------------------------

    def effect(self, signature: str) -> Row | None:
        """The stored row of ``signature`` (state, tier, data: tool, result, error,
        replay_count, last_replayed_at, compensation), if any."""
        with self.store.transaction() as tx:
            return tx.get(MACHINE, signature)

    def history(self, signature: str) -> list[TransitionEvent]:
        """Every state change of ``signature``, oldest first."""
        with self.store.transaction() as tx:
            return tx.history(MACHINE, signature)

    # -- claim -----------------------------------------------------------------------------

    def _never_logged(self, key: str) -> None:
        """A safe call runs outside the log, so its signature must not be one the log holds
        (outsider batch 45, a 16: a charge whose outcome was unknown ran again when asked
        for as ``safe``): else ``RecordExists``, before anything runs."""
        with self.store.transaction() as tx:
            row = tx.get(MACHINE, key)
        if row is not None:
            raise RecordExists(
                f"effect {describe(key)} is registered as a {describe(row.context.get('tier'))} "
                f"call, now {row.state}, not a safe one: a signature belongs to one tier, and a "
                "safe call would run it outside the log; nothing ran"
            )

    def _claim(self, key: str, tier: str, tool: str | None, session: str | None) -> Claim | _Replay:
        """Register the call and, in the same transaction, claim its run or decide why not.
        A refusal is raised only after the registration is committed."""
        decision: Claim | _Replay | EffectError | None = None
        try:
            with self.store.transaction() as tx:
                row, created = tx.insert(
                    MACHINE, key, context={"tier": tier}, data=_fresh(tool), scope=session
                )
                if not created and row.data.get("tool") != tool:  # the saga undoes by tool
                    raise RecordExists(
                        f"effect {describe(key)} is registered for tool "
                        f"{describe(row.data.get('tool'))}, not {describe(tool)}: a signature "
                        "belongs to one tool, as to one tier and one session"
                    )
                decision = self._decided(tx, row)
        except BaseException:
            if isinstance(decision, Claim):  # the claim did not commit: no run
                over(decision.proof)
            raise
        assert decision is not None
        if isinstance(decision, EffectError):
            raise decision
        return decision

    def _decided(self, tx: Transaction, row: Row) -> Claim | _Replay | EffectError:
        """``_claim_or_refuse`` on the row as it is now. PostgreSQL reads the row without a
        lock, so concurrent replays of one committed effect race to count themselves, and
        all but one lost with ``StaleWrite``, though the result was there to serve (outsider
        batch 34, b 8: 280 of 320 replays). A write that loses reads the row again and
        decides anew, in the same transaction."""
        for _ in range(DECIDE_ATTEMPTS - 1):
            try:
                return self._claim_or_refuse(tx, row)
            except StaleWrite:
                fresh = tx.get(MACHINE, row.key)
                if fresh is None:
                    raise
                row = fresh
        return self._claim_or_refuse(tx, row)

    def _claim_or_refuse(self, tx: Transaction, row: Row) -> Claim | _Replay | EffectError:
        if row.state in ("pending", "approved") and (refused := self._reopened(tx, row)):
            return refused
        if row.state == "pending" and row.context.get("tier") == COMPENSABLE:
            return self._start(tx, row, "execute", "a new Compensable call is routed upstream")
        if row.state == "approved":
            return self._start(tx, row, "resume", "the approved Irreversible call is resumed")
        if row.state == "committed":
            forged = unproven_end(tx.history(MACHINE, row.key))
            if forged is not None:  # a result the runner never recorded (outsider batch 27)
                return EffectRewritten(row.key, row.state, unproven(forged, "its result is"))
            return self._replay(tx, row)
        if row.state == "pending":
            return EffectAwaitingApproval(row.key, arguments.stored_fields(row, "error") or None)
        if row.state == "executing":
            return still_executing(row)
        if row.state == "rejected":
            return EffectRejected(row.key, _decided_by(tx, row))
        return EffectClosed(row.key, row.state)

    def _now(self) -> float:
        return self.clock()

    @staticmethod
    def _reopened(tx: Transaction, row: Row) -> EffectRewritten | None:
        """Why an effect the log could run again (``pending``, ``approved``) must not run:
        its row was written outside a move, or a move out of ``executing`` was made by
        someone else than the run's runner (``effectlog_runs``)."""
        refused = rewritten(row)
        if refused is not None or row.moves == 0:
            return refused
        forged = unproven_end(tx.history(MACHINE, row.key))
        return None if forged is None else rewritten(row, why=unproven(forged))

    def _start(self, tx: Transaction, row: Row, trigger: str, reason: str) -> Claim:
        """Claim the run: the move into ``executing``, its event carrying the process and
        the proofs of the run's secrets; the run counts as this process's from before the
        claim commits (``effectlog_runs.RUNNING``)."""
        secret, proof = new_secret()
        note_secret, note_proof = new_secret()
        data = {
            **row.data,
            "runs": arguments.stored_count(row, "runs") + 1,
            "runner": self.worker,
            "started_at": self._now(),
            "unknown_outcome": None,
        }
        detail = {
            "worker": self.worker,
            "reason": reason,
            "tool": row.data.get("tool"),
            PROCESS: this_process(),
            PROOF: proof,
            NOTE_PROOF: note_proof,
        }
        # the tool and the process go in the history, which no write can change: the saga
        # undoes by the tool the call was started with and asks whether that process lives
        running(proof)
        try:
            moved = tx.move(row, trigger, actor="proxy", detail=detail, data=data)
        except BaseException:
            over(proof)
            raise
        return Claim(moved, secret, note_secret)

    def _replay(self, tx: Transaction, row: Row) -> _Replay:
        """Serve the cached result and count the replay on the committed record. A count
        written outside machines (no count) is left as it is, for the audit to name: the
        result, which no write can change, is served all the same (outsider batch 29)."""
        result = _Replay(row.data.get("result"))
        try:
            count = arguments.stored_count(row, REPLAY_COUNT)
        except StoreError:
            return result
        tx.update(row, {**row.data, REPLAY_COUNT: count + 1, LAST_REPLAYED: self._now()})
        return result

    # -- run and settle --------------------------------------------------------------------

    def _run(self, claim: Claim, fn: Callable[[], T]) -> T:
        """Run the claimed call once. A BaseException that is not an Exception (interrupt,
        exit, cancellation) propagates as it is, after the log wrote that the outcome is
        unknown: the effect stays ``executing``. The run is this process's until what it
        ended with is written."""
        try:
            try:
                value = fn()
            except Exception as error:
                if verdict_of(self.classify, error) in (Verdict.FAILED, Verdict.RETRY):
                    self._reset(claim, error)
                    raise
                row = claim.row
                unknown = EffectOutcomeUnknown(
                    row.key, row.data.get("runner"), row.data.get("started_at"), error
                )
                why = f"it raised {unknown.error_type}: {unknown.error_message}"
                self._note_unknown(claim, why)
                raise unknown from error
            except BaseException as interrupted:
                self._note_unknown(
                    claim, f"the caller was interrupted ({type(interrupted).__name__}) mid-run"
                )
                raise
            return cast(T, self._commit(claim, value))
        finally:
            over(claim.proof)

    def _commit(self, claim: Claim, value: Any) -> Any:
        """Store the result; return it as stored, which every replay returns too."""
        row = claim.row
        detail = {
            "worker": self.worker,
            "reason": "the tool returned a result",
            SECRET: claim.secret,
        }
        try:
            stored = as_stored(value, what=f"the result of '{row.key}'")
            data = {**row.data, "result": stored, "error": None}
            self.store.move(row, "commit", actor="proxy", detail=detail, data=data)
        except Exception as failure:
            reason = message_of(failure)
            self._note_unknown(claim, f"its result could not be recorded: {reason}")
            raise EffectNotRecorded(row.key, reason, value) from failure
        return stored

    def _reset(self, claim: Claim, error: Exception) -> None:
        """Back to pending with the error: the classifier says the call did not happen."""
        recorded = {"type": type(error).__name__, "message": message_of(error)}
        detail = {
            "worker": self.worker,
            "reason": "the call provably did not take effect",
            "error": recorded,
            SECRET: claim.secret,
        }
        data = {**claim.row.data, "error": recorded, "runner": None, "started_at": None}
        try:
            self.store.move(claim.row, "fail", actor="proxy", detail=detail, data=data)
        except Exception as failure:
            reason = f"{recorded['type']} could not be recorded ({message_of(failure)})"
            self._note_unknown(claim, reason)
            raise EffectNotRecorded(claim.row.key, reason) from failure

    def _note_unknown(self, claim: Claim, reason: str) -> None:
        """Write on the effect, still ``executing``, that its run ended with an unknown
        outcome and why, so later callers are told so. Best effort: if the write fails the
        effect is just as safe (``executing`` is never run again), only less explained."""
        try:
            at: float | None = self._now()
        except Exception:
            at = None
        note = {"reason": reason, "at": at, "worker": self.worker, SECRET: claim.note_secret}
        try:
            with self.store.transaction() as tx:
                tx.update(claim.row, {**claim.row.data, "unknown_outcome": note})
        except Exception:
            pass

    # -- human decisions -------------------------------------------------------------------

    def _decide(self, key: str, trigger: str, by: str, reason: str, seen: int | None) -> Row:
        by = arguments.statement(by, f"{trigger} of effect {describe(key)}: by= (who decides)")
        reason = arguments.remark(reason, f"{trigger} of effect {describe(key)}: reason=")
        seen = arguments.seen(seen, f"{trigger}: seen")
        with self.store.transaction() as tx:
            row = tx.get(MACHINE, key)
            if row is None:
                raise EffectNotFound(key)
            arguments.unchanged(row, seen)
            require_bundled_move(MACHINE, row.state, trigger, "human", row.context)
            if trigger == "approve" and (refused := self._reopened(tx, row)):
                raise refused
            return tx.move(row, trigger, actor="human", detail={"by": by, "reason": reason})


# -- helpers -------------------------------------------------------------------------------


def _fresh(tool: str | None) -> dict[str, Any]:
    return {
        "tool": tool,
        "result": None,
        "error": None,
        "runs": 0,
        "runner": None,
        "started_at": None,
        REPLAY_COUNT: 0,
        LAST_REPLAYED: None,
        "compensation": None,
        "unknown_outcome": None,
    }


def _decided_by(tx: Transaction, row: Row) -> str | None:
    """Who made the last human decision on ``row``, from its history."""
    for event in reversed(tx.history(MACHINE, row.key)):
        if event.actor == "human" and event.detail is not None:
            by = event.detail.get("by")
            return by if isinstance(by, str) else None
    return None
