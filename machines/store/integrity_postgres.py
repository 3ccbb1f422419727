"""The PostgreSQL store's check of its own guards (``machines.store.integrity``).

What is expected is read from the generated scripts: each trigger function's body (which
PostgreSQL keeps as written, in ``pg_proc.prosrc``), the search path it is pinned to, that
it runs as its caller (not ``SECURITY DEFINER``) and its other attributes
(``_ATTRIBUTES``); each trigger's table, timing and events, function, arguments and
condition. The catalog of the store's schema must hold
exactly those, every trigger enabled as installed (``ALTER TABLE ... DISABLE TRIGGER`` or
``ENABLE REPLICA TRIGGER`` differ), no other trigger on the tables, and the session must
fire ordinary triggers (``session_replication_role`` set to ``replica`` for a role or a
database turns every guard off). Nothing in ``pg_catalog``, which PostgreSQL searches
before any schema not naming it, may carry a store table's or guard function's name."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from machines.spec import MachineSpec
from machines.store.ddl import (
    REGISTRY,
    REPAIRS,
)
from machines.store.ddl_postgres import postgres_registry, postgres_repairs, postgres_schema
from machines.store.integrity import (
    CATALOG_SHADOW,
    Difference,
    moves_differences,
    object_differences,
    versions_served,
)
from machines.store.integrity_postgres_tables import (
    Expected,
    expected_tables,
    table_differences,
)
from machines.store.names import name
from machines.store.records import DefinitionVersion
from machines.store.schema_postgres import HERE, store_owner
from machines.store.sql import read_versions

Objects = dict[str, tuple[str, object]]

_FUNCTION = re.compile(
    r"CREATE OR REPLACE FUNCTION (\S+)\(\) RETURNS trigger LANGUAGE plpgsql AS "
    r"\$body\$(.*?)\$body\$;",
    re.S,
)
_TRIGGER = re.compile(
    r"CREATE OR REPLACE TRIGGER (\S+) (BEFORE|AFTER) (.+?) ON (\S+)\s+FOR EACH (ROW|STATEMENT)"
    r"(?: WHEN \((.*?)\))?\s+EXECUTE FUNCTION (\S+?)\((.*?)\);",
    re.S,
)
_TYPE = {"ROW": 1, "BEFORE": 2, "INSERT": 4, "DELETE": 8, "UPDATE": 16, "TRUNCATE": 32}
"""The bits of ``pg_trigger.tgtype``."""
_UNPINNED = frozenset({f"{REGISTRY}_refuse", f"{REPAIRS}_refuse"})
"""The generated functions without a pinned search path (they read no table)."""
_ATTRIBUTES = ("plpgsql", "v", False, False, "u", False, "trigger")
"""What every generated function is besides its body (``pg_proc``): in PL/pgSQL, volatile
(an ``IMMUTABLE`` guard may not write its history event), not strict, not leakproof,
parallel unsafe, returning one ``trigger``. Its cost, a planner's hint, is not compared."""
_INVOKER = "SECURITY INVOKER"
"""How every generated function runs: as whoever moves, never as its owner (``ALTER
FUNCTION ... SECURITY DEFINER`` would let a guard read and write as its owner)."""
TABLE_ROLES = ("moves", "entities", "history")
_ENABLED = {"O": "trigger", "A": "trigger", "D": "disabled trigger", "R": "replica-only trigger"}
"""What ``pg_trigger.tgenabled`` makes of a trigger: ``ENABLE ALWAYS`` fires in every
session, as installed or more; ``ENABLE REPLICA`` fires in none of the store's."""

_REPLICA = (
    "EXISTS (SELECT 1 FROM unnest({config}) c "
    "WHERE lower(trim(c)) = 'session_replication_role=replica')"
)
"""A setting list (``setconfig``, ``proconfig``) that switches the guards off: PostgreSQL
keeps a value as it was written ('REPLICA') and reads an enum in any case (outsider batch
39, a P2: 'REPLICA' for a role passed every open, and the role's sessions fired no guard)."""


