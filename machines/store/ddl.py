"""SQL schema generated from a spec: the database itself refuses what the spec forbids.

Per machine ``m``:

- ``m_moves``: every legal (source, dest, trigger, actor) with the guard's context values
  (NULL: any value), one row per admitted combination. Data, not code, so the triggers
  below stay the same whatever the spec says.
- ``m_entities``: one row per entity (its rowid is the creation order: rows are never
  deleted); ``state`` has a CHECK over the spec's states. A row
  can only be inserted in the initial state with no moves, never deleted, and its state
  (and move count) can only change together with a matching, legal history row.
- ``m_history``: append-only (UPDATE and DELETE abort); an inserted event must be a legal
  move by its actor under its context, continue the entity's history without a gap, and
  start from the entity's current state.

``sqlite_schema`` is what the SQLite store runs and what ``machines export --format sql``
prints; the PostgreSQL dialect follows the same plan, with one difference: the check that
a state change has its history event is a constraint trigger deferred to COMMIT, so the
event may be written before or after the state (a move is then one statement), and an
event must continue the entity either from its current state or into it.
"""

from __future__ import annotations

import itertools

from machines.spec import MachineSpec


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _in_list(values: object) -> str:
    return ", ".join(_quote(str(v)) for v in values)  # type: ignore[attr-defined]


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


def _moves_parts(spec: MachineSpec) -> tuple[str, str, str]:
    """(context columns, their names, the VALUES rows) of the legal-moves table, shared
    by both dialects."""
    variables = list(spec.context)
    columns = "".join(f",\n  ctx_{v} TEXT" for v in variables)
    names = "".join(f", ctx_{v}" for v in variables)
    rows = ",\n  ".join(
        "("
        + ", ".join(
            [_quote(s), _quote(d), _quote(tr), _quote(a)]
            + ["NULL" if x is None else _quote(x) for x in values]
        )
        + ")"
        for s, d, tr, a, values in legal_moves(spec)
    )
    return columns, names, rows


