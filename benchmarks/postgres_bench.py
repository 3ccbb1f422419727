"""PostgreSQL claims per second: ``ExactlyOnce.run`` against raw SQL on the same server.

Needs a server: ``MACHINES_TEST_POSTGRES`` (``eval "$(.ci/postgres start)"``). Each round
gets fresh schemas. The baseline is the raw transaction the issue names, at the same
isolation (READ COMMITTED): ``INSERT ... ON CONFLICT DO NOTHING`` of the key plus its
history row, the state set in the same commit. ``ExactlyOnce.run`` needs two commits per
key (the claim is durable before the effect runs), so the crash-safe minimum (the same
statements as two transactions) is measured too. Workers are threads, one connection
each, sharing the keys between them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.harness import Ratio, throughput_ratio
from benchmarks.store_bench import in_threads
from machines.store import open_store
from machines.systems import ExactlyOnce

CLAIMS = 400
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


def _ours(threads: int) -> Callable[[], float]:
    def run() -> float:
        with _schema() as url:
            store = open_store(url)
            workers = [ExactlyOnce(store, worker=f"w{i}") for i in range(threads)]

            def work(index: int, keys: list[str]) -> None:
                for key in keys:
                    workers[index].run(key, lambda: 1)

            elapsed = in_threads(threads, work, CLAIMS)
            with store.transaction() as tx:  # a run that did not do the work measures nothing
                states = [row.state for row in tx.rows("outcome")]
            store.close()
            if states != ["succeeded"] * CLAIMS:
                raise RuntimeError(f"the benchmark run left {len(states)} keys: {set(states)}")
            return elapsed

    return run


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

            elapsed = in_threads(threads, work, CLAIMS)
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
        label = "1 worker" if threads == 1 else f"{threads} workers"
        out.append(
            throughput_ratio(
                f"PostgreSQL claims/s, {label}",
                ("ExactlyOnce.run", _ours(threads)),
                (
                    "raw INSERT ON CONFLICT + history, 1 transaction",
                    _raw(threads, _one_transaction),
                ),
                units=CLAIMS,
                unit="claim",
                goal=0.7,
            )
        )
        out.append(
            throughput_ratio(
                f"PostgreSQL claims/s, {label} (vs crash-safe minimum)",
                ("ExactlyOnce.run", _ours(threads)),
                ("raw claim + outcome, 2 transactions", _raw(threads, _two_transactions)),
                units=CLAIMS,
                unit="claim",
                goal=None,
            )
        )
    return out
