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
then the state). The last tests show what the database's owner can still do (drop or
disable a trigger) and what ``machines audit --from-store`` still sees afterwards.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import machines
from machines.cli import main
from machines.errors import EffectFailed, EffectInProgress, MachinesError
from machines.spec import MachineSpec
from machines.store import BUNDLED, Store, open_store
from machines.systems import EffectLog, ExactlyOnce
from machines.systems.effectlog import EffectAwaitingApproval, EffectStillExecuting
from machines.systems.exactly_once import not_sent
from tests.conftest import postgres_schema
from tests.garbage import garbage

DATABASES = ("sqlite", "postgres")
FAR = 4_000_000_000.0  # a lease that has not expired


class Raw:
    """A second connection to the store's database, as an outsider has one."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.lite = sqlite3.connect(target, isolation_level=None)
        else:
            import psycopg

            self.pg = psycopg.connect(target, autocommit=True)

    def attempt(
        self,
        statements: Sequence[str],
        params: tuple[Any, ...] = (),
        then: str | None = None,
    ) -> Exception | None:
        """Run ``statements`` in one transaction (``params`` bound to the last one; write
        ``{p}`` for a placeholder): the error that stopped them, or None when all ran, and
        then ``then`` (a query whose rows land in ``self.seen``, as dicts). Rolled back either way,
        so that an attack the database wrongly accepted (its test fails) leaves nothing
        behind for the next one."""
        placeholder = "?" if self.kind == "sqlite" else "%s"
        last = len(statements) - 1
        self.seen: list[dict[str, Any]] = []
        if self.kind == "sqlite":
            self.lite.execute("BEGIN")
            try:
                for i, sql in enumerate(statements):
                    self.lite.execute(sql.replace("{p}", placeholder), params if i == last else ())
                if then is not None:
                    self.seen = _rows(self.lite.execute(then))
            except sqlite3.Error as error:
                return error
            finally:
                if self.lite.in_transaction:
                    self.lite.execute("ROLLBACK")
            return None
        import psycopg

        try:
            with self.pg.transaction(force_rollback=True):
                for i, sql in enumerate(statements):
                    query = sql.replace("{p}", placeholder).encode()
                    self.pg.execute(query, params if i == last else None)
                self.pg.execute("SET CONSTRAINTS ALL IMMEDIATE")  # as if it committed
                if then is not None:
                    self.seen = _rows(self.pg.execute(then.encode()))
        except psycopg.Error as error:
            return error
        return None

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return _rows(
            self.lite.execute(sql) if self.kind == "sqlite" else self.pg.execute(sql.encode())
        )

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            return self.lite.execute(sql).fetchall()
        return self.pg.execute(sql.encode()).fetchall()

    def tables(self) -> list[str]:
        if self.kind == "sqlite":
            return [r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [
            r[0]
            for r in self.query(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        ]

    def snapshot(self) -> dict[str, list[str]]:
        """Every row of every table (SQLite: with its rowid, and the schema itself)."""
        rowid = "rowid, " if self.kind == "sqlite" else ""
        out = {
            table: sorted(repr(r) for r in self.query(f'SELECT {rowid}* FROM "{table}"'))
            for table in self.tables()
        }
        if self.kind == "sqlite":
            out["sqlite_master"] = sorted(
                repr(r) for r in self.query("SELECT type, name, sql FROM sqlite_master")
            )
        else:
            out["pg_trigger"] = sorted(
                repr(r)
                for r in self.query(
                    "SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t "
                    "JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE c.relnamespace = current_schema()::regnamespace"
                )
            )
        return out

    def close(self) -> None:
        if self.kind == "sqlite":
            self.lite.close()
        else:
            self.pg.close()


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@dataclass
class Victims:
    """A store with one key or effect in each situation an attack could exploit."""

    store: Store
    raw: Raw

    def settle(self) -> None:
        eo = ExactlyOnce(self.store, worker="setup", classify=not_sent(ValueError))
        eo.run("paid", lambda: {"amount": 5})
        with pytest.raises(EffectFailed):
            eo.run("refused", _raise(ValueError("card declined")))
        self.store.insert("outcome", "busy", data={"owner": "elsewhere", "lease_until": FAR})
        log = EffectLog(self.store, worker="setup")
        log.call("done", lambda: {"v": 1}, tool="charge")
        with pytest.raises(EffectAwaitingApproval):
            log.call("irr", lambda: "wired", tier="irreversible", tool="wire")
        row, _ = self.store.insert("effect", "comp", context={"tier": "compensable"})
        self.store.move(row, "execute", actor="proxy")
        row, _ = self.store.insert("request", "req")
        self.store.move(row, "validate", actor="system", context={"side_effects": "none"})

    def nothing_runs_again(self) -> None:
        """Each key is answered from its record; no ``fn`` is called."""
        calls: list[str] = []

        def fn(key: str) -> Callable[[], str]:
            return lambda: calls.append(key) or key

        eo = ExactlyOnce(self.store, worker="after")
        assert eo.run("paid", fn("paid")) == {"amount": 5}
        with pytest.raises(EffectFailed, match="card declined"):
            eo.run("refused", fn("refused"))
        with pytest.raises(EffectInProgress):
            eo.run("busy", fn("busy"))
        log = EffectLog(self.store, worker="after")
        assert log.call("done", fn("done"), tool="charge") == {"v": 1}
        with pytest.raises(EffectAwaitingApproval):
            log.call("irr", fn("irr"), tier="irreversible", tool="wire")
        with pytest.raises(EffectStillExecuting):
            log.call("comp", fn("comp"))
        assert calls == [], f"ran again after the attack: {calls}"


def _raise(error: Exception) -> Callable[[], Any]:
    def fn() -> Any:
        raise error

    return fn


@contextmanager
def attacked(kind: str, tmp_path: Path) -> Iterator[Victims]:
    """A store of ``kind`` with its victims settled, and a raw connection beside it."""
    with ExitStack() as stack:
        if kind == "sqlite":
            target = str(tmp_path / "attacked.db")
            url = f"sqlite:///{target}"
        else:
            url = target = stack.enter_context(postgres_schema())
        store = open_store(url)
        stack.callback(store.close)
        raw = Raw(kind, target)
        stack.callback(raw.close)
        found = Victims(store, raw)
        found.settle()
        yield found


@pytest.fixture(scope="module")
def victims_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victims]:
    with attacked("sqlite", tmp_path_factory.mktemp("attacks")) as found:
        yield found


@pytest.fixture(scope="module")
def victims_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victims]:
    with attacked("postgres", tmp_path_factory.mktemp("attacks")) as found:
        yield found


@dataclass(frozen=True)
class Attack:
    name: str
    statements: tuple[str, ...]
    on: tuple[str, ...] = DATABASES

    def __str__(self) -> str:
        return self.name


def attack(name: str, *statements: str, on: tuple[str, ...] = DATABASES) -> Attack:
    return Attack(name, statements, on)


def move(key: str, table: str, *, to: str, trigger: str, actor: str, context: str) -> str:
    """A move in the shape the schema accepts one: a single UPDATE naming it."""
    return (
        f"UPDATE {table} SET state = '{to}', moves = moves + 1, version = version + 1, "
        f"last_trigger = '{trigger}', last_actor = '{actor}', last_detail = NULL, "
        f"last_context = '{context}' WHERE key = '{key}'"
    )


COMPENSABLE = '{"tier":"compensable"}'
IRREVERSIBLE = '{"tier":"irreversible"}'
SQLITE, POSTGRES = ("sqlite",), ("postgres",)
E, H, M = "effect_entities", "effect_history", "effect_moves"
OE, OH, OM = "outcome_entities", "outcome_history", "outcome_moves"

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
        f"'{COMPENSABLE}', 0)",
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
        "data a JSON array",
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
        "UPSERT that rewrites a finished key's data",
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
        f"NULL, '{COMPENSABLE}', 0)",
    ),
    attack(
        "a history row for an unknown entity",
        f"INSERT INTO {H} VALUES ('ghost', 1, 'pending', 'executing', 'execute', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0)",
    ),
    attack(
        "a history row at seq 0",
        f"INSERT INTO {H} VALUES ('comp', 0, 'pending', 'pending', 'fail', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0)",
    ),
    attack(
        "a history row with a gap",
        f"INSERT INTO {H} VALUES ('comp', 5, 'executing', 'committed', 'commit', 'proxy', "
        f"NULL, '{COMPENSABLE}', 0)",
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
        "NULL, '{}', 0)",
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
        f"'{IRREVERSIBLE}', 0)",
        f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'",
        on=POSTGRES,
    ),
    attack(
        "a temporary table shadows the entities for the history check",
        f"CREATE TEMP TABLE {E} AS SELECT * FROM {E}",
        f"UPDATE pg_temp.{E} SET moves = moves + 1, state = 'committed', "
        "last_trigger = 'commit', last_actor = 'proxy' WHERE key = 'comp'",
        f"INSERT INTO {H} SELECT key, moves, 'executing', state, last_trigger, last_actor, "
        f"last_detail, last_context, updated_at FROM pg_temp.{E} WHERE key = 'comp'",
        on=POSTGRES,
    ),
    # -- the schema registry -----------------------------------------------------------
    attack(
        "a fingerprint forged",
        "UPDATE machines_schema SET fingerprint = 'forged' WHERE machine = 'outcome'",
    ),
    attack("a fingerprint deleted", "DELETE FROM machines_schema WHERE machine = 'outcome'"),
    attack(
        "a fingerprint inserted again", "INSERT INTO machines_schema VALUES ('outcome', 'forged')"
    ),
    attack(
        "INSERT OR REPLACE of a fingerprint",
        "INSERT OR REPLACE INTO machines_schema VALUES ('outcome', 'forged')",
        on=SQLITE,
    ),
    attack(
        "UPSERT of a fingerprint",
        "INSERT INTO machines_schema VALUES ('outcome', 'forged') "
        "ON CONFLICT (machine) DO UPDATE SET fingerprint = excluded.fingerprint",
    ),
    attack("the registry truncated", "TRUNCATE machines_schema", on=POSTGRES),
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
        if table == "machines_schema":
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


# -- what the database's owner can still do, and what the audit still sees ------------------


@pytest.fixture(params=DATABASES)
def owned(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Victims, str]]:
    """A fresh attacked store and its URL, for a test that changes the schema."""
    with attacked(request.param, tmp_path) as found:
        yield found, found.store.url


def audited(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit", "--from-store", url])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def disable(raw: Raw, table: str, trigger: str) -> None:
    """The owner's way to switch one guard off: SQLite drops it, PostgreSQL disables it."""
    if raw.kind == "sqlite":
        raw.query(f'DROP TRIGGER "{table[: -len("entities")]}{trigger}"')
    else:
        raw.pg.execute(
            f'ALTER TABLE "{table}" DISABLE TRIGGER "{table[: -len("entities")]}{trigger}"'.encode()
        )


