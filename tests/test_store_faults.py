"""Faults of the database file are ``StoreError``s, the key of an effect that ran ends
parked (never run again), and the store works again once the fault is gone.

The faults are real, not mocked: a full disk is a file-size limit on the process
(``RLIMIT_FSIZE``: every write past it fails in the kernel, so SQLite's COMMIT fails as
on a full disk) or SQLite's own ``max_page_count`` (SQLITE_FULL at the next write); a
read-only file is a file the process cannot write (``chmod 444``, and for root, who
ignores modes, ``chattr +i``); corrupt files hold garbage bytes.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from machines.checks.invariants import check_invariants
from machines.checks.snapshots import snapshot
from machines.errors import EffectIndeterminate, EffectInProgress, InvalidArgument
from machines.store import Store, StoreError, open_store
from machines.store.sqlite import SQLiteStore
from machines.systems import ExactlyOnce
from tests.conftest import FakeClock, postgres_schema, unavailable


class FullDisk:
    """While filled, every write this process makes to a file fails in the kernel, as on
    a full disk (SIGXFSZ, which would kill the process, is ignored meanwhile)."""

    def __init__(self) -> None:
        self._limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        self._handler: object = None

    def fill(self) -> None:
        self._handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, self._limits[1]))

    def free(self) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, self._limits)
        if self._handler is not None:
            signal.signal(signal.SIGXFSZ, self._handler)  # type: ignore[arg-type]


@contextmanager
def read_only_file(path: Path) -> Iterator[None]:
    """``path`` cannot be written by this process until the block ends."""
    os.chmod(path, 0o444)
    immutable = os.geteuid() == 0  # root ignores file modes
    if immutable:
        chattr = shutil.which("chattr")
        done = subprocess.run([chattr or "chattr", "+i", str(path)], check=False)
        if chattr is None or done.returncode != 0:
            os.chmod(path, 0o644)
            unavailable("a read-only file for root (chattr +i)", "run as a user, or on ext4")
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        os.chmod(path, 0o644)


def an_effect(runs: list[str], during: Callable[[], object] = lambda: None) -> Callable[[], str]:
    def effect() -> str:
        runs.append("ran")
        during()
        return "r" * 20_000  # a result that needs new pages to store

    return effect


def test_a_disk_that_fills_during_the_effect_parks_the_key_and_recovers(
    tmp_path: Path,
) -> None:
    """issue 13 item 18: on main the settle's COMMIT failed, the store's own ROLLBACK
    then raised "no transaction is active", and a raw ``sqlite3.OperationalError``
    escaped ``run`` after the effect ran. Now: the effect runs once, every store call
    while the disk is full is a ``StoreError``, the key ends indeterminate (parked),
    never re-run, and the store works again once there is room."""
    clock = FakeClock()
    store = open_store(f"sqlite:///{tmp_path / 'effects.db'}", clock=clock)
    eo = ExactlyOnce(store, clock=clock, lease_seconds=30)
    eo.run("warm", lambda: "ok")
    runs: list[str] = []
    disk = FullDisk()
    try:
        with pytest.raises(EffectIndeterminate, match="parking failed too"):
            eo.run("charge-1", an_effect(runs, during=disk.fill))
        with pytest.raises(StoreError, match=r"effects\.db: cannot .*\(SQLITE_"):
            eo.run("charge-2", lambda: "never")
        with pytest.raises(StoreError, match="the store works again"), store.transaction() as tx:
            tx.insert("outcome", "charge-3")
    finally:
        disk.free()
    assert runs == ["ran"]
    with pytest.raises(EffectInProgress):  # its lease still runs: nobody takes it over
        eo.run("charge-1", an_effect(runs))
    clock.now += 31
    with pytest.raises(EffectIndeterminate):
        eo.run("charge-1", an_effect(runs))
    assert runs == ["ran"]
    outcome = eo.outcome("charge-1")
    assert outcome is not None and outcome.state == "indeterminate"
    assert eo.run("charge-2", lambda: "ok") == "ok"  # the store works again
    assert check_invariants(store.specs(), snapshot(store)) == []
    store.close()


def test_a_database_at_its_size_limit_parks_the_key_at_once(tmp_path: Path) -> None:
    """issue 13 item 18: SQLITE_FULL at the settle's write escaped ``run`` raw. The
    database is "full" for real (``PRAGMA max_page_count`` on the store's connection:
    the result needs pages it may not add); the fault replaces that connection, so the
    small park that follows fits, and the key is parked at once."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "effects.db", open_store("memory://").specs(), clock)
    eo = ExactlyOnce(store, clock=clock)
    eo.run("warm", lambda: "ok")

    def fill() -> None:
        conn = store._connections.current()  # the store's own connection: white box
        assert conn is not None
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    runs: list[str] = []
    with pytest.raises(EffectIndeterminate, match="SQLITE_FULL"):
        eo.run("charge-1", an_effect(runs, during=fill))
    outcome = eo.outcome("charge-1")
    assert outcome is not None and outcome.state == "indeterminate"
    with pytest.raises(EffectIndeterminate):
        eo.run("charge-1", an_effect(runs))
    assert runs == ["ran"]
    assert eo.run("charge-2", an_effect(runs)) == "r" * 20_000
    store.close()


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def _bad_header(path: Path) -> None:
    _a_store(path)
    data = bytearray(path.read_bytes())
    data[:16] = b"not sqlite, no!!"
    path.write_bytes(bytes(data))


