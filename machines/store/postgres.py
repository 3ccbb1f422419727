"""A shared store on PostgreSQL (``open_store("postgresql://user@host/db")``), psycopg 3.

Same promises and the same generated plan as the SQLite store (``machines.store.ddl``):
the database refuses illegal state changes and history rewrites itself, in PL/pgSQL.
Each thread has its own connection; a transaction runs at READ COMMITTED. A move locks
its row (``SELECT ... FOR UPDATE``) and compares the version it read, so of two writers
of one row exactly one moves it and the other gets ``StaleWrite``; the history's primary
key and ``UPDATE ... WHERE version = ...`` fence it a second time. Claims use
``INSERT ... ON CONFLICT DO NOTHING``. The schema is created
under an advisory lock, so many processes may open the same database at once.

A ``search_path`` in the URL's ``options`` (``?options=-csearch_path%3Dmine``) keeps one
application's (or one test's) tables apart from another's.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:
    import psycopg
except ModuleNotFoundError as missing:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        "the PostgreSQL store needs psycopg: pip install 'machines[postgres]'"
    ) from missing

from machines.history import Clock, TransitionEvent
from machines.spec import MachineSpec
from machines.store.ddl import postgres_schema
from machines.store.records import (
    RecordExists,
    Row,
    StaleWrite,
    StoreError,
    decide_move,
    encode,
    frozen,
    spec_for,
)

_COLUMNS = "key, state, context, data, scope, ordinal, moves, version, created_at, updated_at"
_SCHEMA_LOCK = 0x6D616368  # "mach": serialises schema creation across processes


def fingerprint(spec: MachineSpec) -> str:
    return hashlib.sha256(postgres_schema(spec).encode()).hexdigest()[:16]


class PostgresStore:
    def __init__(self, url: str, specs: Mapping[str, MachineSpec], clock: Clock = time.time):
        self.url = url
        self._specs = dict(specs)
        self._clock = clock
        self._local = threading.local()
        self._connections: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS machines_schema "
                "(machine TEXT PRIMARY KEY, fingerprint TEXT NOT NULL)"
            )
            for name, spec in self._specs.items():
                found = conn.execute(
                    "SELECT fingerprint FROM machines_schema WHERE machine = %s", (name,)
                ).fetchone()
                expected = fingerprint(spec)
                if found is not None and found[0] != expected:
                    raise StoreError(
                        f"{url}: the tables of machine '{name}' were made for another version "
                        "of its spec; migrate the database or use a new one"
                    )
                if found is None:
                    conn.execute(postgres_schema(spec).encode())
                    conn.execute("INSERT INTO machines_schema VALUES (%s, %s)", (name, expected))

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            try:
                conn = psycopg.connect(self.url, autocommit=True)
            except psycopg.Error as exc:
                raise StoreError(f"cannot connect to PostgreSQL at {self.url}: {exc}") from exc
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        yield conn

    def specs(self) -> Mapping[str, MachineSpec]:
        return self._specs

    @contextmanager
    def transaction(self) -> Iterator[_PostgresTransaction]:
        with self._connection() as conn:
            try:
                with conn.transaction():
                    yield _PostgresTransaction(conn, self._specs, self._clock)
            except psycopg.errors.SerializationFailure as exc:
                raise StaleWrite(f"a concurrent transaction won: {exc}") from exc
            except psycopg.OperationalError as exc:
                raise StoreError(f"{self.url}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()


class _PostgresTransaction:
    def __init__(
        self, conn: psycopg.Connection[Any], specs: Mapping[str, MachineSpec], clock: Clock
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
            frozen(context),
            frozen(data),
            scope,
            ordinal,
            moves,
            version,
            created,
            updated,
        )

    def _write(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """One write; a refusal by the schema is a ``StoreError`` (the transaction is then
        aborted, and the caller's with-block rolls it back)."""
        try:
            cursor = self._conn.execute(sql, params)
        except psycopg.errors.RaiseException as exc:
            raise StoreError(f"the database refused the write: {exc.diag.message_primary}") from exc
        except psycopg.errors.IntegrityError as exc:
            raise StoreError(f"the database refused the write: {exc}") from exc
        return cursor.fetchone() if cursor.description else None

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
        created = self._write(
            f"INSERT INTO {machine}_entities (key, state, context, data, scope, moves, version, "
            f"created_at, updated_at) VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, 0, 1, %s, %s) "
            f"ON CONFLICT (key) DO NOTHING RETURNING {_COLUMNS}",
            (
                key,
                spec.initial,
                encode(context),
                encode(data),
                scope,
                now,
                now,
            ),
        )
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
            f"SELECT {_COLUMNS} FROM {machine}_entities WHERE key = %s", (key,)
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
        # Lock the row and compare versions first: a writer that lost the race learns it
        # here (StaleWrite) instead of by an error that would abort the transaction.
        current = self._conn.execute(
            f"SELECT version FROM {m}_entities WHERE key = %s FOR UPDATE", (row.key,)
        ).fetchone()
        if current is None or current[0] != row.version:
            raise StaleWrite(f"{m} '{row.key}' changed since it was read")
        self._write(
            f"INSERT INTO {m}_history (entity, seq, source, dest, trigger, actor, detail, "
            f"context, at) VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s)",
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
        updated = self._write(
            f"UPDATE {m}_entities SET state = %s, moves = moves + 1, version = version + 1, "
            f"data = %s::jsonb, updated_at = %s WHERE key = %s AND version = %s "
            f"RETURNING {_COLUMNS}",
            (dest, encode(row.data if data is None else data), now, row.key, row.version),
        )
        if updated is None:  # the caller's with-block rolls the history event back
            raise StaleWrite(f"{m} '{row.key}' changed since it was read")
        return self._row(m, updated)

    def update(self, row: Row, data: Mapping[str, Any]) -> Row:
        m = row.machine
        spec_for(self._specs, m)
        updated = self._write(
            f"UPDATE {m}_entities SET data = %s::jsonb, version = version + 1, updated_at = %s "
            f"WHERE key = %s AND version = %s RETURNING {_COLUMNS}",
            (encode(data), self._clock(), row.key, row.version),
        )
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
                None if detail is None else frozen(detail),
                frozen(context),
                at,
            )
            for seq, source, dest, trigger, actor, detail, context, at in self._conn.execute(
                f"SELECT seq, source, dest, trigger, actor, detail, context, at "
                f"FROM {machine}_history WHERE entity = %s ORDER BY seq",
                (key,),
            )
        ]

    def scope(self, machine: str, scope: str) -> list[Row]:
        return self._select(machine, "WHERE scope = %s", (scope,))

    def rows(self, machine: str) -> list[Row]:
        return self._select(machine, "", ())

    def _select(self, machine: str, where: str, params: tuple[Any, ...]) -> list[Row]:
        spec_for(self._specs, machine)
        return [
            self._row(machine, values)
            for values in self._conn.execute(
                f"SELECT {_COLUMNS} FROM {machine}_entities {where} ORDER BY ordinal", params
            )
        ]
