"""The schema a PostgreSQL store lives in: found on the session's search path, pinned, and
kept free of code that another role could make PostgreSQL run inside the guards.

PostgreSQL searches ``pg_catalog`` first, but only among functions and operators with
the very same argument types: a call that needs a conversion to reach the built-in one
(``format(text, text)`` for ``format(text, VARIADIC "any")``, ``currval(text)`` for
``currval(regclass)``, ``json_object_agg(text, json)``) is answered by an exact match in
any schema on the path. The guards' path is the store's schema (and ``pg_temp``, which is
never searched for functions or operators), so a function or operator made there by a
role that does not own the store would run inside every guard, as whoever writes, the
owner included. So, on every open, before anything else runs there:

- no role but the store's owner, the schema's owner and superusers may create objects in
  the schema (``REVOKE CREATE ON SCHEMA ... FROM ...`` otherwise; PostgreSQL 14 and
  earlier grant it on ``public`` to everyone);
- every function, aggregate, procedure and operator in it is one machines made, an
  extension's, or owned by the store's owner or a superuser;
- no such role holds ``TRIGGER`` on a store table or ``UPDATE`` on a store sequence, nor
  is given either by the owner's default privileges.

Every query here, and every statement run before the path is pinned, names ``pg_catalog``
for each function and operator it calls, so none of them can be answered by such code.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from machines.store.ddl import REGISTRY
from machines.store.integrity import Difference
from machines.store.records import StoreError

HERE = (
    "(SELECT oid FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) "
    "pg_catalog.current_schema())"
)
"""The store's schema (the session's current one), found by its name as it is
(``::regnamespace`` would parse the name again, and miss a schema called ``"Tenant"``),
and without calling anything a schema on the path could answer."""


def one_store_on_path(conn: Any, where: str) -> str | None:
    """The schema the store is in, or is made in (``current_schema()``; None when the
    search path names no schema that exists). The session's search path finds at most one
    store, and it is in that schema. Otherwise a second store, made in a schema earlier on
    the path (a schema named after the role is first by default), would silently stand in
    for the real one: a key parked in one could run again in the other."""
    found = [
        row[0]
        for row in conn.execute(
            "SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
            "WHERE c.relname OPERATOR(pg_catalog.=) %s::pg_catalog.name "
            "AND n.nspname OPERATOR(pg_catalog.=) ANY(pg_catalog.current_schemas(false)) "
            "ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(false), n.nspname)",
            (REGISTRY,),
        )
    ]
    here = conn.execute("SELECT pg_catalog.current_schema()").fetchone()
    schema = here[0] if here else None
    if len(found) > 1 or (found and found[0] != schema):
        stores = " and ".join(repr(f) for f in found)
        raise StoreError(
            f"{where}: the search path finds a store in {stores}, and this session's tables "
            f"are those of {schema!r}: one store would stand in for another. Name the "
            "store's schema in the URL (?options=-csearch_path%3DSCHEMA), or remove the "
            "store that should not be there"
        )
    return None if schema is None else str(schema)


def pin_search_path(conn: Any, schema: str) -> None:
    """The session's search path set to ``schema`` and ``pg_temp`` alone (quoted here, not
    by the server's ``format``, which a function on the path could stand in for)."""
    path = sql.SQL("{}, pg_temp").format(sql.Identifier(schema)).as_string(conn)
    conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)", (path,))


