"""SQLite claims per second: ``ExactlyOnce.run`` against raw SQL at the same durability.

Both sides use WAL with ``synchronous=FULL`` in fresh database files. The baseline is
the raw three-statement transaction the issue names (insert the key, update its state,
insert a history row: one commit per key). ``ExactlyOnce.run`` needs two commits per key
(the claim must be durable before the effect runs, then the outcome), so the crash-safe
minimum (the same statements as two transactions) is measured too, for comparison.
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness import Ratio, throughput_ratio
from machines.store import open_store
from machines.systems import ExactlyOnce

CLAIMS = 200

RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS outcome (key TEXT PRIMARY KEY, state TEXT NOT NULL, data TEXT);
CREATE TABLE IF NOT EXISTS history (key TEXT, seq INTEGER, source TEXT, dest TEXT,
                                    PRIMARY KEY (key, seq));
"""


def _raw_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(RAW_SCHEMA)
    return conn


def _raw_one_transaction(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO outcome VALUES (?, 'in_flight', '{}') ON CONFLICT DO NOTHING", (key,))
    conn.execute(
        "UPDATE outcome SET state = 'succeeded', data = '{\"result\": 1}' WHERE key = ?", (key,)
    )
    conn.execute("INSERT INTO history VALUES (?, 1, 'in_flight', 'succeeded')", (key,))
    conn.execute("COMMIT")


def _raw_two_transactions(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO outcome VALUES (?, 'in_flight', '{}') ON CONFLICT DO NOTHING", (key,))
    conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "UPDATE outcome SET state = 'succeeded', data = '{\"result\": 1}' WHERE key = ?", (key,)
    )
    conn.execute("INSERT INTO history VALUES (?, 1, 'in_flight', 'succeeded')", (key,))
    conn.execute("COMMIT")


def in_threads(
    threads: int,
    work: Callable[[int, list[str]], None],
    claims: int = CLAIMS,
    *,
    warm: int = 0,
) -> float:
    """Seconds for ``threads`` threads to run ``work(index, their keys)`` over ``claims``
    keys shared out between them. With ``warm``, each thread first runs that many keys of
    its own, untimed, as a long-lived worker has (its connection, prepared statements)."""
    keys = [f"key-{i}" for i in range(claims)]
    shares = [keys[i::threads] for i in range(threads)]
    ready = threading.Barrier(threads + 1)

    def body(index: int) -> None:
        work(index, [f"warm-{index}-{n}" for n in range(warm)])
        ready.wait()
        work(index, shares[index])

    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def _ours(threads: int) -> Callable[[], float]:
    def run() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(f"sqlite:///{tmp}/eo.db")

            def work(index: int, keys: list[str]) -> None:
                eo = ExactlyOnce(store, worker=f"w{index}")
                for key in keys:
                    eo.run(key, lambda: 1)

            elapsed = in_threads(threads, work)
            store.close()
            return elapsed

    return run


def _raw(threads: int, per_key: Callable[[sqlite3.Connection, str], None]) -> Callable[[], float]:
    def run() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "raw.db"
            _raw_connection(path).close()
            connections = [_raw_connection(path) for _ in range(threads)]

            def work(index: int, keys: list[str]) -> None:
                for key in keys:
                    per_key(connections[index], key)

            elapsed = in_threads(threads, work)
            for conn in connections:
                conn.close()
            return elapsed

    return run


def run() -> list[Ratio]:
    out = []
    for threads in (1, 4):
        label = "1 thread" if threads == 1 else f"{threads} threads contending"
        out.append(
            throughput_ratio(
                f"SQLite claims/s, {label}",
                ("ExactlyOnce.run", _ours(threads)),
                ("raw 3-statement transaction", _raw(threads, _raw_one_transaction)),
                units=CLAIMS,
                unit="claim",
                goal=0.7,
            )
        )
        out.append(
            throughput_ratio(
                f"SQLite claims/s, {label} (vs crash-safe minimum)",
                ("ExactlyOnce.run", _ours(threads)),
                ("raw claim + outcome, 2 transactions", _raw(threads, _raw_two_transactions)),
                units=CLAIMS,
                unit="claim",
                goal=None,
            )
        )
    return out
