"""SQL schema generated from a spec: the database itself refuses what the spec forbids.

Per machine (object names from ``machines.store.names``):

- ``moves``: every legal (source, dest, trigger, actor) with the guard's context values
  (NULL: any value), one row per admitted combination. Data, not code, so the triggers
  below stay the same whatever the spec says. Frozen once seeded: no INSERT, UPDATE,
  DELETE (or TRUNCATE).
- ``entities``: one row per entity (the creation order is its rowid / ``ordinal``). A row
  is created once per key, in the initial state, at version 1, with no moves and exactly
  its fixed context (a value the spec admits for each variable the derivation does not
  compute). It is never deleted. Every UPDATE raises ``version`` by exactly one; key,
  context, scope and creation time never change. The state changes only by a move: one
  UPDATE that raises ``moves`` by one and names the move in ``last_trigger``,
  ``last_actor``, ``last_detail`` and ``last_context``; the move must be legal from the
  old state by that actor, judged under the entity's stored context (the move may give
  only the derived variables; a fixed one must equal the stored value). An AFTER UPDATE
  trigger writes that move's history event, so state and history are one statement.
  ``context``, ``data``, ``last_detail`` and ``last_context`` hold JSON objects, and the
  data of an entity in a terminal state never changes except the fields its state
  declares as ``annotations``.
- ``history``: append-only (no UPDATE, DELETE or TRUNCATE), and written by the moves
  alone: an INSERT is accepted only as the event of the entity's latest move, not yet
  recorded, which only that move's own trigger can write. Each event names the version of
  the definition it was made under (``definition_version``): the schema of version N
  writes N (``machines.store.versions``; a migration installs the next version's).
- The state column has no CHECK of its own: the triggers admit only the initial state at
  creation and a legal move's destination after, so a migration replaces the triggers and
  the legal moves and never rebuilds the entities or their history.

``sqlite_schema`` is what the SQLite store runs and what ``machines export --format sql``
prints; ``postgres_schema`` is the same plan in PL/pgSQL (JSON kept as written, in ``json``
columns, so a stored value comes back exactly), with its functions pinned to the schema
they were created in, so that no session can shadow a table they read (a temporary
``moves`` table, say).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from machines.spec import MachineSpec
from machines.spec.records import derived_variables
from machines.spec.vocabulary import CONTEXT_COLUMN, STORE_PREFIX
from machines.store.names import name
from machines.store.records import StoreError

REGISTRY = STORE_PREFIX + "definitions"
"""The table of every version of every machine's definition a database has served: its
number (1, 2, 3, ... per machine), its semantic digest (``machines.spec.canonical``), the
fingerprint of the schema generated for it, its loadable text
(``machines.spec.document.as_json``) and when it was installed. Rows are only ever added,
each the next version of its machine; a machine's current version is its highest."""

LEGACY_REGISTRY = STORE_PREFIX + "schema"
"""What a database made by a release before versioned definitions names its registry."""

ENTITY_COLUMNS = """  key TEXT PRIMARY KEY{key_check},
  state TEXT NOT NULL,
  context {json} NOT NULL DEFAULT '{{}}' CHECK ({context_object}),
  data {json} NOT NULL DEFAULT '{{}}' CHECK ({data_object}),
  scope TEXT{scope_check},{ordinal}
  moves INTEGER NOT NULL DEFAULT 0 CHECK (moves >= 0),
  version INTEGER NOT NULL DEFAULT 1,
  created_at {real} NOT NULL,
  updated_at {real} NOT NULL,
  last_trigger TEXT,
  last_actor TEXT,
  last_detail {json} CHECK (last_detail IS NULL OR {detail_object}),
  last_context {json} CHECK (last_context IS NULL OR {last_context_object})"""

