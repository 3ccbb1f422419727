"""The effect-log part of the bug zoo: effect logs written the way a user would, from
scratch (their own class, their own storage, their own exceptions), not on
``machines.systems``.

``CarefulLog`` is a correct one: it claims a signature durably before running its tool,
keeps a call whose outcome is unknown ``executing`` for good, stores results as JSON it
checks round-trip, holds irreversible calls for a human, and undoes a failed session newest
first, each effect once. Each bug below rewrites one of its methods the way a careless
engineer might; ``BUGS`` maps each to the rule the suite must name. ``UserAdapter`` is the
adapter a user writes around such a log: it translates the log's own exceptions into the
contract's, and wires the suite's faults and restarts to the log's storage. The bugs'
adapters check nothing and expose no history (but the one whose bug is in its history), so
the suite judges them by what it sees alone.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from machines.errors import MachinesError
from machines.store.records import StoreError
from machines.systems.effectlog import (
    EffectAwaitingApproval,
    EffectClosed,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectStillExecuting,
)
from machines.testing.effectlog.suite import Call, EffectLogAdapter, Move
from machines.testing.faults import Fault, NotSent, SimulatedCrash

Record = dict[str, Any]

# -- the user's storage and exceptions -------------------------------------------------------


class DiskError(Exception):
    """The user's storage failed to write."""


class Disk:
    """What survives a restart: one record per signature, in the order first written."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.pending: Fault | None = None

    def read(self, key: str) -> Record | None:
        record = self.records.get(key)
        return copy.deepcopy(record) if record is not None else None

    def write(self, key: str, record: Record) -> None:
        how, self.pending = self.pending, None
        if how == "error":
            raise DiskError(f"writing {key}: the disk is full")
        if how == "crash":
            raise SimulatedCrash()
        self.records[key] = copy.deepcopy(record)


class LogError(Exception):
    """Base of the user's log errors."""


class Waiting(LogError):
    """An irreversible call waits for a human."""


class Refused(LogError):
    """A human refused the call."""


class Busy(LogError):
    """Another caller runs it, or its outcome is unknown."""


class Unknown(LogError):
    """The tool raised after it may have sent: the outcome is unknown."""


class NotStored(LogError):
    """The tool returned, but its result could not be stored."""


class Closed(LogError):
    """The call is being undone, or was."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class BadDecision(LogError):
    """A human decision on a call that does not wait for one."""


# -- a correct effect log --------------------------------------------------------------------


class CarefulLog:
    """A correct effect log on a ``Disk``; every write is one record, so atomic."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk

    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        record = self.disk.read(signature) or {
            "tier": call.tier,
            "tool": call.tool,
            "session": call.session,
            "status": "pending",
            "result": None,
            "history": [],
        }
        trigger = self._route(signature, record)
        if trigger == "replay":
            return json.loads(record["result"])
        self._claim(signature, record, trigger)
        return self._run(signature, record, fn)

    def _route(self, signature: str, record: Record) -> str:
        """How this call goes: ``replay``, claim with ``execute`` / ``resume``, or refuse."""
        status = record["status"]
        if status == "committed":
            return "replay"
        if status == "executing":
            raise Busy(signature)
        if status == "rejected":
            raise Refused(signature)
        if status == "approved":
            return "resume"
        if status == "pending" and record["tier"] == "irreversible":
            self.disk.write(signature, record)  # registered, waiting for a human
            raise Waiting(signature)
        if status == "pending":
            return "execute"
        raise Closed(status)

    def _claim(self, signature: str, record: Record, trigger: str) -> None:
        """Durably mark the call as running before anything is sent."""
        self._move(signature, record, trigger, "executing", "proxy")

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except NotSent:
            self._move(signature, record, "fail", "pending", "proxy")
            raise
        except Exception as error:
            raise Unknown(signature) from error  # stays executing: never run again
        return self._commit(signature, record, value)

    def _commit(self, signature: str, record: Record, value: Any) -> Any:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError) as error:
            raise NotStored(f"JSON cannot hold it: {error}") from error
        if json.loads(text) != value:
            raise NotStored("it does not come back from JSON as it went in")
        record["result"] = text
        try:
            self._move(signature, record, "commit", "committed", "proxy")
        except DiskError as error:
            raise NotStored(str(error)) from error
        return json.loads(text)

    def _move(self, signature: str, record: Record, trigger: str, dest: str, actor: str) -> None:
        moved = {
            **record,
            "status": dest,
            "history": [*record["history"], [record["status"], trigger, dest, actor]],
        }
        self.disk.write(signature, moved)
        record.update(moved)

    # -- the human -----------------------------------------------------------------------

    def decide(self, signature: str, approve: bool) -> None:
        record = self.disk.read(signature)
        if record is None or record["tier"] != "irreversible" or record["status"] != "pending":
            raise BadDecision(signature)
        dest = "approved" if approve else "rejected"
        self._move(signature, record, "approve" if approve else "reject", dest, "human")

    # -- the saga ------------------------------------------------------------------------

    def compensate(self, session: str, undo: Mapping[str, Callable[[str], None]]) -> None:
        for signature in self._undo_order(session):
            record = self.disk.read(signature)
            if record is None or not self._compensable(record):
                continue
            self._move(signature, record, "compensate", "compensating", "saga")
            action = undo.get(record["tool"])
            try:
                if action is None:
                    raise LookupError(f"no compensation for {record['tool']}")
                action(signature)
            except Exception:
                self._move(
                    signature, record, "compensation_exhausted", "compensation_failed", "saga"
                )
                continue
            self._move(signature, record, "compensation_succeeded", "compensated", "saga")

    def _undo_order(self, session: str) -> list[str]:
        """The session's signatures, newest first."""
        mine = [key for key, r in self.disk.records.items() if r["session"] == session]
        return mine[::-1]

    def _compensable(self, record: Record) -> bool:
        return bool(record["tier"] == "compensable" and record["status"] == "executing")