def served_versions(
    conn: Any, specs: Mapping[str, MachineSpec], fingerprint: Callable[[MachineSpec, int], str]
) -> tuple[dict[str, DefinitionVersion | None], list[Difference]]:
    """Each machine's version as its installed history guard says, and the registry rows
    that disagree with it (``machines.store.integrity.versions_served``)."""

    def guard_of(machine: str) -> str | None:
        found = conn.execute(
            f"SELECT prosrc FROM pg_proc WHERE pronamespace = {HERE} "
            "AND proname = %s AND pronargs = 0",
            (name(machine, "history_guard").strip('"'),),
        ).fetchone()
        return None if found is None else str(found[0])

    return versions_served(specs, lambda m: read_versions(conn, "%s", m), guard_of, fingerprint)


def guard_differences(
    conn: Any, specs: Mapping[str, MachineSpec], versions: Mapping[str, int | None]
) -> list[Difference]:
    """The session's replication role, the registry's guards and each machine's at its
    version (None: not here yet), against the generated scripts; then each legal-moves
    table."""
    out = _replication_roles(conn)
    names = [REGISTRY, REPAIRS]
    pinned = _pinned(conn)
    expected = _expected(postgres_registry(), pinned)
    names += [n[:-2] for n in expected if n.endswith("()")]
    out += object_differences(None, expected, _found(conn, [REGISTRY], expected))
    found = store_owner(conn)
    owner = None if found is None else found[1]
    out += owner_differences(conn, None, [REGISTRY], expected, owner)
    shapes: list[tuple[str | None, Expected]] = [(None, expected_tables(postgres_registry()))]
    repairs = postgres_repairs()
    wanted = _expected(repairs, pinned)
    names += [n[:-2] for n in wanted if n.endswith("()")]
    out += object_differences(None, wanted, _found(conn, [REPAIRS], wanted))
    out += owner_differences(conn, None, [REPAIRS], wanted, owner)
    shapes.append((None, expected_tables(repairs)))
    for machine, version in versions.items():
        if version is None:
            continue
        spec = specs[machine]
        tables = [name(machine, role).strip('"') for role in TABLE_ROLES]
        script = postgres_schema(spec, version)
        wanted = _expected(script, pinned)
        names += tables + [n[:-2] for n in wanted if n.endswith("()")]
        out += object_differences(machine, wanted, _found(conn, tables, wanted))
        out += owner_differences(conn, machine, tables, wanted, owner)
        shapes.append((machine, expected_tables(script)))
        cursor = conn.execute(f"SELECT * FROM {name(machine, 'moves')}".encode())
        columns = [c.name for c in cursor.description]
        out += moves_differences(spec, columns, cursor.fetchall())
    return out + _shadows(conn, names) + table_differences(conn, shapes)


def _pinned(conn: Any) -> str:
    """The search path every pinned guard function is installed with."""
    (pinned,) = conn.execute(
        "SELECT pg_catalog.format('search_path=%I, pg_temp', pg_catalog.current_schema())"
    ).fetchone()
    return str(pinned)


def owner_differences(
    conn: Any,
    machine: str | None,
    tables: list[str],
    expected: Objects,
    owner: str | None,
    whose: str = "who owns the store's registry",
) -> list[Difference]:
    """The tables and guard functions of one machine (or of the registry, or of the record
    of repairs) that ``owner`` does not own (None: no owner to compare with yet). Whoever
    owns a table or a guard can switch it off or rewrite it and put it back between two
    opens, unseen: one role owns every one of the store's. An object a role planted before
    the store was installed keeps that role as its owner (``CREATE TABLE IF NOT EXISTS``
    keeps it, and so does ``CREATE OR REPLACE`` run by another role)."""
    if owner is None:
        return []
    return [
        Difference(
            machine,
            what,
            f"is owned by {role!r}, not by {owner!r} ({whose}): one role must own every "
            "table and guard function of the store (whoever owns one can switch its guard "
            "off, or rewrite it and put it back, unseen); a superuser gives each to the "
            "store's owner (ALTER ... OWNER TO), or drops what does not belong there",
        )
        for what, role in sorted(_owners(conn, tables, expected).items())
        if role != owner
    ]


