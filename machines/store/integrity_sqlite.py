"""The SQLite store's check of its own guards (``machines.store.integrity``).

What is expected is what the generated scripts make: they run once in a scratch in-memory
database, and its ``sqlite_master`` (every table, index and trigger with the text SQLite
keeps of it) is compared, name by name, with the store's, for the registry and each
machine's tables. SQLite keeps a trigger's whole text, so a guard replaced by a no-op of
the same name differs, and so does one dropped or added."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping

from machines.spec import MachineSpec
from machines.store.ddl import (
    REGISTRY,
    REPAIRS,
    sqlite_registry,
    sqlite_repairs,
    sqlite_schema,
    statements,
)
from machines.store.integrity import (
    Difference,
    moves_differences,
    object_differences,
    versions_served,
)
from machines.store.names import name, quote
from machines.store.records import DefinitionVersion
from machines.store.sql import read_versions

Objects = dict[str, tuple[str, object]]
"""Schema objects by name: (kind, (table, SQL text))."""

TABLE_ROLES = ("moves", "entities", "history")


def served_versions(
    conn: sqlite3.Connection,
    specs: Mapping[str, MachineSpec],
    fingerprint: Callable[[MachineSpec, int], str],
) -> tuple[dict[str, DefinitionVersion | None], list[Difference]]:
    """Each machine's version as its installed history guard says, and the registry rows
    that disagree with it (``machines.store.integrity.versions_served``)."""

    def guard_of(machine: str) -> str | None:
        found = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
            (name(machine, "history_guard").strip('"'),),
        ).fetchone()
        return None if found is None else str(found[0])

    return versions_served(specs, lambda m: read_versions(conn, "?", m), guard_of, fingerprint)


def guard_differences(
    conn: sqlite3.Connection, specs: Mapping[str, MachineSpec], versions: Mapping[str, int | None]
) -> list[Difference]:
    """The registry's objects and those of each machine at its version (None: not here
    yet, nothing to compare), against what the scripts make; then each legal-moves
    table."""
    registry = _expected(sqlite_registry())
    out = object_differences(
        None, registry, _without_reporting(conn, registry, _found(conn, [REGISTRY]))
    )
    out += object_differences(None, _expected(sqlite_repairs()), _found(conn, [REPAIRS]))
    for machine, version in versions.items():
        if version is None:
            continue
        spec = specs[machine]
        tables = [name(machine, role).strip('"') for role in TABLE_ROLES]
        expected = _expected(sqlite_schema(spec, version))
        out += object_differences(
            machine, expected, _without_reporting(conn, expected, _found(conn, tables))
        )
        cursor = conn.execute(f"SELECT * FROM {name(machine, 'moves')}")
        columns = [c[0] for c in cursor.description]
        out += moves_differences(spec, columns, cursor.fetchall())
    return out + _shadows(conn)


SHADOWED = ("json_each", "json_tree")
"""The table-valued functions the guards call: a table or view of the same name in the
database would be read in their place, and change what every guard decides."""


def _shadows(conn: sqlite3.Connection) -> list[Difference]:
    marks = ", ".join("?" * len(SHADOWED))
    return [
        Difference(
            None,
            f"{kind} {found}",
            f"has the name of the function {found.lower()}() the guards call, and would be "
            "read in its place: rename or drop it",
        )
        for kind, found in conn.execute(
            f"SELECT type, name FROM sqlite_master WHERE lower(name) IN ({marks})", SHADOWED
        )
    ]


def _without_reporting(conn: sqlite3.Connection, expected: Objects, found: Objects) -> Objects:
    """``found`` without the plain indexes someone added for their own queries: an index
    on columns alone, not UNIQUE and without a WHERE clause, changes no answer and refuses
    no write (one on an expression or with a WHERE clause is evaluated on every write, and
    can refuse a legal one)."""
    return {
        n: o for n, o in found.items() if n in expected or not (o[0] == "index" and _plain(conn, n))
    }


def _plain(conn: sqlite3.Connection, index: str) -> bool:
    """An index on columns alone, compared as stored (``BINARY``: a collation of its own
    is code every write runs, and one SQLite lacks refuses every write)."""
    table = conn.execute(
        "SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND name = ?", (index,)
    ).fetchone()
    if table is None:
        return False
    listed = {
        row[1]: (row[2], row[4]) for row in conn.execute(f"PRAGMA index_list({quote(table[0])})")
    }
    unique, partial = listed.get(index, (1, 1))
    columns = [row for row in conn.execute(f"PRAGMA index_xinfo({quote(index)})") if row[5]]
    return (
        not unique
        and not partial
        and all(row[1] >= 0 and str(row[4]).upper() == "BINARY" for row in columns)
    )


@functools.lru_cache(maxsize=64)
def _expected(script: str) -> Objects:
    """What ``script`` makes, as ``sqlite_master`` records it, in a scratch database."""
    scratch = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for statement in statements(script):
            scratch.execute(statement)
        return _objects(scratch.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    finally:
        scratch.close()


def _found(conn: sqlite3.Connection, tables: list[str]) -> Objects:
    marks = ", ".join("?" * len(tables))
    return _objects(
        conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            f"WHERE lower(tbl_name) IN ({marks})",
            [t.lower() for t in tables],
        )
    )


def _objects(rows: sqlite3.Cursor) -> Objects:
    return {str(n): (str(kind), (str(table), sql)) for kind, n, table, sql in rows}
