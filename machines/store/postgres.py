"""A shared store on PostgreSQL (``open_store("postgresql://user@host/db")``), psycopg 3.

Same promises and the same generated plan as the SQLite store (``machines.store.ddl``):
the database refuses illegal state changes and history rewrites itself, in PL/pgSQL.
Each thread has its own connection; a transaction runs at READ COMMITTED.

A move is one statement: the UPDATE fenced by the version it read; the schema's triggers
judge it and write its history event. Of two writers of one row the second waits for the
first's row lock, then matches nothing and gets ``StaleWrite``, without aborting its
transaction. A claim is one ``INSERT ... ON CONFLICT DO NOTHING``. ``Store.insert`` and
``Store.move`` run that one statement outside BEGIN, so it commits by itself in one round
trip. JSON columns are ``json`` (kept as written), so every stored value comes back
exactly. The schema is created under an advisory lock, so many processes may open the
same database at once.

A ``search_path`` in the URL's ``options`` (``?options=-csearch_path%3Dmine``) keeps one
application's (or one test's) tables apart from another's.

Opened with ``read_only=True`` (an audit) the store runs no DDL: the tables of every
machine must exist, and every session's transactions are READ ONLY and REPEATABLE READ
(one consistent snapshot per transaction), so the server itself refuses any write.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from machines.errors import install_command

try:
    import psycopg
    from psycopg.types.json import set_json_loads
except ModuleNotFoundError as missing:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        f"the PostgreSQL store needs psycopg: {install_command('postgres')}"
    ) from missing

from machines.runtime.history import Clock
from machines.spec import MachineSpec
from machines.store.connections import ThreadConnections
from machines.store.ddl import LEGACY_REGISTRY, REGISTRY, REPAIRS
from machines.store.ddl_postgres import postgres_registry, postgres_repairs, postgres_schema
from machines.store.integrity import Difference, repair_lines, tampered
from machines.store.integrity_postgres import (
    guard_differences,
    installer_differences,
    served_versions,
)
from machines.store.records import (
    ClosedOnExit,
    Row,
    StaleWrite,
    StoreError,
    closed_store,
    hide_passwords,
    shown_url,
)
from machines.store.schema_postgres import foreign_code, one_store_on_path, pin_search_path
from machines.store.sql import (
    Dialect,
    SQLTransaction,
    current_versions,
    record_version,
    refused,
)
from machines.store.stored_json import frozen, read_json
from machines.store.versions import legacy, no_registry, no_store, no_tables

SCHEMA_LOCK = 0x6D616368
"""The first key (\"mach\") of the advisory lock held while a store's schema is created,
opened for writing, migrated or repaired, across processes."""
LOCK_SCHEMA = (
    "SELECT pg_catalog.pg_advisory_xact_lock(%s, "
    "pg_catalog.hashtext(coalesce(pg_catalog.current_schema(), '')))"
)
"""Takes that lock for the session's schema alone (its second key is the schema name's
hash): a session that keeps it holds up the stores of that schema, not every store of the
database."""
_IDLE = psycopg.pq.TransactionStatus.IDLE
_LOST = psycopg.pq.TransactionStatus.UNKNOWN  # the connection broke


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


def fingerprint(spec: MachineSpec, version: int) -> str:
    """The digest of the schema generated for ``spec`` as definition version ``version``."""
    return hashlib.sha256(postgres_schema(spec, version).encode()).hexdigest()[:16]


def _has_table(conn: psycopg.Connection[Any], table: str) -> bool:
    """Whether ``table`` is on the session's search path."""
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(found and found[0])


_READ_ONLY = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
"""Every transaction of a read-only store's session, including each single statement."""


LOCK_TIMEOUT = 30
"""Seconds a session waits for a lock before it gives up (``lock_timeout``), as SQLite
waits for a busy file: a session that holds the schema lock or locks a table and keeps it
makes every open, audit and write fail with a message, never hang."""