def _owners(conn: Any, tables: list[str], expected: Objects) -> dict[str, str]:
    functions = [n[:-2] for n, (kind, _) in expected.items() if kind == "function"]
    return {
        f"{kind} {what}": str(role)
        for kind, what, role in conn.execute(
            "SELECT 'table', relname, pg_get_userbyid(relowner) FROM pg_class "
            f"WHERE relnamespace = {HERE} AND relname = ANY(%s) AND relkind IN ('r', 'p') "
            "UNION ALL SELECT 'function', proname || '()', pg_get_userbyid(proowner) "
            f"FROM pg_proc WHERE pronamespace = {HERE} AND proname = ANY(%s) AND pronargs = 0",
            (tables, functions),
        )
    }


def installer_differences(
    conn: Any, specs: Mapping[str, MachineSpec], installed: list[str], registry: bool
) -> list[Difference]:
    """What this session just installed (the machines ``installed``, the registry if
    ``registry``) that it does not own: an object of that name was there before, planted
    by another role, and the install kept it and its owner."""
    (me,) = conn.execute("SELECT current_user").fetchone()
    pinned = _pinned(conn)
    whose = "the role installing it"
    out = []
    if registry:
        for table, script in ((REGISTRY, postgres_registry()), (REPAIRS, postgres_repairs())):
            expected = _expected(script, pinned)
            out += owner_differences(conn, None, [table], expected, str(me), whose)
    for machine in installed:
        tables = [name(machine, role).strip('"') for role in TABLE_ROLES]
        expected = _expected(postgres_schema(specs[machine], 1), pinned)
        out += owner_differences(conn, machine, tables, expected, str(me), whose)
    return out


def _shadows(conn: Any, names: list[str]) -> list[Difference]:
    """Objects in ``pg_catalog`` named like the store's tables or guard functions. A name
    the guards' pinned search path does not list first is looked up in ``pg_catalog``
    before the store's schema: a view made there (by a superuser, with
    ``allow_system_table_mods``) would be read by every guard in place of its table."""
    found = conn.execute(
        "SELECT 'relation', relname FROM pg_class WHERE relnamespace = "
        "'pg_catalog'::regnamespace AND relname = ANY(%s) UNION ALL "
        "SELECT 'function', proname FROM pg_proc WHERE pronamespace = "
        "'pg_catalog'::regnamespace AND proname = ANY(%s) ORDER BY 2, 1",
        (names, names),
    ).fetchall()
    return [
        Difference(
            None,
            f"{CATALOG_SHADOW}{what}",
            f"a {kind} in pg_catalog has the name of one of the store's: PostgreSQL looks "
            "there first, so the guards would read or call it instead",
        )
        for kind, what in found
    ]


def _replication_roles(conn: Any) -> list[Difference]:
    """``session_replication_role = replica`` fires no ordinary trigger, so no guard judges
    a write: refused for this session, and for any role or for this database as a setting
    (``ALTER ROLE ... SET``, ``ALTER DATABASE ... SET``), whoever opens the store. ``origin``
    and ``local`` fire every guard."""
    out = []
    (role,) = conn.execute("SELECT current_setting('session_replication_role')").fetchone()
    if role == "replica":
        out.append(
            Difference(
                None,
                "session_replication_role",
                f"is '{role}' for this session: no ordinary trigger fires, so no guard "
                "judges a write",
            )
        )
    for who, database in conn.execute(
        "SELECT coalesce(r.rolname, 'every role'), coalesce(d.datname, 'every database') "
        "FROM pg_db_role_setting s LEFT JOIN pg_roles r ON r.oid = s.setrole "
        "LEFT JOIN pg_database d ON d.oid = s.setdatabase "
        "WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database "
        "WHERE datname = current_database())) "
        f"AND {_REPLICA.format(config='s.setconfig')} ORDER BY 1, 2"
    ):
        out.append(
            Difference(
                None,
                "session_replication_role",
                f"is set to 'replica' for {who} in {database}: those sessions fire no guard",
            )
        )
    for (function,) in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p "
        f"WHERE {_REPLICA.format(config='p.proconfig')} ORDER BY 1"
    ):
        out.append(
            Difference(
                None,
                "session_replication_role",
                f"is set to 'replica' by function {function}: whoever may call it writes "
                "with no guard firing",
            )
        )
    if conn.info.server_version >= 150000:
        for (granted,) in conn.execute(
            "SELECT string_agg(coalesce(r.rolname, 'every role'), ', ' ORDER BY 1) "
            "FROM pg_parameter_acl p, aclexplode(p.paracl) a "
            "LEFT JOIN pg_roles r ON r.oid = a.grantee "
            "WHERE p.parname = 'session_replication_role' "
            "AND a.privilege_type IN ('SET', 'ALTER SYSTEM') "
            "AND NOT coalesce(r.rolsuper, FALSE) HAVING count(*) > 0"
        ):
            out.append(
                Difference(
                    None,
                    "session_replication_role",
                    f"may be set by roles that are no superuser ({granted}): their sessions "
                    "(with ALTER SYSTEM, every session) can switch every guard off",
                )
            )
    return out


