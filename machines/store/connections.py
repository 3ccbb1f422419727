"""One database connection per thread, closed when its thread ends.

A store gives each thread its own connection. A service whose server starts a thread per
request would otherwise leave one open connection behind per finished thread, until a
PostgreSQL server refuses new ones. So each connection is closed when the thread that
opened it is gone (its thread-local slot is freed), or when the store closes; a closed
store opens none again (its next use is refused, not quietly reconnected).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")


class _Slot(Generic[C]):
    """What a thread holds; when the thread's locals are freed, so is this."""

    def __init__(self, conn: C) -> None:
        self.conn = conn


class ThreadConnections(Generic[C]):
    def __init__(self, close: Callable[[C], None]) -> None:
        self._close = close
        self._local = threading.local()
        self._lock = threading.Lock()
        self._finalizers: list[weakref.finalize[[C], _Slot[C]]] = []
        self.closed = False
        """Whether ``close_all`` ran: the store is closed, and opens no connection again."""

    def current(self) -> C | None:
        """This thread's connection, if it has one."""
        slot: _Slot[C] | None = getattr(self._local, "slot", None)
        return None if slot is None else slot.conn

    def keep(self, conn: C) -> C:
        """Make ``conn`` this thread's connection (replacing, and closing, any other)."""
        old: _Slot[C] | None = getattr(self._local, "slot", None)
        slot = _Slot(conn)
        with self._lock:
            self._finalizers = [f for f in self._finalizers if f.alive]
            self._finalizers.append(weakref.finalize(slot, self._close, conn))
        self._local.slot = slot
        del old  # its finalizer closes the connection it held
        return conn

    def discard(self) -> None:
        """Close and forget this thread's connection (after a fault left it in a state
        nobody can vouch for): the thread's next use opens a fresh one."""
        old: _Slot[C] | None = getattr(self._local, "slot", None)
        self._local.slot = None
        del old  # its finalizer closes the connection it held

    def open_count(self) -> int:
        """How many connections are open (threads alive that opened one)."""
        with self._lock:
            return sum(f.alive for f in self._finalizers)

    def close_all(self) -> None:
        self.closed = True
        with self._lock:
            finalizers, self._finalizers = self._finalizers, []
        for finalize in finalizers:
            finalize()
        self._local = threading.local()
