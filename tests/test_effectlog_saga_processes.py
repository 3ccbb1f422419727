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
from machines.systems import EffectLog
from machines.systems.effectlog import UndoStep

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


def saga_of(url: str) -> tuple[UndoStep, list[str]]:
    """Session S compensated from this process: its one step, and the refunds made."""
    refunds: list[str] = []
    with open_store(url) as store:
        (step,) = EffectLog(store, worker="w2").compensate(
            "S", {"charge": lambda row: refunds.append(row.key)}
        )
    return step, refunds


def test_the_saga_leaves_a_call_a_live_process_is_running(tmp_path: Path) -> None:
    worker, url = start(tmp_path, 2.0, "return")
    step, refunds = saga_of(url)
    assert refunds == [] and step.state == "executing", step
    assert "still alive" in step.reason
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err.decode()
    assert out.decode().strip() == "charged"
    with open_store(url) as store:
        row = EffectLog(store, worker="w2").effect("charge-1")
    assert row is not None and row.state == "committed"


def test_the_saga_undoes_a_call_whose_process_died(tmp_path: Path) -> None:
    worker, url = start(tmp_path, 0.1, "die")
    worker.communicate(timeout=30)
    assert worker.returncode == 9
    step, refunds = saga_of(url)
    assert refunds == ["charge-1"] and step.state == "compensated", step


def forge(url: str, how: str) -> None:
    """One write outside a move on the running effect, as the application's role can
    make: the process its data names rewritten or removed, or a note of an unknown outcome
    its runner never wrote (outsider batch 25: each had the refund run before the charge,
    the audit saying OK)."""
    import json
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
        (text,) = raw.execute("SELECT data FROM effect_entities WHERE key = 'charge-1'").fetchone()
        data = json.loads(text)
        if how == "host":
            data["process"] = {"host": "elsewhere", "pid": 1, "since": 0}
        elif how == "no process":
            data["process"] = None
        else:
            data["unknown_outcome"] = {"reason": "x", "at": 0, "worker": "w1", "secret": "00"}
        raw.execute(
            "UPDATE effect_entities SET data = ?, version = version + 1 WHERE key = 'charge-1'",
            (json.dumps(data),),
        )


@pytest.mark.parametrize("how", ["host", "no process", "a note"])
def test_a_write_outside_a_move_does_not_let_the_saga_undo_a_running_call(
    tmp_path: Path, how: str
) -> None:
    from machines.cli import main

    worker, url = start(tmp_path, 2.0, "return")
    forge(url, how)
    step, refunds = saga_of(url)
    assert refunds == [] and step.state == "executing", step
    worker.communicate(timeout=30)
    if how == "a note":
        assert main(["audit", "--from-store", url]) == 1


def test_the_saga_leaves_a_run_of_this_process_under_another_spelling_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 26 (a 3): the same database opened twice, by a relative and an
    absolute path, and the saga undid the call the other store's log was making in this
    very process (the running calls were known by the URL as typed). They are known by
    their run now."""
    monkeypatch.chdir(tmp_path)
    runner = EffectLog(open_store("sqlite:///same.db"), worker="w1")
    saga = EffectLog(open_store(f"sqlite:///{tmp_path / 'same.db'}"), worker="w2")
    refunds: list[str] = []

    def charge() -> str:
        (step,) = saga.compensate("S", {"charge": lambda row: refunds.append(row.key)})
        assert step.state == "executing" and "still running in this process" in step.reason
        return "charged"

    assert runner.call("c", charge, tool="charge", session="S") == "charged"
    assert refunds == []


def test_a_claimed_run_is_this_process_before_its_call_starts(tmp_path: Path) -> None:
    """Outsider batch 26 (a 4): the claim committed ``executing`` before the run counted
    as this process's, and a saga in that window undid a call about to be sent. A run
    counts from before its claim commits."""
    from machines.systems.effectlog_runs import Claim

    store = open_store(f"sqlite:///{tmp_path / 'window.db'}")
    log = EffectLog(store, worker="w1")
    original = EffectLog._run
    steps: list[object] = []

    def saga_in_the_window(self: EffectLog, claim: Claim, fn: object) -> object:
        steps.extend(EffectLog(store, worker="w2").compensate("S", {"charge": lambda r: None}))
        return original(self, claim, fn)  # type: ignore[arg-type]

    EffectLog._run = saga_in_the_window  # type: ignore[method-assign,assignment]
    try:
        assert log.call("c", lambda: "charged", tool="charge", session="S") == "charged"
    finally:
        EffectLog._run = original  # type: ignore[method-assign]
    (step,) = steps
    assert step.state == "executing", step  # type: ignore[attr-defined]
