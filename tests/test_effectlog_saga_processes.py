"""The saga leaves a call another live process on this host is running (issue 27, outsider
batch 23, A4 across processes).

Worker 1 ran a charge that took a second; worker 2's saga compensated the session
meanwhile: the refund ran, then the charge landed (the customer stayed charged, the
effect read compensated). A run now records the process that started it (host, pid and
start time); the saga leaves an effect alone while that process lives and its run has not
said how it ended, and undoes it once the process is gone (a crash after sending)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from machines.store import open_store
from machines.systems import EffectLog, EffectOutcomeUnknown

ROOT = Path(__file__).resolve().parents[1]

WORKER = """
import os, sys, time
from machines.store import open_store
from machines.systems import EffectLog
store = open_store(sys.argv[1])
log = EffectLog(store, worker="w1")
def charge():
    open(sys.argv[2], "w").close()
    time.sleep(float(sys.argv[3]))
    if sys.argv[4] == "die":
        os._exit(9)
    return "charged"
print(log.call("charge-1", charge, tool="charge", session="S"))
"""


def start(tmp_path: Path, seconds: float, end: str) -> tuple[subprocess.Popen[bytes], str]:
    url = f"sqlite:///{tmp_path / 'saga.db'}"
    open_store(url).close()
    started = tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", WORKER, url, str(started), str(seconds), end]
    worker = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not started.exists():
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < deadline, "the worker never started its call"
        time.sleep(0.02)
    return worker, url


def test_the_saga_leaves_a_call_a_live_process_is_running(tmp_path: Path) -> None:
    worker, url = start(tmp_path, 2.0, "return")
    store = open_store(url)
    refunds: list[str] = []
    try:
        (step,) = EffectLog(store, worker="w2").compensate(
            "S", {"charge": lambda row: refunds.append(row.key)}
        )
        assert refunds == [] and step.state == "executing", step
        assert "still alive" in step.reason
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err.decode()
        assert out.decode().strip() == "charged"
        row = EffectLog(store, worker="w2").effect("charge-1")
        assert row is not None and row.state == "committed"
    finally:
        store.close()


def test_the_saga_undoes_a_call_whose_process_died(tmp_path: Path) -> None:
    worker, url = start(tmp_path, 0.1, "die")
    worker.communicate(timeout=30)
    assert worker.returncode == 9
    store = open_store(url)
    refunds: list[str] = []
    try:
        (step,) = EffectLog(store, worker="w2").compensate(
            "S", {"charge": lambda row: refunds.append(row.key)}
        )
        assert refunds == ["charge-1"] and step.state == "compensated", step
    finally:
        store.close()


@pytest.mark.parametrize(
    "process",
    [
        {"host": "elsewhere", "pid": 1, "since": 0},
        {"host": None, "pid": "1", "since": None},
        "garbage",
    ],
)
def test_a_run_on_another_host_or_unreadable_is_undone_as_before(
    tmp_path: Path, process: object
) -> None:
    """A process on another host (or a record that names none) cannot be asked; the saga
    undoes it, as a process that died after sending needs."""
    store = open_store(f"sqlite:///{tmp_path / 'other.db'}")
    log = EffectLog(store, worker="w")

    def timed_out() -> None:
        raise TimeoutError("sent; no answer")

    with pytest.raises(EffectOutcomeUnknown):
        log.call("c", timed_out, tool="charge", session="S")
    with store.transaction() as tx:
        row = tx.get("effect", "c")
        assert row is not None
        tx.update(row, {**row.data, "process": process, "unknown_outcome": None})
    refunds: list[str] = []
    (step,) = log.compensate("S", {"charge": lambda r: refunds.append(r.key)})
    assert refunds == ["c"], step
    store.close()
