"""A shadow in ``pg_catalog`` (issue 27, outsider's fourth batch, f06).

The guards run with their search path pinned to the store's schema and ``pg_temp``; a
schema not named there, ``pg_catalog``, is searched first. A superuser with
``allow_system_table_mods`` made a view ``pg_catalog.outcome_moves`` that added a forged
legal move, and the next open found nothing wrong. Now every open names an object in
``pg_catalog`` that carries a store table's or guard function's name, and a repair says
it cannot remove one. Each test works in a database of its own: ``pg_catalog`` is shared
by every schema of a database."""

from __future__ import annotations

import pytest

from machines.cli import main
from machines.spec.loader import load
from machines.store import BUNDLED, open_store
from machines.store.integrity import StoreTampered
from machines.store.records import StoreError
from machines.store.repair import repair
from tests.test_attacks_tampering import own_database

FORGED_MOVES = (
    "CREATE VIEW pg_catalog.outcome_moves AS SELECT source, dest, trigger, actor "
    "FROM public.outcome_moves UNION ALL "
    "SELECT 'indeterminate', 'succeeded', 'decide_landed', 'worker'"
)


@pytest.mark.parametrize(
    ("made", "named"),
    [
        (FORGED_MOVES, "pg_catalog.outcome_moves: a relation in pg_catalog"),
        (
            "CREATE VIEW pg_catalog.outcome_history AS SELECT * FROM public.outcome_history",
            "pg_catalog.outcome_history: a relation in pg_catalog",
        ),
        (
            "CREATE FUNCTION pg_catalog.outcome_entities_guard() RETURNS trigger "
            "LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$",
            "pg_catalog.outcome_entities_guard: a function in pg_catalog",
        ),
    ],
    ids=["moves-view", "history-view", "guard-function"],
)
def test_an_object_in_pg_catalog_with_a_store_name_is_named(
    made: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    with own_database() as (_, url):
        open_store(url).close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SET allow_system_table_mods = on")
            admin.execute(made.encode())
        with pytest.raises(StoreTampered, match=named):
            open_store(url)
        assert main(["audit", "--from-store", url]) != 0
        shadow = named.split(":")[0]
        assert f"[guards-intact] store '{shadow}': a " in capsys.readouterr().out
        specs = {m: load(m) for m in BUNDLED}
        with pytest.raises(StoreError, match=r"does not touch PostgreSQL.s system catalog"):
            repair(url, specs, by="alice")


def test_an_unrelated_object_in_pg_catalog_is_no_alarm() -> None:
    import psycopg

    with own_database() as (_, url):
        open_store(url).close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SET allow_system_table_mods = on")
            admin.execute(b"CREATE VIEW pg_catalog.my_report AS SELECT 1 AS one")
        open_store(url).close()
