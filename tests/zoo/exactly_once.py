"""The exactly-once part of the bug zoo: executors written the way a user would, from
scratch (their own class, their own sqlite3 tables, their own exceptions), not on
``machines.systems``.

``Ledger`` is a careful one: it claims a key durably before running, fences every write
with the row version it claimed, parks whatever it cannot settle, retries only errors that
prove nothing was sent, and records its moves. Each bug below rewrites one of its methods
the way a careless engineer might; ``BUGS`` maps each to the rule the suite must name.
``LedgerAdapter`` is the adapter a user writes around such an executor: it translates the
executor's exceptions and wires the suite's clock, faults and restarts to it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from machines.errors import EffectFailed, EffectIndeterminate, EffectInProgress, MachinesError
from machines.store.records import StoreError
from machines.testing.exactly_once.suite import LEASE, ExactlyOnceAdapter, Move
from machines.testing.faults import Fault, NotSent, SimulatedCrash

SCHEMA = """
CREATE TABLE effects (
    key TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, lease_until REAL,
    result TEXT, error_type TEXT, error_message TEXT, version INTEGER NOT NULL);
CREATE TABLE moves (
    key TEXT NOT NULL, seq INTEGER NOT NULL, source TEXT NOT NULL, trigger TEXT NOT NULL,
    dest TEXT NOT NULL, actor TEXT NOT NULL, PRIMARY KEY (key, seq));
"""


class Busy(Exception):
    """Another worker holds the key."""


class Unknown(Exception):
    """The key is parked: nobody knows whether the effect happened."""


class Refused(Exception):
    """The effect did not happen; replayed as recorded."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type, self.message = error_type, message


class NotParked(Exception):
    """A reclaim or decision for a key that is not parked."""


@dataclass(frozen=True)
class Replay:
    value: Any


Row = tuple[str, str | None, float | None, str | None, str | None, str | None, int]
Claim = int | Replay | Exception
"""A claim's outcome: the version held, a replay, or the exception to raise after commit."""


