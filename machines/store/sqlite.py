"""The embedded default store: SQLite in WAL mode with durable commits.

One connection per thread; every transaction is ``BEGIN IMMEDIATE`` (the write lock is
taken up front, so two writers never deadlock on an upgrade) and commits with
``synchronous=FULL``. The schema comes from the specs (``machines.store.ddl``), so the
database itself refuses illegal state changes and history rewrites even from raw SQL.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from machines.history import Clock, TransitionEvent
from machines.spec import MachineSpec
from machines.store.ddl import sqlite_schema
from machines.store.records import (
    RecordExists,
    Row,
    StaleWrite,
    StoreError,
    decide_move,
    decode,
    encode,
    spec_for,
)

_COLUMNS = "key, state, context, data, scope, rowid, moves, version, created_at, updated_at"
_INSERTED = "key, state, context, data, scope, moves, version, created_at, updated_at"


def fingerprint(spec: MachineSpec) -> str:
    """The generated schema's digest; a database made for another one is refused."""
    return hashlib.sha256(sqlite_schema(spec).encode()).hexdigest()[:16]


class SQLiteStore:
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
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        with self._connection() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            self._ensure_schema(conn)

    # -- connections --------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
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
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        yield conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS machines_schema "
                "(machine TEXT PRIMARY KEY, fingerprint TEXT NOT NULL)"
            )
            for name, spec in self._specs.items():
                found = conn.execute(
                    "SELECT fingerprint FROM machines_schema WHERE machine = ?", (name,)
                ).fetchone()
                expected = fingerprint(spec)
                if found is not None and found[0] != expected:
                    raise StoreError(
                        f"{self.path}: the tables of machine '{name}' were made for another "
                        "version of its spec; migrate the database or use a new one"
                    )
                for statement in _statements(sqlite_schema(spec)):
                    conn.execute(statement)
                if found is None:
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
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()


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


class _SQLiteTransaction:
    def __init__(
        self, conn: sqlite3.Connection, specs: Mapping[str, MachineSpec], clock: Clock
    ) -> None:
        self._conn = conn
        self._specs = specs
        self._clock = clock

    def _row(self, machine: str, values: tuple[Any, ...]) -> Row:
        key, state, context, data, scope, ordinal, moves, version, created, updated = values
        return Row(
            machine,
            key,
            state,
            decode(context),
            decode(data),
            scope,
            ordinal,
            moves,
            version,
            created,
            updated,
        )

    def _execute(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"the database refused the write: {exc}") from exc

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        spec = spec_for(self._specs, machine)
        spec.stepper(**(context or {}))  # validates the context (ContextError)
        now = self._clock()
        created = self._execute(
            f"INSERT INTO {machine}_entities ({_INSERTED}) VALUES (?, ?, ?, ?, ?, 0, 1, ?, ?) "
            f"ON CONFLICT (key) DO NOTHING RETURNING {_COLUMNS}",
            (key, spec.initial, encode(context), encode(data), scope, now, now),
        ).fetchone()
        if created is not None:
            return self._row(machine, created), True
        row = self.get(machine, key)
        assert row is not None, "a conflicting key must exist"
        if row.scope != scope or dict(row.context) != dict(context or {}):
            raise RecordExists(
                f"{machine} '{key}' exists with scope {row.scope!r} and context "
                f"{dict(row.context)}; it was asked for with scope {scope!r} and context "
                f"{dict(context or {})}"
            )
        return row, False

    def get(self, machine: str, key: str) -> Row | None:
        spec_for(self._specs, machine)
        found = self._conn.execute(
            f"SELECT {_COLUMNS} FROM {machine}_entities WHERE key = ?", (key,)
        ).fetchone()
        return None if found is None else self._row(machine, found)

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
        dest, full = decide_move(self._specs, row, trigger, actor, context)
        m, now = row.machine, self._clock()
        try:
            # The history trigger refuses an event that does not continue the row as stored,
            # so a row moved since it was read fails here; the UPDATE fences the version.
            self._conn.execute(
                f"INSERT INTO {m}_history (entity, seq, source, dest, trigger, actor, detail, "
                f"context, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.key,
                    row.moves + 1,
                    row.state,
                    dest,
                    trigger,
                    actor,
                    None if detail is None else encode(detail),
                    encode(full),
                    now,
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise self._stale_or_refused(row, exc) from exc
        updated = self._execute(
            f"UPDATE {m}_entities SET state = ?, moves = moves + 1, version = version + 1, "
            f"data = ?, updated_at = ? WHERE key = ? AND version = ? RETURNING {_COLUMNS}",
            (dest, encode(row.data if data is None else data), now, row.key, row.version),
        ).fetchone()
        if updated is None:  # the caller's with-block rolls the history event back
            raise StaleWrite(f"{m} '{row.key}' changed since it was read")
        return self._row(m, updated)

    def _stale_or_refused(self, row: Row, error: sqlite3.IntegrityError) -> StoreError:
        current = self.get(row.machine, row.key)
        if current is None or current.version != row.version:
            return StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        return StoreError(f"the database refused the write: {error}")

    def update(self, row: Row, data: Mapping[str, Any]) -> Row:
        m = row.machine
        spec_for(self._specs, m)
        updated = self._execute(
            f"UPDATE {m}_entities SET data = ?, version = version + 1, updated_at = ? "
            f"WHERE key = ? AND version = ? RETURNING {_COLUMNS}",
            (encode(data), self._clock(), row.key, row.version),
        ).fetchone()
        if updated is None:
            raise StaleWrite(f"{m} '{row.key}' changed since it was read")
        return self._row(m, updated)

    def history(self, machine: str, key: str) -> list[TransitionEvent]:
        spec_for(self._specs, machine)
        return [
            TransitionEvent(
                machine,
                key,
                seq,
                source,
                dest,
                trigger,
                actor,
                None if detail is None else decode(detail),
                decode(context),
                at,
            )
            for seq, source, dest, trigger, actor, detail, context, at in self._conn.execute(
                f"SELECT seq, source, dest, trigger, actor, detail, context, at "
                f"FROM {machine}_history WHERE entity = ? ORDER BY seq",
                (key,),
            )
        ]

    def scope(self, machine: str, scope: str) -> list[Row]:
        return self._select(machine, "WHERE scope = ?", (scope,))

    def rows(self, machine: str) -> list[Row]:
        return self._select(machine, "", ())

    def _select(self, machine: str, where: str, params: tuple[Any, ...]) -> list[Row]:
        spec_for(self._specs, machine)
        return [
            self._row(machine, values)
            for values in self._conn.execute(
                f"SELECT {_COLUMNS} FROM {machine}_entities {where} ORDER BY rowid", params
            )
        ]
