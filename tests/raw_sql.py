"""The raw-SQL attacks' shared pieces: a second connection to a store's database, as an
outsider has one, and a store with one victim in each situation an attack could exploit
(a settled key, a failed one, a live lease, a committed effect, an Irreversible call
waiting for approval, an executing effect, a request). Used by
tests/test_raw_sql_attacks.py, tests/test_raw_sql_fuzz.py and
tests/test_database_owner.py."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from machines.errors import EffectFailed, EffectInProgress
from machines.store import Store, open_store
from machines.systems import EffectLog, ExactlyOnce
from machines.systems.effectlog import EffectAwaitingApproval, EffectStillExecuting
from machines.systems.exactly_once import not_sent
from tests.conftest import postgres_schema

DATABASES = ("sqlite", "postgres")
FAR = time.time() + 24 * 3600  # a lease that has not expired (a day: at most 7 are taken)


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
