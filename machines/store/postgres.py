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
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:
    import psycopg
except ModuleNotFoundError as missing:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        "the PostgreSQL store needs psycopg: pip install 'machines[postgres]'"
    ) from missing

from machines.history import Clock
from machines.spec import MachineSpec
from machines.store.ddl import postgres_schema
from machines.store.records import Row, StaleWrite, StoreError, decide_move, frozen
from machines.store.sql import SCHEMA_TABLE, Dialect, SQLTransaction, needs_tables, refused

_SCHEMA_LOCK = 0x6D616368  # "mach": serialises schema creation across processes


@contextmanager
def temporary_schema(server: str, prefix: str = "t") -> Iterator[str]:
    """A fresh schema on ``server``, dropped afterwards; yields a URL that selects it
    (for tests and benchmarks: each gets tables of its own on one server)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
    try:
        sep = "&" if "?" in server else "?"
        yield f"{server}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


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
            conn.execute(SCHEMA_TABLE)
            for name, spec in self._specs.items():
                found = conn.execute(
                    "SELECT fingerprint FROM machines_schema WHERE machine = %s", (name,)
                ).fetchone()
                expected = fingerprint(spec)
                if needs_tables(url, name, found and found[0], expected):
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


class _PostgresDialect(Dialect):
    param = "%s"
    json_param = "%s::jsonb"
    ordinal = "ordinal"

    def json(self, value: Any) -> Mapping[str, Any]:
        return frozen(value)


class _PostgresTransaction(SQLTransaction):
    dialect = _PostgresDialect()

    def __init__(
        self, conn: psycopg.Connection[Any], specs: Mapping[str, MachineSpec], clock: Clock
    ) -> None:
        super().__init__(specs, clock)
        self._conn = conn

    def _fetchone(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        found: tuple[Any, ...] | None = self._conn.execute(sql, params).fetchone()
        return found

    def _fetchall(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def _write(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """One write; a refusal by the schema is a ``StoreError`` (the transaction is then
        aborted, and the caller's with-block rolls it back)."""
        try:
            cursor = self._conn.execute(sql, params)
        except psycopg.errors.RaiseException as exc:
            raise refused(exc.diag.message_primary) from exc
        except psycopg.errors.IntegrityError as exc:
            raise refused(exc) from exc
        found: tuple[Any, ...] | None = cursor.fetchone() if cursor.description else None
        return found

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
        # Lock the row and compare versions first: a writer that lost the race learns it
        # here (StaleWrite) instead of by an error that would abort the transaction.
        current = self._fetchone(
            f"SELECT version FROM {row.machine}_entities WHERE key = %s FOR UPDATE", (row.key,)
        )
        if current is None or current[0] != row.version:
            raise StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        now = self._clock()
        self._append_event(row, dest, trigger, actor, full, detail, now)
        return self._set_state(row, dest, data, now)