def commit(raw: Raw, sql: str) -> None:
    if raw.kind == "sqlite":
        raw.lite.execute(sql)
    else:
        raw.pg.execute(sql.encode())


def test_a_guard_switched_off_lets_a_state_change_through_and_the_audit_sees_it(
    owned: tuple[Victims, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The owner may drop (SQLite) or disable (PostgreSQL) a trigger; a state written
    without its move then no longer matches the history, which the audit reports."""
    victims, url = owned
    assert audited(url, capsys)[0] == 0
    guard = "entities_still" if victims.raw.kind == "sqlite" else "entities_guard"
    disable(victims.raw, OE, guard)
    commit(
        victims.raw,
        f"UPDATE {OE} SET state = 'in_flight', version = version + 1 WHERE key = 'paid'",
    )
    code, out = audited(url, capsys)
    assert code == 1 and "history ends in 'succeeded' but the entity is 'in_flight'" in out, out


def test_replication_role_replica_skips_every_guard_and_the_audit_sees_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """On PostgreSQL a superuser's ``session_replication_role = replica`` fires no
    ordinary trigger: a deleted history is then accepted, and reported by the audit."""
    with attacked("postgres", tmp_path) as victims:
        commit(victims.raw, "SET session_replication_role = replica")
        commit(victims.raw, f"DELETE FROM {OH} WHERE entity = 'paid'")
        code, out = audited(victims.store.url, capsys)
    assert code == 1 and "history ends in 'in_flight' but the entity is 'succeeded'" in out, out


def test_a_forged_context_is_reported_by_the_audit(
    owned: tuple[Victims, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 5: an Irreversible effect moved to executing under a forged
    ``tier=compensable`` (however the database was made to take it) is a breach."""
    victims, url = owned
    raw = victims.raw
    forged_event = raw.attempt(
        [
            f"INSERT INTO {H} VALUES ('irr', 1, 'pending', 'executing', 'execute', 'proxy', "
            f"NULL, '{COMPENSABLE}', 0)",
            f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'",
        ]
    )
    if forged_event is None:  # a schema that takes it: write it for real
        commit(raw, "BEGIN")
        commit(
            raw,
            f"INSERT INTO {H} VALUES ('irr', 1, 'pending', 'executing', 'execute', "
            f"'proxy', NULL, '{COMPENSABLE}', 0)",
        )
        commit(raw, f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'")
        commit(raw, "COMMIT")
    else:  # this schema refuses it: only its owner can, with the guard off
        disable(raw, E, "entities_legal_move" if raw.kind == "sqlite" else "entities_guard")
        commit(
            raw,
            move("irr", E, to="executing", trigger="execute", actor="proxy", context=COMPENSABLE),
        )
    code, out = audited(url, capsys)
    assert code == 1 and "tier='compensable', not 'irreversible'" in out, out


def test_a_forged_derived_value_is_taken_by_the_database_but_reported_by_the_audit(
    owned: tuple[Victims, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The limit of the database's guard: a request's ``side_effects`` is derived from its
    nodes at each move, which the database cannot re-run, so a request failed (its
    reservation released) under a forged ``none`` while a node with a side effect is
    submitting is accepted. The audit derives it from the nodes and reports it."""
    victims, url = owned
    store = victims.store
    none = {"side_effects": "none"}
    request, _ = store.insert("request", "r1")
    for trigger, actor in (
        ("validate", "system"),
        ("request_approval", "system"),
        ("approve", "operator"),
        ("start", "system"),
    ):
        request = store.move(request, trigger, actor=actor, context=none)
    node, _ = store.insert(
        "node",
        "r1/send",
        scope="r1",
        context={"kind": "action"},
        data={"name": "send", "has_side_effect": True, "predecessors": []},
    )
    for trigger, actor in (("wake", "planner"), ("prepare", "executor"), ("submit", "executor")):
        node = store.move(node, trigger, actor=actor)
    assert audited(url, capsys)[0] == 0
    forged = move(
        "r1",
        "request_entities",
        to="failed",
        trigger="fail",
        actor="system",
        context='{"side_effects":"none"}',
    )
    assert victims.raw.attempt([forged]) is None  # the documented limit: the database takes it
    commit(victims.raw, forged)
    code, out = audited(url, capsys)
    assert code == 1 and "[no-auto-terminal-money-in-flight] request 'r1'" in out, out


def test_sqlite_puts_a_dropped_guard_back_when_the_store_opens(tmp_path: Path) -> None:
    """Anyone who can write the SQLite file can drop a trigger; the store runs its schema
    (IF NOT EXISTS) whenever it opens, so the guard is back from the next open on."""
    with attacked("sqlite", tmp_path) as victims:
        victims.raw.query('DROP TRIGGER "outcome_entities_final_data"')
        assert (
            victims.raw.attempt(
                [f"UPDATE {OE} SET data = '{{}}', version = version + 1 WHERE key = 'paid'"]
            )
            is None
        )
        open_store(victims.store.url).close()
        assert (
            victims.raw.attempt(
                [f"UPDATE {OE} SET data = '{{}}', version = version + 1 WHERE key = 'paid'"]
            )
            is not None
        )


# -- fuzz: garbage through raw SQL ---------------------------------------------------------


def _bindable(value: Any) -> Any:
    """A garbage value as a driver binds it: None, a 64-bit int, a float, UTF-8 text,
    bytes; anything else as its JSON text if it has one, else its type's name."""
    if value is None or isinstance(value, bytes | float):
        return value
    if isinstance(value, int):
        return int(value) if -(2**63) <= value < 2**63 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode()
    try:
        return json.dumps(value)
    except Exception:  # a hostile object, 10**5000, a cycle: only its type is safe to say
        return f"<{type(value).__name__}>"


BINDABLE = garbage(
    extra=("{}", "[]", '{"result":{"amount":5}}', '{"amount":5}', "succeeded", "in_flight")
).map(_bindable)
FINISHED_COLUMNS = (
    "state",
    "context",
    "data",
    "scope",
    "moves",
    "key",
    "created_at",
    "last_trigger",
    "last_actor",
    "last_detail",
    "last_context",
)


@pytest.mark.parametrize("kind", DATABASES)
@given(column=st.sampled_from(FINISHED_COLUMNS), value=BINDABLE)
def test_fuzz_nothing_changes_a_finished_entity(
    kind: str, column: str, value: Any, request: pytest.FixtureRequest
) -> None:
    """issue 13 item 7, fuzzed: a succeeded key's row takes no value of any type in any
    column (the write is refused, or changes nothing)."""
    victims: Victims = request.getfixturevalue(f"victims_{kind}")
    read = f"SELECT * FROM {OE} WHERE key = 'paid'"
    before = victims.raw.rows(read)
    update = f"UPDATE {OE} SET {column} = {{p}}, version = version + 1 WHERE key = 'paid'"
    refused = victims.raw.attempt([update], (value,), then=read)
    event("refused" if refused is not None else "accepted, nothing changed")
    if refused is None:
        (now,), (then,) = victims.raw.seen, before
        changed = {c for c in now if now[c] != then[c]} - {"version", "updated_at"}
        assert not changed, f"{column} = {value!r} changed {changed}"


def _near_legal_move(
    data: st.DataObject, spec: MachineSpec, state: str, stored: dict[str, str]
) -> tuple[str, str, str, str]:
    """(dest, trigger, actor, context JSON): a legal move from ``state``, then each part
    kept or swapped for another of the machine's names or for garbage, so that legal and
    nearly legal moves are both drawn often."""
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
    legal = [
        (t.dest, t.trigger, a) for t in spec.transitions if t.source == state for a in t.actors
    ]
    dest, trigger, actor = data.draw(st.sampled_from(legal))
    swap = st.integers(0, 3).map(lambda n: n == 0)  # one in four
    if data.draw(swap):
        dest = data.draw(st.sampled_from(list(spec.states)) | text)
    if data.draw(swap):
        trigger = data.draw(st.sampled_from(sorted(spec.triggers)) | text)
    if data.draw(swap):
        actor = data.draw(st.sampled_from(list(spec.actors)) | text)
    context: dict[str, Any] = dict(stored)
    for var, declared in spec.context.items():
        if var not in stored or data.draw(swap):
            choice = data.draw(st.sampled_from([*declared.values, "safe", None, 1, "absent"]))
            if choice == "absent":
                context.pop(var, None)
            else:
                context[var] = choice
    if data.draw(swap):
        context[data.draw(st.sampled_from(["x", "tier", "kind"]))] = "compensable"
    garbled = st.sampled_from(["[]", "{", "null", '"tier"', ""])
    return dest, trigger, actor, data.draw(garbled) if data.draw(swap) else json.dumps(context)


def _legal(
    spec: MachineSpec, row: tuple[str, str], dest: str, trigger: str, actor: str, text: str
) -> bool:
    """The Python rule for the same move: the context a JSON object of strings, its fixed
    variables as stored, and ``spec.step`` leading to ``dest``."""
    state, stored_text = row
    try:
        given = json.loads(text)
        stored = json.loads(stored_text) if isinstance(stored_text, str) else stored_text
    except ValueError:
        return False
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        return False
    derived = set(spec.derivation.context) if spec.derivation else set()
    if any(given.get(v) != stored.get(v) for v in spec.context if v not in derived):
        return False
    try:
        return spec.step(state, trigger, actor=actor, **given) == dest
    except MachinesError:
        return False


@pytest.mark.parametrize("kind", DATABASES)
@pytest.mark.parametrize(
    ("machine", "key"), [("effect", "irr"), ("effect", "comp"), ("request", "req")]
)
@given(data=st.data())
def test_fuzz_a_raw_move_is_taken_exactly_when_the_spec_allows_it(
    kind: str, machine: str, key: str, data: st.DataObject, request: pytest.FixtureRequest
) -> None:
    """The guard of every move, fuzzed: a move written in raw SQL (legal moves with
    their parts swapped for other names or garbage, contexts forged or broken) is
    accepted by the database exactly when ``spec.step`` under the entity's stored
    context allows it."""
    victims: Victims = request.getfixturevalue(f"victims_{kind}")
    spec = victims.store.specs()[machine]
    table = f"{machine}_entities"
    (row,) = victims.raw.query(f"SELECT state, context FROM {table} WHERE key = '{key}'")
    stored = row[1] if isinstance(row[1], dict) else json.loads(row[1])
    dest, trigger, actor, context = _near_legal_move(data, spec, row[0], stored)
    update = (
        f"UPDATE {table} SET state = {{p}}, moves = moves + 1, version = version + 1, "
        "last_trigger = {p}, last_actor = {p}, last_context = {p} "
        f"WHERE key = '{key}'"
    )
    refused = victims.raw.attempt([update], (dest, trigger, actor, context))
    expected = _legal(spec, row, dest, trigger, actor, context)
    event("a legal move" if expected else "an illegal move")
    assert (refused is None) == expected, (dest, trigger, actor, context, refused)
