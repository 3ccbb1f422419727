"""Crash points of a migration: ``machines migrate`` killed at every write boundary.

``machines.store.migration.migrate`` calls its ``boundary`` hook before every write and
after the commit. For every boundary ``n`` a forked child runs the migration on a fresh
store and ends with ``os._exit`` at boundary ``n`` (as ``crashpoints`` does to a system's
run: no rollback handler, no flush); the parent then judges what the store holds. The
enumeration stops at the first ``n`` the migration finishes without reaching.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from machines.testing._harness.crashpoints import (
    _Boundaries,
    _last_boundary,
    boundary_trail,
    crash_each_boundary,
)

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


def _child(url: str, crash_at: int, folder: str, migration: Migration) -> None:
    migration(url, _Boundaries(crash_at, boundary_trail(Path(folder))).tick)
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

    def point(url: str, crash_at: int, work: Path, finished: bool) -> MigrationCrash:
        boundary = "finished" if finished else _last_boundary(work)
        return MigrationCrash(crash_at, boundary, judge(url))

    return crash_each_boundary(
        fresh_url,
        partial(_child, migration=migration),
        point,
        folder,
        what="the migration",
        limit=limit,
    )
