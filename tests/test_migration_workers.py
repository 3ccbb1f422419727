"""Workers keep writing while a PostgreSQL store is migrated (issue 17): the migration's
lock makes each worker wait, or fail with a typed error, and no write lands under a
half-installed schema. The test is shown able to fail: with a migration that takes no
lock and runs no transaction, it catches a move recorded without its history event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.vocabulary import MIGRATION_ACTOR
from machines.store import Row, open_store
from machines.store.migration import StateMap, migrate
from machines.store.migration_postgres import PostgresDatabase
from tests.migration_stores import (
    MAPS,
    bundled_specs,
    changed_spec_dirs,
    load_dir,
    populated,
)

WORKERS = 4
PAUSE = 0.3
"""How long the migration holds still with the old triggers dropped and the new ones not
yet installed: the window in which no worker's write may land."""
AFTER = 3
"""Writes each worker makes after the migration returned, before it stops."""


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return changed_spec_dirs(tmp_path_factory.mktemp("changes"))


@dataclass(frozen=True)
class Write:
    key: str
    seq: int  # the move's number: its history event's seq
    started: float
    returned: float


@dataclass
class Run:
    """What the workers did while the migration ran, and the migration's window."""

    writes: list[Write] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    window: tuple[float, float] | None = None
    committed: float | None = None
    ended: set[str] = field(default_factory=set)  # workers that could not open
    lock: threading.Lock = field(default_factory=threading.Lock)

    def written(self, key: str, after: float = 0.0) -> int:
        """How many writes on ``key`` began after ``after``."""
        with self.lock:
            return sum(w.key == key and w.started > after for w in self.writes)

    def boundary(self, name: str) -> None:
        """The migration's hook: at the first boundary after the triggers were dropped
        (the legal-moves table goes next) it holds still, and records the window."""
        if self.window is None and name.startswith("effect: DROP TABLE"):
            start = time.monotonic()
            time.sleep(PAUSE)
            self.window = (start, time.monotonic())
        elif name == "after commit":
            self.committed = time.monotonic()


def worker(
    url: str, old: Mapping[str, MachineSpec], key: str, run: Run, stop: threading.Event
) -> None:
    """Moves the Compensable effect ``key`` back and forth (execute, fail) until told to
    stop, recording each write's return time and each error (one raised by opening the
    store too: it ends the worker, and the checks judge it)."""
    try:
        store = open_store(url, old)
    except Exception as error:
        with run.lock:
            run.errors.append(error)
            run.ended.add(key)
        return
    try:
        row: Row | None = store.insert("effect", key, context={"tier": "compensable"})[0]
        while not stop.is_set():
            try:
                if row is None:  # after an error: read it again
                    with store.transaction() as tx:
                        row = tx.get("effect", key)
                    continue
                trigger = "execute" if row.state == "pending" else "fail"
                started = time.monotonic()
                row = store.move(row, trigger, actor="proxy")
            except Exception as error:  # judged by the checks: typed, or a failure
                with run.lock:
                    run.errors.append(error)
                row = None
                continue
            with run.lock:
                run.writes.append(Write(key, row.moves, started, time.monotonic()))
    finally:
        store.close()


def race(url: str, migration: Callable[[Callable[[str], None]], object], keys: list[str]) -> Run:
    """Workers on ``keys`` (stores opened with the bundled definitions) while
    ``migration(run.boundary)`` runs; each stops after ``AFTER`` writes begun after it."""
    run, stop = Run(), threading.Event()
    old = bundled_specs()
    threads = [threading.Thread(target=worker, args=(url, old, k, run, stop)) for k in keys]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(
        k in run.ended or run.written(k) >= 5 for k in keys
    ):
        time.sleep(0.01)  # every worker is writing
    try:
        migration(run.boundary)
    finally:
        returned, deadline = time.monotonic(), time.monotonic() + 10
        while time.monotonic() < deadline and not all(
            k in run.ended or run.written(k, returned) >= AFTER for k in keys
        ):
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
    return run


Versions = Mapping[int, Mapping[str, MachineSpec]]
"""The definitions of each version number."""


