"""Crash points of a migration: ``machines migrate`` killed at every write boundary.

``machines.store.migration.migrate`` calls its ``boundary`` hook before every write and
after the commit. For every boundary ``n`` a forked child runs the migration on a fresh
store and ends with ``os._exit`` at boundary ``n`` (as ``crashpoints`` does to a system's
run: no rollback handler, no flush); the parent then judges what the store holds. The
enumeration stops at the first ``n`` the migration finishes without reaching.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from machines.errors import MachinesError
from machines.testing._harness.crashpoints import CRASHED, _Boundaries, _last_boundary

Migration = Callable[[str, Callable[[str], None]], object]
"""``migration(url, boundary)``: runs the migration of the store at ``url``, calling
``boundary(name)`` at each boundary (``migrate(url, ..., boundary=boundary)``)."""


@dataclass
class MigrationCrash:
    """What crashing a migration at one boundary left behind."""

    point: int
    boundary: str
    """The boundary the child died at; "finished" for the run that reached none."""
    breaches: list[str] = field(default_factory=list)

    @property
    def crashed(self) -> bool:
        return self.boundary != "finished"


def _child(url: str, migration: Migration, crash_at: int, folder: str) -> None:
    trail = Path(folder) / "boundaries"

    def record(names: list[str]) -> None:
        trail.write_text(json.dumps(names))

    migration(url, _Boundaries(crash_at, record).tick)
    os._exit(0)


def enumerate_migration_crashes(
    fresh_url: Callable[[], AbstractContextManager[str]],
    migration: Migration,
    judge: Callable[[str], list[str]],
    folder: Path,
    *,
    limit: int = 200,
) -> list[MigrationCrash]:
    """Crash ``migration`` at boundary 1, 2, ... (a fresh store each time, from the
    context manager ``fresh_url()``) until a run finishes without reaching the boundary;
    ``judge(url)`` says what is wrong with the store each left (it may recover it, by
    running the migration again). One ``MigrationCrash`` per boundary, plus the run that
    finished."""
    context = multiprocessing.get_context("fork")
    points: list[MigrationCrash] = []
    for crash_at in range(1, limit + 1):
        work = folder / f"point-{crash_at}"
        work.mkdir(parents=True)
        with fresh_url() as url:
            child = context.Process(target=_child, args=(url, migration, crash_at, str(work)))
            child.start()
            child.join(60)
            if child.exitcode not in (0, CRASHED):
                raise MachinesError(f"the migration's child ended with {child.exitcode}")
            boundary = "finished" if child.exitcode == 0 else _last_boundary(work)
            points.append(MigrationCrash(crash_at, boundary, judge(url)))
            if child.exitcode == 0:
                return points
    raise MachinesError(f"a migration of more than {limit} boundaries; raise the limit")
