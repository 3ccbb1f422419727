"""PostgreSQL claims per second: ``ExactlyOnce`` against raw SQL on the same server.

Needs a server: ``MACHINES_TEST_POSTGRES`` (``eval "$(.ci/postgres start)"``). Each round
gets fresh schemas; workers are threads, one connection each, sharing the keys between
them; every raw baseline runs at the same isolation (READ COMMITTED) with the same
durability (``synchronous_commit`` on).

- **claims/s** (the goal): taking a fresh key durably, the step ``ExactlyOnce.run`` takes
  before it runs anything, against the raw transaction the issue names:
  ``INSERT ... ON CONFLICT DO NOTHING`` of the key plus a history row, one commit.
- **runs/s**: the whole ``ExactlyOnce.run`` (claim, then the outcome: two commits, since
  the claim must be durable before the effect runs) against the same work in raw SQL as
  two transactions (the crash-safe minimum), and against all of it in one transaction
  (one commit; not crash-safe, so a floor no exactly-once run can reach).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.harness import Ratio
from benchmarks.store_bench import did_the_work, in_threads, three_ratios
from machines.store import open_store
from machines.systems import ExactlyOnce

CLAIMS = 400
WARM = 20  # keys per worker before the clock starts: a worker's connection is long-lived
SERVER = os.environ.get("MACHINES_TEST_POSTGRES")

RAW_SCHEMA = """
CREATE TABLE outcome (key TEXT PRIMARY KEY, state TEXT NOT NULL, data JSONB);
CREATE TABLE history (key TEXT, seq INTEGER, source TEXT, dest TEXT, PRIMARY KEY (key, seq));
"""


@contextmanager
def _schema() -> Iterator[str]:
    from machines.store.postgres import temporary_schema

    assert SERVER is not None
    with temporary_schema(SERVER, "bench") as url:
        yield url


def _ours(threads: int, per_key: Callable[[ExactlyOnce, str], object]) -> Callable[[], float]:
    def run() -> float:
        with _schema() as url:
            store = open_store(url)
            workers = [ExactlyOnce(store, worker=f"w{i}") for i in range(threads)]

            def work(index: int, keys: list[str]) -> None:
                for key in keys:
                    per_key(workers[index], key)

            elapsed = in_threads(threads, work, CLAIMS, warm=WARM)
            with store.transaction() as tx:
                did_the_work([row.state for row in tx.rows("outcome")], CLAIMS + threads * WARM)
            store.close()
            return elapsed

    return run


def _raw_claim(conn: Any, key: str) -> None:
    with conn.transaction():
        conn.execute(
            "INSERT INTO outcome VALUES (%s, 'in_flight', '{}') ON CONFLICT DO NOTHING", (key,)
        )
        conn.execute("INSERT INTO history VALUES (%s, 0, NULL, 'in_flight')", (key,))


def _one_transaction(conn: Any, key: str) -> None:
    with conn.transaction():
        conn.execute(
            "INSERT INTO outcome VALUES (%s, 'in_flight', '{}') ON CONFLICT DO NOTHING", (key,)
        )
        conn.execute(
            "UPDATE outcome SET state = 'succeeded', data = '{\"result\": 1}' WHERE key = %s",
            (key,),
        )
        conn.execute("INSERT INTO history VALUES (%s, 1, 'in_flight', 'succeeded')", (key,))


def _two_transactions(conn: Any, key: str) -> None:
    with conn.transaction():
        conn.execute(
            "INSERT INTO outcome VALUES (%s, 'in_flight', '{}') ON CONFLICT DO NOTHING", (key,)
        )
    with conn.transaction():
        conn.execute(
            "UPDATE outcome SET state = 'succeeded', data = '{\"result\": 1}' WHERE key = %s",
            (key,),
        )
        conn.execute("INSERT INTO history VALUES (%s, 1, 'in_flight', 'succeeded')", (key,))


def _raw(threads: int, per_key: Callable[[Any, str], None]) -> Callable[[], float]:
    import psycopg

    def run() -> float:
        with _schema() as url:
            connections = [psycopg.connect(url, autocommit=True) for _ in range(threads)]
            connections[0].execute(RAW_SCHEMA)

            def work(index: int, keys: list[str]) -> None:
                for key in keys:
                    per_key(connections[index], key)

            elapsed = in_threads(threads, work, CLAIMS, warm=WARM)
            states = connections[0].execute("SELECT state FROM outcome").fetchall()
            did_the_work([state for (state,) in states], CLAIMS + threads * WARM)
            for conn in connections:
                conn.close()
            return elapsed

    return run


def run() -> list[Ratio]:
    if SERVER is None:
        print('postgres: skipped, no server (eval "$(.ci/postgres start)")')
        return []
    out = []
    for threads in (1, 8):
        out += three_ratios(
            "PostgreSQL",
            "1 worker" if threads == 1 else f"{threads} workers",
            CLAIMS,
            functools.partial(_ours, threads),
            (
                _raw(threads, _raw_claim),
                _raw(threads, _two_transactions),
                _raw(threads, _one_transaction),
            ),
            "raw INSERT ON CONFLICT + history, 1 transaction",
        )
    return out