@functools.lru_cache(maxsize=64)
def _expected(script: str, pinned: str) -> Objects:
    out: Objects = {}
    for match in _FUNCTION.finditer(script):
        function = match.group(1).strip('"')
        config = None if function in _UNPINNED else (pinned,)
        out[f"{function}()"] = ("function", (match.group(2), config, _INVOKER, _ATTRIBUTES))
    for match in _TRIGGER.finditer(script):
        trigger, timing, events, table, level, when, function, args = match.groups()
        bits = (_TYPE["ROW"] if level == "ROW" else 0) + (
            _TYPE["BEFORE"] if timing == "BEFORE" else 0
        )
        bits += sum(_TYPE[e.strip()] for e in events.split(" OR "))
        trigger_name = trigger.strip('"')
        out[trigger_name] = (
            "trigger",
            (table.strip('"'), bits, function.strip('"'), _arguments(args), _condition(when)),
        )
    return out


def _found(conn: Any, tables: list[str], expected: Objects) -> Objects:
    out: Objects = {}
    functions = [n[:-2] for n, (kind, _) in expected.items() if kind == "function"]
    for proname, prosrc, proconfig, definer, *attributes in conn.execute(
        "SELECT p.proname, p.prosrc, p.proconfig, p.prosecdef, l.lanname, "
        "p.provolatile::text, p.proisstrict, p.proleakproof, p.proparallel::text, "
        "p.proretset, p.prorettype::regtype::text "
        "FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
        f"WHERE p.pronamespace = {HERE} "
        "AND p.proname = ANY(%s) AND p.pronargs = 0",
        (functions,),
    ):
        config = None if proconfig is None else tuple(proconfig)
        security = "SECURITY DEFINER" if definer else _INVOKER
        out[f"{proname}()"] = ("function", (prosrc, config, security, tuple(attributes)))
    for relname, tgname, enabled, bits, function, here, args, definition in conn.execute(
        "SELECT c.relname, t.tgname, t.tgenabled, t.tgtype::int "
        "+ 128 * (t.tgattr::text <> '')::int + 256 * t.tgdeferrable::int "
        "+ 512 * (t.tgconstraint <> 0)::int + 1024 "
        "* (t.tgoldtable IS NOT NULL OR t.tgnewtable IS NOT NULL)::int, p.proname, "
        f"p.pronamespace = {HERE}, t.tgargs, pg_get_triggerdef(t.oid) "
        "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p "
        f"ON p.oid = t.tgfoid WHERE c.relnamespace = {HERE} "
        "AND NOT t.tgisinternal AND c.relname = ANY(%s)",
        (tables,),
    ):
        kind = _ENABLED.get(str(enabled), f"trigger ({enabled})")
        where = function if here else f"{function} of another schema"
        values = tuple(a.decode() for a in bytes(args).split(b"\x00")[:-1])
        out[str(tgname)] = (
            kind,
            (relname, int(bits), where, values, _condition(_when_of(definition))),
        )
    return out


def _arguments(text: str) -> tuple[str, ...]:
    text = text.strip()
    if not text:
        return ()
    return (text[1:-1].replace("''", "'"),)


def _when_of(definition: str) -> str | None:
    start = definition.find(" WHEN (")
    if start < 0:
        return None
    return definition[start + len(" WHEN (") : definition.rfind(") EXECUTE FUNCTION")]


def _condition(text: str | None) -> str | None:
    """A trigger's condition with case, spaces, parentheses and quotes left out (how
    PostgreSQL prints it back differs in those alone)."""
    if text is None:
        return None
    return re.sub(r"[\s()\"]", "", text).lower()
