"""The benchmark command stays runnable: its workloads are legal and its harness sane.
(No timing is asserted here; ratios are reported by ``python -m benchmarks``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness
from benchmarks.__main__ import main
from benchmarks.harness import measure_ratio
from benchmarks.workloads import every_transition
from tests.conftest import require_postgres

ROOT = Path(__file__).resolve().parent.parent


def test_every_benchmark_move_is_legal() -> None:
    moves = every_transition()
    assert len({(m.machine.name, m.state, m.trigger, m.actor) for m in moves}) == len(moves)
    for m in moves:
        assert m.machine.step(m.state, m.trigger, actor=m.actor, **m.context) == m.dest


def test_harness_reports_the_median_ratio() -> None:
    work = list(range(2000))
    ratio = measure_ratio(
        "same",
        ("a", lambda: sum(work)),
        ("b", lambda: sum(work)),
        units=len(work),
        unit="item",
        goal=None,
        rounds=3,
    )
    assert ratio.rounds == 3 and ratio.meets_goal is None
    assert 0 < ratio.ratio < 10 and ratio.candidate_ns > 0


def test_step_suite_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command, quick (one round each: a check that it runs, not a measurement)."""
    out = tmp_path / "bench.json"
    try:
        assert main(["--only", "step", "--quick", "--json", str(out)]) == 0
    finally:
        harness.quick(False)
    written = json.loads(out.read_text())
    names = [r["name"] for r in written["results"]]
    assert "step, context bound once" in names and all(r["ratio"] > 0 for r in written["results"])
    assert written["quick"] is True and all(r["rounds"] == 1 for r in written["results"])
    assert "not measurements" in capsys.readouterr().out


@pytest.mark.thorough
def test_every_benchmark_runs_in_full(tmp_path: Path) -> None:
    """``python -m benchmarks`` as its docs run it: every suite of ratios, at full rounds,
    written to JSON (the goals are reported in the table, never asserted: a ratio on a
    shared machine is a measurement, not a test)."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--json", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    written = json.loads(out.read_text())
    assert written["quick"] is False and all(r["rounds"] > 1 for r in written["results"][:5])
    names = " ".join(r["name"] for r in written["results"])
    for suite in (
        "step",
        "entity creation",
        "SQLite claims",
        "steps/s",
        "mutation",
        "zoo",
        "explore",
    ):
        assert suite in names, suite


def test_store_benchmark_sides_do_their_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every side of every SQLite ratio leaves each of its keys in one state (the runner
    raises otherwise), with 1 and 4 threads."""
    from benchmarks import store_bench

    monkeypatch.setattr(store_bench, "CLAIMS", 12)
    monkeypatch.setattr(store_bench, "WARM", 2)
    for threads in (1, 4):
        sides = [
            store_bench._ours(threads, store_bench.claim),
            store_bench._ours(threads, store_bench.whole_run),
            store_bench._raw(threads, store_bench._raw_claim),
            store_bench._raw(threads, store_bench._raw_one_transaction),
            store_bench._raw(threads, store_bench._raw_two_transactions),
        ]
        assert all(side() > 0 for side in sides)
    with pytest.raises(RuntimeError, match="left 3 keys"):
        store_bench.did_the_work(["succeeded"] * 3, 4)
    with pytest.raises(RuntimeError, match="in_flight"):
        store_bench.did_the_work(["succeeded", "in_flight"], 2)


def test_suite_benchmark_counts_steps() -> None:
    from benchmarks import suite_bench

    seconds = suite_bench._steps_timer(suite_bench._Empty)()
    assert seconds > 0


def test_zoo_benchmark_reports_each_bug_shrunk() -> None:
    """The zoo benchmark (``--quick``: two bugs of each zoo) hunts each bug to a shrunk
    report, compares its length with the shortest known, and refuses a bug not caught."""
    from benchmarks import zoo_bench

    harness.quick(True)
    try:
        reports = {zoo: list(hunts()) for zoo, hunts in zoo_bench.ZOOS.items()}
    finally:
        harness.quick(False)
    assert [len(found) for found in reports.values()] == [2] * len(zoo_bench.ZOOS)
    for found in reports.values():
        assert all(r.steps >= 1 and r.seconds > 0 and r.rule for r in found), found
    assert all(r.steps >= r.shortest for r in reports["exactly-once"] if r.shortest), reports
    summary = zoo_bench.summary("exactly-once", reports["exactly-once"], 1.0)
    assert "2 bugs reported: median" in summary.name
    assert "steps over the shortest known" in summary.name
    from machines.testing.profiles import hunting
    from tests.test_zoo_exactly_once import suite_for
    from tests.zoo.exactly_once import Ledger

    with pytest.raises(AssertionError, match="was not caught"):
        zoo_bench._hunt("careful", suite_for(Ledger, history=False), hunting(2, 2), None)


def test_explorer_benchmark_baseline_searches_the_same_graph() -> None:
    """The recorded graph is the model's own: the same BFS finds the same states."""
    from typing import cast

    from benchmarks import explore_bench
    from machines.explore import Model, build_model, explore

    recorded, states = explore_bench._record("transfer", "gated")
    assert explore(cast(Model, recorded)).states == states
    assert states == explore(build_model("transfer", "gated")).states


def test_postgres_benchmark_sides_do_their_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every side of every PostgreSQL ratio leaves each of its keys in one state (the
    runner raises otherwise), with 1 and 8 workers."""
    from benchmarks import postgres_bench, store_bench

    monkeypatch.setattr(postgres_bench, "SERVER", require_postgres())
    monkeypatch.setattr(postgres_bench, "CLAIMS", 40)
    monkeypatch.setattr(postgres_bench, "WARM", 2)
    for threads in (1, 8):
        sides = [
            postgres_bench._ours(threads, store_bench.claim),
            postgres_bench._ours(threads, store_bench.whole_run),
            postgres_bench._raw(threads, postgres_bench._raw_claim),
            postgres_bench._raw(threads, postgres_bench._one_transaction),
            postgres_bench._raw(threads, postgres_bench._two_transactions),
        ]
        assert all(side() > 0 for side in sides)


def test_desk_benchmark_runs_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The desk's page against the raw query (issue 30), one round on a small store: a
    check that both sides read the waiting rows, not a measurement."""
    pytest.importorskip("starlette")
    out = tmp_path / "desk.json"
    try:
        assert main(["--only", "desk", "--quick", "--json", str(out)]) == 0
    finally:
        harness.quick(False)
    (result,) = json.loads(out.read_text())["results"]
    assert result["name"].startswith("desk: what waits") and result["goal"] == 3.0