def sqlite_schema(spec: MachineSpec) -> str:
    """The DDL (idempotent: IF NOT EXISTS everywhere) for one machine on SQLite."""
    m = spec.name
    ctx_columns, ctx_names, moves = _moves_parts(spec)
    ctx_match = "".join(
        f"\n      AND (mv.ctx_{v} IS NULL OR mv.ctx_{v} = json_extract(NEW.context, '$.{v}'))"
        for v in spec.context
    )
    states = _in_list(spec.states)
    abort = f"SELECT RAISE(ABORT, '{m}:"
    return f"""-- machine '{m}': generated from the spec by machines; do not edit by hand
CREATE TABLE IF NOT EXISTS {m}_moves (
  source TEXT NOT NULL,
  dest TEXT NOT NULL,
  trigger TEXT NOT NULL,
  actor TEXT NOT NULL{ctx_columns}
);
INSERT INTO {m}_moves (source, dest, trigger, actor{ctx_names})
SELECT * FROM (VALUES
  {moves}
) WHERE NOT EXISTS (SELECT 1 FROM {m}_moves);
CREATE TRIGGER IF NOT EXISTS {m}_moves_frozen_update BEFORE UPDATE ON {m}_moves
BEGIN {abort} the legal moves come from the spec and never change'); END;
CREATE TRIGGER IF NOT EXISTS {m}_moves_frozen_delete BEFORE DELETE ON {m}_moves
BEGIN {abort} the legal moves come from the spec and never change'); END;

CREATE TABLE IF NOT EXISTS {m}_entities (
  key TEXT PRIMARY KEY,
  state TEXT NOT NULL CHECK (state IN ({states})),
  context TEXT NOT NULL DEFAULT '{{}}',
  data TEXT NOT NULL DEFAULT '{{}}',
  scope TEXT,
  moves INTEGER NOT NULL DEFAULT 0 CHECK (moves >= 0),
  version INTEGER NOT NULL DEFAULT 1,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS {m}_entities_scope ON {m}_entities (scope);
CREATE TRIGGER IF NOT EXISTS {m}_entities_start BEFORE INSERT ON {m}_entities
WHEN NEW.state IS NOT {_quote(spec.initial)} OR NEW.moves IS NOT 0
BEGIN {abort} an entity starts in {spec.initial} with no moves'); END;
CREATE TRIGGER IF NOT EXISTS {m}_entities_no_delete BEFORE DELETE ON {m}_entities
BEGIN {abort} entities are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS {m}_entities_fixed BEFORE UPDATE OF key, context, scope
ON {m}_entities
WHEN NEW.key IS NOT OLD.key OR NEW.context IS NOT OLD.context OR NEW.scope IS NOT OLD.scope
BEGIN {abort} key, context and scope never change'); END;
CREATE TRIGGER IF NOT EXISTS {m}_entities_legal_move BEFORE UPDATE ON {m}_entities
WHEN (NEW.state IS NOT OLD.state OR NEW.moves IS NOT OLD.moves)
  AND NOT (NEW.moves = OLD.moves + 1 AND EXISTS (
    SELECT 1 FROM {m}_history h
    WHERE h.entity = NEW.key AND h.seq = NEW.moves AND h.source = OLD.state
      AND h.dest = NEW.state))
BEGIN {abort} a state change needs its legal history event (illegal UPDATE refused)'); END;

CREATE TABLE IF NOT EXISTS {m}_history (
  entity TEXT NOT NULL,
  seq INTEGER NOT NULL,
  source TEXT NOT NULL,
  dest TEXT NOT NULL,
  trigger TEXT NOT NULL,
  actor TEXT NOT NULL,
  detail TEXT,
  context TEXT NOT NULL,
  at REAL NOT NULL,
  PRIMARY KEY (entity, seq)
);
CREATE TRIGGER IF NOT EXISTS {m}_history_no_update BEFORE UPDATE ON {m}_history
BEGIN {abort} history is append-only (UPDATE refused)'); END;
CREATE TRIGGER IF NOT EXISTS {m}_history_no_delete BEFORE DELETE ON {m}_history
BEGIN {abort} history is append-only (DELETE refused)'); END;
CREATE TRIGGER IF NOT EXISTS {m}_history_legal BEFORE INSERT ON {m}_history
WHEN NOT EXISTS (
    SELECT 1 FROM {m}_moves mv
    WHERE mv.source = NEW.source AND mv.dest = NEW.dest AND mv.trigger = NEW.trigger
      AND mv.actor = NEW.actor{ctx_match})
  OR NOT EXISTS (
    SELECT 1 FROM {m}_entities e
    WHERE e.key = NEW.entity AND e.state = NEW.source AND e.moves + 1 = NEW.seq)
BEGIN {abort} not a legal next move of this entity (the spec forbids it)'); END;
"""