CONNECT_TIMEOUT = 10
"""Seconds to wait for a server that does not answer, unless the URL says otherwise
(``?connect_timeout=N``): an unreachable host is an error, not a wait for TCP to give up."""


def _connect(
    url: str, read_only: bool = False, schema: str | None = None
) -> psycopg.Connection[Any]:
    """A session on ``url``; with ``schema``, its search path pinned to that schema (and
    ``pg_temp``), so that a store made later in a schema earlier on the path never stands
    in for this one in a session opened after it."""
    try:
        if "connect_timeout" in url:
            conn = psycopg.connect(url, autocommit=True)
        else:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL at {shown_url(url)}: {hide_passwords(str(exc), url)}"
        ) from exc
    set_json_loads(read_json, conn)  # a key given twice is refused, as on SQLite
    pin_session(conn)
    if schema is not None:
        try:
            pin_search_path(conn, schema)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"{shown_url(url)}: cannot pin the search path: {exc}") from exc
    if read_only:
        try:
            conn.execute(_READ_ONLY)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"{shown_url(url)}: cannot make the session read-only: {exc}") from exc
    return conn


def pin_session(conn: psycopg.Connection[Any]) -> None:
    """The settings every statement of the store's session relies on, whatever the URL's
    options, the role's or the database's settings say: ``LOCK_TIMEOUT``; text sent and
    read as UTF-8 (another client encoding cannot hold every key and result); the isolation
    the store's writes are made for (read committed: under serializable, racing callers of
    one key were told StaleWrite instead of its result), writable unless it is an audit's;
    times read
    to their last digit (``extra_float_digits`` below 1 rounds them, so a time would not
    read back as written, and kept heads would name edits nobody made); and a commit that
    is durable when it returns (``synchronous_commit = off`` could lose a claim already
    taken after a crash, and its effect would run again; a stronger setting is kept)."""
    try:
        for setting, value in (
            ("lock_timeout", f"{LOCK_TIMEOUT}s"),
            ("client_encoding", "UTF8"),
            ("extra_float_digits", "3"),
            ("default_transaction_isolation", "read committed"),
            ("default_transaction_read_only", "off"),  # an audit's session sets it again
        ):
            conn.execute("SELECT pg_catalog.set_config(%s, %s, false)", (setting, value))
        conn.execute(
            "SELECT pg_catalog.set_config('synchronous_commit', 'on', false) WHERE "
            "pg_catalog.current_setting('synchronous_commit') = 'off'"
        )
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"cannot set what the store's session relies on: {exc}") from exc