HISTORY_COLUMNS = """  entity TEXT NOT NULL,
  seq INTEGER NOT NULL,
  source TEXT NOT NULL,
  dest TEXT NOT NULL,
  trigger TEXT NOT NULL,
  actor TEXT NOT NULL,
  detail {json},
  context {json} NOT NULL,
  at {real} NOT NULL,
  definition_version INTEGER NOT NULL,
  PRIMARY KEY (entity, seq)"""

MOVE_COLUMNS = "entity, seq, source, dest, trigger, actor, detail, context, at, definition_version"


def move_values(version: int) -> str:
    """The history event of the move just made, under definition version ``version``
    (the schema of each version writes its own number)."""
    return (
        "NEW.key, NEW.moves, OLD.state, NEW.state, NEW.last_trigger, NEW.last_actor, "
        f"NEW.last_detail, NEW.last_context, NEW.updated_at, {int(version)}"
    )


def literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def in_list(values: Iterable[str]) -> str:
    return ", ".join(literal(v) for v in values)


def legal_moves(spec: MachineSpec) -> list[tuple[str, str, str, str, tuple[str | None, ...]]]:
    """(source, dest, trigger, actor, guard values per context variable) rows."""
    variables = list(spec.context)
    rows = []
    for t in spec.transitions:
        choices = [sorted(t.when[v]) if v in t.when else [None] for v in variables]
        for actor in t.actors:
            for values in itertools.product(*choices):
                rows.append((t.source, t.dest, t.trigger, actor, tuple(values)))
    return rows


class Plan:
    """What both dialects say about one machine, and how they word their refusals."""

    def __init__(self, spec: MachineSpec, version: int = 1) -> None:
        if type(version) is not int or version < 1:
            raise ValueError(f"a definition version is a whole number from 1, not {version!r}")
        self.spec = spec
        self.version = version
        self.m = spec.name
        derived = derived_variables(spec)
        self.fixed = {v: c.values for v, c in spec.context.items() if v not in derived}
        self.derived = {v: c.values for v, c in spec.context.items() if v in derived}
        self.terminal = {s: st.annotations for s, st in spec.states.items() if st.terminal}

    def n(self, role: str) -> str:
        return name(self.m, role)

    def say(self, text: str) -> str:
        """A refusal's message as an SQL string literal, naming the machine."""
        return literal(f"{self.m}: {text}")

    def moves_table(self) -> str:
        """The legal-moves table and its seed (both dialects): seeded only while empty,
        so a second run inserts no row and its frozen-insert trigger never fires."""
        variables = list(self.spec.context)
        columns = "".join(f",\n  {CONTEXT_COLUMN}{v} TEXT" for v in variables)
        names = "".join(f", {CONTEXT_COLUMN}{v}" for v in variables)
        rows = ",\n  ".join(
            "("
            + ", ".join(
                [literal(s), literal(d), literal(tr), literal(a)]
                + ["NULL" if x is None else literal(x) for x in values]
            )
            + ")"
            for s, d, tr, a, values in legal_moves(self.spec)
        )
        moves = self.n("moves")
        return f"""CREATE TABLE IF NOT EXISTS {moves} (
  source TEXT NOT NULL,
  dest TEXT NOT NULL,
  trigger TEXT NOT NULL,
  actor TEXT NOT NULL{columns}
);
INSERT INTO {moves} (source, dest, trigger, actor{names})
SELECT * FROM (VALUES
  {rows}
) AS legal WHERE NOT EXISTS (SELECT 1 FROM {moves});"""

    def guard_match(self, value_of: str) -> str:
        """The legal-moves row for the move being made (``value_of % var``: the move's
        value of a context variable)."""
        match = "".join(
            f"\n        AND (mv.{c} IS NULL OR mv.{c} = {value_of % v})"
            for v, c in ((v, CONTEXT_COLUMN + v) for v in self.spec.context)
        )
        return (
            f"SELECT 1 FROM {self.n('moves')} mv\n"
            "      WHERE mv.source = OLD.state AND mv.dest = NEW.state\n"
            "        AND mv.trigger = NEW.last_trigger AND mv.actor = NEW.last_actor"
            f"{match}"
        )

    @property
    def start_message(self) -> str:
        return self.say(
            f"an entity starts in {self.spec.initial} at version 1 with no moves (and no last move)"
        )

    @property
    def context_message(self) -> str:
        fixed = ", ".join(self.fixed) or "none"
        return self.say(
            f"an entity's context is an object holding exactly its fixed variables ({fixed}), "
            "each with a value the spec allows"
        )

    @property
    def final_data_message(self) -> str:
        kept = "; ".join(f"{s}: {', '.join(a)}" for s, a in self.terminal.items() if a)
        return self.say(
            "the data of an entity in a terminal state never changes, except the fields its "
            f"state declares as annotations ({kept or 'none'}), each a text, a number, true, "
            "false or null"
        )

    FIXED = "key, context, scope and creation never change"
    VERSION = "every write raises version by exactly one"
    STILL = "the state and the last move change only by a move (moves rises by one)"
    LEGAL = "not a legal next move of this entity under its stored context (the spec forbids it)"
    NEW_KEY = (
        "an entity is created once, in a place of its own: its key or its place exists "
        "(INSERT OR REPLACE, which would delete the row there, and UPSERT refused)"
    )
    NO_DELETE = "entities are never deleted"
    NEXT_PLACE = (
        "an entity takes the next place in creation order (the order a saga undoes its "
        "effects in): a rowid or ordinal of one's own is refused"
    )
    MOVES_FROZEN = "the legal moves come from the spec and never change"
    HISTORY_ONLY_MOVES = (
        "a history event is written by its move (an UPDATE of the entity), never on its own"
    )
    APPEND_ONLY = "history is append-only"
    NO_TRUNCATE = "TRUNCATE refused: legal moves, entities and history are never emptied"