# -- the adapter a user writes ---------------------------------------------------------------


class UserAdapter(EffectLogAdapter):
    """Runs ``log_class`` on a fresh ``Disk``; translates its errors into the contract's."""

    log_class: type[CarefulLog] = CarefulLog
    exposes_history = True

    def __init__(self) -> None:
        self.disk = Disk()
        self.log = self.log_class(self.disk)

    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        try:
            return self.log.call(signature, fn, call)
        except Waiting:
            raise EffectAwaitingApproval(signature, None) from None
        except Refused:
            raise EffectRejected(signature, None) from None
        except Busy:
            raise EffectStillExecuting(signature, None, None) from None
        except Unknown as unknown:
            cause = unknown.__cause__
            error = cause if isinstance(cause, Exception) else unknown
            raise EffectOutcomeUnknown(signature, None, None, error) from cause
        except NotStored as why:
            raise EffectNotRecorded(signature, str(why)) from why
        except Closed as closed:
            raise EffectClosed(signature, closed.status) from None
        except DiskError as failed:
            raise StoreError(f"{signature}: {failed}") from failed

    def approve(self, signature: str) -> None:
        self._decide(signature, True)

    def reject(self, signature: str) -> None:
        self._decide(signature, False)

    def _decide(self, signature: str, approve: bool) -> None:
        try:
            self.log.decide(signature, approve)
        except (BadDecision, DiskError) as refused:
            raise MachinesError(f"{signature}: the decision was refused ({refused!r})") from None

    def compensate(self, session: str, compensations: Mapping[str, Callable[[str], None]]) -> None:
        self.log.compensate(session, compensations)

    def history(self, signature: str) -> Sequence[Move] | None:
        if not self.exposes_history:
            return None
        record = self.disk.read(signature)
        return [Move(*move) for move in record["history"]] if record else []

    def fail_next_write(self, how: Fault | None) -> None:
        self.disk.pending = how

    def restart(self) -> None:
        self.log = self.log_class(self.disk)

    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        return []


# -- the bugs --------------------------------------------------------------------------------


class RetriesAfterSending(CarefulLog):
    """Retries a timeout, "a transient error", within the call: the double charge."""

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        for attempt in range(3):
            try:
                value = fn()
                break
            except NotSent:
                self._move(signature, record, "fail", "pending", "proxy")
                raise
            except TimeoutError:
                if attempt == 2:
                    raise
            except Exception as error:
                raise Unknown(signature) from error
        return self._commit(signature, record, value)


class ClaimsAfterRunning(CarefulLog):
    """Writes nothing before running ("one write per call is faster"): no durable claim,
    so a duplicate caller runs the tool too."""

    def _claim(self, signature: str, record: Record, trigger: str) -> None:
        record["history"].append([record["status"], trigger, "executing", "proxy"])
        record["status"] = "executing"


