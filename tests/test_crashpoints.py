"""Crash-point enumeration on SQLite and PostgreSQL: a child process killed at every write
boundary of ``ExactlyOnce.run`` and ``EffectLog.call``, then a restarted worker, then the
invariants. Nothing acknowledged may be lost and no parked effect may run again."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from machines.errors import MachinesError
from machines.store import Store
from machines.systems import EffectLog, ExactlyOnce, TransferEngine
from machines.systems.transfer import ObserveAnswer, PlanNode, PrepareAnswer, SubmitAnswer
from machines.testing._harness.crashpoints import CrashingStore, Scenario, enumerate_crash_points
from tests.conftest import postgres_schema

BEFORE, AFTER = 1_000.0, 2_000.0  # the restarted worker comes after every lease expired


def answer(call: Callable[[], Any]) -> list[Any]:
    """What a caller is told, as JSON: the value, or the error's type."""
    try:
        return ["value", call()]
    except MachinesError as error:
        return ["error", type(error).__name__]


def exactly_once_kept(ack: list[Any], row: Any) -> bool:
    if ack[0] == "value":
        return row is not None and row.state == "succeeded" and row.data["result"] == ack[1]
    told = {"EffectFailed": "failed", "EffectIndeterminate": "indeterminate"}.get(ack[1])
    return told is None or (row is not None and row.state == told)


def effect_log_kept(ack: list[Any], row: Any) -> bool:
    if ack[0] == "value":
        return row is not None and row.state == "committed" and row.data["result"] == ack[1]
    return True  # an error told the caller nothing is known: any recorded state is honest


class Venue:
    """Signs nothing, sends once (the counted upstream effect), confirms on observation."""

    def __init__(self, effect: Callable[[], Any]) -> None:
        self.effect = effect

    def prepare(self, node: PlanNode) -> PrepareAnswer:
        return "submit"

    def submit(self, node: PlanNode) -> SubmitAnswer:
        self.effect()
        return "accepted"

    def observe(self, node: PlanNode) -> ObserveAnswer:
        return "completed"


PLAN = [
    {"name": "withdraw", "kind": "action", "has_side_effect": True, "executor": "venue"},
    {
        "name": "confirm",
        "kind": "observe",
        "has_side_effect": False,
        "executor": "venue",
        "after": ["withdraw"],
    },
]


def transfer_run(store: Store, fn: Callable[[], Any]) -> list[Any]:
    engine = TransferEngine(store, {"venue": Venue(fn)}, clock=lambda: BEFORE, engine_id="e1")

    def lifecycle() -> str:
        engine.submit("r1", PLAN)
        engine.validate("r1")
        engine.request_approval("r1")
        engine.approve("r1", by="olivia")
        engine.start("r1")
        return engine.run("r1").value

    return answer(lifecycle)


def transfer_recover(store: Store, fn: Callable[[], Any]) -> list[Any]:
    engine = TransferEngine(store, {"venue": Venue(fn)}, clock=lambda: AFTER, engine_id="e2")
    return answer(lambda: engine.run("r1").value)


def transfer_kept(ack: list[Any], row: Any) -> bool:
    return ack[0] != "value" or (row is not None and row.state == ack[1])


SCENARIOS = {
    "ExactlyOnce.run": Scenario(
        "ExactlyOnce.run",
        "outcome",
        "order-1",
        lambda store, fn: answer(
            lambda: ExactlyOnce(store, clock=lambda: BEFORE).run("order-1", fn)
        ),
        lambda store, fn: answer(
            lambda: ExactlyOnce(store, clock=lambda: AFTER).run("order-1", fn)
        ),
        exactly_once_kept,
    ),
    "EffectLog.call": Scenario(
        "EffectLog.call",
        "effect",
        "sig-1",
        lambda store, fn: answer(
            lambda: EffectLog(store, clock=lambda: BEFORE).call("sig-1", fn, session="s1")
        ),
        lambda store, fn: answer(
            lambda: EffectLog(store, clock=lambda: AFTER).call("sig-1", fn, session="s1")
        ),
        effect_log_kept,
    ),
    "TransferEngine step": Scenario(
        "TransferEngine step", "request", "r1", transfer_run, transfer_recover, transfer_kept
    ),
}


def sqlite_urls(tmp_path: Path) -> Callable[[], contextlib.AbstractContextManager[str]]:
    counter = iter(range(1_000))

    @contextlib.contextmanager
    def fresh() -> Iterator[str]:
        yield f"sqlite:///{tmp_path}/crash-{next(counter)}.db"

    return fresh


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_write_boundary_crashed_and_recovered(
    name: str, backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = sqlite_urls(tmp_path) if backend == "sqlite" else postgres_schema
    points = enumerate_crash_points(fresh, SCENARIOS[name], tmp_path / "work")
    crashed = [p for p in points if p.acknowledged is None]
    assert len(crashed) >= 4, [p.boundary for p in points]  # claim and settle, before and after
    assert points[-1].acknowledged in (["value", {"charge": "ch_1"}], ["value", "completed"])
    for p in points:
        assert p.breaches == [], (p.point, p.boundary, p.breaches)
        assert p.runs <= 1, p
    kinds = Counter(p.boundary for p in crashed)
    with capsys.disabled():
        print(
            f"\ncrash points {name} on {backend}: {len(crashed)} boundaries crashed "
            f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}) + the finished run; "
            "none lost an acknowledged result or ran the effect twice"
        )


def test_the_enumeration_catches_a_system_that_reruns_after_a_crash(tmp_path: Path) -> None:
    """A 'recovery' that treats a parked key as safe to run again must be caught."""

    def rerun(store: Store, fn: Callable[[], Any]) -> Any:
        result = answer(lambda: ExactlyOnce(store, clock=lambda: AFTER).run("order-1", fn))
        if result == ["error", "EffectIndeterminate"]:
            ExactlyOnce(store).reclaim("order-1", by="bug", reason="retry everything")
            result = answer(lambda: ExactlyOnce(store, clock=lambda: AFTER).run("order-1", fn))
        return result

    careless = Scenario(
        "careless", "outcome", "order-1", SCENARIOS["ExactlyOnce.run"].run, rerun, exactly_once_kept
    )
    points = enumerate_crash_points(sqlite_urls(tmp_path), careless, tmp_path / "work")
    assert any("ran a parked effect again" in " ".join(p.breaches) for p in points), points


def test_a_crashing_store_counts_boundaries_without_crashing_past_them(tmp_path: Path) -> None:
    from machines.store import open_store

    seen: list[list[str]] = []
    store = CrashingStore(open_store(f"sqlite:///{tmp_path}/c.db"), 10_000, seen.append)
    ExactlyOnce(store).run("k", lambda: 1)
    assert seen[-1] == ["before insert", "after commit", "before move", "after commit"]