def foreign_code(conn: Any) -> list[Difference]:
    """Who else may create objects in the store's schema, and each function, aggregate,
    procedure or operator in it that neither an extension, the store's owner nor a
    superuser made (machines' own functions are the owner's: ``integrity_postgres`` checks
    that)."""
    owner = _owner_or_me(conn)
    out = [
        Difference(
            None,
            f"schema {schema}",
            f"{role} may create objects in it: a function made there can stand in for a "
            "built-in inside every guard, and run as whoever writes, the owner included. "
            f"The schema's owner revokes it: REVOKE CREATE ON SCHEMA {schema} FROM {role}",
        )
        for schema, role in conn.execute(
            "SELECT n.nspname, COALESCE(r.rolname, 'PUBLIC') "
            "FROM pg_catalog.pg_namespace n "
            "CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a "
            "LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee "
            f"WHERE n.oid OPERATOR(pg_catalog.=) {HERE} "
            "AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text "
            "AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner "
            "AND a.grantee OPERATOR(pg_catalog.<>) %s::pg_catalog.oid "
            "AND NOT COALESCE(r.rolsuper, false) ORDER BY 2",
            (owner,),
        )
    ]
    out += _granted_code(conn, owner) + _default_grants(conn, owner)
    trusted = (
        "NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid "
        "OPERATOR(pg_catalog.=) 'pg_catalog.{catalog}'::pg_catalog.regclass AND d.objid "
        "OPERATOR(pg_catalog.=) {oid} AND d.deptype OPERATOR(pg_catalog.=) "
        "'e'::pg_catalog.\"char\") "
        "AND {owner} OPERATOR(pg_catalog.<>) %s::pg_catalog.oid AND NOT EXISTS (SELECT 1 FROM "
        "pg_catalog.pg_roles s WHERE s.oid OPERATOR(pg_catalog.=) {owner} AND s.rolsuper)"
    )
    found = conn.execute(
        "SELECT 'function', p.oid::pg_catalog.regprocedure::pg_catalog.text, "
        "pg_catalog.pg_get_userbyid(p.proowner) FROM pg_catalog.pg_proc p "
        f"WHERE p.pronamespace OPERATOR(pg_catalog.=) {HERE} AND "
        + trusted.format(catalog="pg_proc", oid="p.oid", owner="p.proowner")
        + " UNION ALL SELECT 'operator', o.oid::pg_catalog.regoperator::pg_catalog.text, "
        "pg_catalog.pg_get_userbyid(o.oprowner) FROM pg_catalog.pg_operator o "
        f"WHERE o.oprnamespace OPERATOR(pg_catalog.=) {HERE} AND "
        + trusted.format(catalog="pg_operator", oid="o.oid", owner="o.oprowner")
        + " ORDER BY 2",
        (owner, owner),
    ).fetchall()
    return out + [
        Difference(
            None,
            f"{kind} {name}",
            f"is in the store's schema, made by {role!r}, not by machines nor the store's "
            "owner: PostgreSQL may call it in place of a built-in inside the guards. Keep "
            "the store in a schema of its own, or drop it",
        )
        for kind, name, role in found
    ]


def _granted_code(conn: Any, owner: int) -> list[Difference]:
    """Another role's grant of ``TRIGGER`` on a store table, or of ``UPDATE`` on a store
    sequence. The first lets that role attach a trigger of its own (its function in its
    ``pg_temp``, gone with its session) that rewrites every row as it is written, a
    committed result included, after the guards judged it; the second lets it ``setval``
    a creation order into a gap and back, so that a saga undoes out of order (outsider
    batch 35, a B and a C). Neither leaves a trace an open could see afterwards, so the
    grant itself is refused."""
    found = conn.execute(
        "SELECT c.relkind, COALESCE(r.rolname, 'PUBLIC'), a.privilege_type, "
        "pg_catalog.string_agg(c.relname, ', ' ORDER BY c.relname), "
        "pg_catalog.current_schema() "
        "FROM pg_catalog.pg_class c CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a "
        "LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee "
        f"WHERE c.relnamespace OPERATOR(pg_catalog.=) {HERE} "
        "AND c.relowner OPERATOR(pg_catalog.=) %s::pg_catalog.oid "
        "AND ((c.relkind OPERATOR(pg_catalog.=) 'r'::pg_catalog.\"char\" AND a.privilege_type "
        "OPERATOR(pg_catalog.=) 'TRIGGER'::pg_catalog.text) OR (c.relkind "
        "OPERATOR(pg_catalog.=) 'S'::pg_catalog.\"char\" AND a.privilege_type "
        "OPERATOR(pg_catalog.=) 'UPDATE'::pg_catalog.text)) "
        "AND a.grantee OPERATOR(pg_catalog.<>) c.relowner "
        "AND NOT COALESCE(r.rolsuper, false) GROUP BY 1, 2, 3 ORDER BY 1 DESC, 2",
        (owner,),
    ).fetchall()
    out = []
    for kind, role, privilege, relations, schema in found:
        grantee = "PUBLIC" if role == "PUBLIC" else sql.Identifier(role).as_string(conn)
        where = sql.Identifier(schema).as_string(conn)
        if kind == "r":
            place, what, every = "tables", "may attach a trigger of its own to them", "TABLES"
            what += ", which rewrites what a write stores after the guards judged it"
        else:
            place, what, every = "sequences", "may set their creation order (setval)", "SEQUENCES"
            what += ", which a saga undoes a session's effects in"
        out.append(
            Difference(
                None,
                f"{place} {relations}",
                f"{role} {what}. The store's owner revokes it: REVOKE {privilege} ON ALL "
                f"{every} IN SCHEMA {where} FROM {grantee}",
            )
        )
    return out


