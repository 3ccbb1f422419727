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
from machines.store.ddl import sqlite_schema
from machines.store.records import (
    OneWriteTransactions,
    Row,
    StaleWrite,
    StoreError,
    as_read,
    check_move,
    decide_move,
    decode,
    encode,
)
from machines.store.sql import (
    SCHEMA_TABLE,
    Dialect,
    SQLTransaction,
    moved,
    needs_tables,
)


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
            conn.execute(SCHEMA_TABLE)
            for name, spec in self._specs.items():
                found = conn.execute(
                    "SELECT fingerprint FROM machines_schema WHERE machine = ?", (name,)
                ).fetchone()
                expected = fingerprint(spec)
                fresh = needs_tables(self.path, name, found and found[0], expected)
                for statement in _statements(sqlite_schema(spec)):
                    conn.execute(statement)
                if fresh:
                    conn.execute("INSERT INTO machines_schema VALUES (?, ?)", (name, expected))
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
    refusals = (sqlite3.IntegrityError,)  # a trigger's RAISE(ABORT) arrives as one too

    def json(self, value: Any) -> Mapping[str, Any]:
        return decode(value)

    def number_in_data(self) -> str:
        return "(SELECT value FROM json_each(data) WHERE key = ? AND type IN ('integer', 'real'))"


class _SQLiteTransaction(SQLTransaction):
    dialect = _SQLiteDialect()

    def move(
        self,
        row: Row,
        trigger: str,
        *,
        actor: str,
        context: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Row:
        trigger, actor, context = check_move(
            self._specs, row, trigger, actor, context, detail, data
        )
        dest, full = decide_move(self._specs, row, trigger, actor, context)
        m, now = row.machine, self._clock()
        data_json = encode(row.data if data is None else data, m, row.key, "data")
        try:
            # The history trigger refuses an event that does not continue the row as
            # stored, so a row moved since it was read fails here.
            self._write(
                f"INSERT INTO {m}_history (entity, seq, source, dest, trigger, actor, detail, "
                "context, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.key,
                    row.moves + 1,
                    row.state,
                    dest,
                    trigger,
                    actor,
                    None if detail is None else encode(detail, m, row.key, "detail"),
                    encode(full, m, row.key, "context"),
                    now,
                ),
            )
        except StoreError as refusal:
            current = self.get(m, row.key)
            if not as_read(current, row):
                raise StaleWrite(f"{m} '{row.key}' changed since it was read") from refusal
            raise
        updated = self._write(
            f"UPDATE {m}_entities SET state = ?, moves = moves + 1, version = version + 1, "
            "data = ?, updated_at = ? WHERE key = ? AND version = ? RETURNING version",
            (dest, data_json, now, row.key, row.version),
        )
        if updated is None:  # the caller's with-block rolls the history event back
            raise StaleWrite(f"{m} '{row.key}' changed since it was read")
        return moved(row, dest, data_json, now)
