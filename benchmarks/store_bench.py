"""SQLite claims and runs per second: ``ExactlyOnce`` against raw SQL at the same durability.

Both sides use WAL with ``synchronous=FULL`` in fresh database files; workers are threads,
one connection each, warmed before the clock starts, sharing the keys between them. The
three ratios are the PostgreSQL benchmark's:

- **claims/s** (a goal): taking a fresh key durably, the step ``ExactlyOnce.run`` takes
  before it runs anything, against the raw claim (insert the key and a history row, one
  commit).
- **runs/s** (a goal): the whole ``ExactlyOnce.run`` (the claim, then the outcome: two
  commits, since the claim must be durable before the effect runs) against the same work in
  raw SQL as two transactions, the crash-safe minimum.
- **runs/s against one commit** (no goal): all of it in one transaction is not crash-safe,
  so no exactly-once run can reach it; where a commit's flush to disk dominates, the ratio
  is near 0.5 whatever the store does.
"""

from __future__ import annotations

import functools
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
WARM = 10  # keys per worker before the clock starts: a worker's connection is long-lived

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


def _raw_claim(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO outcome VALUES (?, 'in_flight', '{}') ON CONFLICT DO NOTHING", (key,))
    conn.execute("INSERT INTO history VALUES (?, 0, NULL, 'in_flight')", (key,))
    conn.execute("COMMIT")


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


def claim(eo: ExactlyOnce, key: str) -> object:
    """``run()``'s first step: the key is taken durably, nothing has run yet."""
    return eo._claim(key)


def whole_run(eo: ExactlyOnce, key: str) -> object:
    return eo.run(key, lambda: 1)


def did_the_work(states: list[str], keys: int) -> None:
    """A round that did not leave all its ``keys`` in one and the same state measured
    nothing."""
    if len(states) != keys or len(set(states)) != 1:
        raise RuntimeError(f"the benchmark left {len(states)} keys in {set(states)}")


def _ours(threads: int, per_key: Callable[[ExactlyOnce, str], object]) -> Callable[[], float]:
    def run() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(f"sqlite:///{tmp}/eo.db")
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


def _raw(threads: int, per_key: Callable[[sqlite3.Connection, str], None]) -> Callable[[], float]:
    def run() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "raw.db"
            _raw_connection(path).close()
            connections = [_raw_connection(path) for _ in range(threads)]

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


Side = Callable[[], float]


def three_ratios(
    database: str,
    label: str,
    claims: int,
    ours: Callable[[Callable[[ExactlyOnce, str], object]], Side],
    raw: tuple[Side, Side, Side],
    raw_claim_name: str,
) -> list[Ratio]:
    """The three ratios of one database and worker count: the claim against
    ``raw[0]`` (goal 0.7), the whole run against two transactions ``raw[1]`` (goal 0.7)
    and against one, ``raw[2]`` (no goal: not crash-safe)."""
    raw_claim, two, one = raw
    sides = (
        ("claims/s", "claim", ("ExactlyOnce claim", ours(claim)), (raw_claim_name, raw_claim), 0.7),
        (
            "runs/s",
            "run",
            ("ExactlyOnce.run", ours(whole_run)),
            ("raw claim + outcome, 2 transactions", two),
            0.7,
        ),
        (
            "runs/s",
            "run",
            ("ExactlyOnce.run", ours(whole_run)),
            ("raw claim + outcome, 1 transaction", one),
            None,
        ),
    )
    return [
        throughput_ratio(
            f"{database} {what}, {label}" + ("" if goal else " (vs one commit, not crash-safe)"),
            candidate,
            baseline,
            units=claims,
            unit=unit,
            goal=goal,
        )
        for what, unit, candidate, baseline, goal in sides
    ]


def run() -> list[Ratio]:
    out = []
    for threads in (1, 4):
        out += three_ratios(
            "SQLite",
            "1 thread" if threads == 1 else f"{threads} threads contending",
            CLAIMS,
            functools.partial(_ours, threads),
            (
                _raw(threads, _raw_claim),
                _raw(threads, _raw_two_transactions),
                _raw(threads, _raw_one_transaction),
            ),
            "raw key + history row, 1 transaction",
        )
    return out
