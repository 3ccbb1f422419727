"""The generated schema of ``machines.store.ddl`` for PostgreSQL: the same plan in
PL/pgSQL. JSON columns are ``json`` (the text as written, so a stored value comes back
exactly, where ``jsonb`` would turn ``1e300`` into an integer and ``-0.0`` into ``0``),
compared as text. The trigger functions are pinned to the schema they were created in
(``search_path = <schema>, pg_temp``), so that no session can shadow a table they read
(a temporary ``moves`` table holding a forged legal move, say)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from machines.spec import MachineSpec
from machines.store.ddl import (
    ENTITY_COLUMNS,
    HISTORY_COLUMNS,
    LATEST_REPAIR_TIME,
    MOVE_COLUMNS,
    POSTGRES_VERSION_TEST,
    REGISTRY,
    REGISTRY_COLUMNS,
    REGISTRY_FROZEN,
    REGISTRY_INSTALLED,
    REGISTRY_INSTALLED_TRIGGER,
    REGISTRY_NEXT,
    REPAIRS,
    REPAIRS_FROZEN,
    REPAIRS_INSERT_TRIGGER,
    REPAIRS_MALFORMED,
    REPAIRS_OWNER,
    Plan,
    history_guard_marks,
    in_list,
    literal,
    move_values,
)

_FUNCTIONS = ("refuse", "entities_guard", "entities_record", "history_guard")


def _context_ok(plan: Plan, column: str, *, at_creation: bool) -> str:
    """A boolean without a query (PL/pgSQL evaluates it at once): an object with no key
    but the spec's variables (at creation: its fixed ones), each a string the spec allows;
    every fixed variable present, in a move equal to the entity's stored value. A key
    given twice is read as its last value, by PostgreSQL and by Python alike."""
    allowed = list(plan.fixed) if at_creation else [*plan.fixed, *plan.derived]
    keys = f"ARRAY[{in_list(allowed)}]::text[]" if allowed else "ARRAY[]::text[]"
    checks = [f"{column}::jsonb - {keys} = '{{}}'::jsonb"]
    for v, values in plan.fixed.items():
        text, kind = f"({column} ->> {literal(v)})", f"json_typeof({column} -> {literal(v)})"
        expected = f"(OLD.context ->> {literal(v)})" if not at_creation else None
        checks.append(f"{kind} = 'string'")
        checks.append(f"{text} = {expected}" if expected else f"{text} IN ({in_list(values)})")
    if not at_creation:
        for v, values in plan.derived.items():
            text, kind = f"({column} ->> {literal(v)})", f"json_typeof({column} -> {literal(v)})"
            checks.append(
                f"({column} -> {literal(v)} IS NULL OR ({kind} = 'string' "
                f"AND {text} IN ({in_list(values)})))"
            )
    joined = "\n       AND ".join(checks)
    return f"coalesce({joined}, FALSE)"


FLOAT_MAX = repr(sys.float_info.max)
"""The largest number a float holds, as PostgreSQL reads it: a larger one is no float."""


def _final_data(plan: Plan) -> str:
    def without(column: str, kept: Sequence[str]) -> str:
        return (
            f"(SELECT json_object_agg(key, value ORDER BY key)::text FROM json_each({column}) "
            f"WHERE key NOT IN ({in_list(kept)}))"
        )

    def unreadable(kept: Sequence[str]) -> str:
        """A key given twice, or an annotation that is not a scalar JSON reads back (an
        object or a list could hold a key twice, a number no float holds): every later
        read of the finished entity would refuse it (outsider batch 28)."""
        scalar = (
            "json_typeof(value) IN ('string', 'boolean', 'null') OR (json_typeof(value) = "
            f"'number' AND abs(value::text::numeric) <= {FLOAT_MAX})"
        )
        return (
            "NOT (SELECT count(*) = count(DISTINCT key) AND coalesce(bool_and("
            f"key NOT IN ({in_list(kept)}) OR {scalar}), TRUE) FROM json_each(NEW.data))"
        )

    cases = []
    for state, kept in plan.terminal.items():
        if kept:
            changed = (
                f"{without('NEW.data', kept)} IS DISTINCT FROM {without('OLD.data', kept)} "
                f"OR {unreadable(kept)}"
            )
        else:
            changed = "NEW.data::text IS DISTINCT FROM OLD.data::text"
        cases.append(f"\n          WHEN {literal(state)} THEN {changed}")
    return f"(CASE OLD.state{''.join(cases)}\n        ELSE FALSE END)" if cases else "FALSE"


def _pinned(functions: Sequence[str]) -> str:
    """The block that pins each of ``functions`` (``name()``) to the schema it is made in,
    whatever schema that is (the generated script names none)."""
    listed = ", ".join(literal(f) for f in functions)
    return f"""DO $pin$