# -- SQLite --------------------------------------------------------------------------------


def _sqlite_object(column: str) -> str:
    return (
        f"CASE WHEN typeof({column}) = 'text' AND json_valid({column}) "
        f"THEN json_type({column}) = 'object' ELSE FALSE END"
    )


def _sqlite_context_ok(plan: Plan, column: str, *, at_creation: bool) -> str:
    """A boolean, from one scan of ``json_each(column)``: an object, no key twice (SQLite
    reads the first of two, Python the last), every value a string the spec allows for
    its variable, and every fixed variable present. At creation the context holds exactly
    the fixed variables; in a move it may add derived ones, and each fixed one must equal
    the entity's stored value."""
    fixed = len(plan.fixed)
    whens = []
    for v, values in {**plan.fixed, **({} if at_creation else plan.derived)}.items():
        if v in plan.fixed and not at_creation:
            whens.append(f"WHEN {literal(v)} THEN value IS NOT json_extract(OLD.context, '$.{v}')")
        else:
            whens.append(f"WHEN {literal(v)} THEN value NOT IN ({in_list(values)})")
    wrong = f"CASE key {' '.join(whens)} ELSE TRUE END" if whens else "TRUE"
    if at_creation:
        count = f"count(*) = {fixed} AND count(DISTINCT key) = {fixed}"
    else:
        present = f"key IN ({in_list(plan.fixed)})" if plan.fixed else "FALSE"
        count = (
            "count(*) = count(DISTINCT key) AND "
            f"coalesce(sum(CASE WHEN {present} THEN 1 ELSE 0 END), 0) = {fixed}"
        )
    ok = (
        f"(SELECT {count} AND NOT coalesce(max(type IS NOT 'text' OR {wrong}), FALSE) "
        f"FROM json_each({column}))"
    )
    return f"CASE WHEN {_sqlite_object(column)} THEN {ok} ELSE FALSE END"


