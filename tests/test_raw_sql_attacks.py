"""The raw-SQL attack suite (issue 13 items 1-7): with a store open, a second connection
(plain ``sqlite3`` / ``psycopg``, no Python of ours in the way) tries every way an
outsider would change an entity, its history, the legal moves or the schema registry
outside a legal move. Each attack must be refused by the database itself, leave every
table as it was, and leave every recorded effect as it was: a settled key is replayed,
not run again, and an Irreversible call still waits for its approval.

Runs on SQLite and on the real PostgreSQL server (skipped loudly without one, failed in
CI), one database of each for all the attacks: each attack runs in a transaction that is
rolled back, refused or not. Attacks are written as an outsider would, against the
bundled machines' tables; several are given in the shape today's schema accepts a move
in (one UPDATE naming it) and in the shape the schema before issue 13 did (a history row,
then the state). The fuzz of the same boundary is in tests/test_raw_sql_fuzz.py; what
the database's owner can still do, in tests/test_database_owner.py.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import machines
from machines.spec import MachineSpec
from machines.store import BUNDLED, open_store
from machines.store.ddl import Plan, literal
from tests.conftest import postgres_schema
from tests.raw_sql import (
    COMPENSABLE,
    DATABASES,
    IRREVERSIBLE,
    OE,
    OH,
    OM,
    POSTGRES,
    SQLITE,
    E,
    H,
    M,
    Raw,
    Victims,
    move,
    victims_postgres,
    victims_sqlite,
)

__all__ = ["victims_postgres", "victims_sqlite"]  # fixtures this module uses


@dataclass(frozen=True)
class Attack:
    name: str
    statements: tuple[str, ...]
    on: tuple[str, ...] = DATABASES

    def __str__(self) -> str:
        return self.name


def attack(name: str, *statements: str, on: tuple[str, ...] = DATABASES) -> Attack:
    return Attack(name, statements, on)


FORGED_MESSAGE = literal(f"outcome: {Plan.HISTORY_ONLY_MOVES}")
FORGED_VERSION_3 = (
    "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
    "installed_at) VALUES ('outcome', 3, 'forged', 'forged', '{}', 0)"
)

RECORDED = "INSERT INTO machines_repairs (at, person, found) VALUES (1000.0, 'ops', '[\"x\"]')"
ATTACKS = [
    # -- the state and the move count --------------------------------------------------
    attack("state alone", f"UPDATE {E} SET state = 'committed' WHERE key = 'comp'"),
    attack(
        "state and version",
        f"UPDATE {E} SET state = 'committed', version = version + 1 WHERE key = 'comp'",
    ),
    attack(
        "state, moves and version without naming the move",
        f"UPDATE {E} SET state = 'committed', moves = moves + 1, version = version + 1 "
        "WHERE key = 'comp'",
    ),
    attack("moves alone", f"UPDATE {E} SET moves = moves + 1 WHERE key = 'comp'"),
    attack(
        "moves and version",
        f"UPDATE {E} SET moves = moves + 1, version = version + 1 WHERE key = 'comp'",
    ),
    attack(
        "moves by two",
        f"UPDATE {E} SET state = 'committed', moves = moves + 2, version = version + 1, "
        "last_trigger = 'commit', last_actor = 'proxy', "
        f"last_context = '{COMPENSABLE}' WHERE key = 'comp'",
    ),
    attack(
        "a move by an actor who may not make it",
        move("comp", E, to="committed", trigger="commit", actor="human", context=COMPENSABLE),
    ),
    attack(
        "a move that skips a state",
        move("irr", E, to="committed", trigger="commit", actor="proxy", context=IRREVERSIBLE),
    ),
    attack(
        "a move out of a terminal state",
        move("paid", OE, to="in_flight", trigger="reclaim", actor="caller", context="{}"),
    ),
    attack(
        "a move under another trigger's name",
        move("comp", E, to="committed", trigger="fail", actor="proxy", context=COMPENSABLE),
    ),
    attack(
        "the last move rewritten without moving",
        f"UPDATE {E} SET last_actor = 'human', version = version + 1 WHERE key = 'comp'",
    ),
    # -- item 5: the guard context -------------------------------------------------------
    attack(
        "a forged context in the move (issue 13 item 5)",
        move("irr", E, to="executing", trigger="execute", actor="proxy", context=COMPENSABLE),
    ),
    attack(
        "a forged context as an event, then the state (issue 13 item 5)",
        f"INSERT INTO {H} VALUES ('irr', 1, 'pending', 'executing', 'execute', 'proxy', NULL, "
        f"'{COMPENSABLE}', 0, 1)",
        f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'",
    ),
    attack(
        "a context with the fixed variable twice",
        move(
            "irr",
            E,
            to="executing",
            trigger="execute",
            actor="proxy",
            context='{"tier":"irreversible","tier":"compensable"}',
        ),
    ),
    attack(
        "a context with an unknown variable",
        move(
            "irr",
            E,
            to="approved",
            trigger="approve",
            actor="human",
            context='{"tier":"irreversible","by":"x"}',
        ),
    ),
    attack(
        "a context value that is not a string",
        move("irr", E, to="approved", trigger="approve", actor="human", context='{"tier":1}'),
    ),
    attack(
        "a context that is not an object",
        move("irr", E, to="approved", trigger="approve", actor="human", context='["tier"]'),
    ),
    attack(
        "a move without its fixed variable",
        move("comp", E, to="committed", trigger="commit", actor="proxy", context="{}"),
    ),
    attack(
        "a derived value the spec does not allow",
        move(
            "req",
            "request_entities",
            to="pending_approval",
            trigger="request_approval",
            actor="system",
            context='{"side_effects":"maybe"}',
        ),
    ),
    attack(
        "a derived variable given twice",
        move(
            "req",
            "request_entities",
            to="failed",
            trigger="fail_validation",
            actor="system",
            context='{"side_effects":"none","side_effects":"started"}',
        ),
    ),
    attack(
        "the stored context changed",
        f"UPDATE {E} SET context = '{COMPENSABLE}', version = version + 1 WHERE key = 'irr'",
    ),
    # -- the columns that never change -------------------------------------------------
    attack("the key", f"UPDATE {OE} SET key = 'other', version = version + 1 WHERE key = 'paid'"),
    attack(
        "the scope", f"UPDATE {E} SET scope = 'other', version = version + 1 WHERE key = 'done'"
    ),
    attack(
        "the creation time",
        f"UPDATE {E} SET created_at = 0, version = version + 1 WHERE key = 'comp'",
    ),
    attack(
        "the creation order",
        f"UPDATE {E} SET rowid = 1000, version = version + 1 WHERE key = 'comp'",
        on=SQLITE,
    ),
    attack(
        "the creation order",
        f"UPDATE {E} SET ordinal = 0, version = version + 1 WHERE key = 'comp'",
        on=POSTGRES,
    ),
    # -- item 7: version and data ------------------------------------------------------
    attack(
        "version backwards (issue 13 item 7)",
        f"UPDATE {OE} SET version = version - 1 WHERE key = 'busy'",
    ),
    attack("version by two", f"UPDATE {OE} SET version = version + 2 WHERE key = 'busy'"),
    attack(
        "data without a new version",
        f"UPDATE {OE} SET data = '{{\"owner\":null}}' WHERE key = 'busy'",
    ),
    attack(
        "a succeeded result rewritten (issue 13 item 7)",
        f'UPDATE {OE} SET data = \'{{"result":{{"amount":500}}}}\', version = version + 1 '
        "WHERE key = 'paid'",
    ),
    attack(
        "a committed result rewritten with its replay count",
        f'UPDATE {E} SET data = \'{{"result":{{"v":2}},"replay_count":1}}\', '
        "version = version + 1 WHERE key = 'done'",
    ),
    attack(
        "a failed key's error erased",
        f"UPDATE {OE} SET data = '{{}}', version = version + 1 WHERE key = 'refused'",
    ),
    attack(
        "data not JSON (issue 13 item 7)",
        f"UPDATE {OE} SET data = '{{not json', version = version + 1 WHERE key = 'busy'",
    ),
    attack(
        "data a JSON array (issue 13 item 7)",
        f"UPDATE {OE} SET data = '[1, 2]', version = version + 1 WHERE key = 'busy'",
    ),
    attack(
        "data a JSON string",
        f"UPDATE {OE} SET data = '\"owner\"', version = version + 1 WHERE key = 'busy'",
    ),
    attack("data NULL", f"UPDATE {OE} SET data = NULL, version = version + 1 WHERE key = 'busy'"),
    attack(
        "data a blob",
        f"UPDATE {OE} SET data = X'7B7D', version = version + 1 WHERE key = 'busy'",
        on=SQLITE,
    ),
    attack(
        "a move whose detail is not an object",
        f"UPDATE {E} SET state = 'committed', moves = moves + 1, version = version + 1, "
        "last_trigger = 'commit', last_actor = 'proxy', last_detail = '[1]', "
        f"last_context = '{COMPENSABLE}' WHERE key = 'comp'",
    ),
    # -- creating and deleting entities ------------------------------------------------
    attack(
        "a row created in a terminal state",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) VALUES ('new', 'succeeded', 0, 0)",
    ),
    attack(
        "a row created with moves",
        f"INSERT INTO {OE} (key, state, moves, created_at, updated_at) "
        "VALUES ('new', 'in_flight', 3, 0, 0)",
    ),
    attack(
        "a row created at another version",
        f"INSERT INTO {OE} (key, state, version, created_at, updated_at) "
        "VALUES ('new', 'in_flight', 7, 0, 0)",
    ),
    attack(
        "a row created with a last move",
        f"INSERT INTO {OE} (key, state, last_trigger, last_actor, created_at, updated_at) "
        "VALUES ('new', 'in_flight', 'succeed', 'worker', 0, 0)",
    ),
    attack(  # outsider batch 15: a place of one's own in the order a saga undoes things
        "a row created at the largest rowid (SQLite then hands out random ones)",
        f"INSERT INTO {OE} (rowid, key, state, created_at, updated_at) "
        "VALUES (9223372036854775807, 'new', 'in_flight', 0, 0)",
        on=SQLITE,
    ),
    attack(  # outsider batch 17 (a06): REPLACE deletes the row there, firing no trigger
        "a row created in the newest entity's place by INSERT OR REPLACE (deletes it)",
        f"INSERT OR REPLACE INTO {OE} (rowid, key, state, created_at, updated_at) "
        f"VALUES ((SELECT max(rowid) FROM {OE}), 'x', 'in_flight', 1.0, 1.0)",
        on=SQLITE,
    ),
    attack(
        "a row created in the oldest entity's place by INSERT OR REPLACE (deletes it)",
        f"INSERT OR REPLACE INTO {OE} (rowid, key, state, created_at, updated_at) "
        f"VALUES ((SELECT min(rowid) FROM {OE}), 'x', 'in_flight', 1.0, 1.0)",
        on=SQLITE,
    ),
    attack(
        "a row created before the others in creation order",
        f"INSERT INTO {OE} (rowid, key, state, created_at, updated_at) "
        "VALUES (-1, 'new', 'in_flight', 0, 0)",
        on=SQLITE,
    ),
    attack(
        "a row created at an ordinal of its own",
        f"SELECT nextval(pg_get_serial_sequence('{OE}', 'ordinal'))",
        f"INSERT INTO {OE} (key, state, created_at, updated_at, ordinal) "
        "VALUES ('new', 'in_flight', 0, 0, 1)",
        on=POSTGRES,
    ),
    attack(
        "a row created at an ordinal of its own, the sequence never drawn",
        f"INSERT INTO {OE} (key, state, created_at, updated_at, ordinal) "
        "VALUES ('new', 'in_flight', 0, 0, 1)",
        on=POSTGRES,
    ),
    attack(  # outsider batch 19 (a02): the guard checked currval alone
        "a second row at the place the session's last insert drew",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) VALUES ('new', 'in_flight', 0, 0)",
        f"INSERT INTO {OE} (key, state, created_at, updated_at, ordinal) VALUES ('new2', "
        f"'in_flight', 0, 0, currval(pg_get_serial_sequence('{OE}', 'ordinal')))",
        on=POSTGRES,
    ),
    attack(  # outsider batch 19 (a03): times no clock gives
        "a row created at a time that is not a number",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) "
        "VALUES ('new', 'in_flight', 'NaN', 'NaN')",
        on=POSTGRES,
    ),
    attack(
        "a row created at an infinite time",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) "
        "VALUES ('new', 'in_flight', 9e999, 9e999)",
        on=SQLITE,
    ),
    attack(
        "a move at a time that is not a number",
        f"UPDATE {OE} SET updated_at = 'NaN', version = version + 1 WHERE key = 'busy'",
        on=POSTGRES,
    ),
    attack(
        "a move at an infinite time",
        f"UPDATE {OE} SET updated_at = 'Infinity', version = version + 1 WHERE key = 'busy'",
        on=POSTGRES,
    ),
    attack(
        "a move at an infinite time",
        f"UPDATE {OE} SET updated_at = -9e999, version = version + 1 WHERE key = 'busy'",
        on=SQLITE,
    ),
    attack(
        "an effect created without its tier (issue 13 item 5)",
        f"INSERT INTO {E} (key, state, created_at, updated_at) VALUES ('new', 'pending', 0, 0)",
    ),
    attack(
        "an effect created with a refused tier",
        f"INSERT INTO {E} (key, state, context, created_at, updated_at) "
        "VALUES ('new', 'pending', '{\"tier\":\"safe\"}', 0, 0)",
    ),
    attack(  # PostgreSQL reads a key given twice as its last value, as Python does
        "an effect created with its tier twice",
        f"INSERT INTO {E} (key, state, context, created_at, updated_at) VALUES ('new', "
        '\'pending\', \'{"tier":"compensable","tier":"irreversible"}\', 0, 0)',
        on=SQLITE,
    ),
    attack(
        "a request created with a derived value stored",
        "INSERT INTO request_entities (key, state, context, created_at, updated_at) "
        "VALUES ('new', 'received', '{\"side_effects\":\"none\"}', 0, 0)",
    ),
    attack(
        "a row created with a blob key",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) VALUES (X'6B', 'in_flight', 0, 0)",
        on=SQLITE,
    ),
    attack(
        "a row created with a blob for a scope",
        f"INSERT INTO {OE} (key, state, scope, created_at, updated_at) "
        "VALUES ('new', 'in_flight', X'00', 0, 0)",
        on=SQLITE,
    ),
    attack(
        "a row created with a text for a time",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) "
        "VALUES ('new', 'in_flight', 'yesterday', 0)",
    ),
    attack(
        "a row created with data not JSON",
        f"INSERT INTO {OE} (key, state, data, created_at, updated_at) "
        "VALUES ('new', 'in_flight', '{', 0, 0)",
    ),
    attack(
        "INSERT OR REPLACE of a finished key (issue 13 item 2)",
        f"INSERT OR REPLACE INTO {OE} (key, state, created_at, updated_at) "
        "VALUES ('paid', 'in_flight', 0, 0)",
        on=SQLITE,
    ),
    attack(
        "REPLACE INTO a failed key (issue 13 item 2)",
        f"REPLACE INTO {OE} (key, state, created_at, updated_at) "
        "VALUES ('refused', 'in_flight', 0, 0)",
        on=SQLITE,
    ),
    attack(
        "REPLACE INTO a waiting Irreversible effect (issue 13 item 2)",
        f"REPLACE INTO {E} (key, state, context, data, created_at, updated_at) "
        f"VALUES ('irr', 'pending', '{COMPENSABLE}', '{{}}', 0, 0)",
        on=SQLITE,
    ),
    attack(
        "UPSERT that resets a finished key",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) VALUES ('paid', 'in_flight', 0, 0)"
        " ON CONFLICT (key) DO UPDATE SET state = 'in_flight'",
    ),
    attack(
        "UPSERT that rewrites a finished key's data (issue 13 item 2)",
        f"INSERT INTO {OE} (key, state, created_at, updated_at) VALUES ('paid', 'in_flight', 0, 0)"
        " ON CONFLICT (key) DO UPDATE SET data = '{}', version = excluded.version + 1",
    ),
    attack("an entity deleted", f"DELETE FROM {OE} WHERE key = 'paid'"),
    attack("every entity deleted", f"DELETE FROM {E}"),
    attack("entities truncated (issue 13 item 4)", f"TRUNCATE {OE}", on=POSTGRES),
    attack("entities truncated in cascade", f"TRUNCATE {E}, {H} CASCADE", on=POSTGRES),
    # -- item 6: history ---------------------------------------------------------------
    attack(
        "a history row without the entity moving (issue 13 item 6)",
        f"INSERT INTO {H} VALUES ('comp', 2, 'executing', 'committed', 'commit', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0, 1)",
    ),
    attack(
        "a history row for an unknown entity",
        f"INSERT INTO {H} VALUES ('ghost', 1, 'pending', 'executing', 'execute', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0, 1)",
    ),
    attack(
        "a history row at seq 0",
        f"INSERT INTO {H} VALUES ('comp', 0, 'pending', 'pending', 'fail', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0, 1)",
    ),
    attack(
        "a history row with a gap",
        f"INSERT INTO {H} VALUES ('comp', 5, 'executing', 'committed', 'commit', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0, 1)",
    ),
    attack(
        "a history row repeating the last event",
        f"INSERT INTO {H} SELECT * FROM {H} WHERE entity = 'comp'",
    ),
    attack(
        "INSERT OR REPLACE of a recorded event",
        f"INSERT OR REPLACE INTO {OH} SELECT entity, seq, source, dest, trigger, 'operator', "
        f"detail, context, at FROM {OH} WHERE entity = 'paid'",
        on=SQLITE,
    ),
    attack(
        "UPSERT of a recorded event",
        f"INSERT INTO {OH} SELECT * FROM {OH} WHERE entity = 'paid' "
        "ON CONFLICT (entity, seq) DO UPDATE SET actor = 'operator'",
    ),
    attack("history updated", f"UPDATE {H} SET actor = 'human'"),
    attack("history deleted", f"DELETE FROM {OH} WHERE entity = 'paid'"),
    attack("history truncated (issue 13 item 4)", f"TRUNCATE {OH}", on=POSTGRES),
    # -- item 3: the legal moves -------------------------------------------------------
    attack(
        "a legal move added (issue 13 item 3)",
        f"INSERT INTO {M} VALUES ('pending', 'executing', 'execute', 'proxy', 'irreversible')",
    ),
    attack(
        "a move out of failed added, then taken (issue 13 item 3)",
        f"INSERT INTO {OM} VALUES ('failed', 'in_flight', 'retry', 'worker')",
        move("refused", OE, to="in_flight", trigger="retry", actor="worker", context="{}"),
    ),
    attack(
        "a move out of failed added, then taken as event and state (issue 13 item 3)",
        f"INSERT INTO {OM} VALUES ('failed', 'in_flight', 'retry', 'worker')",
        f"INSERT INTO {OH} VALUES ('refused', 2, 'failed', 'in_flight', 'retry', 'worker', "
        "NULL, '{}', 0, 1)",
        f"UPDATE {OE} SET state = 'in_flight', moves = 2 WHERE key = 'refused'",
    ),
    attack(
        "INSERT OR REPLACE of a legal move",
        f"INSERT OR REPLACE INTO {OM} VALUES ('succeeded', 'in_flight', 'reclaim', 'caller')",
        on=SQLITE,
    ),
    attack("a legal move changed", f"UPDATE {M} SET actor = 'human' WHERE trigger = 'execute'"),
    attack("the legal moves deleted", f"DELETE FROM {M}"),
    attack("the legal moves truncated (issue 13 item 4)", f"TRUNCATE {M}", on=POSTGRES),
    attack(
        "a temporary table shadows the legal moves",
        f"CREATE TEMP TABLE {M} AS SELECT * FROM {M}",
        f"INSERT INTO pg_temp.{M} VALUES ('pending', 'executing', 'execute', 'proxy', NULL)",
        move("irr", E, to="executing", trigger="execute", actor="proxy", context=IRREVERSIBLE),
        on=POSTGRES,
    ),
    attack(
        "a temporary table shadows the legal moves (event, then state)",
        f"CREATE TEMP TABLE {M} AS SELECT * FROM {M}",
        f"INSERT INTO pg_temp.{M} VALUES ('pending', 'executing', 'execute', 'proxy', NULL)",
        f"INSERT INTO {H} VALUES ('irr', 1, 'pending', 'executing', 'execute', 'proxy', NULL, "
        f"'{IRREVERSIBLE}', 0, 1)",
        f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'",
        on=POSTGRES,
    ),
    attack(
        "a temporary table shadows the entities for the history check",
        f"CREATE TEMP TABLE {E} AS SELECT * FROM {E}",
        f"UPDATE pg_temp.{E} SET moves = moves + 1, state = 'committed', "
        "last_trigger = 'commit', last_actor = 'proxy' WHERE key = 'comp'",
        f"INSERT INTO {H} SELECT key, moves, 'executing', state, last_trigger, last_actor, "
        f"last_detail, last_context, updated_at, 1 FROM pg_temp.{E} WHERE key = 'comp'",
        on=POSTGRES,
    ),
    # -- the registry of definition versions --------------------------------------------
    attack(
        "a version's digest forged",
        "UPDATE machines_definitions SET digest = 'forged' WHERE machine = 'outcome'",
    ),
    attack(
        "a version's definition rewritten",
        "UPDATE machines_definitions SET definition = '{}' WHERE machine = 'outcome'",
    ),
    attack("a version deleted", "DELETE FROM machines_definitions WHERE machine = 'outcome'"),
    attack(
        "a version inserted again",
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) VALUES ('outcome', 1, 'forged', 'forged', '{}', 0)",
    ),
    attack(
        "a version number skipped",
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) VALUES ('outcome', 3, 'forged', 'forged', '{}', 0)",
    ),
    attack(
        "INSERT OR REPLACE of a version",
        "INSERT OR REPLACE INTO machines_definitions (machine, version, digest, fingerprint, "
        "definition, installed_at) VALUES ('outcome', 1, 'forged', 'forged', '{}', 0)",
        on=SQLITE,
    ),
    attack(
        "UPSERT of a version",
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) VALUES ('outcome', 1, 'forged', 'forged', '{}', 0) "
        "ON CONFLICT (machine, version) DO UPDATE SET digest = excluded.digest",
    ),
    attack("the registry truncated", "TRUNCATE machines_definitions", on=POSTGRES),
    attack(  # issue 27 item 3: one such row made every later open fail
        "a next version forged (no schema of it installed)",
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) SELECT machine, version + 1, digest, fingerprint, definition, 0 "
        "FROM machines_definitions WHERE machine = 'outcome'",
    ),
    attack(  # the registry's installed-schema guard is fooled; its no-gap guard is not
        "a version skipped, with the texts the installed-schema guard looks for forged",
        f"CREATE TRIGGER forged_marks BEFORE INSERT ON {OM} WHEN 0 BEGIN "
        f"SELECT 'NEW.definition_version IS NOT 3 OR', {FORGED_MESSAGE}; END",
        f"{FORGED_VERSION_3}",
        on=SQLITE,
    ),
    attack(
        "a version skipped, with the texts the installed-schema guard looks for forged",
        "CREATE FUNCTION forged_marks() RETURNS text LANGUAGE sql AS $$ SELECT "
        f"'NEW.definition_version IS DISTINCT FROM 3 OR' || {FORGED_MESSAGE} $$",
        f"{FORGED_VERSION_3}",
        on=POSTGRES,
    ),
    attack(
        "a first version forged for a machine that has no tables",
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) VALUES ('ghost', 1, 'forged', 'forged', '{}', 0)",
    ),
    # the record of repairs, installed with every store: one row as a repair writes it
    # (the store's owner, here the raw connection, may add one), then the attack
    attack("a repair recorded as nothing", RECORDED, "UPDATE machines_repairs SET found = '[]'"),
    attack("a recorded repair deleted", RECORDED, "DELETE FROM machines_repairs"),
    attack("the record of repairs truncated", RECORDED, "TRUNCATE machines_repairs", on=POSTGRES),
    attack(
        "a repair recorded in a shape no repair writes",
        "INSERT INTO machines_repairs (at, person, found) VALUES (1e300, 'ops', 'not json')",
    ),
]


def _cases() -> list[Any]:
    return [pytest.param(kind, a, id=f"{kind}: {a.name}") for a in ATTACKS for kind in a.on]


@pytest.mark.parametrize(("kind", "raw_attack"), _cases())
def test_the_database_refuses_the_attack(
    kind: str, raw_attack: Attack, request: pytest.FixtureRequest
) -> None:
    """issue 13 items 2-7 (each attack names its item): refused, nothing changed, nothing
    runs again."""
    victims: Victims = request.getfixturevalue(f"victims_{kind}")
    before = victims.raw.snapshot()
    error = victims.raw.attempt(raw_attack.statements)
    after = victims.raw.snapshot()
    assert error is not None, f"{kind} accepted: {raw_attack.name}"
    assert after == before, f"{kind} changed something: {raw_attack.name}"
    victims.nothing_runs_again()


def test_every_attack_runs_on_a_database() -> None:
    assert {kind for a in ATTACKS for kind in a.on} == set(DATABASES)
    assert len(_cases()) == sum(len(a.on) for a in ATTACKS)


def guard_roles(raw: Raw) -> dict[str, list[tuple[str, str]]]:
    """Every trigger that refuses something, by what it is for (its role, the same for
    every machine): role -> (table, trigger) on every machine."""
    from machines.store.names import prefix  # the rule of this schema (issue 13 item 1)

    if raw.kind == "sqlite":
        found = raw.query("SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'")
    else:
        found = raw.query(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal"
        )
    out: dict[str, list[tuple[str, str]]] = {}
    for table, trigger in found:
        machine = next((m for m in BUNDLED if trigger.startswith(f"{prefix(m)}_")), None)
        role = trigger if machine is None else trigger[len(prefix(machine)) + 1 :]
        if role != "entities_record":  # it writes the history; it refuses nothing
            out.setdefault(role, []).append((table, trigger))
    return out


def switched_off(raw: Raw, guards: list[tuple[str, str]]) -> list[str]:
    if raw.kind == "sqlite":
        return [f'DROP TRIGGER "{trigger}"' for _, trigger in guards]
    return [f'ALTER TABLE "{table}" DISABLE TRIGGER "{trigger}"' for table, trigger in guards]


@pytest.mark.parametrize("kind", DATABASES)
def test_every_guard_is_needed(kind: str, request: pytest.FixtureRequest) -> None:
    """A check that cannot fail is a defect: without any one trigger (on every machine,
    inside a transaction that is rolled back), some attack above gets through."""
    victims: Victims = request.getfixturevalue(f"victims_{kind}")
    roles = guard_roles(victims.raw)
    assert len(roles) >= (16 if kind == "sqlite" else 9), roles
    for role, guards in roles.items():
        off = switched_off(victims.raw, guards)
        assert any(
            victims.raw.attempt([*off, *a.statements]) is None for a in ATTACKS if kind in a.on
        ), f"no attack needs {role}"


# -- item 1: long machine names ------------------------------------------------------------

NAME_LENGTHS = (40, 41, 42, 52, 53, 54, 63, 64, 120)


def long_names(length: int) -> tuple[str, str]:
    """Two machine names of ``length`` characters that differ only in the last one."""
    stem = ("payment_outcome_of_a_very_long_named_service_" * 4)[: length - 1]
    return f"{stem}a", f"{stem}b"


def outcome_named(name: str, where: Path) -> MachineSpec:
    source = (machines.load("outcome").path or Path()).read_text()
    path = where / f"{name}.yaml"
    path.write_text(source.replace("machine: outcome\n", f"machine: {name}\n"))
    return machines.load(path)


def tables_of(raw: Raw) -> dict[str, dict[str, str]]:
    """The tables of each machine, found in the catalog by their columns (so that the
    test needs no naming rule): machine -> entities / history / moves -> table."""
    out: dict[str, dict[str, str]] = {}
    for table in raw.tables():
        if table in ("machines_definitions", "machines_repairs"):
            continue
        if raw.kind == "sqlite":
            columns = {r[1] for r in raw.query(f'PRAGMA table_info("{table}")')}
        else:
            columns = {
                r[0]
                for r in raw.query(
                    "SELECT column_name FROM information_schema.columns "
                    f"WHERE table_schema = current_schema() AND table_name = '{table}'"
                )
            }
        role = "history" if "entity" in columns else "entities" if "key" in columns else "moves"
        out.setdefault(table[: -len(role)], {})[role] = table
    return out


def guards_of(raw: Raw) -> dict[str, int]:
    """How many triggers guard each table."""
    if raw.kind == "sqlite":
        rows = raw.query("SELECT tbl_name FROM sqlite_master WHERE type = 'trigger'")
    else:
        rows = raw.query(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal"
        )
    out: dict[str, int] = {}
    for (table,) in rows:
        out[table] = out.get(table, 0) + 1
    return out


@pytest.mark.parametrize("kind", DATABASES)
@pytest.mark.parametrize("length", NAME_LENGTHS)
def test_long_machine_names_keep_every_guard(kind: str, length: int, tmp_path: Path) -> None:
    """issue 13 item 1: PostgreSQL cuts identifiers at 63 bytes; two machines whose long
    names differ only at the end keep tables, triggers and guards of their own."""
    first, second = long_names(length)
    specs = [
        machines.load("outcome"),
        outcome_named(first, tmp_path),
        outcome_named(second, tmp_path),
    ]
    with ExitStack() as stack:
        if kind == "sqlite":
            target = str(tmp_path / "long.db")
            url = f"sqlite:///{target}"
        else:
            url = target = stack.enter_context(postgres_schema())
        store = open_store(url, specs)
        stack.callback(store.close)
        raw = Raw(kind, target)
        stack.callback(raw.close)
        for spec in specs[:2]:
            row, _ = store.insert(spec.name, "k", data={"owner": "w"})
            store.move(row, "succeed", actor="worker", data={"result": 1})
        with store.transaction() as tx:
            assert tx.get(second, "k") is None, "the two machines share their tables"
        row, _ = store.insert(second, "k")
        store.move(row, "park", actor="worker")
        tables, guards = tables_of(raw), guards_of(raw)
        assert len(tables) == 3 and all(len(t) == 3 for t in tables.values()), tables
        counts = {sum(guards.get(t, 0) for t in mine.values()) for mine in tables.values()}
        assert len(counts) == 1, f"a long name lost triggers: {guards}"
        before = raw.snapshot()
        for mine in tables.values():
            e, h, m = mine["entities"], mine["history"], mine["moves"]
            for sql in (
                f'INSERT INTO "{e}" (key, state, created_at, updated_at) '
                "VALUES ('new', 'succeeded', 0, 0)",
                f"UPDATE \"{e}\" SET state = 'in_flight'",
                f'DELETE FROM "{e}"',
                f"UPDATE \"{h}\" SET actor = 'operator'",
                f'DELETE FROM "{h}"',
                f'DELETE FROM "{m}"',
            ):
                assert raw.attempt([sql]) is not None, f"{length} characters: accepted {sql}"
        assert raw.snapshot() == before


def test_sqlite_an_entity_row_removed_outside_the_guards_is_named_by_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (a06b): an entity row gone while its history remains (removed by
    REPLACE through a unique index of one's own, or by any tool with the file) was not
    named by the audit."""
    from machines.cli import main
    from tests.raw_sql import attacked

    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        lite = victims.raw.lite
        lite.execute("PRAGMA recursive_triggers = OFF")
        lite.execute(f"CREATE UNIQUE INDEX gone ON {OE} ((1)) WHERE key IN ('paid', 'x')")
        lite.execute(
            f"INSERT OR REPLACE INTO {OE} (key, state, created_at, updated_at) "
            "VALUES ('x', 'in_flight', 1.0, 1.0)"
        )
        lite.execute("DROP INDEX gone")
        assert lite.execute(f"SELECT count(*) FROM {OE} WHERE key = 'paid'").fetchone() == (0,)
        capsys.readouterr()
        assert main(["audit", "--from-store", victims.store.url]) == 1
        out = capsys.readouterr().out
        assert "[history-kept] outcome 'paid': its history is there and its row is not" in out