DECLARE f text;
BEGIN
  FOREACH f IN ARRAY ARRAY[{listed}] LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
  END LOOP;
END $pin$;
"""


def postgres_registry() -> str:
    """The registry of definitions (``REGISTRY``) on PostgreSQL: a row is added only as the
    next version of its machine, and never changed, deleted or emptied."""
    guard, refuse = f"{REGISTRY}_guard", f"{REGISTRY}_refuse"
    installed = REGISTRY_INSTALLED_TRIGGER
    version, needle = history_guard_marks(POSTGRES_VERSION_TEST)
    columns = REGISTRY_COLUMNS.format(
        real="DOUBLE PRECISION", ordinal="\n  ordinal BIGSERIAL NOT NULL,"
    )
    return f"""CREATE TABLE IF NOT EXISTS {REGISTRY} (
{columns}
);
CREATE OR REPLACE FUNCTION {guard}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF NEW.version IS DISTINCT FROM coalesce(
      (SELECT max(version) FROM {REGISTRY} WHERE machine = NEW.machine), 0) + 1 THEN
    RAISE EXCEPTION USING MESSAGE = {literal(REGISTRY_NEXT)};
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  RAISE EXCEPTION USING MESSAGE = {literal(REGISTRY_FROZEN)};
END $body$;
CREATE OR REPLACE TRIGGER {REGISTRY}_next BEFORE INSERT ON {REGISTRY}
FOR EACH ROW EXECUTE FUNCTION {guard}();
CREATE OR REPLACE TRIGGER {REGISTRY}_frozen BEFORE UPDATE OR DELETE ON {REGISTRY}
FOR EACH ROW EXECUTE FUNCTION {refuse}();
CREATE OR REPLACE TRIGGER {REGISTRY}_no_truncate BEFORE TRUNCATE ON {REGISTRY}
FOR EACH STATEMENT EXECUTE FUNCTION {refuse}();
CREATE OR REPLACE FUNCTION {installed}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_proc p
      WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
      AND p.pronargs = 0
      AND strpos(p.prosrc, {version}) > 0 AND strpos(p.prosrc, {needle}) > 0) THEN
    RAISE EXCEPTION USING MESSAGE = {literal(REGISTRY_INSTALLED)};
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE TRIGGER {installed} BEFORE INSERT ON {REGISTRY}
FOR EACH ROW EXECUTE FUNCTION {installed}();
{_pinned([f"{guard}()", f"{installed}()"])}"""


def _finite(column: str) -> str:
    """A time that is a number: PostgreSQL's double precision also holds NaN (which sorts
    above Infinity) and the infinities, which no clock gives and every reader of a time
    would have to guess at."""
    return f"{column} > '-Infinity' AND {column} < 'Infinity'"


def postgres_repairs() -> str:
    """The table of repairs (``REPAIRS``) on PostgreSQL: rows are only ever added, by the
    table's owner (or a role it is a member of: a superuser), each as a repair writes it."""
    refuse, insert = f"{REPAIRS}_refuse", REPAIRS_INSERT_TRIGGER
    body = f"BEGIN RAISE EXCEPTION USING MESSAGE = {literal(REPAIRS_FROZEN)}; END"
    return f"""CREATE TABLE IF NOT EXISTS {REPAIRS} (
  at DOUBLE PRECISION NOT NULL,
  person TEXT NOT NULL,
  found TEXT NOT NULL
);
CREATE OR REPLACE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS $body$ {body} $body$;
CREATE OR REPLACE TRIGGER {REPAIRS}_frozen BEFORE UPDATE OR DELETE ON {REPAIRS}
FOR EACH ROW EXECUTE FUNCTION {refuse}();
CREATE OR REPLACE TRIGGER {REPAIRS}_no_truncate BEFORE TRUNCATE ON {REPAIRS}
FOR EACH STATEMENT EXECUTE FUNCTION {refuse}();
CREATE OR REPLACE FUNCTION {insert}() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
  found json;
BEGIN
  IF NOT pg_has_role(current_user,
      (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
    RAISE EXCEPTION USING MESSAGE = {literal(REPAIRS_OWNER)};
  END IF;
  BEGIN
    found := NEW.found::json;
  EXCEPTION WHEN others THEN
    RAISE EXCEPTION USING MESSAGE = {literal(REPAIRS_MALFORMED)};
  END;
  IF NOT coalesce(NEW.at >= 0 AND NEW.at < {LATEST_REPAIR_TIME:g}
      AND btrim(NEW.person) <> '' AND NEW.person !~ '[[:cntrl:]]'
      AND json_typeof(found) = 'array'
      AND NOT EXISTS (SELECT 1 FROM json_array_elements(found) item
                      WHERE json_typeof(item) <> 'string'), FALSE) THEN
    RAISE EXCEPTION USING MESSAGE = {literal(REPAIRS_MALFORMED)};
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE TRIGGER {insert} BEFORE INSERT ON {REPAIRS}
FOR EACH ROW EXECUTE FUNCTION {insert}();
{_pinned([f"{insert}()"])}"""