def _sqlite_unreadable(kept: Sequence[str]) -> str:
    """An annotation that is not a scalar JSON reads back: an object or a list (which could
    hold a key twice), a number no float holds (an integer of thousands of digits, which
    Python's JSON reader refuses, included), or a text whose JSON is not the one SQLite
    writes for it (a NUL or a lone surrogate, escaped): every later read of the finished
    entity would refuse it (outsider batch 28). A key given twice at the top is refused by
    the comparison before this."""
    judged = (
        f"CASE WHEN key NOT IN ({in_list(kept)}) OR type IN ('null', 'true', 'false') "
        "THEN 1 WHEN type IN ('integer', 'real') THEN abs(value) < 9e999 "
        "WHEN type = 'text' THEN json_extract(NEW.data, fullkey, fullkey) IS "
        "json_array(value, value) ELSE 0 END"
    )
    return f"NOT coalesce((SELECT min({judged}) FROM json_each(NEW.data)), 1)"


def _sqlite_final_data(plan: Plan) -> str:
    cases = []
    for state, kept in plan.terminal.items():
        if kept:
            paths = ", ".join(literal(f"$.{k}") for k in kept)
            changed = (
                f"CASE WHEN json_valid(NEW.data) THEN json_remove(NEW.data, {paths}) IS NOT "
                f"json_remove(OLD.data, {paths}) OR {_sqlite_unreadable(kept)} ELSE TRUE END"
            )
        else:
            changed = "NEW.data IS NOT OLD.data"
        cases.append(f"\n  WHEN {literal(state)} THEN {changed}")
    return f"CASE OLD.state{''.join(cases)}\n  ELSE FALSE END" if cases else "FALSE"


SQLITE_VERSION_TEST = "NEW.definition_version IS NOT %s OR"
POSTGRES_VERSION_TEST = "NEW.definition_version IS DISTINCT FROM %s OR"
"""How each dialect's history guard tests an event's version (``%s``: the number); the
registry's guard looks for this text in the installed history guard."""

REGISTRY_COLUMNS = """  machine TEXT NOT NULL,
  version INTEGER NOT NULL CHECK (version >= 1),
  digest TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  definition TEXT NOT NULL,
  installed_at {real} NOT NULL,{ordinal}
  PRIMARY KEY (machine, version)"""

REGISTRY_NEXT = "machines_definitions: a machine's versions are 1, 2, 3, ... with no gap"
REGISTRY_FROZEN = "machines_definitions: a version, once installed, never changes"
REGISTRY_INSTALLED = (
    "machines_definitions: a version is recorded only after its schema is installed (the "
    "machine's history guard writes that version): machines installs both, so a row added "
    "by hand is refused"
)
REGISTRY_INSTALLED_TRIGGER = f"{REGISTRY}_installed"
"""The registry's guard against a forged version. Like every guard, its absence is named
on every open (a store made before it existed is reinstalled by ``machines repair``)."""


REPAIRS = STORE_PREFIX + "repairs"
"""The table of every repair of a store's guards (``machines.store.repair``): when, by
whom, what it found. Append-only, and checked on every open like the other guards."""
REPAIRS_FROZEN = "machines_repairs: a repair, once recorded, never changes"
REPAIRS_INSERT_TRIGGER = f"{REPAIRS}_insert"
"""The guard on what a repair records. Like every guard, its absence is named on every
open, never taken for an older store's and quietly put back (``machines repair`` puts it
back, recorded)."""
REPAIRS_MALFORMED = (
    "machines_repairs: a repair is recorded by machines repair, as a new row (none is "
    "replaced) with a time (seconds since 1970), the person who repaired (one line) and "
    "what it found (a JSON list of texts)"
)
REPAIRS_OWNER = (
    "machines_repairs: only the store's owner records a repair (machines repair, run as the owner)"
)
LATEST_REPAIR_TIME = 1e11
"""Later than any repair (the year 5138): a time at or above it, or below 0, is no time a
repair was made at (and one far larger would overflow every reader's calendar)."""


