"""Crash-point enumeration: kill a real process at every write boundary, then recover.

A run of a system (``ExactlyOnce.run``, ``EffectLog.call``) goes through a store whose
transactions count *boundaries*: just before each write (insert, move, update) and just
after each commit. For every boundary ``n`` a child process (forked) runs the system and
calls ``os._exit`` at boundary ``n``: no ``finally``, no rollback handler, no flush, as
when the machine loses power or the process is killed. The parent then reopens the store,
runs the system once more the way a restarted worker would, and judges what is stored by
the named invariants, with the upstream effect's real run count and what the child's
caller was told (its acknowledgement). Enumeration stops at the first ``n`` the run never
reaches: every boundary was crashed once.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from machines.checks.invariants import check_invariants
from machines.checks.snapshots import snapshot
from machines.errors import MachinesError
from machines.store import BUNDLED, Store, open_store
from machines.testing._harness.durable import append_durably
from machines.testing._harness.stores import WatchedStore
from machines.testing.verdict import bundled

CRASHED = 86
"""The exit status of a child killed at its boundary."""

Point = TypeVar("Point")


class _Boundaries:
    def __init__(self, crash_at: int, record: Callable[[list[str]], None] | None) -> None:
        self.crash_at = crash_at
        self.record = record
        self.names: list[str] = []

    def tick(self, name: str) -> None:
        self.names.append(name)
        if self.record is not None:  # persisted before the process may die here
            self.record(self.names)
        if len(self.names) == self.crash_at:
            os._exit(CRASHED)


class CrashingStore(WatchedStore):
    """Wraps a store: boundary ``crash_at`` (1-based) ends the process on the spot;
    ``record`` is told the boundaries passed so far, before each may be the last."""

    def __init__(
        self,
        store: Store,
        crash_at: int,
        record: Callable[[list[str]], None] | None = None,
    ) -> None:
        super().__init__(store)
        self.boundaries = _Boundaries(crash_at, record)

    def before_write(self, name: str) -> None:
        self.boundaries.tick(f"before {name}")

    def after_commit(self) -> None:
        self.boundaries.tick("after commit")


@dataclass(frozen=True)
class Scenario:
    """One system call to crash and recover.

    ``run(store, effect)`` makes the call once and returns what its caller is told
    (a JSON-able acknowledgement, e.g. ``["value", ...]`` or ``["error", "EffectFailed"]``);
    ``recover(store, effect)`` is a restarted worker's call (later clock). ``effect`` runs
    the upstream operation and counts it. ``kept(ack, row)`` says whether what the caller
    was told is still what the store records."""

    name: str
    machine: str
    key: str
    run: Callable[[Store, Callable[[], Any]], Any]
    recover: Callable[[Store, Callable[[], Any]], Any]
    kept: Callable[[Any, Any], bool]


@dataclass
class CrashPoint:
    """What crashing at one boundary left behind."""

    point: int
    boundary: str
    acknowledged: Any
    runs: int
    breaches: list[str] = field(default_factory=list)


def boundary_trail(work: Path) -> Callable[[list[str]], None]:
    """Records the boundaries passed so far in ``work``, before each may be the last."""
    trail = work / "boundaries"

    def record(names: list[str]) -> None:
        trail.write_text(json.dumps(names))

    return record


def _child(url: str, crash_at: int, folder: str, scenario: Scenario) -> None:
    work = Path(folder)
    store = CrashingStore(open_store(url), crash_at, boundary_trail(work))
    ack = scenario.run(store, _upstream_effect(work / "upstream"))
    (work / "ack").write_text(json.dumps(ack))
    os._exit(0)


def _upstream_effect(upstream: Path) -> Callable[[], Any]:
    """The upstream operation: one durable line per run, so the parent can count runs
    even of a child that died right after."""

    def effect() -> Any:
        append_durably(upstream, "ran")
        return {"charge": "ch_1"}

    return effect


def _last_boundary(work: Path) -> str:
    trail = work / "boundaries"
    return json.loads(trail.read_text())[-1] if trail.exists() else "before any write"


def crash_each_boundary(
    fresh_url: Callable[[], AbstractContextManager[str]],
    child: Callable[[str, int, str], None],
    judge: Callable[[str, int, Path, bool], Point],
    folder: Path,
    *,
    what: str,
    limit: int,
) -> list[Point]:
    """The enumeration itself: for ``crash_at`` = 1, 2, ... a forked ``child(url, crash_at,
    work)`` runs on a fresh store (from the context manager ``fresh_url()``) and either dies
    at boundary ``crash_at`` or finishes (exit 0); ``judge(url, crash_at, work, finished)``
    then says what it left. Stops after the first run that finished."""
    context = multiprocessing.get_context("fork")
    points: list[Point] = []
    for crash_at in range(1, limit + 1):
        work = folder / f"point-{crash_at}"
        work.mkdir(parents=True)
        with fresh_url() as url:
            process = context.Process(target=child, args=(url, crash_at, str(work)))
            process.start()
            process.join(60)
            if process.exitcode not in (0, CRASHED):
                raise MachinesError(f"{what}: the child ended with {process.exitcode}")
            points.append(judge(url, crash_at, work, process.exitcode == 0))
            if process.exitcode == 0:
                return points
    raise MachinesError(f"{what}: more than {limit} boundaries; raise the limit")


def enumerate_crash_points(
    fresh_url: Callable[[], AbstractContextManager[str]],
    scenario: Scenario,
    folder: Path,
    *,
    limit: int = 100,
) -> list[CrashPoint]:
    """Crash ``scenario`` at boundary 1, 2, ... (a fresh store each time, from the context
    manager ``fresh_url()``) until a run finishes without reaching the boundary; judge
    each, and the finished run too (its process ends right after answering). Returns one
    ``CrashPoint`` per boundary crashed, plus that last one."""
    judge = {name: bundled(name) for name in BUNDLED}
    return crash_each_boundary(
        fresh_url,
        partial(_child, scenario=scenario),
        lambda url, crash_at, work, _finished: _judge(url, scenario, crash_at, work, judge),
        folder,
        what=scenario.name,
        limit=limit,
    )


def _judge(
    url: str, scenario: Scenario, crash_at: int, work: Path, judge: Mapping[str, Any]
) -> CrashPoint:
    upstream = work / "upstream"
    acked = json.loads((work / "ack").read_text()) if (work / "ack").exists() else None
    boundary = "after the answer" if acked is not None else _last_boundary(work)
    store = open_store(url)
    try:
        scenario.recover(store, _upstream_effect(upstream))
        runs = len(upstream.read_text().splitlines()) if upstream.exists() else 0
        snap = snapshot(store, {(scenario.machine, scenario.key): runs})
        breaches = [b.describe() for b in check_invariants(judge, snap)]
        row = snap.entities.get((scenario.machine, scenario.key))
        if acked is not None and not scenario.kept(acked, row):
            breaches.append(f"acknowledged {acked!r} but the store holds {row!r}")
        if runs > 1:
            breaches.append(
                f"the effect ran {runs} times: a restarted worker ran a parked effect again"
            )
    finally:
        store.close()
    return CrashPoint(crash_at, boundary, acked, runs, breaches)
