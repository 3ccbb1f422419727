"""Measure a candidate against a baseline as a ratio, robust to a noisy shared machine.

Both are timed in alternating rounds (the order flips every round) with the same number
of calls, and the reported ratio is the median of the per-round ratios. ``quick()`` makes
every comparison one round: a check that each benchmark runs, whose ratios are not
measurements.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    name: str
    candidate: str
    baseline: str
    ratio: float
    goal: float | None
    candidate_ns: float  # median time of one unit of work (a call, a move, an entity)
    baseline_ns: float
    unit: str
    rounds: int
    higher_is_better: bool = False  # throughput ratios: candidate per second / baseline's

    @property
    def meets_goal(self) -> bool | None:
        if self.goal is None:
            return None
        return self.ratio >= self.goal if self.higher_is_better else self.ratio <= self.goal


_QUICK = {"on": False}


def quick(on: bool = True) -> None:
    """One round per comparison from now on (``python -m benchmarks --quick``)."""
    _QUICK["on"] = on


def is_quick() -> bool:
    return _QUICK["on"]


def _time(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_ratio(
    name: str,
    candidate: tuple[str, Callable[[], object]],
    baseline: tuple[str, Callable[[], object]],
    *,
    units: int,
    unit: str,
    goal: float | None,
    rounds: int = 11,
) -> Ratio:
    """Time ``candidate`` and ``baseline`` (each doing ``units`` units of work per call);
    the ratio is candidate time over baseline time (lower is better)."""
    (cand_name, cand), (base_name, base) = candidate, baseline
    cand()  # warm up caches and lazy imports
    base()
    return _compare(
        name,
        (cand_name, lambda: _time(cand)),
        (base_name, lambda: _time(base)),
        units=units,
        unit=unit,
        goal=goal,
        rounds=rounds,
        throughput=False,
    )


def throughput_ratio(
    name: str,
    candidate: tuple[str, Callable[[], float]],
    baseline: tuple[str, Callable[[], float]],
    *,
    units: int,
    unit: str,
    goal: float | None,
    rounds: int = 5,
) -> Ratio:
    """For work that times itself (each call returns its seconds, setup excluded); the
    ratio is candidate throughput over baseline throughput (higher is better)."""
    return _compare(
        name, candidate, baseline, units=units, unit=unit, goal=goal, rounds=rounds, throughput=True
    )


def _compare(
    name: str,
    candidate: tuple[str, Callable[[], float]],
    baseline: tuple[str, Callable[[], float]],
    *,
    units: int,
    unit: str,
    goal: float | None,
    rounds: int,
    throughput: bool,
) -> Ratio:
    (cand_name, cand), (base_name, base) = candidate, baseline
    rounds = 1 if is_quick() else rounds
    ratios, cand_times, base_times = [], [], []
    for i in range(rounds):
        if i % 2:
            b, c = base(), cand()
        else:
            c, b = cand(), base()
        ratios.append(b / c if throughput else c / b)
        cand_times.append(c)
        base_times.append(b)
    return Ratio(
        name=name,
        candidate=cand_name,
        baseline=base_name,
        ratio=statistics.median(ratios),
        goal=goal,
        candidate_ns=statistics.median(cand_times) / units * 1e9,
        baseline_ns=statistics.median(base_times) / units * 1e9,
        unit=unit,
        rounds=rounds,
        higher_is_better=throughput,
    )


def clean_check_seconds(rounds: int = 3) -> float:
    """Median seconds of one clean ``machines check`` of the bundled definitions: the
    baseline of figures that are seconds to a verdict (a mutation caught, a bug reported)."""
    from machines.checks.report import check

    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        check()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def against_check(
    name: str, candidate: str, seconds: float, *, check_seconds: float, unit: str, rounds: int
) -> Ratio:
    """``seconds`` (a median over ``rounds`` units) as a ratio to one clean check."""
    return Ratio(
        name=name,
        candidate=candidate,
        baseline="one clean machines check",
        ratio=seconds / check_seconds,
        goal=None,
        candidate_ns=seconds * 1e9,
        baseline_ns=check_seconds * 1e9,
        unit=unit,
        rounds=rounds,
    )