class RunsWhenAskedAgain(CarefulLog):
    """Holds an irreversible call only at its first call ("the second call comes after the
    dashboard approved it")."""

    def _route(self, signature: str, record: Record) -> str:
        if record["status"] == "pending" and record["tier"] == "irreversible":
            if not record["history"] and signature not in self.disk.records:
                self.disk.write(signature, record)
                raise Waiting(signature)
            return "execute"
        return super()._route(signature, record)


class ApprovalOutlivesItsRun(CarefulLog):
    """After an approved run fails provably, the call goes back to ``approved`` ("the human
    already said yes"): it runs again on the same approval."""

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except NotSent:
            back = "approved" if record["tier"] == "irreversible" else "pending"
            self._move(signature, record, "fail", back, "proxy")
            raise
        except Exception as error:
            raise Unknown(signature) from error
        return self._commit(signature, record, value)


class LiveValueFirst(CarefulLog):
    """Hands the first caller the tool's own value and replays the stored JSON: a tuple
    comes back a list."""

    def _commit(self, signature: str, record: Record, value: Any) -> Any:
        try:
            record["result"] = json.dumps(value)
            self._move(signature, record, "commit", "committed", "proxy")
        except (TypeError, ValueError, DiskError) as error:
            raise NotStored(str(error)) from error
        return value


class AcksBeforeDurable(CarefulLog):
    """Returns the result even when storing it failed ("the caller has it; the cache is
    best effort"): later callers get no replay."""

    def _commit(self, signature: str, record: Record, value: Any) -> Any:
        try:
            return super()._commit(signature, record, value)
        except NotStored:
            return value


class EveryErrorIsRetryable(CarefulLog):
    """Treats every error as "the call failed, try again": a timeout after sending frees
    the signature."""

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except Exception:
            self._move(signature, record, "fail", "pending", "proxy")
            raise
        return self._commit(signature, record, value)


class ReleasesWhenCancelled(CarefulLog):
    """Frees the claim when the caller is cancelled or interrupted ("do not leave it stuck
    because a worker was shut down")."""

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except NotSent:
            self._move(signature, record, "fail", "pending", "proxy")
            raise
        except Exception as error:
            raise Unknown(signature) from error
        except BaseException:
            self._move(signature, record, "fail", "pending", "proxy")
            raise
        return self._commit(signature, record, value)


class KeepsNotSentFailures(CarefulLog):
    """Safe, by another policy: a compensable call whose tool proved nothing was sent is
    closed for good; every later caller is told so, and the tool never runs again
    (outsider batch 31, b 2)."""

    def _route(self, signature: str, record: Record) -> str:
        if record.get("not_sent"):
            raise Closed("failed before sending")
        return super()._route(signature, record)

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        try:
            return super()._run(signature, record, fn)
        except NotSent:
            if record["tier"] == "compensable":
                record["not_sent"] = True
                self.disk.write(signature, record)
            raise


class KeepsEveryNotSentFailure(KeepsNotSentFailures):
    """Safe, by the same policy, for both tiers: an irreversible call whose tool proved
    nothing was sent is closed for good too, and a later approval of it is refused
    (outsider batch 46, a 14: failed as a break of ``decisions``, a guarantee)."""

    def _run(self, signature: str, record: Record, fn: Callable[[], Any]) -> Any:
        try:
            return CarefulLog._run(self, signature, record, fn)
        except NotSent:
            record["not_sent"] = True
            self.disk.write(signature, record)
            raise

    def decide(self, signature: str, approve: bool) -> None:
        record = self.disk.read(signature)
        if record is not None and record.get("not_sent"):
            raise BadDecision(signature)
        super().decide(signature, approve)


class UndoesOldestFirst(CarefulLog):
    """Undoes a session in the order its calls were made."""

    def _undo_order(self, session: str) -> list[str]:
        return [key for key, r in self.disk.records.items() if r["session"] == session]


class UndoesCommitted(CarefulLog):
    """Undoes every call of the failed session that ran, committed ones too."""

    def _compensable(self, record: Record) -> bool:
        return bool(
            record["tier"] == "compensable" and record["status"] in ("executing", "committed")
        )