def postgres_schema(spec: MachineSpec) -> str:
    """The same plan for PostgreSQL: JSONB context and data, PL/pgSQL trigger functions,
    the state-change check deferred to COMMIT. Idempotent (IF NOT EXISTS, CREATE OR
    REPLACE, DROP ... IF EXISTS); statements end with ``;`` at a line's end, function
    bodies are dollar-quoted."""
    m = spec.name
    ctx_columns, ctx_names, moves = _moves_parts(spec)
    ctx_match = "".join(
        f"\n      AND (mv.ctx_{v} IS NULL OR mv.ctx_{v} = NEW.context ->> {_quote(v)})"
        for v in spec.context
    )
    states = _in_list(spec.states)
    refuse = f"RAISE EXCEPTION '{m}: %'"
    return f"""-- machine '{m}' (PostgreSQL): generated from the spec; do not edit by hand
CREATE TABLE IF NOT EXISTS {m}_moves (
  source TEXT NOT NULL,
  dest TEXT NOT NULL,
  trigger TEXT NOT NULL,
  actor TEXT NOT NULL{ctx_columns}
);
INSERT INTO {m}_moves (source, dest, trigger, actor{ctx_names})
SELECT * FROM (VALUES
  {moves}
) AS legal WHERE NOT EXISTS (SELECT 1 FROM {m}_moves);
CREATE OR REPLACE FUNCTION {m}_refuse() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  {refuse}, TG_ARGV[0];
END $body$;
CREATE OR REPLACE TRIGGER {m}_moves_frozen BEFORE UPDATE OR DELETE ON {m}_moves
FOR EACH ROW EXECUTE FUNCTION {m}_refuse('the legal moves come from the spec and never change');

CREATE TABLE IF NOT EXISTS {m}_entities (
  key TEXT PRIMARY KEY,
  state TEXT NOT NULL CHECK (state IN ({states})),
  context JSONB NOT NULL DEFAULT '{{}}',
  data JSONB NOT NULL DEFAULT '{{}}',
  scope TEXT,
  ordinal BIGSERIAL NOT NULL,
  moves INTEGER NOT NULL DEFAULT 0 CHECK (moves >= 0),
  version INTEGER NOT NULL DEFAULT 1,
  created_at DOUBLE PRECISION NOT NULL,
  updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS {m}_entities_scope ON {m}_entities (scope);
CREATE OR REPLACE TRIGGER {m}_entities_no_delete BEFORE DELETE ON {m}_entities
FOR EACH ROW EXECUTE FUNCTION {m}_refuse('entities are never deleted');
CREATE OR REPLACE FUNCTION {m}_entities_guard() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.state IS DISTINCT FROM {_quote(spec.initial)} OR NEW.moves <> 0 THEN
      {refuse}, 'an entity starts in {spec.initial} with no moves';
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.key IS DISTINCT FROM OLD.key OR NEW.context IS DISTINCT FROM OLD.context
     OR NEW.scope IS DISTINCT FROM OLD.scope OR NEW.ordinal IS DISTINCT FROM OLD.ordinal THEN
    {refuse}, 'key, context and scope never change';
  END IF;
  IF (NEW.state IS DISTINCT FROM OLD.state OR NEW.moves IS DISTINCT FROM OLD.moves)
     AND NEW.moves IS DISTINCT FROM OLD.moves + 1 THEN
    {refuse}, 'a state change needs its legal history event (illegal UPDATE refused)';
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE TRIGGER {m}_entities_guard BEFORE INSERT OR UPDATE ON {m}_entities
FOR EACH ROW EXECUTE FUNCTION {m}_entities_guard();
CREATE OR REPLACE FUNCTION {m}_entities_moved() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF NOT EXISTS (
      SELECT 1 FROM {m}_history h
      WHERE h.entity = NEW.key AND h.seq = NEW.moves AND h.source = OLD.state
        AND h.dest = NEW.state) THEN
    {refuse}, 'a state change needs its legal history event (illegal UPDATE refused)';
  END IF;
  RETURN NULL;
END $body$;
DROP TRIGGER IF EXISTS {m}_entities_moved ON {m}_entities;
CREATE CONSTRAINT TRIGGER {m}_entities_moved AFTER UPDATE ON {m}_entities
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (NEW.state IS DISTINCT FROM OLD.state OR NEW.moves IS DISTINCT FROM OLD.moves)
EXECUTE FUNCTION {m}_entities_moved();

CREATE TABLE IF NOT EXISTS {m}_history (
  entity TEXT NOT NULL,
  seq INTEGER NOT NULL,
  source TEXT NOT NULL,
  dest TEXT NOT NULL,
  trigger TEXT NOT NULL,
  actor TEXT NOT NULL,
  detail JSONB,
  context JSONB NOT NULL,
  at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (entity, seq)
);
CREATE OR REPLACE TRIGGER {m}_history_append_only BEFORE UPDATE OR DELETE ON {m}_history
FOR EACH ROW EXECUTE FUNCTION {m}_refuse('history is append-only');
CREATE OR REPLACE FUNCTION {m}_history_legal() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  IF NOT EXISTS (
      SELECT 1 FROM {m}_moves mv
      WHERE mv.source = NEW.source AND mv.dest = NEW.dest AND mv.trigger = NEW.trigger
        AND mv.actor = NEW.actor{ctx_match})
     OR NOT EXISTS (
      SELECT 1 FROM {m}_entities e
      WHERE e.key = NEW.entity AND (
        (e.state = NEW.source AND e.moves + 1 = NEW.seq)
        OR (e.state = NEW.dest AND e.moves = NEW.seq AND NEW.seq > 0))) THEN
    {refuse}, 'not a legal next move of this entity (the spec forbids it)';
  END IF;
  RETURN NEW;
END $body$;
CREATE OR REPLACE TRIGGER {m}_history_legal BEFORE INSERT ON {m}_history
FOR EACH ROW EXECUTE FUNCTION {m}_history_legal();
"""
