"""The desk's list of what waits, against the store's raw query for the same rows.

A SQLite store holds 100,000 outcomes, 1,000 of them ``indeterminate`` (parked: waiting on
a person). The candidate is the desk's first page as a signed-in person gets it over HTTP
(Starlette's test client: the counts, the 50 longest waiting, the page rendered). The
baseline is the raw SQL on one connection that reads the same: the counts by state of
each machine's table and the 50 oldest rows in the waiting state. The aim: the page costs
at most 3x the query.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from benchmarks.harness import Ratio, is_quick, measure_ratio
from machines.store import open_store
from machines.store.names import name

ENTITIES = 100_000
WAITING = 1_000
PASSWORD = "benchmark password"


def _fill(url: str, entities: int, waiting: int) -> None:
    with open_store(url) as store:
        with store.transaction() as tx:
            for i in range(entities):
                tx.insert("outcome", f"k{i:06d}")
        step = entities // waiting
        with store.transaction() as tx:
            for i in range(0, entities, step):
                row = tx.get("outcome", f"k{i:06d}")
                assert row is not None
                tx.move(row, "park", actor="worker", detail={"evidence": "lease expired"})


def run() -> list[Ratio]:
    from starlette.testclient import TestClient

    from machines.desk.accounts import add_account, read_accounts
    from machines.desk.app import desk_app

    entities, waiting = (10_000, 100) if is_quick() else (ENTITIES, WAITING)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "desk.db"
        url = f"sqlite:///{path}"
        _fill(url, entities, waiting)
        accounts = Path(tmp) / "accounts.json"
        add_account(accounts, "olga", ["operator"], PASSWORD)
        store = open_store(url)
        client = TestClient(desk_app(store, read_accounts(accounts)), base_url="http://desk.test")
        client.post("/login", data={"name": "olga", "password": PASSWORD})
        raw = sqlite3.connect(path)
        tables = [name(m, "entities") for m in ("effect", "outcome", "node", "request")]

        def page() -> None:
            answer = client.get("/")
            assert answer.status_code == 200 and "k000000" in answer.text

        def query() -> None:
            for table in tables:
                raw.execute(f"SELECT state, count(*) FROM {table} GROUP BY state").fetchall()
            rows = raw.execute(
                f"SELECT key, state, context, data, scope, rowid, moves, version, created_at, "
                f"updated_at FROM {name('outcome', 'entities')} WHERE state IN "
                "('indeterminate') ORDER BY updated_at, rowid LIMIT 51"
            ).fetchall()
            assert rows

        ratio = measure_ratio(
            f"desk: what waits, {entities:,} entities, {waiting:,} waiting",
            ("the desk's first page over HTTP", page),
            ("the raw SQL for its rows and counts", query),
            units=1,
            unit="page",
            goal=3.0,
            rounds=7,
        )
        raw.close()
        store.close()
    return [ratio]