def _bad_pages(path: Path) -> None:
    _a_store(path, rows=200)
    data = bytearray(path.read_bytes())
    for page in range(len(data) // 4096 // 2, len(data) // 4096):
        data[page * 4096 : page * 4096 + 64] = os.urandom(64)
    path.write_bytes(bytes(data))


def _a_store(path: Path, rows: int = 1) -> None:
    store = open_store(f"sqlite:///{path}")
    for i in range(rows):
        store.insert("outcome", f"k{i}", data={"pad": "p" * 400})
    store.close()


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_garbage, "not a SQLite database"),
        (_bad_header, "not a SQLite database"),
        (_bad_pages, "damaged"),
        (lambda path: path.mkdir(), "that path is a directory, not a database file"),
    ],
    ids=["garbage", "bad-header", "bad-pages", "a-directory"],
)
def test_a_broken_file_is_a_store_error_at_every_call(
    make: Callable[[Path], None], says: str, tmp_path: Path
) -> None:
    """issue 13 item 18: a file of garbage, a damaged header or damaged pages raised raw
    ``sqlite3.DatabaseError`` from ``open_store`` or from the first read. Every call
    that fails says so with a ``StoreError`` naming the file and what to do."""
    path = tmp_path / "effects.db"
    make(path)
    errors: list[StoreError] = []
    try:
        store = open_store(f"sqlite:///{path}")
    except StoreError as refused:
        errors.append(refused)
    else:
        for call in (_insert, _rows, _history):
            try:
                call(store)
            except StoreError as refused:
                errors.append(refused)
        store.close()
    assert errors and all(str(path) in str(e) and says in str(e) for e in errors), errors


def _insert(store: Store) -> None:
    store.insert("outcome", "new")


def _rows(store: Store) -> None:
    with store.transaction() as tx:
        tx.rows("outcome")


def _history(store: Store) -> None:
    with store.transaction() as tx:
        tx.history("outcome", "k1")


@pytest.mark.parametrize(
    "where", ["/dev/null", "missing-dir/effects.db", "a\x00b.db"], ids=["devnull", "dir", "nul"]
)
def test_a_path_that_cannot_hold_a_database_is_a_store_error(where: str, tmp_path: Path) -> None:
    """issue 13 item 18: ``/dev/null`` ended in "cannot rollback - no transaction is
    active" and a NUL in the path in a raw ``ValueError``."""
    path = where if where.startswith("/") else str(tmp_path / where)
    refused = InvalidArgument if "\x00" in where else StoreError  # a NUL is no path at all
    with pytest.raises(refused, match=r"cannot|NUL|is not a file"):
        open_store(f"sqlite:///{path}")


