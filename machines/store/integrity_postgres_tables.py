"""The PostgreSQL store's check of its tables themselves (``machines.store.integrity``):
the guards are triggers, and a table can be changed around them.

Expected is what the generated ``CREATE TABLE`` statements say: each column's name, type,
NOT NULL and default, in order, with its type's own collation; the primary key; each
CHECK; the indexes the script makes. The catalog must hold exactly those (a CHECK
compared with PostgreSQL's casts, spaces and parentheses left out; a plain index someone
added for their own queries changes no answer and is left alone, but not a UNIQUE one,
nor one on an expression or with a WHERE clause, which every write evaluates), and each
table must be an ordinary, logged table that inherits from nothing and that nothing
inherits from (a child's rows are read as the table's, and no guard of the table judges
them), with no rule (which rewrites a write before any trigger sees it) and no row-level
security (which hides rows from the store's reads)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from machines.store.ddl import literal
from machines.store.integrity import Difference
from machines.store.names import quote
from machines.store.records import MAX_STORED_INT

_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\S+) \(\n(.*?)\n\);", re.S)
_TYPES = {
    "TEXT": "text",
    "JSON": "json",
    "INTEGER": "integer",
    "DOUBLE PRECISION": "double precision",
    "BIGSERIAL": "bigint",
}
_CLAUSE = re.compile(r" (NOT NULL|DEFAULT|CHECK|PRIMARY KEY)\b")
HERE = "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"

Column = tuple[str, str, bool, str | None]  # name, type, not null, default
Expected = dict[str, tuple[tuple[Column, ...], tuple[str, ...]]]


@functools.lru_cache(maxsize=64)
def expected_tables(script: str) -> Expected:
    """Each table ``script`` creates: its columns, and its constraints (normalised)."""
    out = {}
    for match in _TABLE.finditer(script):
        table, body = match.group(1).strip('"'), match.group(2)
        columns: list[Column] = []
        constraints: list[str] = []
        key: list[str] = []
        for line in (raw.strip().rstrip(",") for raw in body.splitlines()):
            if line.startswith("PRIMARY KEY"):
                constraints.append(normal(line))
                key += [c.strip() for c in line[line.index("(") + 1 : -1].split(",")]
            elif line.startswith("CHECK"):
                constraints.append(normal(line))
            elif line.startswith("CONSTRAINT"):  # CONSTRAINT name UNIQUE (...)
                constraints.append(normal(line.split(" ", 2)[2]))
            else:
                columns.append(_column(line, constraints))
        columns = [
            (n, t, null or n in key, d) for n, t, null, d in columns
        ]  # a primary key's columns are NOT NULL
        out[table] = (tuple(columns), tuple(sorted(constraints)))
    return out


def _column(line: str, constraints: list[str]) -> Column:
    column, _, rest = line.partition(" ")
    clause = _CLAUSE.search(" " + rest)
    kind = (rest if clause is None else rest[: clause.start()]).strip()
    clauses = "" if clause is None else " " + rest[clause.start() :]
    default = None
    if kind == "BIGSERIAL":
        default = "nextval"
    elif " DEFAULT " in clauses:
        default = normal(clauses.split(" DEFAULT ", 1)[1].split(" CHECK ", 1)[0].split(" NOT ")[0])
    if " CHECK " in clauses:
        constraints.append(normal("CHECK " + clauses.split(" CHECK ", 1)[1]))
    if " PRIMARY KEY" in clauses:
        constraints.append(normal(f"PRIMARY KEY ({column})"))
    not_null = kind == "BIGSERIAL" or " NOT NULL" in clauses or " PRIMARY KEY" in clauses
    return column, _TYPES.get(kind, kind.lower()), not_null, default


def normal(text: str) -> str:
    """A constraint or default as both sides print it: casts, spaces, parentheses and
    double quotes left out, lower case."""
    text = re.sub(r"::(?:double precision|[a-z ]+?(?=[\s),]|$))", "", text.strip())
    text = re.sub(r"[\s()\"]", "", text).lower()
    return "nextval" if text.startswith("nextval") else text


def table_differences(conn: Any, owners: Sequence[tuple[str | None, Expected]]) -> list[Difference]:
    """The tables each owner (a machine, or None: the store's own) expects, as the catalog
    holds them, against what it expects: three catalog reads for every table at once."""
    tables = [t for _, expected in owners for t in expected]
    found_columns: dict[str, list[Column]] = {t: [] for t in tables}
    for table, column, kind, not_null, default in conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) || CASE WHEN "
        "a.attcollation = ty.typcollation THEN '' ELSE ' COLLATE ' || "
        "coalesce(co.collname, a.attcollation::text) END || CASE WHEN a.attidentity <> '' "
        "THEN ' GENERATED AS IDENTITY' ELSE '' END || CASE WHEN a.attgenerated <> '' THEN "
        "' GENERATED ALWAYS AS (...) STORED' ELSE '' END, a.attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type ty ON ty.oid = a.atttypid "
        "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        f"WHERE c.relnamespace = {HERE} AND c.relname = ANY(%s) AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY c.relname, a.attnum",
        (tables,),
    ):
        found_columns[table].append(
            (column, kind, bool(not_null), None if default is None else normal(default))
        )
    found_constraints: dict[str, list[str]] = {t: [] for t in tables}
    for table, definition in conn.execute(
        "SELECT c.relname, pg_get_constraintdef(o.oid) FROM pg_constraint o "
        "JOIN pg_class c ON c.oid = o.conrelid "
        f"WHERE c.relnamespace = {HERE} AND c.relname = ANY(%s) AND o.contype <> 'n'",
        (tables,),
    ):
        found_constraints[table].append(normal(definition))
    properties = _properties(conn, tables)
    out = []
    for machine, expected in owners:
        for table, (columns, constraints) in expected.items():
            out += _columns(machine, table, columns, found_columns[table])
            out += _constraints(machine, table, constraints, found_constraints[table])
            out += [Difference(machine, f"table {table}", p) for p in properties.get(table, ())]
    return out


def _columns(
    machine: str | None, table: str, expected: Sequence[Column], found: Sequence[Column]
) -> list[Difference]:
    if list(found) == list(expected):
        return []
    if not found:
        return [Difference(machine, f"table {table}", "missing (dropped?)")]

    def shown(columns: Sequence[Column]) -> str:
        return ", ".join(
            f"{n} {t}{' NOT NULL' if null else ''}{f' DEFAULT {d}' if d else ''}"
            for n, t, null, d in columns
        )

    return [
        Difference(
            machine,
            f"table {table}",
            f"columns ({shown(found)}), not as generated ({shown(expected)})",
        )
    ]


def _constraints(
    machine: str | None, table: str, expected: Sequence[str], found: Sequence[str]
) -> list[Difference]:
    want, have = Counter(expected), Counter(found)
    out = [
        Difference(machine, f"table {table}", f"constraint missing (dropped?): {c}")
        for c in sorted(want - have)
    ]
    out += [
        Difference(machine, f"table {table}", f"a constraint not generated by machines: {c}")
        for c in sorted(have - want)
    ]
    return out


def _properties(conn: Any, tables: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    serials: dict[str, str] = {}
    for (
        table,
        kind,
        persistence,
        security,
        forced,
        parents,
        children,
        rules,
        unique,
        computed,
        sequence,
        serial,
        subscriptions,
    ) in conn.execute(
        "SELECT c.relname, c.relkind, c.relpersistence, c.relrowsecurity, "
        "c.relforcerowsecurity, "
        "(SELECT count(*) FROM pg_inherits i WHERE i.inhrelid = c.oid), "
        "(SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid), "
        "(SELECT count(*) FROM pg_rewrite r WHERE r.ev_class = c.oid), "
        "(SELECT count(*) FROM pg_index x WHERE x.indrelid = c.oid AND x.indisunique "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint o WHERE o.conindid = x.indexrelid)), "
        "(SELECT count(*) FROM pg_index x WHERE x.indrelid = c.oid AND NOT x.indisunique "
        "AND (x.indexprs IS NOT NULL OR x.indpred IS NOT NULL)), "
        "(SELECT count(*) FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid "
        "AND d.adnum = a.attnum WHERE a.attrelid = c.oid AND a.attname = 'ordinal' AND ("
        "pg_get_serial_sequence(c.oid::regclass::text, 'ordinal') IS NULL OR "
        "pg_get_expr(d.adbin, d.adrelid) <> format('nextval(%%L::regclass)', "
        "pg_get_serial_sequence(c.oid::regclass::text, 'ordinal')::regclass) OR "
        "(SELECT seqincrement <> 1 OR seqcycle OR seqmin <> 1 OR seqmax <> "
        f"{MAX_STORED_INT} OR seqcache <> 1 OR q.relpersistence <> 'p' FROM pg_sequence "
        "JOIN pg_class q ON q.oid = seqrelid WHERE seqrelid = "
        "pg_get_serial_sequence(c.oid::regclass::text, 'ordinal')::regclass))), "
        "(SELECT pg_get_serial_sequence(c.oid::regclass::text, 'ordinal') FROM pg_attribute a "
        "WHERE a.attrelid = c.oid AND a.attname = 'ordinal' AND NOT a.attisdropped), "
        "(SELECT string_agg(quote_ident(s.subname), ', ' ORDER BY s.subname) "
        "FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid "
        "WHERE r.srrelid = c.oid) "
        f"FROM pg_class c WHERE c.relnamespace = {HERE} AND c.relname = ANY(%s)",
        (tables,),
    ):
        problems = out.setdefault(table, [])
        if kind != "r":
            problems.append(f"is not an ordinary table (relkind {kind})")
        if persistence != "p":
            problems.append("is not logged (a crash empties an unlogged table)")
        if security or forced:
            problems.append("has row-level security on (it hides rows from the store's reads)")
        if parents:
            problems.append("inherits from another table")
        if children:
            problems.append(
                "is inherited by another table (its rows are read as this table's, and no "
                "guard of this table judges them)"
            )
        if rules:
            problems.append("has a rule (it rewrites a write before any guard sees it)")
        if unique:
            problems.append("has a UNIQUE index not generated by machines")
        if sequence:
            problems.append(
                "its creation order is not drawn, rising, from its own sequence as "
                "BIGSERIAL makes it (by 1, from 1, one at a time, logged, never cycling; "
                "the order compensation undoes in, newest first, would change)"
            )
        elif serial is not None:
            serials[table] = serial
        if subscriptions:
            problems.append(
                f"is written by logical-replication subscription {subscriptions}, whose "
                "apply worker fires no ordinary trigger: no guard judges what it writes "
                "(a superuser drops it: DROP SUBSCRIPTION)"
            )
        if computed:
            problems.append(
                "has an index on an expression or with a WHERE clause not generated by "
                "machines (evaluated on every write, it can refuse a legal one)"
            )
    for table in _set_back(conn, serials):
        out[table].append(
            "its creation-order sequence was set back to a place an entity holds (ALTER "
            "SEQUENCE ... RESTART): the next creations would fail on a taken place"
        )
    return out


def _set_back(conn: Any, serials: dict[str, str]) -> list[str]:
    """The tables (of ``serials``: each table's creation-order sequence, as PostgreSQL
    names it) whose sequence's next value is a place an entity already holds: an owner's
    ``RESTART`` lower, which its settings do not show. One statement for them all."""
    if not serials:
        return []
    parts = [
        f"SELECT {literal(table)}, (SELECT CASE WHEN is_called THEN last_value + 1 "
        f"ELSE last_value END FROM {sequence}) <= (SELECT max(ordinal) FROM "
        f"{quote(table)})"
        for table, sequence in sorted(serials.items())
    ]
    rows = conn.execute(" UNION ALL ".join(parts).encode()).fetchall()
    return [table for table, behind in rows if behind]
