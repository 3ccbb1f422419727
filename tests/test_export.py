"""``machines export``: the JSON other languages load and the SQL the store runs."""

from __future__ import annotations

import json

import pytest

import machines
from machines.cli import main
from machines.store.ddl import sqlite_schema
from machines.store.ddl_postgres import postgres_schema
from tests.conftest import postgres_schema as postgres_schema_on_server


@pytest.mark.parametrize("name", ["effect", "outcome", "node", "request"])
def test_json_export_carries_the_whole_definition(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = machines.load(name)
    assert main(["export", name, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["machine"] == name and doc["initial"] == spec.initial
    assert list(doc["states"]) == list(spec.states)
    assert [(t["source"], t["trigger"], t["dest"]) for t in doc["transitions"]] == [
        (t.source, t.trigger, t.dest) for t in spec.transitions
    ]
    assert {f["id"] for f in doc["findings"]} == {f.id for f in spec.findings}
    assert ("derivation" in doc) == (spec.derivation is not None)
    for t, exported in zip(spec.transitions, doc["transitions"], strict=True):
        for var, values in exported["when"].items():
            assert set(values) == set(t.when[var])
        assert exported["unreachable_in_systems"] == t.unreachable_in_systems


def test_json_export_says_which_transitions_no_system_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``export --format json`` promised everything the definition says and dropped
    ``unreachable_in_systems`` (issue 15): effect's replay edge carries its finding."""
    assert main(["export", "effect", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    marked = {
        (t["source"], t["trigger"], t["dest"]): t["unreachable_in_systems"]
        for t in doc["transitions"]
        if t["unreachable_in_systems"]
    }
    assert set(marked) == set(machines.load("effect").unreachable_in_systems)
    assert marked, "effect marks no transition unreachable in systems"


def test_sql_export_is_the_store_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "effect", "--format", "sql"]) == 0
    assert capsys.readouterr().out == sqlite_schema(machines.load("effect"))


def test_postgresql_export_is_the_store_schema_and_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import psycopg

    assert main(["export", "outcome", "--format", "postgresql"]) == 0
    script = capsys.readouterr().out
    assert script == postgres_schema(machines.load("outcome"))
    with postgres_schema_on_server() as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(script.encode())
        conn.execute(script.encode())  # idempotent: a second run changes nothing
        with pytest.raises(psycopg.Error, match="starts in in_flight"):
            conn.execute(
                "INSERT INTO outcome_entities (key, state, created_at, updated_at) "
                "VALUES ('k', 'succeeded', 0, 0)"
            )


def test_export_of_an_unknown_machine_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "nope"]) == 2
    assert "did you mean 'node'" in capsys.readouterr().err
