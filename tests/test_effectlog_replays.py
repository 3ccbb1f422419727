"""Every replay of a committed effect gets its result and is counted, however many come at
once. Outsider batch 34 (b 8): on PostgreSQL, which reads the row without a lock, 280 of
320 concurrent replays raised ``StaleWrite`` (a count written first by another replay)
instead of the stored result, and the count said 40; SQLite's ``BEGIN IMMEDIATE`` served
all 320."""

from __future__ import annotations

import threading
from collections import Counter

from machines.store.records import Store
from machines.systems import EffectLog


def test_concurrent_replays_all_get_the_result_and_are_all_counted(store: Store) -> None:
    log = EffectLog(store, worker="first")
    assert log.call("charge-1", lambda: {"charge": "ch_1"}, tool="charge") == {"charge": "ch_1"}
    threads, each = 8, 10
    told: Counter[str] = Counter()
    lock, start = threading.Lock(), threading.Barrier(threads)

    def replay() -> None:
        start.wait()
        for _ in range(each):
            try:
                got = repr(log.call("charge-1", lambda: 1 / 0, tool="charge"))
            except Exception as error:  # what each caller was told, whatever it was
                got = f"{type(error).__name__}: {error}"
            with lock:
                told[got] += 1

    pool = [threading.Thread(target=replay) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert told == {"{'charge': 'ch_1'}": threads * each}, told
    row = log.effect("charge-1")
    assert row is not None and row.data["replay_count"] == threads * each