class Ledger:
    """A careful exactly-once executor on a sqlite3 connection (the "disk": a restart
    rolls back whatever was not committed)."""

    lease = LEASE
    retries = 1

    def __init__(
        self, db: sqlite3.Connection, clock: Callable[[], float], before_write: Callable[[], None]
    ) -> None:
        self.db, self.clock, self.before_write = db, clock, before_write

    # -- plumbing ------------------------------------------------------------------------

    @contextmanager
    def tx(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except Exception:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def write(self, sql: str, *args: Any) -> int:
        self.before_write()
        return self.db.execute(sql, args).rowcount

    def move(self, key: str, source: str, trigger: str, dest: str, actor: str = "worker") -> None:
        self.write(
            "INSERT INTO moves SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM moves "
            "WHERE key = ?",
            key,
            source,
            trigger,
            dest,
            actor,
            key,
        )

    def row(self, key: str) -> Row | None:
        found: Row | None = self.db.execute(
            "SELECT state, owner, lease_until, result, error_type, error_message, version "
            "FROM effects WHERE key = ?",
            (key,),
        ).fetchone()
        return found

    # -- running -------------------------------------------------------------------------

    def run(self, key: str, fn: Callable[[], Any], worker: str) -> Any:
        claim = self.claim(key, worker)
        if isinstance(claim, Replay):
            return claim.value
        attempt = 0
        while True:
            attempt += 1
            try:
                value = fn()
            except Exception as error:
                if self.may_retry(key, error, attempt):
                    continue
                if self.proves_not_sent(error):
                    refused = Refused(type(error).__name__, str(error))
                    self.settle(key, claim, "fail", None, refused)
                    raise refused from error
                self.give_up(key, claim, error)
                raise Unknown(key) from error
            except BaseException as interrupt:
                self.give_up(key, claim, interrupt)
                raise
            return self.succeed(key, claim, value)

    def claim(self, key: str, worker: str) -> int | Replay:
        """The version this worker holds the key at, or the recorded outcome: decided in
        one transaction, answered once it is committed."""
        with self.tx():
            outcome = self.claim_in(key, worker, self.clock())
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def claim_in(self, key: str, worker: str, now: float) -> Claim:
        row = self.row(key)
        if row is None:
            self.write(
                "INSERT INTO effects (key, state, owner, lease_until, version) "
                "VALUES (?, 'in_flight', ?, ?, 1)",
                key,
                worker,
                now + self.lease,
            )
            return 1
        state, owner, until, *_, version = row
        if state != "in_flight":
            return self.recorded(key, row)
        if owner is None:  # reclaimed: a fresh claim
            return self.take(key, worker, version)
        if until is not None and self.lease_live(until, now):
            return self.when_busy(key, worker, version)
        return self.when_expired(key, worker, version)

    def recorded(self, key: str, row: Row) -> Claim:
        state, _, _, result, error_type, message, _ = row
        if state == "succeeded":
            return Replay(json.loads(result or "null"))
        if state == "failed":
            return Refused(error_type or "?", message or "")
        return Unknown(key)

    def take(self, key: str, worker: str, version: int) -> int:
        self.write(
            "UPDATE effects SET owner = ?, lease_until = ?, version = version + 1 WHERE key = ?",
            worker,
            self.clock() + self.lease,
            key,
        )
        return version + 1

    def lease_live(self, until: float, now: float) -> bool:
        return until > now

    def when_busy(self, key: str, worker: str, version: int) -> Claim:
        return Busy(key)

    def when_expired(self, key: str, worker: str, version: int) -> Claim:
        """Its holder may have run the effect: park it, never run it again."""
        self.park_row(key, version)
        return Unknown(key)

    def may_retry(self, key: str, error: Exception, attempt: int) -> bool:
        return isinstance(error, NotSent) and attempt <= self.retries

    def proves_not_sent(self, error: Exception) -> bool:
        return isinstance(error, NotSent)

    def succeed(self, key: str, version: int, value: Any) -> Any:
        self.settle(key, version, "succeed", json.dumps(value), None)
        return value

    def settle(
        self, key: str, version: int, trigger: str, result: str | None, error: Refused | None
    ) -> None:
        """Record the outcome; park the key if it cannot be stored."""
        try:
            with self.tx():
                changed = self.settle_row(key, version, trigger, result, error)
        except sqlite3.Error as failed:
            self.park(key, version)
            raise Unknown(key) from failed
        if not changed:
            raise Unknown(key)  # the lease was lost: someone parked or took the key

    def settle_row(
        self, key: str, version: int, trigger: str, result: str | None, error: Refused | None
    ) -> bool:
        """Write the outcome, fenced by the claimed version: False if the claim was lost."""
        dest = "succeeded" if trigger == "succeed" else "failed"
        changed = self.write(
            "UPDATE effects SET state = ?, owner = NULL, lease_until = NULL, result = ?, "
            "error_type = ?, error_message = ?, version = version + 1 "
            "WHERE key = ? AND version = ? AND state = 'in_flight'",
            dest,
            result,
            error and error.error_type,
            error and error.message,
            key,
            version,
        )
        if changed:
            self.move(key, "in_flight", trigger, dest)
        return bool(changed)

    def give_up(self, key: str, version: int, error: BaseException) -> None:
        """The effect may have happened: park the key."""
        self.park(key, version)

    def park(self, key: str, version: int) -> None:
        try:
            with self.tx():
                self.park_row(key, version)
        except sqlite3.Error:
            pass  # the lease expires, and the next caller parks it

    def park_row(self, key: str, version: int) -> None:
        if self.write(
            "UPDATE effects SET state = 'indeterminate', owner = NULL, lease_until = NULL, "
            "version = version + 1 WHERE key = ? AND version = ? AND state = 'in_flight'",
            key,
            version,
        ):
            self.move(key, "in_flight", "park", "indeterminate")

    # -- the ways out of indeterminate -------------------------------------------------

    def reclaim(self, key: str) -> None:
        with self.tx():
            if not self.write(
                "UPDATE effects SET state = 'in_flight', owner = NULL, lease_until = NULL, "
                "version = version + 1 WHERE key = ? AND state = 'indeterminate'",
                key,
            ):
                raise NotParked(key)
            self.move(key, "indeterminate", "reclaim", "in_flight", "caller")

    def decide(self, key: str, landed: bool, result: Any) -> None:
        dest, trigger = (
            ("succeeded", "decide_landed") if landed else ("failed", "decide_not_landed")
        )
        with self.tx():
            if not self.write(
                "UPDATE effects SET state = ?, result = ?, error_type = ?, error_message = ?, "
                "version = version + 1 WHERE key = ? AND state = 'indeterminate'",
                dest,
                json.dumps(result) if landed else None,
                None if landed else "Decided",
                None if landed else "a person decided it did not land",
                key,
            ):
                raise NotParked(key)
            self.move(key, "indeterminate", trigger, dest, "operator")

    def history(self, key: str) -> list[Move]:
        return [
            Move(*row)
            for row in self.db.execute(
                "SELECT source, trigger, dest, actor FROM moves WHERE key = ? ORDER BY seq", (key,)
            )
        ]


class LedgerAdapter(ExactlyOnceAdapter):
    """The adapter a user writes around ``executor``: its exceptions become the suite's,
    its writes pass a fault hook, and a restart rolls back what was not committed and
    starts a new executor (a new process) on the same database. With ``history=False`` it
    exposes no history, so the suite judges by what it observed alone."""

    def __init__(self, executor: type[Ledger] = Ledger, *, history: bool = True) -> None:
        self.expose_history = history
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.executescript(SCHEMA)
        self.now = 1_000.0
        self.pending: Fault | None = None
        self.kind = executor
        self.executor = self._start()

    def _start(self) -> Ledger:
        return self.kind(self.db, lambda: self.now, self._before_write)

    def _before_write(self) -> None:
        how, self.pending = self.pending, None
        if how == "error":
            raise sqlite3.OperationalError("disk I/O error (injected)")
        if how == "crash":
            raise SimulatedCrash()

    def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any:
        try:
            return self.executor.run(key, effect, worker)
        except Refused as refused:
            raise EffectFailed(key, refused.error_type, refused.message) from None
        except Unknown:
            raise EffectIndeterminate(key, "parked by the ledger") from None
        except Busy:
            raise EffectInProgress(key, "another worker", self.now) from None
        except sqlite3.Error as failed:  # a claim that did not land: nothing ran
            raise StoreError(f"the ledger's database failed: {failed}") from None

    def reclaim(self, key: str) -> None:
        try:
            self.executor.reclaim(key)
        except NotParked:
            raise MachinesError(f"{key} is not parked") from None

    def decide(self, key: str, landed: bool, result: Any) -> None:
        try:
            self.executor.decide(key, landed, result)
        except NotParked:
            raise MachinesError(f"{key} is not parked") from None

    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    def fail_next_write(self, how: Fault | None) -> None:
        self.pending = how

    def restart(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self.executor = self._start()

    def history(self, key: str) -> list[Move] | None:
        return self.executor.history(key) if self.expose_history else None

    def check(self) -> list[str]:
        return []


# -- the bugs: each rewrites one method of Ledger ------------------------------------------


class Unfenced(Ledger):
    """Lease fencing switched off: the result is written whatever happened to the claim, so
    a holder that stalled past its lease settles a key another caller was told is
    indeterminate (the issue's headline case)."""

    def settle_row(
        self, key: str, version: int, trigger: str, result: str | None, error: Refused | None
    ) -> bool:
        dest = "succeeded" if trigger == "succeed" else "failed"
        source = (self.row(key) or ("in_flight",))[0]
        self.write(
            "UPDATE effects SET state = ?, owner = NULL, lease_until = NULL, result = ?, "
            "error_type = ?, error_message = ?, version = version + 1 WHERE key = ?",
            dest,
            result,
            error and error.error_type,
            error and error.message,
            key,
        )
        self.move(key, source, trigger, dest)
        return True


class RetriesAfterSend(Ledger):
    """Retries every error once, including a timeout after the request went out."""

    def may_retry(self, key: str, error: Exception, attempt: int) -> bool:
        return attempt <= self.retries


class RetriesForever(Ledger):
    """Retries an error that proves nothing was sent for as long as it keeps coming
    ("it is safe, so why give up?"): a caller whose upstream refuses waits for ever."""

    def may_retry(self, key: str, error: Exception, attempt: int) -> bool:
        return isinstance(error, NotSent)


class TimeoutIsFailure(Ledger):
    """Counts a timeout as "it did not happen" and records the key failed."""

    def proves_not_sent(self, error: Exception) -> bool:
        return isinstance(error, NotSent | TimeoutError)


class AcksBeforeDurable(Ledger):
    """Returns the result at once and writes it with the next call (one transaction
    saved per call): a process that dies in between has acknowledged a result it lost."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.behind: list[tuple[str, int, Any]] = []

    def succeed(self, key: str, version: int, value: Any) -> Any:
        row = self.row(key)
        if row is None or row[0] != "in_flight" or row[6] != version:
            raise Unknown(key)  # the lease was lost: that much it checks
        self.behind.append((key, version, value))
        return value

    def run(self, key: str, fn: Callable[[], Any], worker: str) -> Any:
        while self.behind:
            Ledger.succeed(self, *self.behind.pop(0))
        return super().run(key, fn, worker)


class ForgetsOnCancel(Ledger):
    """Releases the claim when the caller is cancelled or interrupted, "so it can retry"."""

    def give_up(self, key: str, version: int, error: BaseException) -> None:
        if isinstance(error, Exception):
            self.park(key, version)
        else:
            with self.tx():
                self.write("DELETE FROM effects WHERE key = ? AND version = ?", key, version)


class CancelIsFailure(Ledger):
    """Records a cancelled or interrupted call as failed: "the caller gave up"."""

    def give_up(self, key: str, version: int, error: BaseException) -> None:
        if isinstance(error, Exception):
            self.park(key, version)
        else:
            self.settle(key, version, "fail", None, Refused(type(error).__name__, "cancelled"))


class KeepsLeaseOnCancel(Ledger):
    """Safe, by another policy: an interrupted call keeps its lease until it expires, and
    the next caller then parks the key (told in progress meanwhile, never run twice)."""

    def give_up(self, key: str, version: int, error: BaseException) -> None:
        if isinstance(error, Exception):
            self.park(key, version)


class FreesFailures(Ledger):
    """Safe, by another policy: a failed key (nothing was sent, or a person decided it did
    not land) is freed, and the next call claims it afresh, as Stripe's idempotency keys
    do for a request that never started (outsider batch 29, b 2)."""

    settled_to_free: tuple[str, ...] = ("failed",)

    def claim_in(self, key: str, worker: str, now: float) -> Claim:
        row = self.row(key)
        if row is not None and row[0] in self.settled_to_free:
            self.write("DELETE FROM effects WHERE key = ?", key)
        return super().claim_in(key, worker, now)


class FreesEveryOutcome(FreesFailures):
    """Frees a succeeded key too ("the next payment with this key is a new one"): its
    effect runs again."""

    settled_to_free = ("failed", "succeeded")


class ReplaysStoredText(Ledger):
    """Replays a succeeded key's result as the JSON text it stored (the decode was
    forgotten on the replay path): the first caller got a dict, every later one a str."""

    def recorded(self, key: str, row: Row) -> Claim:
        if row[0] == "succeeded":
            return Replay(row[3])
        return super().recorded(key, row)


class ForgetsErrors(Ledger):
    """Replays a failed key with a generic error instead of the recorded one."""

    def recorded(self, key: str, row: Row) -> Claim:
        if row[0] == "failed":
            return Refused("Failed", "this effect failed earlier")
        return super().recorded(key, row)


class RetriesParked(Ledger):
    """Treats a parked key as "try again": the next call runs the effect."""

    def recorded(self, key: str, row: Row) -> Claim:
        if row[0] == "indeterminate":
            self.write("UPDATE effects SET state = 'in_flight' WHERE key = ?", key)
            self.move(key, "indeterminate", "reclaim", "in_flight")
            return self.take(key, "retry", row[6])
        return super().recorded(key, row)


class TakesOverExpired(Ledger):
    """A key whose holder's lease expired is taken over and run again, not parked."""

    def when_expired(self, key: str, worker: str, version: int) -> Claim:
        return self.take(key, worker, version)


class NeverExpires(Ledger):
    """Leases never run out: a key whose holder died is "in progress" forever."""

    def lease_live(self, until: float, now: float) -> bool:
        return True


class NoLeaseCheck(Ledger):
    """Runs a key that another worker holds ("it is probably stuck")."""

    def when_busy(self, key: str, worker: str, version: int) -> Claim:
        return self.take(key, worker, version)


class ParksWhenBusy(Ledger):
    """Parks a key another worker holds ("better safe than sorry"): the next caller is
    told indeterminate at once, and the first worker's result, when it lands, is thrown
    away."""

    def when_busy(self, key: str, worker: str, version: int) -> Claim:
        self.park_row(key, version)
        return Unknown(key)


class NoneForDuplicates(Ledger):
    """Answers a duplicate caller with None while the first one runs."""

    def when_busy(self, key: str, worker: str, version: int) -> Claim:
        return Replay(None)


class GlobalLock(Ledger):
    """One effect at a time per process: a caller of any other key meanwhile is told the
    key is in progress."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.running = False

    def run(self, key: str, fn: Callable[[], Any], worker: str) -> Any:
        if self.running:
            raise Busy(key)
        self.running = True
        try:
            return super().run(key, fn, worker)
        finally:
            self.running = False


class LeaksStoreErrors(Ledger):
    """Lets a failed write of the outcome reach the caller as the database's error (its
    adapter says "the store failed", which reads as "nothing ran"), after the effect
    sent."""

    def settle(
        self, key: str, version: int, trigger: str, result: str | None, error: Refused | None
    ) -> None:
        with self.tx():
            changed = self.settle_row(key, version, trigger, result, error)
        if not changed:
            raise Unknown(key)


class SaysBusyItsOwnWay(Ledger):
    """Tells a duplicate caller "busy" with an exception of its own that its adapter does
    not translate."""

    def when_busy(self, key: str, worker: str, version: int) -> Claim:
        return RuntimeError(f"{key} is busy")


class ParksCleanSuccess(Ledger):
    """Parks every key whose effect returned, "to be safe" (outsider batch 45, a 1): each
    caller is told indeterminate, and a person is sent to settle a call that succeeded."""

    def succeed(self, key: str, version: int, value: Any) -> Any:
        self.park(key, version)
        raise Unknown(key)


class RunsUnclaimed(Ledger):
    """Runs the effect anyway when its claim write fails, "the upstream is what matters"
    (outsider batch 45, a 6): nothing records it, so the next caller runs it again."""

    def claim(self, key: str, worker: str) -> int | Replay:
        try:
            return super().claim(key, worker)
        except sqlite3.Error:
            return -1

    def succeed(self, key: str, version: int, value: Any) -> Any:
        return value if version == -1 else super().succeed(key, version, value)


class FailsFresh(Ledger):
    """Records a key it has never seen as failed, without running its effect ("new keys
    are suspicious"): every caller is told it failed, and nothing ever ran (outsider batch
    46, a 3)."""

    def claim_in(self, key: str, worker: str, now: float) -> Claim:
        if self.row(key) is None:
            self.write(
                "INSERT INTO effects (key, state, error_type, error_message, version) "
                "VALUES (?, 'failed', 'Suspicious', 'a new key', 1)",
                key,
            )
            return Refused("Suspicious", "a new key")
        return super().claim_in(key, worker, now)


class GuardsUnclaimedInMemory(Ledger):
    """When its claim write fails, runs the effect anyway under a lock kept in memory and
    records the outcome afterwards: a process that dies after the send forgets the lock,
    and the next caller sends again (outsider batch 46, a 4)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: set[str] = set()

    def claim(self, key: str, worker: str) -> int | Replay:
        try:
            return super().claim(key, worker)
        except sqlite3.Error:
            if key in self.held:
                raise Busy(key) from None
            self.held.add(key)
            return -1

    def succeed(self, key: str, version: int, value: Any) -> Any:
        if version != -1:
            return super().succeed(key, version, value)
        with self.tx():
            self.write(
                "INSERT INTO effects (key, state, result, version) VALUES (?, 'succeeded', ?, 1)",
                key,
                json.dumps(value),
            )
        self.held.discard(key)
        return value


