"""``machines repair``: a store's guards put back as machines installed them, by the owner,
explicitly, and recorded.

A store refuses to open when its guards differ from the generated ones
(``machines.store.integrity``). Its owner decides what happened and runs the repair, which
in one transaction, the database locked as for a migration:

- checks that the definitions given are the ones the store serves (``DefinitionChanged``
  otherwise: a repair reinstalls a version, it never migrates);
- drops every trigger on the tables of each machine, of the registry and of the record
  of repairs (``_record`` puts the latter back), and each
  machine's legal-moves table whose rows or columns differ, and runs the generated
  schema of its current version again (SQLite: the same statements a new store runs;
  PostgreSQL: the functions and triggers replaced, all enabled, and each creation-order
  sequence put back as BIGSERIAL makes it, its next place past every place taken);
- removes the registry rows no migration wrote above the version the store serves (the
  one its history guard writes, or a later genuine row when the guards were put back to
  an older version's: that row is never removed), with the registry's guards off only
  within this transaction;
- records the repair in ``machines_repairs`` (when, who, each difference it found), which
  is append-only, so that ``machines audit --from-store`` names every repair;
- checks again, and rolls everything back if any difference remains: what it does not
  put back (on PostgreSQL a table's columns, key and constraints, a rule, row-level
  security, a child table, ``session_replication_role`` set for a role or a database) is
  the owner's to undo by hand first.

The data written while the guards were off stays as it is: the audit judges it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from machines.errors import InvalidArgument
from machines.spec import MachineSpec
from machines.store.arguments import check_key, specs_by_name, text
from machines.store.ddl import REGISTRY, REPAIRS, sqlite_repairs, statements
from machines.store.ddl_postgres import postgres_repairs
from machines.store.integrity import CATALOG_SHADOW, MOVES_TABLE, Difference
from machines.store.migration import Database, db_on, open_database
from machines.store.names import name, quote
from machines.store.records import MAX_STORED_INT, StoreError
from machines.store.versions import fits


@dataclass(frozen=True)
class Repair:
    """What a repair found (``differences``) and whether it was carried out."""

    where: str
    differences: tuple[Difference, ...]
    applied: bool

    def lines(self) -> list[str]:
        return [f"{self.where}: {d.describe()}" for d in self.differences]


def repair(url: str, specs: Mapping[str, MachineSpec], *, by: str, dry_run: bool = False) -> Repair:
    """Put back the guards of the store at ``url`` (see the module), recorded as done by
    ``by``. ``dry_run``: only list what differs."""
    url = check_key(text(url, "a store URL"), "repair", "URL")
    specs = specs_by_name(specs)
    by = check_key(text(by, "who repairs (--by)"), "repair", "--by")
    if not by.strip():
        raise InvalidArgument(
            f"repair: --by {by!r} names nobody; give the name of the person who repairs, as "
            "every audit prints it"
        )
    if not by.isprintable():
        raise InvalidArgument(
            f"repair: --by {by!r} holds a character that is not printable (a line break, a "
            "tab, a line separator, a direction override); name the person on one line, as "
            "every audit prints it"
        )
    if not isinstance(dry_run, bool):
        raise InvalidArgument(f"dry_run must be True or False, not {type(dry_run).__name__}")
    db = open_database(url, "repair")
    try:
        if not db.has_table(REGISTRY):
            raise StoreError(f"{db.where}: no machines tables here; there is nothing to repair")
        tables = [name(m, r) for m in specs for r in ("entities", "history", "moves")]
        db.begin([t for t in tables if db.has_table(t.strip('"'))])
        versions, found = _differences(db, specs)
        if not found or dry_run:
            return Repair(db.where, tuple(found), applied=False)
        shadows = [d for d in found if d.where.startswith(CATALOG_SHADOW)]
        if shadows:
            raise StoreError(
                f"{db.where}: the repair does not touch PostgreSQL's system catalog, so "
                "nothing changed: "
                + "; ".join(d.describe() for d in shadows)
                + ". Drop those by hand (a superuser, with allow_system_table_mods on), then "
                "run the repair again"
            )
        _reinstall(db, specs, versions, {d.machine for d in found if d.where == MOVES_TABLE})
        if db.param == "%s":
            _put_back_creation_order(db, versions)
        _record(db, by, found)
        left = _differences(db, specs)[1]
        if left:
            raise StoreError(
                f"{db.where}: the repair puts back triggers, functions, legal moves and "
                "registry rows, not what else was changed, so nothing changed: "
                + "; ".join(d.describe() for d in left)
                + ". Undo those by hand (a table's key, constraints, rules, row-level "
                "security, child tables, a role's setting), then run the repair again"
            )
        db.commit()
        return Repair(db.where, tuple(found), applied=True)
    finally:
        db.close()


def _differences(
    db: Database, specs: Mapping[str, MachineSpec]
) -> tuple[dict[str, int], list[Difference]]:
    served, forged = db.served(specs)
    absent = [m for m in specs if served.get(m) is None]
    if absent:  # outsider batch 45 (c F5): ignored, and the audit it advised then failed
        kept = [m for m in specs if m not in absent]
        raise StoreError(
            f"{db.where}: the store has no machine {', '.join(map(repr, absent))}; a repair "
            "puts back the guards of the machines a store serves, with their definitions: "
            f"give those alone ({', '.join(kept) or 'none of those given'}); nothing changed"
        )
    for machine, version in served.items():
        fits(db.where, specs[machine], version, db.fingerprint, specs)
    versions = {m: v.version for m, v in served.items() if v is not None}
    return versions, [*forged, *db.differences(specs, dict(versions))]


def _reinstall(
    db: Database,
    specs: Mapping[str, MachineSpec],
    versions: Mapping[str, int],
    forged_moves: set[str | None],
) -> None:
    """The guards put back; a machine's legal-moves table is made again only when its rows
    or columns differ (a view you made over an intact one is kept)."""
    for table, trigger in db.triggers([quote(REGISTRY), quote(REPAIRS)]):
        db.execute(f"DROP TRIGGER IF EXISTS {quote(trigger)}" + db_on(db, table))
    p = db.param
    for machine, version in versions.items():
        db.execute(
            f"DELETE FROM {REGISTRY} WHERE machine = {p} AND version > {p}", (machine, version)
        )
    for machine, version in versions.items():
        tables = [name(machine, role) for role in ("moves", "entities", "history")]
        for table, trigger in db.triggers(tables):
            db.execute(f"DROP TRIGGER IF EXISTS {quote(trigger)}" + db_on(db, table))
        if machine in forged_moves:
            db.execute(f"DROP TABLE IF EXISTS {name(machine, 'moves')}")
        for statement in db.schema(specs[machine], version):
            db.execute(statement)
    for statement in db.registry_schema():
        db.execute(statement)


def _put_back_creation_order(db: Database, versions: Mapping[str, int]) -> None:
    """PostgreSQL: each creation-order sequence as BIGSERIAL makes it (by 1, from 1, one
    at a time, logged, never cycling), its next place past every place taken and never
    behind where it stood. The places entities took while it was changed stay as they
    are."""
    for machine in versions:
        table = name(machine, "entities")
        found = db.execute(
            "SELECT pg_get_serial_sequence(c.oid::regclass::text, 'ordinal') FROM pg_class c "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'ordinal' "
            "AND NOT a.attisdropped WHERE c.oid = to_regclass(%s)",
            (table,),
        )
        if not found or found[0][0] is None:
            continue  # a missing column is named, and left to the owner
        sequence = found[0][0]
        ((after,),) = db.execute(
            f"SELECT greatest(coalesce((SELECT max(ordinal) FROM {table}), 0) + 1, 1, "
            "(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END "
            f"FROM {sequence}))"
        )
        db.execute(
            f"ALTER SEQUENCE {sequence} INCREMENT BY 1 MINVALUE 1 MAXVALUE {MAX_STORED_INT} "
            f"CACHE 1 NO CYCLE RESTART WITH {int(after)}"
        )
        db.execute(f"ALTER SEQUENCE {sequence} SET LOGGED")


def _record(db: Database, by: str, found: list[Difference]) -> None:
    script = postgres_repairs() if db.param == "%s" else sqlite_repairs()
    for statement in [script] if db.param == "%s" else list(statements(script)):
        db.execute(statement)
    p = db.param
    db.execute(
        f"INSERT INTO {REPAIRS} (at, person, found) VALUES ({p}, {p}, {p})",
        (time.time(), by, json.dumps([d.describe() for d in found])),
    )