def sqlite_repairs() -> str:
    """The table of repairs (``REPAIRS``) on SQLite: rows are only ever added, each as a
    repair writes it (SQLite has no roles: whoever can write the file can add one)."""
    refuse = f"BEGIN SELECT RAISE(ABORT, {literal(REPAIRS_FROZEN)}); END;"
    control = "'*[' || char(1) || '-' || char(31) || char(127) || ']*'"
    well_formed = (
        f"typeof(NEW.at) IN ('real', 'integer') AND NEW.at >= 0 AND NEW.at < {LATEST_REPAIR_TIME:g}"
        " AND typeof(NEW.person) = 'text' AND trim(NEW.person) <> ''"
        f" AND NEW.person NOT GLOB {control} AND instr(NEW.person, char(0)) = 0"
        " AND CASE WHEN typeof(NEW.found) = 'text' AND json_valid(NEW.found)"
        " THEN json_type(NEW.found) = 'array' AND NOT EXISTS (SELECT 1 FROM json_each(NEW.found)"
        " WHERE type <> 'text') ELSE 0 END"
        f" AND NOT EXISTS (SELECT 1 FROM {REPAIRS} WHERE rowid = NEW.rowid)"
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {REPAIRS} (at REAL NOT NULL, person TEXT NOT NULL, "
        "found TEXT NOT NULL);\n"
        + "".join(
            f"CREATE TRIGGER IF NOT EXISTS {REPAIRS}_no_{event.lower()} BEFORE {event} ON "
            f"{REPAIRS} {refuse}\n"
            for event in ("UPDATE", "DELETE")
        )
        + f"CREATE TRIGGER IF NOT EXISTS {REPAIRS_INSERT_TRIGGER} BEFORE INSERT ON {REPAIRS} "
        f"WHEN NOT coalesce({well_formed}, 0) "
        f"BEGIN SELECT RAISE(ABORT, {literal(REPAIRS_MALFORMED)}); END;\n"
    )


def history_guard_marks(version_test: str) -> tuple[str, str]:
    """What the installed history guard of a machine says, as two SQL expressions over
    ``NEW.machine`` and ``NEW.version`` of a registry row: the version test it makes
    (``version_test`` spells it for the dialect, with ``%s`` for the number) and its
    refusal's text, which names the machine."""
    version = version_test.replace("%s", "' || NEW.version || '")
    quote, doubled = literal("'"), literal("''")
    needle = f"{quote} || replace(NEW.machine, {quote}, {doubled}) || " + literal(
        f": {Plan.HISTORY_ONLY_MOVES}'"
    )
    return f"'{version}'", needle


def sqlite_registry() -> str:
    """The registry of definitions (``REGISTRY``): a row is added only as the next version
    of its machine, once the schema of that version is installed, and never changed or
    deleted."""
    version, needle = history_guard_marks(SQLITE_VERSION_TEST)
    return f"""CREATE TABLE IF NOT EXISTS {REGISTRY} (
{REGISTRY_COLUMNS.format(real="REAL", ordinal="")}
);
CREATE TRIGGER IF NOT EXISTS {REGISTRY}_next BEFORE INSERT ON {REGISTRY}
WHEN NEW.version IS NOT coalesce(
  (SELECT max(version) FROM {REGISTRY} WHERE machine = NEW.machine), 0) + 1
BEGIN SELECT RAISE(ABORT, {literal(REGISTRY_NEXT)}); END;
CREATE TRIGGER IF NOT EXISTS {REGISTRY}_frozen_update BEFORE UPDATE ON {REGISTRY}
BEGIN SELECT RAISE(ABORT, {literal(REGISTRY_FROZEN)}); END;
CREATE TRIGGER IF NOT EXISTS {REGISTRY}_frozen_delete BEFORE DELETE ON {REGISTRY}
BEGIN SELECT RAISE(ABORT, {literal(REGISTRY_FROZEN)}); END;
CREATE TRIGGER IF NOT EXISTS {REGISTRY_INSTALLED_TRIGGER} BEFORE INSERT ON {REGISTRY}
WHEN NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger'
  AND instr(sql, {version}) > 0 AND instr(sql, {needle}) > 0)
BEGIN SELECT RAISE(ABORT, {literal(REGISTRY_INSTALLED)}); END;
"""


def sqlite_schema(spec: MachineSpec, version: int = 1) -> str:
    """The DDL (idempotent: IF NOT EXISTS everywhere) for one machine on SQLite, as
    version ``version`` of its definition."""
    p = Plan(spec, version)
    n, say = p.n, p.say
    entities, history, moves = n("entities"), n("history"), n("moves")
    columns = ENTITY_COLUMNS.format(
        key_check=" CHECK (typeof(key) = 'text')",
        json="TEXT",
        context_object=_sqlite_object("context"),
        data_object=_sqlite_object("data"),
        scope_check=" CHECK (scope IS NULL OR typeof(scope) = 'text')",
        ordinal="",
        real="REAL",
        detail_object=_sqlite_object("last_detail"),
        last_context_object=_sqlite_object("last_context"),
    )
    last_move_changed = " OR ".join(
        f"NEW.{c} IS NOT OLD.{c}"
        for c in ("state", "last_trigger", "last_actor", "last_detail", "last_context")
    )

    def refuse(text: str) -> str:
        return f"BEGIN SELECT RAISE(ABORT, {text}); END;"

    return f"""-- machine '{p.m}', definition version {version}: generated by machines; do not edit
{p.moves_table()}
CREATE TRIGGER IF NOT EXISTS {n("moves_frozen_insert")} BEFORE INSERT ON {moves}
{refuse(say(p.MOVES_FROZEN))}
CREATE TRIGGER IF NOT EXISTS {n("moves_frozen_update")} BEFORE UPDATE ON {moves}
{refuse(say(p.MOVES_FROZEN))}
CREATE TRIGGER IF NOT EXISTS {n("moves_frozen_delete")} BEFORE DELETE ON {moves}
{refuse(say(p.MOVES_FROZEN))}

CREATE TABLE IF NOT EXISTS {entities} (
{columns},
  CHECK (typeof(created_at) = 'real' AND typeof(updated_at) = 'real'
    AND abs(created_at) < 9e999 AND abs(updated_at) < 9e999)
);
CREATE INDEX IF NOT EXISTS {n("entities_by_scope")} ON {entities} (scope);
CREATE TRIGGER IF NOT EXISTS {n("entities_new_key")} BEFORE INSERT ON {entities}
WHEN EXISTS (SELECT 1 FROM {entities} WHERE key = NEW.key OR rowid = NEW.rowid)
{refuse(say(p.NEW_KEY))}
CREATE TRIGGER IF NOT EXISTS {n("entities_start")} BEFORE INSERT ON {entities}
WHEN NEW.state IS NOT {literal(spec.initial)} OR NEW.moves IS NOT 0 OR NEW.version IS NOT 1
  OR NEW.last_trigger IS NOT NULL OR NEW.last_actor IS NOT NULL
  OR NEW.last_detail IS NOT NULL OR NEW.last_context IS NOT NULL
{refuse(p.start_message)}
CREATE TRIGGER IF NOT EXISTS {n("entities_context")} BEFORE INSERT ON {entities}
WHEN NOT ({_sqlite_context_ok(p, "NEW.context", at_creation=True)})
{refuse(p.context_message)}
CREATE TRIGGER IF NOT EXISTS {n("entities_next_place")} AFTER INSERT ON {entities}
WHEN NEW.rowid IS NOT 1 + coalesce(
    (SELECT max(rowid) FROM {entities} WHERE rowid < NEW.rowid), 0)
  OR EXISTS (SELECT 1 FROM {entities} WHERE rowid > NEW.rowid)
{refuse(say(p.NEXT_PLACE))}
CREATE TRIGGER IF NOT EXISTS {n("entities_no_delete")} BEFORE DELETE ON {entities}
{refuse(say(p.NO_DELETE))}
CREATE TRIGGER IF NOT EXISTS {n("entities_fixed")} BEFORE UPDATE ON {entities}
WHEN NEW.key IS NOT OLD.key OR NEW.context IS NOT OLD.context OR NEW.scope IS NOT OLD.scope
  OR NEW.created_at IS NOT OLD.created_at OR NEW.rowid IS NOT OLD.rowid
{refuse(say(p.FIXED))}
CREATE TRIGGER IF NOT EXISTS {n("entities_version")} BEFORE UPDATE ON {entities}
WHEN NEW.version IS NOT OLD.version + 1
{refuse(say(p.VERSION))}
CREATE TRIGGER IF NOT EXISTS {n("entities_still")} BEFORE UPDATE ON {entities}
WHEN NEW.moves IS OLD.moves AND ({last_move_changed})
{refuse(say(p.STILL))}
CREATE TRIGGER IF NOT EXISTS {n("entities_legal_move")} BEFORE UPDATE ON {entities}
WHEN NEW.moves IS NOT OLD.moves AND NOT (
  NEW.moves IS OLD.moves + 1
  AND {_sqlite_context_ok(p, "NEW.last_context", at_creation=False)}
  AND EXISTS ({p.guard_match("json_extract(NEW.last_context, '$.%s')")}))
{refuse(say(p.LEGAL))}
CREATE TRIGGER IF NOT EXISTS {n("entities_final_data")} BEFORE UPDATE OF data ON {entities}
WHEN {_sqlite_final_data(p)}
{refuse(p.final_data_message)}
CREATE TRIGGER IF NOT EXISTS {n("entities_record")} AFTER UPDATE OF moves ON {entities}
WHEN NEW.moves IS NOT OLD.moves
BEGIN INSERT INTO {history} ({MOVE_COLUMNS}) VALUES ({move_values(version)}); END;

CREATE TABLE IF NOT EXISTS {history} (
{HISTORY_COLUMNS.format(json="TEXT", real="REAL")}
);
CREATE TRIGGER IF NOT EXISTS {n("history_no_update")} BEFORE UPDATE ON {history}
{refuse(say(p.APPEND_ONLY + " (UPDATE refused)"))}
CREATE TRIGGER IF NOT EXISTS {n("history_no_delete")} BEFORE DELETE ON {history}
{refuse(say(p.APPEND_ONLY + " (DELETE refused)"))}
CREATE TRIGGER IF NOT EXISTS {n("history_guard")} BEFORE INSERT ON {history}
WHEN NEW.seq < 1 OR {SQLITE_VERSION_TEST % version} NOT EXISTS (
    SELECT 1 FROM {entities} e
    WHERE e.key = NEW.entity AND e.moves = NEW.seq AND e.state = NEW.dest
      AND e.last_trigger = NEW.trigger AND e.last_actor = NEW.actor
      AND e.last_detail IS NEW.detail AND e.last_context = NEW.context
      AND e.updated_at = NEW.at)
  OR EXISTS (SELECT 1 FROM {history} h WHERE h.entity = NEW.entity AND h.seq = NEW.seq)
{refuse(say(p.HISTORY_ONLY_MOVES))}
"""


def statements(script: str) -> Iterator[str]:
    """Split a generated script on statement ends (triggers end with ``END;``)."""
    buffer: list[str] = []
    for line in script.splitlines():
        if line.startswith("--") or not line.strip():
            continue
        buffer.append(line)
        joined = "\n".join(buffer)
        if sqlite3.complete_statement(joined):
            yield joined
            buffer = []
    if buffer:
        raise StoreError("generated schema has an unterminated statement")
