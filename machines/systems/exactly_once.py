"""The exactly-once executor (seed 004): run an effect at most once per idempotency key.

Life of a key, on the ``outcome`` machine:

1. **Claim.** The first caller inserts the key ``in_flight`` with its lease (owner, expiry)
   in a durable transaction *before* running anything. Later callers get the recorded
   result (``succeeded``), the recorded error (``failed``), ``EffectIndeterminate``
   (parked) or ``EffectInProgress`` (a live lease elsewhere). A key whose lease expired was
   abandoned mid-run: its holder may have run the effect, so it is parked, never re-run.
   A key nobody asks for again is parked by a sweeper that polls ``park_expired``.
2. **Run.** The holder calls the effect. Retries happen here, inside ``in_flight`` under the
   one lease, and only after an error the classifier says proves the effect did not happen.
3. **Settle.** A result is stored (``succeed``); an error classified as "did not happen"
   is stored (``fail``); anything else (an unknown error, a timeout after sending, a lost
   lease, a failed store write, a result JSON cannot give back unchanged, a classifier
   that raises, a crash) ends ``indeterminate`` at once: a settle that fails for any
   reason parks the key in the same call, so no caller is told "in progress" about a
   key whose run is over. Writes are fenced by the row version taken with the claim: a
   holder whose lease was taken over cannot write a result.
4. **Leave indeterminate** only explicitly: ``reclaim`` (the caller declares the effect safe
   to repeat; the next ``run`` executes it again) or ``decide`` (a person answers the gate).
   A key without a lease holder is free for that fresh run only in the very row version
   its reclaim wrote (the reclaim's history event names it): a holder removed by any
   other write, such as a raw ``UPDATE`` of the row, parks the key instead.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from machines.errors import (
    EffectFailed,
    EffectIndeterminate,
    EffectInProgress,
    InvalidArgument,
    InvalidStateTransition,
    MachinesError,
    message_of,
)
from machines.runtime.history import Clock, checked_clock
from machines.spec.jsonvalue import as_stored, describe, dumps
from machines.spec.states import OutcomeState
from machines.store.arguments import check_key
from machines.store.records import Row, StaleWrite, Store, Transaction
from machines.systems import arguments
from machines.systems.arguments import MAX_RETRIES, store_with
from machines.systems.awaiting import steps_of, through
from machines.systems.effectlog_errors import EffectNotFound
from machines.systems.verdicts import Classifier as Classifier
from machines.systems.verdicts import Verdict as Verdict
from machines.systems.verdicts import fail_closed as fail_closed
from machines.systems.verdicts import not_sent as not_sent
from machines.systems.verdicts import verdict_of

MACHINE = "outcome"
RECLAIMED_AT = "version"
"""The field of a reclaim's history detail naming the row version the reclaim wrote: the
one state of the row in which a key without a lease holder is free for a fresh claim."""
MAX_LEASE_SECONDS = 7 * 24 * 3600.0
"""The longest lease a holder may take: a lease that runs out later than that after now
was written by no claim (the row was changed outside machines), and is no lease at all:
the next caller parks the key rather than wait for it."""
SWEEP_PAGE = 500
"""How many in-flight keys a sweep reads at once looking for leases that are none."""
CLAIM_ATTEMPTS = 3
"""How often a caller reads a known key again when another wrote it first (the race for a
reclaimed key): the loser then sees the winner's lease (``EffectInProgress``)."""
MAX_SWEEP = 10_000
"""The most keys one ``park_expired`` call parks (all in one transaction)."""


def process_identity(prefix: str = "") -> str:
    """``host:pid:random`` naming this process in leases and audit details."""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class _Replay:
    value: Any


