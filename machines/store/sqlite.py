"""The embedded default store: SQLite in WAL mode with durable commits.

One connection per thread; every transaction is ``BEGIN IMMEDIATE`` (the write lock is
taken up front, so two writers never deadlock on an upgrade) and commits with
``synchronous=FULL``. The schema comes from the specs (``machines.store.ddl``), so the
database itself refuses illegal state changes and history rewrites even from raw SQL.

Faults of the file (full disk, I/O error, read-only file, a damaged or foreign file, a
path that cannot be opened) are ``StoreError``s naming the file and what to do, whatever
the call; the transaction is rolled back if SQLite has not already done so, and the
connection is replaced, so the store works again once the fault is gone. Opened with
``read_only=True`` (an audit) the file is opened ``mode=ro``: it is never created, its
tables must exist, and every write is refused.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from machines.runtime.history import Clock
from machines.spec import MachineSpec
from machines.store.connections import ThreadConnections
from machines.store.ddl import (
    LEGACY_REGISTRY,
    REGISTRY,
    REPAIRS,
    sqlite_registry,
    sqlite_repairs,
    sqlite_schema,
    statements,
)
from machines.store.integrity import Difference, repair_lines, tampered
from machines.store.integrity_sqlite import guard_differences, served_versions
from machines.store.records import ClosedOnExit, OneWriteTransactions, StoreError, closed_store
from machines.store.sql import Dialect, SQLTransaction, current_versions, record_version
from machines.store.sqlite_files import (
    foreign_logs,
    identity,
    is_directory,
    require_file_or_nothing,
    require_owner_or_logs,
    second_name,
    shown_path,
    unwritable_folder,
)
from machines.store.stored_json import decode
from machines.store.versions import legacy, no_registry, no_store, no_tables


def fingerprint(spec: MachineSpec, version: int) -> str:
    """The digest of the schema generated for ``spec`` as definition version ``version``."""
    return hashlib.sha256(sqlite_schema(spec, version).encode()).hexdigest()[:16]


class SQLiteStore(OneWriteTransactions, ClosedOnExit):
    """``open_store("sqlite:///path/to/file.db")``."""

    def __init__(
        self,
        path: str | Path,
        specs: Mapping[str, MachineSpec],
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
        *,
        read_only: bool = False,
        create: bool = True,
    ) -> None:
        self.path = os.path.abspath(str(path))  # every thread's connection: this one file
        self.url = f"sqlite:///{self.path}"
        self._file: tuple[int, int] | None = None  # the file's (device, inode) once opened
        self._opened: tuple[int, int] | None = None  # the first connection's, while it checks
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
        self._busy_timeout = busy_timeout
        self._connections: ThreadConnections[sqlite3.Connection] = ThreadConnections(
            sqlite3.Connection.close
        )
        if not (create or read_only or os.path.isfile(self.path)):
            raise no_store(self.url)
        try:
            with self._connection() as conn:
                if read_only:
                    self._require_schema(conn)
                else:
                    if not create and not _has_table(conn, REGISTRY):
                        raise no_store(self.url)  # before anything is written to the file
                    conn.execute("PRAGMA journal_mode=WAL")
                    self._ensure_schema(conn, create)
            if self._opened is None or identity(self.path) != self._opened:
                raise StoreError(
                    f"SQLite database {shown_path(self.path)}: the file at this path was replaced "
                    "while the store opened it (its guards were checked on the one it opened "
                    "first); nothing was written. Open the store again"
                )
            self._file = self._opened
        except sqlite3.Error as exc:
            self.close()
            raise self._fault("open it", exc) from exc
        except BaseException:
            self.close()
            raise

    # -- connections --------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        if self._connections.closed:
            raise closed_store(self.url)
        conn = self._connections.current()
        if conn is None:
            conn = self._connections.keep(self._open())
        yield conn

    def _require_same_file(self) -> None:
        """``StoreError`` when the file at the store's path is no longer the one its first
        connection opened and checked (replaced, moved or removed since): a thread's new
        connection would otherwise write a file whose guards nobody checked, or an empty
        one SQLite makes (outsider batch 38, a A6, A7). Every transaction asks it again
        once it holds the lock: a connection still open on a file renamed since logs
        beside the old name, while a process that opens the new one logs beside that, and
        neither sees the other's claims (batch 42, a 2: an effect ran twice). Opening the
        store again checks it. A file with a second name is refused too
        (``second_name``); one ``stat`` answers both."""
        try:
            found: os.stat_result | None = os.stat(self.path)
        except (OSError, ValueError):
            found = None  # nothing there yet: SQLite makes it, with one name
        this_file = None if found is None else (found.st_dev, found.st_ino)
        if self._file is not None and this_file != self._file:
            raise StoreError(
                f"SQLite database {shown_path(self.path)}: the file at this path is not the one "
                "this store opened and checked (it was replaced, moved or removed since); "
                "nothing was written. Open the store again, which checks its guards"
            )
        if found is not None and stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
            raise second_name(self.path, found.st_nlink)

    def _open(self) -> sqlite3.Connection:
        """A new connection, set up; read-only stores open the file ``mode=ro`` (never
        created, never written). Something at the path that is no file or folder (a FIFO,
        a device, a socket) is refused before SQLite opens it: opening a FIFO waits for a
        writer for ever."""
        require_file_or_nothing(self.path)
        self._require_same_file()
        if self.read_only:
            require_owner_or_logs(self.path)
        try:
            # check_same_thread=False only so that close() can close every thread's
            # connection; each connection is used by its own thread alone.
            conn = sqlite3.connect(
                f"{Path(self.path).absolute().as_uri()}?mode=ro" if self.read_only else self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=self.read_only,
            )
        except sqlite3.Error as exc:
            raise self._fault("open it", exc) from exc
        except ValueError as exc:  # a NUL or a lone surrogate in the path
            raise StoreError(f"{shown_path(self.path)!r} cannot be a file name: {exc}") from exc
        try:
            self._require_same_file()
        except StoreError:
            conn.close()
            raise
        if self._file is None and self._opened is None:
            self._opened = identity(self.path)  # the file the first connection opened
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            if self.read_only:
                conn.execute("PRAGMA query_only=ON")
        except sqlite3.Error as exc:
            conn.close()
            raise self._fault("open it", exc) from exc
        return conn

    def _require_schema(self, conn: sqlite3.Connection) -> None:
        """A read-only store creates nothing: every machine's tables must be there, made
        for the definition given. What differs from the guards it should have is kept in
        ``tampering`` (an audit reports it), not raised."""
        if not _has_table(conn, REGISTRY):
            raise legacy(self.url) if _has_table(conn, LEGACY_REGISTRY) else no_registry(self.url)
        current, self.tampering = self._checked_versions(conn)
        if _has_table(conn, REPAIRS):
            self.repairs, odd = repair_lines(
                conn.execute(f"SELECT at, person, found FROM {REPAIRS}")
            )
            self.forged_repairs = tuple(odd)
        for machine, version in current.items():
            if version is None:
                raise no_tables(self.url, machine)

    def _checked_versions(
        self, conn: sqlite3.Connection
    ) -> tuple[dict[str, int | None], tuple[Difference, ...]]:
        """Each machine's version (the one its installed guards serve, which must be the
        definition given) and every way the guards differ from the generated ones."""
        served, wrong = served_versions(conn, self._specs, fingerprint)
        current = current_versions(conn, "?", self.url, self._specs, fingerprint, served)
        return current, (*wrong, *guard_differences(conn, self._specs, current))

    def _rollback(self, conn: sqlite3.Connection) -> None:
        """Roll back what SQLite has not rolled back already (it does so itself on some
        faults, and then a ROLLBACK would fail); a connection that cannot even roll back
        is replaced."""
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._connections.discard()

    def _fault(self, doing: str, exc: sqlite3.Error) -> StoreError:
        """``exc`` as the store's error: the file, what failed, and what to do. The
        thread's connection is replaced: after a fault nobody can vouch for its state."""
        self._connections.discard()
        code = getattr(exc, "sqlite_errorcode", None)
        name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
        primary = code & 0xFF if isinstance(code, int) else None
        wal_blocked = self.read_only and unwritable_folder(self.path)
        theirs = foreign_logs(self.path)
        if is_directory(self.path):
            advice = "that path is a directory, not a database file: name the store's file"
        elif wal_blocked and primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
            advice = (  # outsider batch 45 (c F1): blamed on a write, or a missing file
                "the file is there, but its folder is not writable by this user, and SQLite "
                "must make the store's -shm file beside it even to read a store in WAL mode: "
                "read it as the file's owner, or audit a copy of the file with its -wal and "
                "-shm files in a folder of this user's"
            )
        elif theirs and primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
            advice = (  # outsider batch 46 (b 43): "the file cannot be written", which could
                f"the store's {theirs} cannot be written by this user (another user's read "
                "of the store made it): remove it while nothing has the store open, or give "
                "it to the store's owner"
            )
        elif primary == sqlite3.SQLITE_READONLY and self.read_only:
            advice = "this store was opened read-only (for an audit): it refuses every write"
        elif primary == sqlite3.SQLITE_CANTOPEN and self.read_only:
            advice = "no database file is there (a store opened read-only creates none)"
        else:
            advice = _ADVICE.get(primary, "check the file and the disk it is on")
        return StoreError(
            f"SQLite database {shown_path(self.path)}: cannot {doing}: {exc} ({name}); {advice}"
        )

    def _ensure_schema(self, conn: sqlite3.Connection, create: bool = True) -> None:
        """The registry, and the tables of every machine the database does not have yet
        (as version 1 of its definition); the others must be made for the definition given
        (``machines.store.versions``), with their guards as generated
        (``machines.store.integrity``: ``StoreTampered`` otherwise). What it installs is
        checked the same way before it commits: an object planted in the file beforehand
        under a guard's name survives ``IF NOT EXISTS``, and must not serve a first session."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _has_table(conn, LEGACY_REGISTRY) and not _has_table(conn, REGISTRY):
                raise legacy(self.url)
            current: dict[str, int | None] = dict.fromkeys(self._specs)  # a new registry
            if _has_table(conn, REGISTRY):
                current, differences = self._checked_versions(conn)
                if differences:
                    raise tampered(self.url, differences)
            if not create and (missing := [m for m, v in current.items() if v is None]):
                raise no_store(self.url, missing)
            # IF NOT EXISTS throughout: a new database gets the registry
            for statement in statements(sqlite_registry() + sqlite_repairs()):
                conn.execute(statement)
            # a write that changes nothing: a file that cannot be written fails here
            conn.execute(f"DELETE FROM {REGISTRY} WHERE 0")
            for machine, version in current.items():
                if version is None:
                    spec = self._specs[machine]
                    for statement in statements(sqlite_schema(spec, 1)):
                        conn.execute(statement)
                    record_version(conn, "?", spec, 1, fingerprint(spec, 1), time.time())
            if None in current.values():  # what was just installed is checked as well
                differences = self._checked_versions(conn)[1]
                if differences:
                    raise tampered(self.url, differences)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise

    def specs(self) -> Mapping[str, MachineSpec]:
        return self._specs

    @contextmanager
    def transaction(self) -> Iterator[_SQLiteTransaction]:
        """A read-only store's transaction is a deferred BEGIN: a consistent snapshot of
        the file (WAL), without taking the write lock."""
        with self._connection() as conn:
            if conn.in_transaction:  # a misuse, not a fault: the outer one stays intact
                raise StoreError(
                    f"SQLite database {shown_path(self.path)}: a transaction is already open in "
                    "this thread; transactions do not nest"
                )
            self._execute(conn, "BEGIN" if self.read_only else "BEGIN IMMEDIATE", "begin")
            try:  # renamed or linked since this connection opened it: its log is elsewhere
                self._require_same_file()
            except StoreError:
                self._rollback(conn)
                raise
            tx = _SQLiteTransaction(conn, self._specs, self._clock)
            try:
                yield tx
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise self._fault("read or write", exc) from exc
            except BaseException:
                self._rollback(conn)
                raise
            finally:
                tx.end(f"SQLite database {shown_path(self.path)}")
            self._execute(conn, "COMMIT", "commit")

    def _execute(self, conn: sqlite3.Connection, statement: str, doing: str) -> None:
        try:
            conn.execute(statement)
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise self._fault(doing, exc) from exc

    def close(self) -> None:
        self._connections.close_all()


_ADVICE: Mapping[int | None, str] = {
    sqlite3.SQLITE_FULL: "the disk (or the database's size limit) is full: free space, and "
    "the store works again",
    sqlite3.SQLITE_IOERR: "a read or write of the file failed (a failing or full disk, or "
    "the file cut short or changed under the store): fix it, and the store works again "
    "(open it again if the file changed, which checks it)",
    sqlite3.SQLITE_READONLY: "the file or its directory cannot be written: make them "
    "writable, or open the store read-only to read it",
    sqlite3.SQLITE_CORRUPT: "the file is damaged: restore it from a backup",
    sqlite3.SQLITE_NOTADB: "the file is not a SQLite database: point the URL at the store",
    sqlite3.SQLITE_CANTOPEN: "check that the path names a file (not a directory) in a "
    "directory that exists and can be written",
    sqlite3.SQLITE_BUSY: "another connection holds the database: retry later",
    sqlite3.SQLITE_LOCKED: "another connection holds the database: retry later",
    sqlite3.SQLITE_PERM: "the operating system denied access to the file",
}
"""What to do about each kind of fault, by SQLite's primary result code."""


