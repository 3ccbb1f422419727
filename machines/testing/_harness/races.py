"""Many worker processes racing on the same keys, and a Jepsen-style check of what they saw.

``race`` forks worker processes that call ``ExactlyOnce.run`` on keys drawn at random from a
small set, with short leases, random crashes (``os._exit`` right after the effect ran, or
before it ran), effects that time out after sending, callers that reclaim parked keys, and
sweeps that park keys whose lease expired (``park_expired``).
A crashed worker is replaced by a new process. Every call is recorded in the worker's own
JSON Lines file as Jepsen records operations: ``invoke`` before, then ``ok`` (the value
returned), ``fail`` (a recorded failure: the effect provably did not happen) or ``info``
(indeterminate, in progress, or the process died: nobody knows). The upstream effect
appends a line to a log of its own before returning.

``check`` then judges the recorded history against the store: no key ran more often than
1 + its successful reclaims, every ``ok`` is still what the key records, every ``fail``
too, and the named invariants hold on the final store.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machines.checks.invariants import check_invariants
from machines.checks.snapshots import snapshot
from machines.errors import EffectFailed, MachinesError
from machines.store import open_store
from machines.systems import ExactlyOnce, not_sent
from machines.testing._harness.durable import append_durably
from machines.testing.verdict import bundled


class _Refused(Exception):
    """Raised by an effect before sending: classified as proof it did not happen."""


@dataclass
class RaceReport:
    processes: int
    crashes: int
    calls: Counter[str] = field(default_factory=Counter)  # by outcome: ok, fail, info
    runs: int = 0
    reclaims: int = 0
    sweeps: int = 0
    swept: int = 0  # keys parked by sweeps
    problems: list[str] = field(default_factory=list)


def _append(path: Path, record: dict[str, Any]) -> None:
    append_durably(path, json.dumps(record))


def _worker(url: str, index: int, generation: int, calls: int, keys: int, folder: str) -> None:
    rng = random.Random(index * 1_000 + generation)
    me = f"p{index}.{generation}"
    log = Path(folder) / f"history-{me}.jsonl"
    upstream = Path(folder) / "upstream.jsonl"
    store = open_store(url)
    eo = ExactlyOnce(store, worker=me, lease_seconds=0.05, classify=not_sent(_Refused))
    for n in range(calls):
        key = f"k{rng.randrange(keys)}"
        if rng.random() < 0.1:
            _append(log, {"process": me, "type": "invoke", "f": "reclaim", "key": key})
            try:
                eo.reclaim(key, by=me, reason="the caller says a repeat is safe")
                done = {"type": "ok"}
            except MachinesError as error:  # not parked (or absent): refused, nothing changed
                done = {"type": "fail", "error": type(error).__name__}
            _append(log, {"process": me, "f": "reclaim", "key": key, **done})
            continue
        if rng.random() < 0.05:
            _append(log, {"process": me, "type": "invoke", "f": "sweep"})
            parked = eo.park_expired(limit=3)
            _append(log, {"process": me, "type": "ok", "f": "sweep", "parked": parked})
            continue
        value = f"{key}:{me}:{n}"
        fate = rng.random()

        def effect(key: str = key, value: str = value, fate: float = fate) -> str:
            if fate < 0.05:
                os._exit(3)  # dies before anything was sent
            if fate < 0.10:
                raise _Refused("refused before sending")
            _append(upstream, {"key": key, "by": me})
            if fate < 0.18:
                os._exit(3)  # dies after sending, before the outcome is stored
            if fate < 0.24:
                raise TimeoutError("sent, but no answer")
            return value

        _append(log, {"process": me, "type": "invoke", "f": "run", "key": key})
        try:
            got = eo.run(key, effect)
            done = {"type": "ok", "value": got}
        except EffectFailed as error:
            done = {"type": "fail", "error": error.error_type}
        except MachinesError as error:
            done = {"type": "info", "error": type(error).__name__}
        _append(log, {"process": me, "f": "run", "key": key, **done})
        time.sleep(rng.random() * 0.01)
    store.close()
    os._exit(0)


def race(url: str, folder: Path, *, processes: int, calls: int, keys: int) -> int:
    """Run ``processes`` workers of ``calls`` calls each, replacing crashed ones until
    every worker slot has finished once; how many processes crashed."""
    context = multiprocessing.get_context("fork")
    open_store(url).close()  # create the schema once, before the race
    generation = [0] * processes
    live = {
        i: context.Process(target=_worker, args=(url, i, 0, calls, keys, str(folder)))
        for i in range(processes)
    }
    for p in live.values():
        p.start()
    crashes = 0
    while live:
        for i, p in list(live.items()):
            p.join(0.05)
            if p.exitcode is None:
                continue
            del live[i]
            if p.exitcode != 0:
                crashes += 1
                generation[i] += 1
                replacement = context.Process(
                    target=_worker, args=(url, i, generation[i], calls, keys, str(folder))
                )
                replacement.start()
                live[i] = replacement
    return crashes


def check(url: str, folder: Path, processes: int, crashes: int) -> RaceReport:
    """Judge the recorded history against the final store."""
    report = RaceReport(processes, crashes)
    ops = [
        json.loads(line)
        for path in sorted(folder.glob("history-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    completions = [op for op in ops if op.get("type") != "invoke"]
    report.calls.update(op["type"] for op in completions if op["f"] == "run")
    invoked = Counter((op["process"], op["f"]) for op in ops if op.get("type") == "invoke")
    finished = Counter((op["process"], op["f"]) for op in completions)
    report.calls["info"] += sum((invoked - finished).values())  # died mid-call: unknown
    upstream_path = folder / "upstream.jsonl"
    upstream = upstream_path.read_text().splitlines() if upstream_path.exists() else []
    runs = Counter(json.loads(line)["key"] for line in upstream)
    reclaimed = Counter(
        op["key"] for op in completions if op["f"] == "reclaim" and op["type"] == "ok"
    )
    report.runs, report.reclaims = sum(runs.values()), sum(reclaimed.values())
    sweeps = [op for op in completions if op["f"] == "sweep"]
    report.sweeps, report.swept = len(sweeps), sum(len(op["parked"]) for op in sweeps)
    store = open_store(url)
    try:
        snap = snapshot(store, {("outcome", key): n for key, n in runs.items()})
        judge = {name: bundled(name) for name in store.specs()}
        report.problems += [b.describe() for b in check_invariants(judge, snap)]
        for key, n in runs.items():
            if n > 1 + reclaimed[key]:
                report.problems.append(f"{key} ran {n} times with {reclaimed[key]} reclaims")
        for op in completions:
            if op["f"] != "run" or op["type"] == "info":
                continue
            row = snap.entities.get(("outcome", op["key"]))
            if op["type"] == "ok" and (
                row is None or row.state != "succeeded" or row.data.get("result") != op["value"]
            ):
                report.problems.append(f"acknowledged {op} but the store holds {row}")
            if op["type"] == "fail" and (row is None or row.state != "failed"):
                report.problems.append(f"told {op} but the store holds {row}")
    finally:
        store.close()
    return report