def _default_grants(conn: Any, owner: int) -> list[Difference]:
    """Default privileges of the store's owner (in its schema, or everywhere) that would
    give another role ``TRIGGER`` on every table, or ``UPDATE`` on every sequence, made
    from now on: the tables an open installs would carry the grant, and another role could
    attach its trigger before the next open saw it (outsider batch 36, a A)."""
    found = conn.execute(
        "SELECT d.defaclobjtype, COALESCE(r.rolname, 'PUBLIC'), a.privilege_type, "
        "d.defaclnamespace OPERATOR(pg_catalog.<>) 0::pg_catalog.oid "
        "FROM pg_catalog.pg_default_acl d "
        "CROSS JOIN LATERAL pg_catalog.aclexplode(d.defaclacl) a "
        "LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee "
        "WHERE d.defaclrole OPERATOR(pg_catalog.=) %s::pg_catalog.oid "
        f"AND d.defaclnamespace OPERATOR(pg_catalog.=) ANY(ARRAY[0::pg_catalog.oid, {HERE}]) "
        "AND ((d.defaclobjtype OPERATOR(pg_catalog.=) 'r'::pg_catalog.\"char\" AND "
        "a.privilege_type OPERATOR(pg_catalog.=) 'TRIGGER'::pg_catalog.text) OR "
        "(d.defaclobjtype OPERATOR(pg_catalog.=) 'S'::pg_catalog.\"char\" AND "
        "a.privilege_type OPERATOR(pg_catalog.=) 'UPDATE'::pg_catalog.text)) "
        "AND a.grantee OPERATOR(pg_catalog.<>) d.defaclrole "
        "AND NOT COALESCE(r.rolsuper, false) ORDER BY 1 DESC, 2",
        (owner,),
    ).fetchall()
    out = []
    for kind, role, privilege, here in found:
        grantee = "PUBLIC" if role == "PUBLIC" else sql.Identifier(role).as_string(conn)
        every = "TABLES" if kind == "r" else "SEQUENCES"
        where = " IN SCHEMA " + sql.Identifier(_schema(conn)).as_string(conn) if here else ""
        out.append(
            Difference(
                None,
                f"default privileges on {every.lower()}",
                f"{role} is given {privilege} on every {every[:-1].lower()} made here from "
                f"now on, the store's included. The store's owner revokes it: ALTER DEFAULT "
                f"PRIVILEGES{where} REVOKE {privilege} ON {every} FROM {grantee}",
            )
        )
    return out


def _schema(conn: Any) -> str:
    (name,) = conn.execute("SELECT pg_catalog.current_schema()").fetchone()
    return str(name)


def store_owner(conn: Any) -> tuple[int, str] | None:
    """The owner of the store's registry (its oid and name), whom every other table and
    guard must have; None before the registry is installed."""
    found = conn.execute(
        "SELECT c.relowner, pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c "
        f"WHERE c.relnamespace OPERATOR(pg_catalog.=) {HERE} "
        "AND c.relname OPERATOR(pg_catalog.=) %s::pg_catalog.name",
        (REGISTRY,),
    ).fetchone()
    return None if found is None else (int(found[0]), str(found[1]))


def _owner_or_me(conn: Any) -> int:
    """The store's owner, or (before it is installed) this session's role."""
    found = store_owner(conn)
    if found is not None:
        return found[0]
    (me,) = conn.execute(
        "SELECT oid FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) CURRENT_USER"
    ).fetchone()
    return int(me)