class IgnoresReclaim(Ledger):
    """A reclaim clears the lease but leaves the key parked."""

    def reclaim(self, key: str) -> None:
        with self.tx():
            if not self.write(
                "UPDATE effects SET owner = NULL, lease_until = NULL WHERE key = ? "
                "AND state = 'indeterminate'",
                key,
            ):
                raise NotParked(key)


class ReclaimsAnything(Ledger):
    """A reclaim resets any key, even one whose result callers already have."""

    def reclaim(self, key: str) -> None:
        with self.tx():
            row = self.row(key)
            if row is None:
                raise NotParked(key)
            self.write(
                "UPDATE effects SET state = 'in_flight', owner = NULL, lease_until = NULL, "
                "version = version + 1 WHERE key = ?",
                key,
            )
            if row[0] == "indeterminate":
                self.move(key, "indeterminate", "reclaim", "in_flight", "caller")


class DecisionReruns(Ledger):
    """ "It landed" is answered by running the effect again to fetch its result."""

    def decide(self, key: str, landed: bool, result: Any) -> None:
        if landed:
            self.reclaim(key)
        else:
            super().decide(key, landed, result)


class DecidesHeldKeys(Ledger):
    """A person's decision is written on a key still in flight too, not only a parked one
    (outsider batch 26: the suite passed it while the holder's lease was live)."""

    def decide(self, key: str, landed: bool, result: Any) -> None:
        dest, trigger = (
            ("succeeded", "decide_landed") if landed else ("failed", "decide_not_landed")
        )
        with self.tx():
            row = self.row(key)
            if row is None or row[0] not in ("indeterminate", "in_flight"):
                raise NotParked(key)
            self.write(
                "UPDATE effects SET state = ?, result = ?, error_type = ?, error_message = ?, "
                "owner = NULL, lease_until = NULL, version = version + 1 WHERE key = ?",
                dest,
                json.dumps(result) if landed else None,
                None if landed else "Decided",
                None if landed else "a person decided it did not land",
                key,
            )
            if row[0] == "indeterminate":
                self.move(key, "indeterminate", trigger, dest, "operator")