class RetriesFailedUndo(CarefulLog):
    """A later saga tries a failed compensation again: the refund runs twice."""

    def _compensable(self, record: Record) -> bool:
        return bool(
            record["tier"] == "compensable"
            and record["status"] in ("executing", "compensation_failed")
        )


class ResumesWithExecute(CarefulLog):
    """Records an approved call's claim as ``execute`` (the trigger of compensable calls):
    a history the definition does not allow."""

    def _claim(self, signature: str, record: Record, trigger: str) -> None:
        self._move(signature, record, "execute", "executing", "proxy")


class ApprovalsInMemory(CarefulLog):
    """Keeps approvals in a set in memory: a restart forgets them."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk)
        self.approved: set[str] = set()

    def _route(self, signature: str, record: Record) -> str:
        if record["status"] == "pending" and signature in self.approved:
            self.approved.discard(signature)
            return "execute"
        return super()._route(signature, record)

    def decide(self, signature: str, approve: bool) -> None:
        if approve:
            record = self.disk.read(signature)
            if record is None or record["tier"] != "irreversible" or record["status"] != "pending":
                raise BadDecision(signature)
            self.approved.add(signature)
        else:
            super().decide(signature, approve)


class ApprovesAnything(CarefulLog):
    """``approve`` just sets the status ("the dashboard only shows waiting calls")."""

    def decide(self, signature: str, approve: bool) -> None:
        record = self.disk.read(signature)
        if record is None:
            raise BadDecision(signature)
        dest = "approved" if approve else "rejected"
        self._move(signature, record, "approve" if approve else "reject", dest, "human")


class PreApproves(CarefulLog):
    """A human may approve an irreversible call before any caller asked for it ("approve
    the wire in advance"): the approval is of no request anyone saw (outsider batch 45,
    a 10)."""

    def decide(self, signature: str, approve: bool) -> None:
        if self.disk.read(signature) is None and signature.startswith("wire"):
            fresh = {"tier": "irreversible", "tool": "wire", "session": "s" + signature[-1]}
            record = {**fresh, "status": "pending", "result": None, "history": []}
            self.disk.write(signature, record)
        super().decide(signature, approve)


class RunsAnywayIfClaimFails(CarefulLog):
    """Runs the tool even when the write of its claim failed ("the upstream is what
    matters"): a second caller meanwhile finds nothing claimed and runs it too (outsider
    batch 45, a 11)."""

    def _claim(self, signature: str, record: Record, trigger: str) -> None:
        with contextlib.suppress(DiskError):
            super()._claim(signature, record, trigger)


@dataclass(frozen=True)
class Bug:
    log: type[CarefulLog]
    rules: tuple[str, ...]
    """The rules this bug breaks, the one it is about first: the suite must name one of
    them (it names the first it sees broken)."""
    history: bool = False
    """Whether its adapter exposes the log's history (only where the bug is in it)."""

    @property
    def name(self) -> str:
        return self.log.__name__


BUGS = (
    Bug(RetriesAfterSending, ("at-most-once",)),
    Bug(ClaimsAfterRunning, ("at-most-once", "unknown-stays-unknown")),
    Bug(RunsWhenAskedAgain, ("approval",)),
    Bug(ApprovalOutlivesItsRun, ("approval", "decisions")),
    Bug(LiveValueFirst, ("replay",)),
    Bug(AcksBeforeDurable, ("replay",)),
    Bug(EveryErrorIsRetryable, ("unknown-stays-unknown",)),
    Bug(ReleasesWhenCancelled, ("cancelled-stays-unknown", "saga-completes")),
    Bug(UndoesOldestFirst, ("saga-newest-first",)),
    Bug(KeepsNotSentFailures, ("not-sent-runs-again",)),
    Bug(UndoesCommitted, ("saga-only-unknown", "replay")),
    Bug(RetriesFailedUndo, ("saga-once",)),
    Bug(ResumesWithExecute, ("history-chain",), history=True),
    Bug(ApprovalsInMemory, ("told-truth",)),
    Bug(ApprovesAnything, ("decisions",)),
    Bug(PreApproves, ("decisions",)),
    Bug(RunsAnywayIfClaimFails, ("at-most-once",)),
)


def adapter_for(bug: Bug) -> type[UserAdapter]:
    """The user's adapter around ``bug``'s log."""
    return type(
        f"{bug.log.__name__}Adapter",
        (UserAdapter,),
        {"log_class": bug.log, "exposes_history": bug.history},
    )
