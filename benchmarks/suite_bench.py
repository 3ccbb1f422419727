"""The property suites: Hypothesis steps per second per suite, and mutation detection.

Steps per second depend on the machine, so each suite is compared with an empty
Hypothesis state machine (one rule that does nothing, same settings) run in the same
process: the ratio is the suite's throughput over Hypothesis' own ceiling. The mutation
catalog's median seconds to detection are compared with one clean ``machines check``
(most mutations are caught by it; a ratio near 1 means detection costs one check).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from benchmarks import zoo_bench
from benchmarks.harness import Ratio, _compare, against_check, clean_check_seconds
from machines.mutation.catalog import run_catalog
from machines.testing.effectlog.suite import EffectLogSuite
from machines.testing.exactly_once.suite import ExactlyOnceSuite
from machines.testing.profiles import run_suite
from machines.testing.transfer.suite import TransferSuite

STEPS = 30
EXAMPLES = 20
SUITES: dict[str, type[RuleBasedStateMachine]] = {
    "ExactlyOnceSuite": ExactlyOnceSuite,
    "EffectLogSuite": EffectLogSuite,
    "TransferSuite": TransferSuite,
}


class _Empty(RuleBasedStateMachine):
    @rule()
    def nothing(self) -> None:
        pass


def _counting(
    suite: type[RuleBasedStateMachine], counter: list[int]
) -> type[RuleBasedStateMachine]:
    """``suite`` with its steps counted (plus one per run: see ``count_steps``)."""

    class Counted(suite):  # type: ignore[valid-type,misc]
        @invariant()
        def count_steps(self) -> None:
            """Invariants run once before the first step and after every step."""
            counter[0] += 1

    return Counted


def _steps_timer(suite: type[RuleBasedStateMachine]) -> Callable[[], float]:
    """Seconds one run of ``EXAMPLES`` x ``STEPS`` takes, scaled to exactly that many
    steps (Hypothesis may run a few fewer)."""
    run_settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )

    def timed() -> float:
        counter = [0]
        machine = _counting(suite, counter)
        start = time.perf_counter()
        run_suite(machine, run_settings)
        seconds = time.perf_counter() - start
        steps = counter[0] - EXAMPLES
        return seconds * EXAMPLES * STEPS / max(1, steps)

    return timed


def run() -> list[Ratio]:
    baseline = ("empty state machine", _steps_timer(_Empty))
    results = [
        _compare(
            f"{name} steps/s",
            (name, _steps_timer(suite)),
            baseline,
            units=EXAMPLES * STEPS,
            unit="step",
            goal=None,
            rounds=3,
            throughput=True,
        )
        for name, suite in SUITES.items()
    ]
    results.append(mutation_detection())
    results.extend(zoo_bench.run())
    return results


def mutation_detection() -> Ratio:
    """Median seconds to catch a catalog mutation over seconds of one clean check."""
    check_seconds = clean_check_seconds()
    kills = run_catalog()
    seconds = [k.seconds for k in kills if k.caught_by]
    return against_check(
        f"mutation detection ({len(seconds)}/{len(kills)} caught)",
        "median seconds to detect a mutation",
        statistics.median(seconds),
        check_seconds=check_seconds,
        unit="mutation",
        rounds=len(kills),
    )