def test_a_read_only_file_is_a_store_error_and_can_still_be_read(tmp_path: Path) -> None:
    """issue 13 items 18 and 20: a file the process cannot write raised a raw
    ``sqlite3.OperationalError`` from ``open_store``; it is a ``StoreError`` that says
    what to do, and the store opened read-only reads it and refuses writes."""
    path = tmp_path / "effects.db"
    _a_store(path)
    with read_only_file(path):
        with pytest.raises(StoreError, match="cannot be written: make them writable, or open"):
            open_store(f"sqlite:///{path}")
        store = open_store(f"sqlite:///{path}", read_only=True)
        with store.transaction() as tx:
            found = tx.get("outcome", "k0")
        assert found is not None and found.state == "in_flight"
        with pytest.raises(StoreError, match="opened read-only"):
            store.insert("outcome", "k1")
        store.close()


def test_a_store_in_a_folder_it_cannot_write_is_named_so_when_read(tmp_path: Path) -> None:
    """Outsider batch 45 (c F1): a SQLite store in a folder the auditor cannot write was
    "no database file is there", or "refuses every write" though nothing was written:
    SQLite makes a store's ``-shm`` file beside it even to read one in WAL mode. The
    message says so, and what to do."""
    folder = tmp_path / "store"
    folder.mkdir()
    _a_store(folder / "effects.db")
    if os.geteuid() == 0:  # root ignores folder modes: make it immutable instead
        if subprocess.run(["chattr", "+i", str(folder)], check=False).returncode != 0:
            unavailable("an unwritable folder for root (chattr +i)", "run as a user, or on ext4")
    else:
        os.chmod(folder, 0o555)
    try:
        with pytest.raises(StoreError) as refused:
            open_store(f"sqlite:///{folder / 'effects.db'}", read_only=True)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        os.chmod(folder, 0o755)
    said = str(refused.value)
    assert "the file is there, but its folder is not writable by this user" in said, said
    assert "no database file is there" not in said and "refuses every write" not in said