class ExactlyOnce:
    """``ExactlyOnce(store).run(key, fn)``: ``fn`` runs at most once per ``key`` (plus once
    per explicit ``reclaim``); every later call replays what was recorded."""

    def __init__(
        self,
        store: Store,
        *,
        classify: Classifier = fail_closed,
        retries: int = 0,
        lease_seconds: float = 30.0,
        on_indeterminate: Literal["fail", "gate"] = "fail",
        clock: Clock = time.time,
        worker: str | None = None,
    ) -> None:
        if not isinstance(on_indeterminate, str) or on_indeterminate not in ("fail", "gate"):
            raise InvalidArgument(
                f"on_indeterminate must be 'fail' or 'gate', not {describe(on_indeterminate)}"
            )
        self.store = store_with(store, MACHINE, "ExactlyOnce")
        self.classify = arguments.function(classify, "classify")
        self.retries = arguments.count(retries, "retries", most=MAX_RETRIES)
        self.lease_seconds = arguments.seconds(lease_seconds, "lease_seconds")
        if self.lease_seconds > MAX_LEASE_SECONDS:
            raise InvalidArgument(
                f"lease_seconds must be at most {MAX_LEASE_SECONDS:g} (7 days), not "
                f"{describe(lease_seconds)}: a longer lease is taken for a row changed "
                "outside machines"
            )
        self.on_indeterminate = on_indeterminate
        self.clock = checked_clock(clock, "ExactlyOnce", consequence="nothing was written")
        self.worker = arguments.optional_name(worker, "worker", "ExactlyOnce") or process_identity()

    # -- the two ways to run ------------------------------------------------------------

    def run(self, key: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` for ``key`` at most once; replay the recorded outcome otherwise."""
        arguments.function(fn, "fn")
        claim = self._claim(key)
        if isinstance(claim, _Replay):
            return claim.value
        attempt = 0
        while True:
            attempt += 1
            try:
                value = fn()
            except BaseException as error:
                self._after_error(claim, attempt, error)  # returns only to retry
                continue
            return self._after_value(claim, attempt, value)

    async def arun(self, key: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        """``run`` for async callables: ``await eo.arun(key, lambda: charge(card))``. A
        plain function given by mistake has run by the time it returns something that is
        not awaitable: the key is parked at once (never retried, whatever the classifier
        says of the error awaiting it would raise)."""
        arguments.function(fn, "fn", asynchronous=True)
        claim = self._claim(key)
        if isinstance(claim, _Replay):
            return claim.value
        attempt = 0
        while True:
            attempt += 1
            try:
                started = fn()
            except BaseException as error:
                self._after_error(claim, attempt, error)
                continue
            steps = steps_of(started)
            if steps is None:
                raise self._park_quietly(
                    claim,
                    f"fn returned {describe(started)}, not an awaitable that can be awaited: "
                    "a plain function ran in full outside the await, or the object's "
                    "__await__ failed after fn ran (arun takes an async callable; run takes "
                    "a plain one)",
                )
            try:
                value = await through(steps)
            except BaseException as error:
                self._after_error(claim, attempt, error)
                continue
            return self._after_value(claim, attempt, value)

    # -- sweeping abandoned keys ---------------------------------------------------------

    def park_expired(self, *, limit: int = 100) -> list[str]:
        """Park up to ``limit`` keys (1 to ``MAX_SWEEP``) whose holder's lease expired
        before it stored a result (oldest first), as a later caller of each would; the
        keys parked. For a sweeper that polls, so that an abandoned key surfaces as
        ``indeterminate`` without waiting for someone to ask for it again. Sweepers may
        run side by side: on PostgreSQL each takes rows the others do not hold (``SKIP
        LOCKED``)."""
        arguments.count(limit, "limit", least=1, most=MAX_SWEEP)
        now = self._now()
        parked = []
        with self.store.transaction() as tx:
            for row in tx.due(MACHINE, "in_flight", field="lease_until", before=now, limit=limit):
                reason = f"the lease of {row.data.get('owner')} expired before a result was stored"
                parked.append(self._park(tx, row, reason).key)
        offset = 0
        while len(parked) < limit:  # and every key whose lease is none (batch 27)
            with self.store.transaction() as tx:
                rows = tx.in_states(MACHINE, ["in_flight"], limit=SWEEP_PAGE, offset=offset)
            for row in rows:
                why = _no_lease(row, now)
                if why is not None and len(parked) < limit and (key := self._park_unheld(row, why)):
                    parked.append(key)
                else:
                    offset += 1  # still in flight: the next page starts after it
            if len(rows) < SWEEP_PAGE:
                break
        return parked

    def _park_unheld(self, row: Row, reason: str) -> str | None:
        """Park ``row`` as read, unless it changed or was reclaimed since (its key)."""
        with contextlib.suppress(StaleWrite), self.store.transaction() as tx:
            current = tx.get(MACHINE, row.key)
            if current is None or current.version != row.version or self._reclaimed(tx, row):
                return None
            return self._park(tx, current, reason).key
        return None

    # -- the explicit ways out of indeterminate -----------------------------------------

    def reclaim(self, key: str, *, by: str, reason: str, seen: int | None = None) -> None:
        """Declare the effect safe to repeat: the key goes back ``in_flight`` with no
        holder, and the next ``run`` executes ``fn`` again under a fresh claim. ``seen``:
        the row version the person decided on (``StaleWrite`` if the key moved since)."""
        key = check_key(key, MACHINE)
        seen = arguments.seen(seen, "reclaim: seen")
        detail: dict[str, Any] = {
            "by": arguments.statement(by, "by"),
            "reason": arguments.statement(reason, "reason"),
        }
        with self.store.transaction() as tx:
            row = _parked(arguments.unchanged(self._existing(tx, key), seen), "reclaim", "reclaim")
            data = {
                **row.data,
                "owner": None,
                "lease_until": None,
                "reclaims": arguments.stored_count(row, "reclaims") + 1,
                "gate": None,
            }
            detail[RECLAIMED_AT] = row.version + 1  # the version this move writes
            tx.move(row, "reclaim", actor="caller", detail=detail, data=data)

    def decide(
        self,
        key: str,
        *,
        landed: bool,
        by: str,
        reason: str,
        result: Any = None,
        seen: int | None = None,
    ) -> None:
        """A person's answer to "did this land?": ``landed`` records ``result`` as the
        outcome (later callers get it; it must be a JSON value that comes back unchanged,
        like any result); otherwise the key fails with the decision as its error.
        ``seen``: the row version the person decided on; a key that moved since (reclaimed
        and run again, say) is ``StaleWrite`` and keeps what it has become."""
        key = check_key(key, MACHINE)  # before any message names it
        arguments.flag(landed, "landed")
        seen = arguments.seen(seen, "decide: seen")
        by, reason = arguments.statement(by, "by"), arguments.statement(reason, "reason")
        detail = {"by": by, "reason": reason}  # the checked texts, and only those, are used
        if landed:
            dumps(result, what=f"the result decided for {describe(key)}")
        decided_at = self._now()
        with self.store.transaction() as tx:
            row = _parked(
                arguments.unchanged(self._existing(tx, key), seen),
                "decide",
                "decide_landed" if landed else "decide_not_landed",
            )
            gate = {
                **arguments.stored_fields(row, "gate"),
                "state": "decided",
                "landed": landed,
                "by": by,
                "reason": reason,
                "decided_at": decided_at,
            }
            if landed:
                tx.move(
                    row,
                    "decide_landed",
                    actor="operator",
                    detail=detail,
                    data={**row.data, "gate": gate, "result": result},
                )
            else:
                error = {
                    "type": "GateDecision",
                    "message": f"{by} decided it did not land: {reason}",
                }
                tx.move(
                    row,
                    "decide_not_landed",
                    actor="operator",
                    detail=detail,
                    data={**row.data, "gate": gate, "error": error},
                )

    def outcome(self, key: str) -> Row | None:
        """The stored row of ``key`` (state, data: result, error, lease, gate), if any."""
        with self.store.transaction() as tx:
            return tx.get(MACHINE, key)

    # -- steps --------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock()

    def _existing(self, tx: Transaction, key: str) -> Row:
        row = tx.get(MACHINE, key)
        if row is None:
            raise EffectNotFound(key, "key")
        return row

    def _lease(self) -> dict[str, Any]:
        return {"owner": self.worker, "lease_until": self._now() + self.lease_seconds}

    def _claim(self, key: str) -> Row | _Replay:
        """Take the key (durably, before anything runs) or report what is recorded. A new
        key is one insert that commits by itself; a known one is decided in a transaction."""
        row, created = self.store.insert(
            MACHINE, key, data={**self._lease(), "runs": 1, "attempts": 0, "reclaims": 0}
        )
        if created:
            return row
        if row.state != "in_flight":
            return self._recorded(row)
        for _ in range(CLAIM_ATTEMPTS - 1):
            with contextlib.suppress(StaleWrite):  # another caller took it meanwhile
                return self._claim_known(key)
        return self._claim_known(key)

    def _claim_known(self, key: str) -> Row | _Replay:
        """``_claim`` of a key that exists, in one transaction: ``StaleWrite`` when another
        caller wrote it between the read and the write (then the caller reads it again)."""
        parked: EffectIndeterminate | None = None
        with self.store.transaction() as tx:
            row = self._existing(tx, key)
            if row.state != "in_flight":
                return self._recorded(row)
            owner, until = row.data.get("owner"), row.data.get("lease_until")
            if owner is None and self._reclaimed(tx, row):  # free for a fresh claim
                return tx.update(
                    row,
                    {
                        **row.data,
                        **self._lease(),
                        "runs": arguments.stored_count(row, "runs") + 1,
                        "attempts": 0,
                    },
                )
            now = self._now()
            reason = _no_lease(row, now)
            if reason is None:
                if cast(float, until) > now:  # a holder and a numeric expiry: _no_lease said
                    raise EffectInProgress(key, cast(str, owner), cast(float, until))
                reason = f"the lease of {owner} expired before a result was stored"
            row = self._park(tx, row, reason)
            parked = self._indeterminate(row, reason)
        raise parked

    @staticmethod
    def _reclaimed(tx: Transaction, row: Row) -> bool:
        """Whether an in-flight key without a lease holder is free because of a reclaim:
        its last history event (append-only, written by the move) is a reclaim that names
        the row's version after it, and nothing wrote the row since (every write raises the
        version). A holder removed by any other write parks the key instead."""
        history = tx.history(MACHINE, row.key)
        last = history[-1] if history else None
        return (
            last is not None
            and last.trigger == "reclaim"
            and (last.detail or {}).get(RECLAIMED_AT) == row.version
        )

    def _recorded(self, row: Row) -> _Replay:
        """What a settled key tells a later caller: its result, or the error it ended on."""
        if row.state == "succeeded":
            return _Replay(row.data.get("result"))
        if row.state == "failed":
            error = arguments.stored_fields(row, "error")
            raise EffectFailed(row.key, error.get("type", "?"), error.get("message", ""))
        raise self._indeterminate(row, row.data.get("reason", "parked"))

    def _after_error(self, claim: Row, attempt: int, error: BaseException) -> None:
        """Retry (return), or settle the key and raise what the caller must see."""
        verdict = verdict_of(self.classify, error)
        if verdict is Verdict.RETRY and attempt <= self.retries and self._lease_left(claim):
            return
        name = type(error).__name__
        if verdict in (Verdict.RETRY, Verdict.FAILED):
            message = message_of(error) or name
            recorded = {"type": name, "message": message}
            try:
                self._settle(
                    claim,
                    "fail",
                    {"error": recorded, "attempts": attempt},
                    {"attempts": attempt, "error": name},
                )
            except Exception as store_error:
                raise self._park_after_write_failure(claim, store_error) from error
            raise EffectFailed(claim.key, name, message) from error
        reason = f"{name} after the effect was started: {message_of(error)}"
        parked = self._park_quietly(claim, reason)
        if not isinstance(error, Exception):
            raise error  # KeyboardInterrupt, SystemExit, CancelledError: parked, then re-raised
        raise parked from error

    def _lease_left(self, claim: Row) -> bool:
        try:
            return bool(self._now() < claim.data["lease_until"])
        except MachinesError:
            return False  # no trustworthy time: no retry

    def _after_value(self, claim: Row, attempt: int, value: Any) -> Any:
        """Store the result and return it as stored (what every replay returns too), or
        park the key at once when it cannot be stored."""
        try:
            value = as_stored(value, what=f"the result of '{claim.key}'")
            self._settle(
                claim, "succeed", {"result": value, "attempts": attempt}, {"attempts": attempt}
            )
        except StaleWrite as lost:
            reason = f"the lease was lost before the result was stored ({lost})"
            raise self._park_quietly(claim, reason) from lost
        except Exception as failed:
            raise self._park_after_write_failure(claim, failed) from failed
        return value

    def _settle(
        self, claim: Row, trigger: str, fields: Mapping[str, Any], detail: Mapping[str, Any]
    ) -> None:
        data = {**claim.data, **fields, "owner": None, "lease_until": None}
        self.store.move(
            claim, trigger, actor="worker", detail={"worker": self.worker, **detail}, data=data
        )

    def _park(self, tx: Transaction, row: Row, reason: str) -> Row:
        data: dict[str, Any] = {**row.data, "owner": None, "lease_until": None, "reason": reason}
        if self.on_indeterminate == "gate":
            try:
                opened_at: float | None = self._now()
            except MachinesError:
                opened_at = None  # the gate opens all the same
            data["gate"] = {"state": "open", "opened_at": opened_at}
        return tx.move(
            row, "park", actor="worker", detail={"worker": self.worker, "reason": reason}, data=data
        )

    def _park_quietly(self, claim: Row, reason: str) -> EffectIndeterminate:
        """Park our own claim; if even that write fails, the expired lease will park it.
        A claim that changed since it was taken was parked or reclaimed meanwhile (a move),
        or else rewritten outside machines (its holder or lease, with no move): then it is
        parked as it is now, for no expiry of a forged lease would ever park it."""
        try:
            with self.store.transaction() as tx:
                row = self._park(tx, claim, reason)
            return self._indeterminate(row, reason)
        except StaleWrite:
            return self._park_rewritten(claim, reason)
        except Exception as store_error:
            return self._indeterminate(
                claim, f"{reason}; parking failed too ({message_of(store_error)})"
            )

    def _park_rewritten(self, claim: Row, reason: str) -> EffectIndeterminate:
        try:
            with self.store.transaction() as tx:
                row = tx.get(MACHINE, claim.key)
                if row is None or row.state != OutcomeState.IN_FLIGHT or row.moves != claim.moves:
                    return self._indeterminate(claim, f"{reason}; it was parked or reclaimed")
                why = f"{reason}; its holder or lease was rewritten outside machines meanwhile"
                return self._indeterminate(self._park(tx, row, why), why)
        except Exception as store_error:
            return self._indeterminate(
                claim, f"{reason}; parking failed too ({message_of(store_error)})"
            )

    def _park_after_write_failure(self, claim: Row, failure: Exception) -> EffectIndeterminate:
        return self._park_quietly(claim, f"the outcome could not be stored: {message_of(failure)}")

    def _indeterminate(self, row: Row, reason: str) -> EffectIndeterminate:
        gate = arguments.stored_fields(row, "gate")
        return EffectIndeterminate(row.key, reason, gate_open=gate.get("state") == "open")


def _no_lease(row: Row, now: float) -> str | None:
    """Why an in-flight ``row`` holds no lease at all, written outside machines (so the key
    is parked, not waited for), or None: no holder (a reclaim's row, which its history
    frees, excepted by the caller), an expiry that is no number, or one later than any
    lease can run."""
    owner, until = row.data.get("owner"), row.data.get("lease_until")
    if owner is None:
        return (
            "the key's lease holder was removed without a reclaim (the row was changed "
            "outside machines): the effect may have run"
        )
    if not isinstance(until, int | float) or isinstance(until, bool):
        return (
            f"the lease of {owner} has no readable expiry ({describe(until)}; the row was "
            "changed outside machines): the effect may have run"
        )
    if until > now + MAX_LEASE_SECONDS:
        return (
            f"the lease of {owner} runs out at {describe(until)}, later than any lease can "
            "(the row was changed outside machines, or this process's clock is behind the "
            "one that wrote it): the effect may have run"
        )
    return None


def _parked(row: Row, call: str, trigger: str) -> Row:
    """``row`` when it is parked ``indeterminate``: a person's answer is to "did this land?",
    which only a parked key asks. A definition may let a person decide from another state
    (an owner's addition the reliance check allows); a key in flight has a worker whose
    own result would then be overruled, or lost: refused, nothing written."""
    if row.state != OutcomeState.INDETERMINATE:
        raise InvalidStateTransition(
            MACHINE,
            row.state,
            trigger=trigger,
            reason=f"{call} answers for a key the system parked {OutcomeState.INDETERMINATE} "
            "(wait for its worker, or for park_expired)",
        )
    return row