class PostgresStore(ClosedOnExit):
    def __init__(
        self,
        url: str,
        specs: Mapping[str, MachineSpec],
        clock: Clock = time.time,
        *,
        read_only: bool = False,
        create: bool = True,
    ):
        self.url = url
        self.where = shown_url(url)  # the URL as messages show it: no password
        self.read_only = read_only
        self.tampering: tuple[Difference, ...] = ()
        """How the guards differ from the generated ones (read-only stores only: a
        writable one refuses to open instead)."""
        self.repairs: tuple[str, ...] = ()
        """Each recorded ``machines repair`` (read-only stores only, for the audit)."""
        self.forged_repairs: tuple[Difference, ...] = ()
        """The rows of that record no repair wrote (read-only stores only, for the audit)."""
        self._specs = dict(specs)
        self._clock = clock
        self._connections: ThreadConnections[psycopg.Connection[Any]] = ThreadConnections(
            psycopg.Connection.close
        )
        self._schema: str | None = None
        """The schema this store's tables are in, found at open: every later session is
        pinned to it."""
        if read_only:
            self._require_schema()
            return
        with self._errors(), _connect(url) as conn, conn.transaction():
            conn.execute(LOCK_SCHEMA, (SCHEMA_LOCK,))
            self._schema = self._pinned_schema(conn)
            if _has_table(conn, LEGACY_REGISTRY) and not _has_table(conn, REGISTRY):
                raise legacy(self.where)
            current: dict[str, int | None] = dict.fromkeys(self._specs)  # a new registry
            if _has_table(conn, REGISTRY):
                current, differences = self._checked_versions(conn)
                if differences:
                    raise tampered(self.where, differences)
            new_registry = not _has_table(conn, REGISTRY)
            if new_registry and not create:
                raise no_store(self.where)
            if not create and (missing := [m for m, v in current.items() if v is None]):
                raise no_store(self.where, missing)
            if new_registry:
                conn.execute((postgres_registry() + postgres_repairs()).encode())
            for machine, version in current.items():
                if version is None:
                    spec = self._specs[machine]
                    conn.execute(postgres_schema(spec, 1).encode())
                    record_version(conn, "%s", spec, 1, fingerprint(spec, 1), time.time())
            if None in current.values():  # what was just installed is checked as well
                installed = [m for m, v in current.items() if v is None]
                planted = installer_differences(conn, self._specs, installed, new_registry)
                if planted:
                    raise tampered(self.where, planted)
                differences = self._checked_versions(conn)[1] or tuple(foreign_code(conn))
                if differences:
                    raise tampered(self.where, differences)

    def _require_schema(self) -> None:
        """A read-only store runs no DDL: every machine's tables must be there, made for
        the definition given."""
        with self._errors(), _connect(self.url, read_only=True) as conn:
            self._schema = self._pinned_schema(conn)
            if not _has_table(conn, REGISTRY):
                raise (
                    legacy(self.where)
                    if _has_table(conn, LEGACY_REGISTRY)
                    else no_registry(self.where)
                )
            current, self.tampering = self._checked_versions(conn)
            if _has_table(conn, REPAIRS):
                self.repairs, odd = repair_lines(
                    conn.execute(f"SELECT at, person, found FROM {REPAIRS}")
                )
                self.forged_repairs = tuple(odd)
        for machine, version in current.items():
            if version is None:
                raise no_tables(self.where, machine)

    def _pinned_schema(self, conn: psycopg.Connection[Any]) -> str | None:
        """The store's schema (``one_store_on_path``), this session's path pinned to it, and
        no code in it that another role made (``StoreTampered`` otherwise, even for an
        audit: reading on would run that code as the reader)."""
        schema = one_store_on_path(conn, self.where)
        if schema is not None:
            pin_search_path(conn, schema)
            foreign = foreign_code(conn)
            if foreign:
                raise tampered(self.where, foreign)
        return schema

    def _checked_versions(
        self, conn: psycopg.Connection[Any]
    ) -> tuple[dict[str, int | None], tuple[Difference, ...]]:
        """Each machine's version (the one its installed guards serve, which must be the
        definition given) and every way the guards differ from the generated ones."""
        served, wrong = served_versions(conn, self._specs, fingerprint)
        current = current_versions(conn, "%s", self.where, self._specs, fingerprint, served)
        return current, (*wrong, *guard_differences(conn, self._specs, current))

    def _connection(self) -> psycopg.Connection[Any]:
        """This thread's connection (autocommit: a transaction is an explicit BEGIN), with
        no transaction open: transactions do not nest (psycopg would make the inner one a
        savepoint, and a one-write transaction would silently join the outer one)."""
        if self._connections.closed:
            raise closed_store(self.where)
        conn = self._connections.current()
        if conn is None or conn.closed or conn.info.transaction_status == _LOST:
            conn = self._connections.keep(_connect(self.url, self.read_only, self._schema))
        if conn.info.transaction_status != _IDLE:
            raise StoreError(
                f"{self.where}: a transaction is already open in this thread; "
                "transactions do not nest"
            )
        return conn

    def specs(self) -> Mapping[str, MachineSpec]:
        return self._specs

    @contextmanager
    def transaction(self) -> Iterator[_PostgresTransaction]:
        conn = self._connection()
        with self._errors(), conn.transaction():
            tx = _PostgresTransaction(conn, self._specs, self._clock)
            try:
                yield tx
            finally:
                tx.end(self.where)

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        """One ``INSERT ... ON CONFLICT DO NOTHING`` that commits by itself (one round
        trip); on a conflict the row found is read back."""
        with self._errors():
            return self._statements().insert(machine, key, context=context, data=data, scope=scope)

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
        """A move is one statement (``_PostgresTransaction.move``), so it commits alone."""
        with self._errors():
            return self._statements().move(
                row, trigger, actor=actor, context=context, detail=detail, data=data
            )

    def _statements(self) -> _PostgresTransaction:
        """The transaction's statements outside BEGIN: each commits by itself. Only for
        operations that write with one statement."""
        return _PostgresTransaction(self._connection(), self._specs, self._clock)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """psycopg's errors as the store's: a refusal by the schema is refused(), a lost
        serialization is StaleWrite."""
        try:
            yield
        except psycopg.errors.SerializationFailure as exc:
            raise StaleWrite(f"a concurrent transaction won: {exc}") from exc
        except psycopg.errors.LockNotAvailable as exc:
            raise StoreError(
                f"{self.where}: waited {LOCK_TIMEOUT} s for a lock another session holds "
                f"(a migration, a repair, or a session that locked a table or the schema "
                f"lock and keeps it); nothing was written: find it in pg_locks, then try again"
            ) from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            why = (
                "this store was opened read-only (for an audit): it refuses every write"
                if self.read_only
                else f"the server refused the write as read-only ({exc}): a standby, or a "
                "setting of the server's"
            )
            raise StoreError(f"{self.where}: {why}") from exc
        except _DIALECT.refusals as exc:
            raise refused(_DIALECT.reason(exc)) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(f"{self.where}: {exc}; {_grants(self.read_only)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: {exc}") from exc

    def close(self) -> None:
        self._connections.close_all()