def _has_table(conn: sqlite3.Connection, table: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return found is not None


class _SQLiteDialect(Dialect):
    param = "?"
    json_param = "?"
    ordinal = "rowid"
    lock_skipping = ""  # BEGIN IMMEDIATE already holds the whole database
    reads_before_insert = True  # under BEGIN IMMEDIATE nobody inserts between read and write
    refusals = (sqlite3.IntegrityError,)  # a trigger's RAISE(ABORT) arrives as one too

    def json(self, value: Any) -> Mapping[str, Any]:
        return decode(value)

    def number_in_data_below(self) -> str:
        return (
            "(SELECT value FROM json_each(data) WHERE key = ? AND type IN ('integer', 'real')) < ?"
        )


Read = TypeVar("Read")


class _SQLiteTransaction(SQLTransaction):
    dialect = _SQLiteDialect()

    def _fetchone(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._decoded(lambda: super(_SQLiteTransaction, self)._fetchone(sql, params))

    def _fetchall(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._decoded(lambda: super(_SQLiteTransaction, self)._fetchall(sql, params))

    def _decoded(self, read: Callable[[], Read]) -> Read:
        """``read()``, and again with texts read leniently when one is not UTF-8."""
        try:
            return read()
        except sqlite3.OperationalError as exc:
            if not _undecodable(exc):
                raise
            with _lenient_text(self._conn):
                return read()


def _undecodable(error: sqlite3.OperationalError) -> bool:
    """A text column whose bytes are not UTF-8 (SQLite takes any bytes as text, and its
    ``CHECK (typeof(key) = 'text')`` cannot tell): one such row made every read of the
    table fail, and the audit with it."""
    return str(error).startswith("Could not decode to UTF-8")


@contextmanager
def _lenient_text(conn: Any) -> Iterator[None]:
    """Texts read with their bytes that are not UTF-8 as lone surrogates, which every
    check of a row read refuses (``StoreError`` naming the entity), instead of failing the
    whole read; the normal (faster, C) decoding is put back afterwards."""
    before = conn.text_factory
    conn.text_factory = _surrogates
    try:
        yield
    finally:
        conn.text_factory = before


def _surrogates(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
