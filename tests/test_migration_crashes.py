"""Crash points over a migration on SQLite and PostgreSQL (issue 17): a child process
killed at every write boundary of a breaking migration with maps. After each crash the
store opens at the old version with everything exactly as it was, or at the new one,
migrated whole; never in between; and a rerun of the migration completes it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from machines.store import migration_postgres, migration_sqlite
from machines.store.integrity import StoreTampered
from machines.store.migration import MigrationPlan, StateMap, migrate
from machines.testing._harness.migration_crashes import enumerate_migration_crashes
from tests.migration_stores import (
    DATABASES,
    MAPS,
    breaking,
    bundled_specs,
    copy_sqlite,
    load_dir,
    opens,
    populated,
    raw_snapshot,
    registry,
)

AT = 5_000.0
"""The migration's clock: every run writes the same times, so a recovered store can be
compared whole with a clean migration's."""


def fresh_stores(kind: str, folder: Path) -> Callable[[], contextlib.AbstractContextManager[str]]:
    """Fresh populated stores: SQLite copies one file; PostgreSQL fills a new schema each
    time (the same rows, with the same clock)."""
    counter = iter(range(10_000))
    if kind == "sqlite":
        template = folder / "template"
        with populated("sqlite", template) as url:
            pass

    @contextlib.contextmanager
    def fresh() -> Iterator[str]:
        n = next(counter)
        if kind == "sqlite":
            yield copy_sqlite(url, folder / f"store-{n}.db")
        else:
            with populated("postgres", folder) as schema_url:
                yield schema_url

    return fresh


class Judge:
    """What a crashed migration must leave: the store opens with the old definitions and
    holds exactly what it held (registry included), or opens with the new ones and holds
    exactly what a clean migration leaves; the rerun then completes it (or has nothing
    to do) and leaves that too."""

    def __init__(
        self, fresh: Callable[[], contextlib.AbstractContextManager[str]], root: Path
    ) -> None:
        self.old, self.new = bundled_specs(), load_dir(breaking(root).path)
        self.maps = [StateMap.parse(m) for m in MAPS]
        with fresh() as url:
            self.before, self.old_registry = raw_snapshot(url), registry(url, self.old)
            self.migrate(url)
            self.clean = raw_snapshot(url)
            assert registry(url, self.new)["effect"] == [1, 2] != self.old_registry["effect"]

    def migrate(self, url: str, boundary: Callable[[str], None] | None = None) -> MigrationPlan:
        return migrate(url, self.new, self.maps, boundary=boundary, clock=lambda: AT)

    def __call__(self, url: str) -> list[str]:
        problems = []
        as_old = opens(url, self.old)
        if as_old is None:  # then it holds the very rows it held: the new specs cannot open it
            if raw_snapshot(url) != self.before or registry(url, self.old) != self.old_registry:
                problems.append("opens at the old version, but something changed")
        else:
            as_new = opens(url, self.new)
            if as_new is not None:
                problems.append(f"opens with neither: {as_old}; {as_new}")
            elif raw_snapshot(url) != self.clean:
                problems.append("opens at the new version, but not as a clean migration left it")
        try:
            plan = self.migrate(url)  # the operator runs it again
        except StoreTampered as exc:  # a store torn apart names itself so
            return [*problems, f"the rerun: {exc}"]
        if plan.refused or plan.nothing_to_do != (as_old is not None):
            problems.append(f"the rerun: {plan.lines()}")
        if raw_snapshot(url) != self.clean:
            problems.append("the rerun did not leave what a clean migration leaves")
        return problems


@pytest.mark.parametrize("kind", DATABASES)
def test_every_boundary_of_a_migration_crashed_and_recovered(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = fresh_stores(kind, tmp_path)
    judge = Judge(fresh, tmp_path / "changed")
    points = enumerate_migration_crashes(fresh, judge.migrate, judge, tmp_path / "work")
    crashed = [p for p in points if p.crashed]
    with capsys.disabled():
        print(f"\ncrash points migrate on {kind}: {len(crashed)} boundaries")
    boundaries = [p.boundary for p in crashed]
    assert any("DROP TRIGGER" in b for b in boundaries)
    assert sum('UPDATE "effect_entities"' in b for b in boundaries) == 2  # the mapped writes
    assert boundaries[-1] == "after commit" and not points[-1].crashed
    for p in points:
        assert p.breaches == [], (p.point, p.boundary, p.breaches)


class Caught(Exception):
    pass


@pytest.mark.parametrize("kind", DATABASES)
def test_the_judge_catches_a_migration_that_is_not_one_transaction(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement of this migration commits by itself (no BEGIN): a crash after the
    first one leaves a store that opens (read-only) with the old definitions, a trigger
    short; a rerun of the migration now refuses to run over it, naming the trigger."""
    fresh = fresh_stores(kind, tmp_path)
    judge = Judge(fresh, tmp_path / "changed")
    database = (
        migration_postgres.PostgresDatabase
        if kind == "postgres"
        else migration_sqlite.SQLiteDatabase
    )
    monkeypatch.setattr(database, "begin", lambda self, tables: None)
    monkeypatch.setattr(database, "commit", lambda self: None)

    def first_breach(url: str) -> list[str]:
        found = judge(url)
        if found:
            raise Caught(found)
        return found

    with pytest.raises(
        Caught,
        match=r"opens at the old version, but something changed.*the rerun: .* trigger .*: missing",
    ):
        enumerate_migration_crashes(fresh, judge.migrate, first_breach, tmp_path / "work")
