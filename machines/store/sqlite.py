"""The embedded default store: SQLite in WAL mode with durable commits.

One connection per thread; every transaction is ``BEGIN IMMEDIATE`` (the write lock is
taken up front, so two writers never deadlock on an upgrade) and commits with
``synchronous=FULL``. The schema comes from the specs (``machines.store.ddl``), so the
database itself refuses illegal state changes and history rewrites even from raw SQL.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from machines.history import Clock
from machines.spec import MachineSpec
from machines.store.connections import ThreadConnections
from machines.store.ddl import REGISTRY, sqlite_registry, sqlite_schema
from machines.store.records import OneWriteTransactions, StoreError, decode
from machines.store.sql import Dialect, SQLTransaction, needs_tables


def fingerprint(spec: MachineSpec) -> str:
    """The generated schema's digest; a database made for another one is refused."""
    return hashlib.sha256(sqlite_schema(spec).encode()).hexdigest()[:16]


class SQLiteStore(OneWriteTransactions):
    """``open_store("sqlite:///path/to/file.db")``."""

    def __init__(
        self,
        path: str | Path,
        specs: Mapping[str, MachineSpec],
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self._specs = dict(specs)
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._connections: ThreadConnections[sqlite3.Connection] = ThreadConnections(
            sqlite3.Connection.close
        )
        with self._connection() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            self._ensure_schema(conn)

    # -- connections --------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = self._connections.current()
        if conn is None:
            try:
                # check_same_thread=False only so that close() can close every thread's
                # connection; each connection is used by its own thread alone.
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open SQLite database {self.path}: {exc}") from exc
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._connections.keep(conn)
        yield conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(sqlite_registry()):
                conn.execute(statement)
            for name, spec in self._specs.items():
                found = conn.execute(
                    f"SELECT fingerprint FROM {REGISTRY} WHERE machine = ?", (name,)
                ).fetchone()
                expected = fingerprint(spec)
                fresh = needs_tables(self.path, name, found and found[0], expected)
                for statement in _statements(sqlite_schema(spec)):
                    conn.execute(statement)
                if fresh:
                    conn.execute(f"INSERT INTO {REGISTRY} VALUES (?, ?)", (name, expected))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def specs(self) -> Mapping[str, MachineSpec]:
        return self._specs

    @contextmanager
    def transaction(self) -> Iterator[_SQLiteTransaction]:
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot start a transaction: {exc}") from exc
            try:
                yield _SQLiteTransaction(conn, self._specs, self._clock)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise StoreError(f"{self.path}: commit failed: {exc}") from exc

    def close(self) -> None:
        self._connections.close_all()


def _statements(script: str) -> Iterator[str]:
    """Split a generated script on statement ends (triggers end with ``END;``)."""
    buffer: list[str] = []
    for line in script.splitlines():
        if line.startswith("--") or not line.strip():
            continue
        buffer.append(line)
        joined = "\n".join(buffer)
        if sqlite3.complete_statement(joined):
            yield joined
            buffer = []
    if buffer:
        raise StoreError("generated schema has an unterminated statement")


class _SQLiteDialect(Dialect):
    param = "?"
    json_param = "?"
    ordinal = "rowid"
    lock_skipping = ""  # BEGIN IMMEDIATE already holds the whole database
    reads_before_insert = True  # under BEGIN IMMEDIATE nobody inserts between read and write
    refusals = (sqlite3.IntegrityError,)  # a trigger's RAISE(ABORT) arrives as one too

    def json(self, value: Any) -> Mapping[str, Any]:
        return decode(value)

    def number_in_data(self) -> str:
        return "(SELECT value FROM json_each(data) WHERE key = ? AND type IN ('integer', 'real'))"


class _SQLiteTransaction(SQLTransaction):
    dialect = _SQLiteDialect()