def test_a_read_by_another_user_never_leaves_logs_its_owner_cannot_write(
    tmp_path: Path,
) -> None:
    """Outsider batch 46 (b 43): an audit run as another user than the store file's owner
    made the ``-wal`` and ``-shm`` files as that user, and the store's owner could then not
    open it ("the file or its directory cannot be written", which was false). Such a read
    is refused while those files are not there, and nothing is made; while its service
    has it open (the files are there), it reads."""
    if os.geteuid() != 0:
        unavailable("a store file of another user (chown)", "run as root")
    path = tmp_path / "effects.db"
    _a_store(path)
    os.chown(path, 65534, 65534)  # nobody's now
    with pytest.raises(StoreError, match=r"does not own the store's file \(uid 65534\)"):
        open_store(f"sqlite:///{path}", read_only=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["effects.db"]
    writer = open_store(f"sqlite:///{path}")  # its service has it open: the logs are there
    try:
        reader = open_store(f"sqlite:///{path}", read_only=True)
        with reader.transaction() as tx:
            assert tx.get("outcome", "k0") is not None
        reader.close()
    finally:
        writer.close()


def test_a_locked_database_is_a_store_error_at_open(tmp_path: Path) -> None:
    """issue 13 item 18: opening a store while another connection holds the write lock
    raised a raw "database is locked" from schema creation."""
    path = tmp_path / "effects.db"
    _a_store(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="another connection holds the database"):
            SQLiteStore(path, open_store("memory://").specs(), busy_timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store = SQLiteStore(path, open_store("memory://").specs(), busy_timeout=0.05)
    assert store.insert("outcome", "k1")[1]
    store.close()


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_a_read_only_store_creates_nothing_and_refuses_every_write(
    database: str, tmp_path: Path
) -> None:
    """issue 13 item 20: opening for an audit created the SQLite file, or the tables on
    PostgreSQL. Read-only, a missing database or missing tables are a ``StoreError``,
    nothing is created, and a write to an existing store is a ``StoreError``."""
    with ExitStack() as cleanup:
        if database == "postgres":
            url = cleanup.enter_context(postgres_schema())
        else:
            url = f"sqlite:///{tmp_path / 'effects.db'}"
        with pytest.raises(StoreError, match=r"creates? (nothing|none)"):
            open_store(url, read_only=True)
        assert list(tmp_path.iterdir()) == []
        if database == "postgres":
            assert _tables(url) == []
        writer = open_store(url)
        writer.insert("outcome", "k1")
        writer.close()
        store = open_store(url, read_only=True)
        with pytest.raises(StoreError, match="opened read-only"):
            store.insert("outcome", "k2")
        with pytest.raises(StoreError, match="opened read-only"), store.transaction() as tx:
            row = tx.get("outcome", "k1")
            assert row is not None
            tx.move(row, "park", actor="worker")
        with store.transaction() as tx:
            row = tx.get("outcome", "k1")
            assert row is not None and row.state == "in_flight"
            assert tx.get("outcome", "k2") is None
        store.close()


def _tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    return [name for (name,) in found]


def test_a_lost_postgres_connection_is_a_store_error_and_the_store_reconnects() -> None:
    """issue 13 item 18, on PostgreSQL: a connection the server ended is a ``StoreError``
    (never a psycopg error), and the next call opens a new one."""
    import psycopg

    from machines.store.postgres import PostgresStore

    with postgres_schema() as url:
        store = PostgresStore(url, open_store("memory://").specs())
        store.insert("outcome", "k1")
        conn = store._connections.current()  # the store's own connection: white box
        assert conn is not None
        pid = conn.info.backend_pid  # this one connection, never another test's
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreError), store.transaction() as tx:
            tx.get("outcome", "k1")
        assert store.insert("outcome", "k2")[1]
        store.close()


def in_a_thread(call: Callable[[], object]) -> object:
    """What ``call`` returns in a new thread, or the exception it raised."""
    import threading

    found: list[object] = []

    def run() -> None:
        try:
            found.append(call())
        except Exception as exc:
            found.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return found[0]


def test_a_relative_path_keeps_its_file_when_the_working_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 38 (a A6): a store opened at ``sqlite:///effects.db`` opened each new
    thread's connection relative to the working directory of that moment; after a
    ``chdir`` beside another store the same key ran again there. The path is made
    absolute once, at open."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    ran: list[int] = []
    with open_store("sqlite:///effects.db") as store:
        eo = ExactlyOnce(store)
        assert eo.run("order-42", lambda: ran.append(1) or 1) == 1
        open_store(f"sqlite:///{second / 'effects.db'}").close()
        monkeypatch.chdir(second)
        assert in_a_thread(lambda: eo.run("order-42", lambda: ran.append(2) or 2)) == 1
        assert store.url == f"sqlite:///{first / 'effects.db'}"
    assert ran == [1]


def test_a_file_replaced_while_the_store_is_open_is_refused_by_a_new_connection(
    tmp_path: Path,
) -> None:
    """Outsider batch 38 (a A7): the database file swapped for one without the guards, or
    removed, while a store was open; a new thread's connection used it unchecked (or
    SQLite made an empty one). A connection opened later refuses a file that is not the
    one the store opened and checked, and writes nothing."""
    path = tmp_path / "effects.db"
    ran: list[int] = []
    with open_store(f"sqlite:///{path}") as store:
        eo = ExactlyOnce(store)
        eo.run("order-42", lambda: ran.append(1) or 1)
        (tmp_path / "other.db").write_bytes(b"")
        os.replace(tmp_path / "other.db", path)
        refused = in_a_thread(lambda: eo.run("order-42", lambda: ran.append(2) or 2))
        assert isinstance(refused, StoreError), refused
        assert "not the one this store opened and checked" in str(refused)
        path.unlink()
        refused = in_a_thread(lambda: eo.run("order-43", lambda: ran.append(3) or 3))
        assert isinstance(refused, StoreError), refused
        assert not path.exists()
    assert ran == [1]


def test_a_file_replaced_while_the_store_opens_it_is_refused(tmp_path: Path) -> None:
    """Outsider batch 38's fix, attacked in batch 39 (a A1): while the first open waited for
    the write lock another connection held, the file was moved aside and a copy without the
    guards put at its path; the open checked the file it had opened, then took the path's
    (device, inode), which was the copy's, and every later connection wrote the copy: an
    effect ran twice. The open now refuses a path that changed while it checked."""
    import threading
    import time

    path, copy = tmp_path / "effects.db", tmp_path / "copy.db"
    open_store(f"sqlite:///{path}").close()
    shutil.copy(path, copy)
    with sqlite3.connect(copy) as raw:
        for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            raw.execute(f'DROP TRIGGER "{name}"')
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    found: list[object] = []

    def opening() -> None:
        try:
            found.append(open_store(f"sqlite:///{path}"))
        except Exception as exc:
            found.append(exc)

    opener = threading.Thread(target=opening)
    opener.start()
    time.sleep(0.5)  # the open waits for the lock, on the file it opened
    os.rename(path, tmp_path / "aside.db")
    os.rename(copy, path)
    holder.execute("ROLLBACK")
    holder.close()
    opener.join()
    assert isinstance(found[0], StoreError), found
    assert "was replaced while the store opened it" in str(found[0])


def test_a_database_file_with_a_second_name_is_refused(tmp_path: Path) -> None:
    """Outsider batch 41 (a 13): two processes opened one SQLite file by two names (a hard
    link); SQLite locks and logs it beside each name, so neither saw the other's claim,
    the effect ran twice, one acknowledged result was lost and the audit said OK. A file
    with a second name is refused, at open and by every later connection; a symbolic link
    (which SQLite follows to the file) is not such a name."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "db", tmp_path / "b" / "db"
    store = open_store(f"sqlite:///{first}")
    try:
        os.link(first, second)
        for name in (first, second):
            with pytest.raises(StoreError, match="the file has 2 names"):
                open_store(f"sqlite:///{name}")
        errors: list[BaseException] = []

        def another_thread() -> None:
            try:
                ExactlyOnce(store).run("k", lambda: 1)
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=another_thread)
        worker.start()
        worker.join()
        assert len(errors) == 1 and "the file has 2 names" in str(errors[0]), errors
        second.unlink()
        (tmp_path / "link").symlink_to(first)
        with open_store(f"sqlite:///{tmp_path / 'link'}") as linked:
            assert ExactlyOnce(linked).run("k", lambda: 1) == 1
    finally:
        store.close()


def test_a_database_file_renamed_while_open_is_refused_by_the_next_transaction(
    tmp_path: Path,
) -> None:
    """Outsider batch 42 (a 2): the file was renamed while a store had it open; another
    store opened it by its new name. SQLite logs a file beside the name it was opened
    by, so neither saw the other's claim: the effect ran twice, and every acknowledged
    result was lost. The store that opened the old name refuses its next transaction,
    before anything runs."""
    first, renamed = tmp_path / "a.db", tmp_path / "c.db"
    store = open_store(f"sqlite:///{first}")
    ran: list[str] = []
    try:
        assert ExactlyOnce(store).run("warm", lambda: "x") == "x"
        first.rename(renamed)
        other = (  # another process: SQLite shares one file's locks within a process
            "from machines.store import open_store\n"
            "from machines.systems import ExactlyOnce\n"
            f"with open_store('sqlite:///{renamed}') as s:\n"
            "    print(ExactlyOnce(s).run('pay-1', lambda: 'b'))\n"
        )
        said = subprocess.run(
            [sys.executable, "-c", other], capture_output=True, text=True, check=True
        )
        assert said.stdout == "b\n"
        ran.append("b")
        with pytest.raises(StoreError, match="not the one this store opened"):
            ExactlyOnce(store).run("pay-1", lambda: ran.append("a") or "a")
        assert ran == ["b"]
    finally:
        store.close()
    with open_store(f"sqlite:///{renamed}") as again:
        assert ExactlyOnce(again).run("pay-1", lambda: ran.append("c") or "c") == "b"
    assert ran == ["b"]