@pytest.mark.parametrize("kind", DATABASES)
def test_a_history_text_no_reader_agrees_on_is_named_with_its_entity(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (a05): a legal move whose detail gives a key twice (SQLite reads
    the first value, PostgreSQL and Python the last) made the audit stop without naming
    the entity; then (batch 18) it was named, but the audit still stopped there (exit 2)
    and judged nothing else, so every other breach hid behind it. Now each unreadable
    entity, a row's data as well as an event, is a breach with its place, and the rest of
    the store is judged."""
    from machines.cli import main
    from tests.raw_sql import attacked

    with attacked(kind, tmp_path) as victims:
        victims.store.close()
        statements = [
            f"UPDATE {OE} SET state = 'indeterminate', moves = moves + 1, "
            "version = version + 1, last_trigger = 'park', last_actor = 'worker', "
            "last_detail = '{\"n\": 1, \"n\": 2}', last_context = '{}' WHERE key = 'busy'",
            f'UPDATE {E} SET data = \'{{"n": 1, "n": 2}}\', version = version + 1 '
            "WHERE key = 'comp'",
        ]
        for statement in statements:
            if kind == "sqlite":
                victims.raw.lite.execute(statement)
            else:
                victims.raw.pg.execute(statement.encode())
        capsys.readouterr()
        assert main(["audit", "--from-store", victims.store.url]) == 1
        out = capsys.readouterr().out
        unreadable = "[append-only-history] outcome 'busy': cannot be read (outcome 'busy', event #"
        assert unreadable in out, out
        assert "[append-only-history] effect 'comp': cannot be read (" in out, out
        assert "gives the key 'n' twice" in out
        assert "FAILED: 2 breach(es)" in out, out


@pytest.mark.parametrize(
    "written",
    [
        "UPDATE outcome_entities SET updated_at = 'soon', version = version + 1 WHERE key = 'busy'",
        "INSERT INTO outcome_entities (key, state, created_at, updated_at) "
        "VALUES (X'00ff', 'in_flight', 1.0, 1.0)",
    ],
    ids=["a time that is text", "a key that is a blob"],
)
def test_sqlite_a_row_its_checks_refuse_is_named_and_the_rest_judged(
    written: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 18 (a12): with ``PRAGMA ignore_check_constraints`` (an owner power
    of the application's SQLite connection) a text ``updated_at`` passed the audit (exit
    0, and the store read it back as a time), and a blob key stopped the audit without
    naming its entity. Each is now named with its place, and every store read refuses
    such a row (``StoreError``) rather than hand it on."""
    from machines.cli import main
    from machines.store.records import StoreError
    from tests.raw_sql import attacked

    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        victims.raw.lite.execute("PRAGMA ignore_check_constraints = ON")
        victims.raw.lite.execute(written)
        capsys.readouterr()
        assert main(["audit", "--from-store", victims.store.url]) == 1
        out = capsys.readouterr().out
        assert "FAILED: 1 breach(es)" in out, out
        shown = "'busy'" if "soon" in written else "'b'\\x00\\xff''"
        assert f"[append-only-history] outcome {shown}: cannot be read" in out, out
        with (
            open_store(victims.store.url, read_only=True) as store,
            store.transaction() as tx,
            pytest.raises(StoreError, match="outside the store"),
        ):
            tx.rows("outcome")