def postgres_schema(spec: MachineSpec, version: int = 1) -> str:
    """The same plan for PostgreSQL: ``json`` columns (the text as written, so values
    come back exactly), PL/pgSQL trigger functions pinned to the tables' schema.
    Idempotent (IF NOT EXISTS, CREATE OR REPLACE); function bodies are dollar-quoted. Its
    moves write their events as version ``version`` of the definition."""
    p = Plan(spec, version)
    n, say = p.n, p.say
    entities, history, moves, refuse = n("entities"), n("history"), n("moves"), n("refuse")
    columns = ENTITY_COLUMNS.format(
        key_check="",
        json="JSON",
        context_object="json_typeof(context) = 'object'",
        data_object="jsonb_typeof(data::jsonb) = 'object'",
        scope_check="",
        ordinal="\n  ordinal BIGSERIAL NOT NULL,",
        real="DOUBLE PRECISION",
        detail_object="json_typeof(last_detail) = 'object'",
        last_context_object="json_typeof(last_context) = 'object'",
    )
    last_move_changed = "\n       OR ".join(
        f"NEW.{c} IS DISTINCT FROM OLD.{c}"
        for c in ("state", "last_trigger", "last_actor", "last_detail::text", "last_context::text")
    )
    functions = [f"{n(f)}()" for f in _FUNCTIONS]

    def raise_(message: str) -> str:
        return f"RAISE EXCEPTION USING MESSAGE = {message};"

    def refused(text: str) -> str:
        return f"EXECUTE FUNCTION {refuse}({literal(text)})"

    return f"""-- machine '{p.m}' (PostgreSQL), definition version {version}: generated; do not edit
{p.moves_table()}
CREATE OR REPLACE FUNCTION {refuse}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  RAISE EXCEPTION USING MESSAGE = {literal(p.m + ": ")} || TG_ARGV[0];
END $body$;
CREATE OR REPLACE TRIGGER {n("moves_frozen")} BEFORE INSERT OR UPDATE OR DELETE ON {moves}
FOR EACH ROW {refused(p.MOVES_FROZEN)};
CREATE OR REPLACE TRIGGER {n("moves_no_truncate")} BEFORE TRUNCATE ON {moves}
FOR EACH STATEMENT {refused(p.NO_TRUNCATE)};

CREATE TABLE IF NOT EXISTS {entities} (
{columns},
  CONSTRAINT {n("entities_ordinal")} UNIQUE (ordinal),
  CHECK ({_finite("created_at")} AND {_finite("updated_at")})
);
CREATE INDEX IF NOT EXISTS {n("entities_by_scope")} ON {entities} (scope);
CREATE OR REPLACE TRIGGER {n("entities_no_delete")} BEFORE DELETE ON {entities}
FOR EACH ROW {refused(p.NO_DELETE)};
CREATE OR REPLACE TRIGGER {n("entities_no_truncate")} BEFORE TRUNCATE ON {entities}
FOR EACH STATEMENT {refused(p.NO_TRUNCATE)};
CREATE OR REPLACE FUNCTION {n("entities_guard")}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.state IS DISTINCT FROM {literal(spec.initial)} OR NEW.moves IS DISTINCT FROM 0
       OR NEW.version IS DISTINCT FROM 1 OR NEW.last_trigger IS NOT NULL
       OR NEW.last_actor IS NOT NULL OR NEW.last_detail IS NOT NULL
       OR NEW.last_context IS NOT NULL THEN
      {raise_(p.start_message)}
    END IF;
    IF json_typeof(NEW.context) IS DISTINCT FROM 'object' THEN
      {raise_(p.context_message)}
    END IF;
    IF NOT {_context_ok(p, "NEW.context", at_creation=True)} THEN
      {raise_(p.context_message)}
    END IF;
    IF NEW.ordinal IS DISTINCT FROM
       currval(pg_get_serial_sequence(TG_RELID::regclass::text, 'ordinal')) THEN
      {raise_(say(p.NEXT_PLACE))}
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.key IS DISTINCT FROM OLD.key OR NEW.context::text IS DISTINCT FROM OLD.context::text
     OR NEW.scope IS DISTINCT FROM OLD.scope OR NEW.ordinal IS DISTINCT FROM OLD.ordinal
     OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
    {raise_(say(p.FIXED))}
  END IF;
  IF NEW.version IS DISTINCT FROM OLD.version + 1 THEN
    {raise_(say(p.VERSION))}
  END IF;
  IF NEW.moves IS NOT DISTINCT FROM OLD.moves THEN
    IF {last_move_changed} THEN
      {raise_(say(p.STILL))}
    END IF;
    IF OLD.state IN ({in_list(p.terminal) or "NULL"}) THEN
      IF json_typeof(NEW.data) = 'object' THEN
        IF {_final_data(p)} THEN
          {raise_(p.final_data_message)}
        END IF;
      END IF;
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.moves IS DISTINCT FROM OLD.moves + 1
     OR json_typeof(NEW.last_context) IS DISTINCT FROM 'object' THEN
    {raise_(say(p.LEGAL))}
  END IF;
  IF NOT {_context_ok(p, "NEW.last_context", at_creation=False)}
     OR NOT EXISTS ({p.guard_match("(NEW.last_context ->> '%s')")}) THEN
    {raise_(say(p.LEGAL))}
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE TRIGGER {n("entities_guard")} BEFORE INSERT OR UPDATE ON {entities}
FOR EACH ROW EXECUTE FUNCTION {n("entities_guard")}();
CREATE OR REPLACE FUNCTION {n("entities_record")}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  INSERT INTO {history} ({MOVE_COLUMNS})
  VALUES ({move_values(version)});
  RETURN NULL;
END $body$;
CREATE OR REPLACE TRIGGER {n("entities_record")} AFTER UPDATE ON {entities}
FOR EACH ROW WHEN (NEW.moves IS DISTINCT FROM OLD.moves)
EXECUTE FUNCTION {n("entities_record")}();

CREATE TABLE IF NOT EXISTS {history} (
{HISTORY_COLUMNS.format(json="JSON", real="DOUBLE PRECISION")}
);
CREATE OR REPLACE TRIGGER {n("history_append_only")} BEFORE UPDATE OR DELETE ON {history}
FOR EACH ROW {refused(p.APPEND_ONLY)};
CREATE OR REPLACE TRIGGER {n("history_no_truncate")} BEFORE TRUNCATE ON {history}
FOR EACH STATEMENT {refused(p.NO_TRUNCATE)};
CREATE OR REPLACE FUNCTION {n("history_guard")}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF NEW.seq < 1 OR {POSTGRES_VERSION_TEST % version} NOT EXISTS (
      SELECT 1 FROM {entities} e
      WHERE e.key = NEW.entity AND e.moves = NEW.seq AND e.state = NEW.dest
        AND e.last_trigger = NEW.trigger AND e.last_actor = NEW.actor
        AND e.last_detail::text IS NOT DISTINCT FROM NEW.detail::text
        AND e.last_context::text = NEW.context::text AND e.updated_at = NEW.at) THEN
    {raise_(say(p.HISTORY_ONLY_MOVES))}
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE TRIGGER {n("history_guard")} BEFORE INSERT ON {history}
FOR EACH ROW EXECUTE FUNCTION {n("history_guard")}();
{_pinned(functions)}"""