def _grants(read_only: bool) -> str:
    """What a role needs on the store's schema, for a refusal of its rights (outsider
    batch 45, c F2: an auditor granted SELECT on the tables alone met "permission denied
    for sequence" and was not told what to grant)."""
    if read_only:
        return (
            "a role that reads a store (an audit) needs USAGE on its schema and SELECT on its "
            "tables and sequences: GRANT SELECT ON ALL TABLES IN SCHEMA s TO role; GRANT "
            "SELECT ON ALL SEQUENCES IN SCHEMA s TO role"
        )
    return (
        "a role that runs a store needs USAGE on its schema, SELECT, INSERT and UPDATE on its "
        "tables, and USAGE and SELECT on its sequences (its owner makes and migrates them)"
    )


class _PostgresDialect(Dialect):
    param = "%s"
    json_param = "%s::json"
    ordinal = "ordinal"
    lock_skipping = "FOR UPDATE SKIP LOCKED"
    reads_before_insert = False  # a claim is one INSERT ... ON CONFLICT DO NOTHING
    refusals = (psycopg.errors.RaiseException, psycopg.errors.IntegrityError)

    def json(self, value: Any) -> Mapping[str, Any]:
        return frozen(value)

    def reason(self, refusal: Exception) -> object:
        if isinstance(refusal, psycopg.Error) and refusal.diag.message_primary:
            return refusal.diag.message_primary
        return refusal

    def number_in_data_below(self) -> str:
        # as jsonb, whose numbers are numeric: the table's check has read every row's data
        # as jsonb, so no row can make the sweep fail (a key given twice, 1e400, \u0000)
        return (
            "(SELECT (v)::numeric FROM (SELECT data::jsonb -> %s AS v) f "
            "WHERE jsonb_typeof(v) = 'number') < %s::numeric"
        )


_DIALECT = _PostgresDialect()


class _PostgresTransaction(SQLTransaction):
    dialect = _DIALECT