class AttemptsAsMoves(Ledger):
    """Records every retry as a move of its own (in_flight -> in_flight)."""

    def may_retry(self, key: str, error: Exception, attempt: int) -> bool:
        again = super().may_retry(key, error, attempt)
        if again:
            with self.tx():
                self.move(key, "in_flight", "retry", "in_flight")
        return again


class Expect(NamedTuple):
    """What the suite must report for a bug: the rule, and the length of the shortest
    counterexample (the steps that matter)."""

    rule: str
    steps: int
    tour_steps: int | None = None
    """The tour's shortest report, where it finds a shorter run than Hypothesis' shrinker
    (it takes every short run in turn)."""


BUGS: dict[type[Ledger], Expect] = {
    Unfenced: Expect("indeterminate-stays", 1),
    RetriesParked: Expect("indeterminate-stays", 2),
    RetriesAfterSend: Expect("no-retry-after-send", 1),
    RetriesForever: Expect("bounded-retries", 1),
    TimeoutIsFailure: Expect("failed-means-not-sent", 1),
    AcksBeforeDurable: Expect("replay-identical", 3, tour_steps=2),
    ReplaysStoredText: Expect("replay-identical", 2),
    ForgetsErrors: Expect("replay-identical", 2),
    FreesFailures: Expect("failure-replayed", 2),
    ForgetsOnCancel: Expect("interrupted-parks", 2),
    CancelIsFailure: Expect("interrupted-parks", 2),
    TakesOverExpired: Expect("expired-lease-parks", 1),
    NeverExpires: Expect("expired-lease-parks", 1),
    NoLeaseCheck: Expect("one-send-per-claim", 2, tour_steps=1),
    ParksWhenBusy: Expect("indeterminate-has-cause", 1),
    NoneForDuplicates: Expect("result-from-upstream", 2, tour_steps=1),
    GlobalLock: Expect("in-progress-means-held", 1),
    LeaksStoreErrors: Expect("failed-means-not-sent", 1),
    SaysBusyItsOwnWay: Expect("typed-answer", 2, tour_steps=1),
    ParksCleanSuccess: Expect("indeterminate-has-cause", 1),
    RunsUnclaimed: Expect("one-send-per-claim", 1),
    FailsFresh: Expect("failed-has-cause", 1),
    GuardsUnclaimedInMemory: Expect("one-send-per-claim", 1),
    IgnoresReclaim: Expect("explicit-exit", 3),
    ReclaimsAnything: Expect("explicit-exit", 2),
    DecisionReruns: Expect("explicit-exit", 3),
    DecidesHeldKeys: Expect("explicit-exit", 3, tour_steps=2),
    AttemptsAsMoves: Expect("legal-history", 1),
}
"""Each bug, and what the suite must say when it catches it."""