def problems(url: str, run: Run, versions: Versions) -> list[str]:
    """Everything wrong with what the workers and the migration left: an untyped error,
    a write that completed inside the window, an effect whose history is not the legal
    chain of its moves (a move recorded without its event, say), and a write begun after
    the commit not made under the new version."""
    out = [
        f"a raw error reached a worker: {e!r}"
        for e in run.errors
        if not isinstance(e, MachinesError)
    ]
    assert run.window is not None
    start, end = run.window
    out += [
        f"{w.key} move {w.seq} completed inside the window"
        for w in run.writes
        if start < w.returned < end
    ]
    store = open_store(url, versions[max(versions)], read_only=True)
    try:
        with store.transaction() as tx:
            for row in tx.rows("effect"):
                history = tx.history("effect", row.key)
                out += chain_problems(row, history, tx.event_versions("effect", row.key), versions)
            numbers_of: dict[str, Sequence[int]] = {}
            for w in run.writes:
                if run.committed is None or w.started <= run.committed:
                    continue
                if w.key not in numbers_of:
                    numbers_of[w.key] = tx.event_versions("effect", w.key)
                numbers = numbers_of[w.key]
                number = numbers[w.seq - 1] if w.seq <= len(numbers) else None
                if number != max(versions):
                    out.append(
                        f"{w.key} move {w.seq}, begun after the commit, is under version {number}"
                    )
    finally:
        store.close()
    return out


def chain_problems(
    row: Row, history: Sequence[TransitionEvent], numbers: Sequence[int], versions: Versions
) -> list[str]:
    """What is wrong with one effect's history: it must hold one event per move, numbered
    1, 2, ..., each leaving the state the last one reached and legal under the version
    it names (a migration's event: out of a state that version removed), versions never
    going down, and end in the row's state."""
    key, out = row.key, []
    if [e.seq for e in history] != list(range(1, row.moves + 1)):
        out.append(
            f"{key}: {row.moves} moves, events {[e.seq for e in history]}: "
            "a move without its history event"
        )
    if list(numbers) != sorted(numbers):
        out.append(f"{key}: definition versions {list(numbers)} go down")
    state = versions[1]["effect"].initial
    for event, number in zip(history, numbers, strict=True):
        spec = versions[number]["effect"]
        if event.actor == MIGRATION_ACTOR:
            legal = number > 1 and event.source not in spec.states
        else:
            try:
                legal = (
                    spec.step(event.source, event.trigger, actor=event.actor, **row.context)
                    == event.dest
                )
            except MachinesError:
                legal = False
        if event.source != state or not legal:
            out.append(
                f"{key}: event {event.seq} {event.source} -> {event.dest} is not a legal "
                f"move of version {number} from {state}"
            )
        state = event.dest
    if state != row.state:
        out.append(f"{key}: the history ends in {state}, the row is in {row.state}")
    return out


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with populated("postgres", tmp_path) as populated_url:
        yield populated_url


KEYS = [f"worker-{i}" for i in range(WORKERS)]


@pytest.mark.parametrize("change", ["widening", "breaking"])
def test_workers_wait_for_the_migration_and_never_write_under_half_a_schema(
    change: str, url: str, changed: dict[str, Path]
) -> None:
    new = load_dir(changed[change])
    maps = [StateMap.parse(m) for m in MAPS] if change == "breaking" else []
    run = race(url, lambda hook: migrate(url, new, maps, boundary=hook), KEYS)
    assert problems(url, run, {1: bundled_specs(), 2: new}) == []
    assert not run.ended, run.errors
    assert run.window is not None and run.committed is not None
    waited = [w for w in run.writes if w.started < run.window[1] < w.returned]
    assert waited, "no worker was writing while the migration held its lock"
    assert {w.key for w in run.writes if w.started > run.committed} == set(KEYS)


def test_the_checks_catch_a_migration_that_takes_no_lock(
    url: str, changed: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement of this migration commits by itself and locks nothing: the
    workers write while the triggers are gone."""
    monkeypatch.setattr(PostgresDatabase, "begin", lambda self, tables: None)
    new = load_dir(changed["widening"])
    run = race(url, lambda hook: migrate(url, new, boundary=hook), KEYS)
    found = problems(url, run, {1: bundled_specs(), 2: new})
    assert any("completed inside the window" in p for p in found), found
    assert any("a move without its history event" in p for p in found), found


def test_the_checks_catch_an_untyped_error_and_a_write_under_the_old_version(url: str) -> None:
    """The other two checks, shown failing on a doctored run: a raw driver error a
    worker got, and writes under version 1 claimed to have begun after the commit."""
    import psycopg

    def no_migration(hook: Callable[[str], None]) -> None:
        hook("effect: DROP TABLE")  # the window, with nothing locked
        hook("after commit")

    run = race(url, no_migration, KEYS)
    run.errors.append(psycopg.errors.LockNotAvailable("canceling statement"))
    run.committed = 0.0
    found = problems(url, run, {1: bundled_specs(), 2: bundled_specs()})
    assert any("a raw error reached a worker: LockNotAvailable" in p for p in found), found
    assert any("begun after the commit, is under version 1" in p for p in found), found
