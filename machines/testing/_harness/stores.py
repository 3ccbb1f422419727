"""The reference systems' store, instrumented: faults injected into it, invariants over it.

``WatchedStore`` wraps a store and sees every write coming (the crash-point harness counts
them). ``FaultyStore`` makes the next write (insert, move or update) fail the way a
database fails (``StoreError``) or the way a process dies (``SimulatedCrash``, which no
``except Exception`` catches, so nothing after it runs, not even a park). ``StoreWatch``
snapshots a reference system's store after every step, checks the named invariants
against the previous snapshot, and records the edges the histories took.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from machines.checks.invariants import check_invariants
from machines.checks.snapshots import Snapshot, snapshot
from machines.spec import MachineSpec
from machines.store import BUNDLED, Store
from machines.store.records import StoreError, Transaction
from machines.testing.coverage import Coverage
from machines.testing.faults import Fault, SimulatedCrash
from machines.testing.verdict import bundled

Specs = Mapping[str, MachineSpec] | None
"""The specs a reference system runs on (None: the bundled ones)."""
WRITES = frozenset({"insert", "move", "update"})
"""The methods of a transaction that write."""


class WatchedStore:
    """Wraps a store and sees every write coming: ``before_write`` runs just before each
    (insert, move, update), ``before_commit`` as a transaction is about to commit, and
    ``after_commit`` once it (or a write outside one) committed. Each does nothing here."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.url = store.url

    def specs(self) -> Any:
        return self._store.specs()

    def close(self) -> None:
        self._store.close()

    def before_write(self, name: str) -> None:
        """Write ``name`` is about to happen."""

    def before_commit(self, wrote: bool) -> None:
        """The transaction under way commits next; ``wrote``: whether it wrote."""

    def after_commit(self) -> None:
        """A commit just happened."""

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with self._store.transaction() as tx:
            watched = _WatchedTransaction(tx, self)
            yield watched
            self.before_commit(watched.wrote)
        self.after_commit()

    def insert(self, *args: Any, **kwargs: Any) -> Any:
        self.before_write("insert")
        found = self._store.insert(*args, **kwargs)
        self.after_commit()
        return found

    def move(self, *args: Any, **kwargs: Any) -> Any:
        self.before_write("move")
        moved = self._store.move(*args, **kwargs)
        self.after_commit()
        return moved


class _WatchedTransaction:
    def __init__(self, tx: Transaction, owner: WatchedStore) -> None:
        self._tx = tx
        self._owner = owner
        self.wrote = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._tx, name)
        if name not in WRITES:
            return attribute

        def write(*args: Any, **kwargs: Any) -> Any:
            self._owner.before_write(name)
            self.wrote = True
            return attribute(*args, **kwargs)

        return write


class FaultyStore(WatchedStore):
    """Wraps a store; the next write of any transaction can be made to fail or to die. A
    commit counts as a write when its transaction wrote: a fault armed after its last write
    (from a callback fired inside it) fails it."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.pending: Fault | None = None

    def before_write(self, name: str) -> None:
        self.maybe_fail()

    def before_commit(self, wrote: bool) -> None:
        if wrote:
            self.maybe_fail()

    def maybe_fail(self) -> None:
        """Fail (or die) here if a fault is pending: just before a write."""
        how, self.pending = self.pending, None
        if how == "error":
            raise StoreError("injected: the database went away mid-write")
        if how == "crash":
            raise SimulatedCrash()


class StoreWatch:
    """The named invariants over successive snapshots of one store, plus edge coverage.

    The invariants are judged by the bundled specs (the published promises), not by the
    specs the store runs: a system run on a broken (mutated) spec must be caught."""

    def __init__(self, store: FaultyStore | Store, coverage: Coverage | None = None) -> None:
        self.store = store
        self.coverage = coverage
        self.previous: Snapshot | None = None
        self.judge = {name: bundled(name) for name in store.specs() if name in BUNDLED}

    def check(self, runs: Mapping[tuple[str, str], int] | None = None) -> list[str]:
        """Every breach, described; ``runs``: (machine, key) -> upstream runs observed."""
        snap = snapshot(self.store, runs)
        breaches = check_invariants(self.judge, snap, self.previous)
        if self.coverage is not None:  # only the events since the previous snapshot
            before = self.previous.entities if self.previous is not None else {}
            for key, entity in snap.entities.items():
                seen = len(before[key].history) if key in before else 0
                for e in entity.history[seen:]:
                    self.coverage.record(e.machine, e.source, e.trigger, e.dest)
        self.previous = snap
        return [b.describe() for b in breaches]
