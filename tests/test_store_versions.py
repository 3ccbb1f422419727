"""Versioned definitions in a store (issue 17 item 2): what a database records of each
definition it served, and when a store opened with a definition refuses to open.

Each promise is attacked from outside: a changed definition, a wording change, a schema
that another release would generate, a database made before versions, a registry row
rewritten by the database's owner."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import machines
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.loader import read_definition_text
from machines.store import StoreError, open_store
from machines.store.migration import migrate
from machines.store.versions import DefinitionChanged, SchemaOutdated, load_versions
from tests.conftest import SpecCopy, postgres_schema, transition

DATABASES = ("sqlite", "postgres")


@contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "postgres":
        with postgres_schema() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path}/versions.db"


def widened(spec_copy: SpecCopy) -> MachineSpec:
    """outcome with one more actor on one edge: a widening change."""
    spec_copy.edit(
        "outcome",
        lambda doc: transition(doc, "in_flight", "succeeded").update(actor=["worker", "operator"]),
    )
    return machines.load(spec_copy.file("outcome"))


def reworded(spec_copy: SpecCopy) -> MachineSpec:
    spec_copy.edit("outcome", lambda doc: doc.update(title="Outcome, reworded"))
    return machines.load(spec_copy.file("outcome"))


@pytest.mark.parametrize("kind", DATABASES)
def test_a_new_store_records_version_1_and_its_events_name_it(kind: str, tmp_path: Path) -> None:
    outcome = machines.load("outcome")
    with database(kind, tmp_path) as url:
        store = open_store(url, [outcome])
        try:
            with store.transaction() as tx:
                row, _ = tx.insert("outcome", "k")
                tx.move(row, "park", actor="worker")
                (version,) = tx.definition_versions("outcome")
                assert tx.event_versions("outcome", "k") == [1]
        finally:
            store.close()
    assert (version.machine, version.version) == ("outcome", 1)
    assert version.digest == semantic_digest(outcome)
    loaded = read_definition_text(version.definition, "outcome", "stored")
    assert loaded.same_definition(outcome)


def test_the_memory_store_serves_one_version() -> None:
    store = open_store("memory://", [machines.load("outcome")])
    with store.transaction() as tx:
        row, _ = tx.insert("outcome", "k")
        tx.move(row, "park", actor="worker")
        assert [v.version for v in tx.definition_versions("outcome")] == [1]
        assert tx.event_versions("outcome", "k") == [1]


@pytest.mark.parametrize("kind", DATABASES)
def test_a_changed_definition_is_refused_until_migrated(
    kind: str, tmp_path: Path, spec_copy: SpecCopy
) -> None:
    new = widened(spec_copy)
    with database(kind, tmp_path) as url:
        open_store(url, [machines.load("outcome")]).close()
        for read_only in (False, True):
            with pytest.raises(DefinitionChanged) as refused:
                open_store(url, [new], read_only=read_only)
            message = str(refused.value)
            assert "machine 'outcome' is stored at definition version 1" in message
            assert (
                "what changed: 0 breaking, 1 widening (transition" in message
                and "machines migrate" in message
            )
        assert migrate(url, {"outcome": new}).applied
        open_store(url, [new]).close()
        with pytest.raises(DefinitionChanged, match="stored at definition version 2"):
            open_store(url, [machines.load("outcome")])


@pytest.mark.parametrize("kind", DATABASES)
def test_a_wording_change_needs_no_migration(
    kind: str, tmp_path: Path, spec_copy: SpecCopy
) -> None:
    original = machines.load("outcome")
    new = reworded(spec_copy)
    assert semantic_digest(new) == semantic_digest(original)
    with database(kind, tmp_path) as url:
        open_store(url, [original]).close()
        store = open_store(url, [new])
        with store.transaction() as tx:
            (version,) = tx.definition_versions("outcome")
        store.close()
        plan = migrate(url, {"outcome": new})
    assert "Outcome, reworded" not in version.definition  # the installed wording is kept
    assert plan.nothing_to_do and not plan.applied


@pytest.mark.parametrize("kind", DATABASES)
def test_a_schema_another_release_generates_is_reinstalled_by_a_migration(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same definition, a schema this release generates differently (as a later
    release of machines might): refused with SchemaOutdated, and a migration installs the
    schema as the next version."""
    import machines.store.ddl_postgres as ddl_postgres
    import machines.store.postgres as postgres
    import machines.store.sqlite as sqlite

    outcome = machines.load("outcome")
    with database(kind, tmp_path) as url:
        open_store(url, [outcome]).close()
        for module, original in (
            (sqlite, sqlite.sqlite_schema),
            (postgres, ddl_postgres.postgres_schema),
        ):
            attribute = "sqlite_schema" if module is sqlite else "postgres_schema"
            monkeypatch.setattr(
                module, attribute, lambda spec, version=1, f=original: f(spec, version) + "\n"
            )
        with pytest.raises(SchemaOutdated, match="another release of machines"):
            open_store(url, [outcome])
        plan = migrate(url, {"outcome": outcome})
        assert plan.applied and [m.action for m in plan.machines] == ["reinstall"]
        store = open_store(url, [outcome])
        with store.transaction() as tx:
            assert [v.version for v in tx.definition_versions("outcome")] == [1, 2]
        store.close()


def test_a_database_made_before_versions_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE machines_schema (machine TEXT PRIMARY KEY, fingerprint TEXT)")
    for read_only in (False, True):
        with pytest.raises(StoreError, match="before versioned definitions"):
            open_store(f"sqlite:///{path}", read_only=read_only)


def test_a_rewritten_stored_definition_is_caught(tmp_path: Path) -> None:
    """The database's owner can drop the registry's guard and rewrite a version's text;
    whoever loads the stored versions (a migration, an audit) finds that the text no
    longer has the digest recorded with it."""
    url = f"sqlite:///{tmp_path}/owned.db"
    open_store(url, [machines.load("outcome")]).close()
    with sqlite3.connect(tmp_path / "owned.db") as conn:
        conn.execute('DROP TRIGGER "machines_definitions_frozen_update"')
        conn.execute(
            "UPDATE machines_definitions SET definition = replace(definition, "
            "'\"terminal\": true', '\"terminal\": false')"
        )
    store = open_store(url, [machines.load("outcome")], read_only=True)
    with store.transaction() as tx:
        versions = tx.definition_versions("outcome")
    store.close()
    with pytest.raises(StoreError, match="does not have the digest recorded with it"):
        load_versions(url, {"outcome": versions})
    changed = SpecCopy(tmp_path)
    with pytest.raises(StoreError, match="does not have the digest recorded with it"):
        migrate(url, {"outcome": widened(changed)})


def test_the_registry_refuses_a_gap_in_version_numbers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gap.db"
    open_store(url, [machines.load("outcome")]).close()
    with (
        sqlite3.connect(tmp_path / "gap.db") as conn,
        pytest.raises(sqlite3.IntegrityError, match=r"no gap|a row added by hand is refused"),
    ):
        conn.execute("INSERT INTO machines_definitions VALUES ('outcome', 3, 'x', 'x', '{}', 0)")


def test_a_request_version_is_loaded_with_the_node_version_of_its_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/plan.db"
    open_store(url).close()
    store = open_store(url, read_only=True)
    with store.transaction() as tx:
        versions = {m: tx.definition_versions(m) for m in ("node", "request")}
    store.close()
    loaded = load_versions(url, versions)
    assert loaded[("request", 1)].same_definition(machines.load("request"))
    assert loaded[("node", 1)].same_definition(machines.load("node"))
