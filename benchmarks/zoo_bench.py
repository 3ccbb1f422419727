"""The bug zoo, as a user meets a bug: seconds to a shrunk report, and its length.

Each implementation of ``tests/zoo`` with one bug in it is hunted as CI hunts it (the
suite's hunt size under the active profile, derandomized), this time with Hypothesis'
shrinking on, as a user's failing run reports: the figure is the seconds from the start of
the run to the report, and the number of steps the report shows. The exactly-once zoo
records the length of the shortest report known for each bug (``Expect.steps``): its
reports are compared with it. Seconds depend on the machine, so each zoo's median is also
given against one clean ``machines check`` in the same process (as the mutation catalog's
detection is), and the worst and the report lengths are in the row's name. The rows
marked ``run()`` time the effect-log and transfer suites as a user's test calls them
(``Suite.run()``: the tour, the dice without Hypothesis' shrinking, the suite's own
minimiser; ``machines.testing.recorded``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from benchmarks.harness import Ratio, against_check, clean_check_seconds, is_quick
from machines.testing._harness.sizes import EFFECT_LOG_HUNT, EXACTLY_ONCE, TRANSFER_HUNT
from machines.testing.recorded import RecordedSuite
from machines.testing.verdict import RuleBroken

T = TypeVar("T")
SHRUNK = [Phase.generate, Phase.shrink]
LIMIT_SECONDS = 10.0
"""The aim: every zoo bug reported within this many seconds (issue 28)."""
OVER_SHORTEST = 2
"""The aim: a report at most this many steps longer than the shortest known."""


@dataclass(frozen=True)
class Report:
    bug: str
    rule: str
    seconds: float
    steps: int
    shortest: int | None  # the shortest report known, where the zoo records it


def _steps(failure: BaseException) -> int:
    notes = getattr(failure, "__notes__", [])
    return sum(
        1
        for line in notes
        if line.startswith("state.")
        and not line.startswith(("state.judge", "state.teardown", "state.promises_kept"))
    )


def _hunt(
    name: str, suite: type[RuleBasedStateMachine], run: settings, shortest: int | None
) -> Report:
    started = time.perf_counter()
    try:
        run_state_machine_as_test(suite, settings=run)
    except RuleBroken as broken:
        return Report(name, broken.rule, time.perf_counter() - started, _steps(broken), shortest)
    raise AssertionError(f"zoo bug {name} was not caught")


def exactly_once() -> Iterator[Report]:
    from tests.test_zoo_exactly_once import suite_for
    from tests.zoo.exactly_once import BUGS, AttemptsAsMoves

    run = settings(EXACTLY_ONCE.hunting(), phases=SHRUNK)
    for kind, expect in _some(list(BUGS.items())):
        suite = suite_for(kind, history=kind is AttemptsAsMoves)
        yield _hunt(kind.__name__, suite, run, expect.steps)


def exactly_once_tour() -> Iterator[Report]:
    """The same zoo, found by the suite's tour alone (``ExactlyOnceSuite.run`` takes it
    before the random runs)."""
    from machines.testing.exactly_once.tour import take_tour
    from tests.test_zoo_exactly_once import suite_for
    from tests.zoo.exactly_once import BUGS, AttemptsAsMoves

    for kind, expect in _some(list(BUGS.items())):
        suite = suite_for(kind, history=kind is AttemptsAsMoves)
        started = time.perf_counter()
        try:
            take_tour(suite, kind.__name__)
        except RuleBroken as broken:
            seconds = time.perf_counter() - started
            yield Report(kind.__name__, broken.rule, seconds, _steps(broken), expect.steps)
            continue
        raise AssertionError(f"zoo bug {kind.__name__} was not caught by the tour")


def effect_log() -> Iterator[Report]:
    from tests.test_zoo_effectlog import suite_for
    from tests.zoo.effectlog import BUGS, adapter_for

    run = settings(EFFECT_LOG_HUNT.hunting(), phases=SHRUNK)
    for bug in _some(list(BUGS)):
        yield _hunt(bug.name, suite_for(adapter_for(bug)), run, None)


def _run_steps(failure: RuleBroken) -> int:
    return str(failure).count("\n      Step(")


def _suite_run(name: str, suite: type[RecordedSuite], run: settings) -> Report:
    """``suite.run()`` as a user's test calls it: the tour, the dice without Hypothesis'
    shrinking, the suite's own minimiser."""
    started = time.perf_counter()
    try:
        suite.run(run)
    except RuleBroken as broken:
        seconds = time.perf_counter() - started
        return Report(name, broken.rule, seconds, _run_steps(broken), None)
    raise AssertionError(f"zoo bug {name} was not caught by run()")


def effect_log_run() -> Iterator[Report]:
    from tests.test_zoo_effectlog import suite_for
    from tests.zoo.effectlog import BUGS, adapter_for

    for bug in _some(list(BUGS)):
        yield _suite_run(bug.name, suite_for(adapter_for(bug)), EFFECT_LOG_HUNT.hunting())


def transfer_run() -> Iterator[Report]:
    from tests.test_zoo_transfer import suite_for
    from tests.zoo.transfer import BUGS, adapter_for

    for name, bug in _some(list(BUGS.items())):
        yield _suite_run(name, suite_for(adapter_for(bug.engine)), TRANSFER_HUNT.hunting())


def transfer() -> Iterator[Report]:
    from tests.test_zoo_transfer import suite_for
    from tests.zoo.transfer import BUGS, adapter_for

    run = settings(TRANSFER_HUNT.hunting(), phases=SHRUNK)
    for name, bug in _some(list(BUGS.items())):
        yield _hunt(name, suite_for(adapter_for(bug.engine)), run, None)


ZOOS: dict[str, Callable[[], Iterator[Report]]] = {
    "exactly-once": exactly_once,
    "exactly-once tour": exactly_once_tour,
    "effect-log": effect_log,
    "effect-log run()": effect_log_run,
    "transfer": transfer,
    "transfer run()": transfer_run,
}


def _some(items: list[T]) -> list[T]:
    """Every bug; under ``--quick``, the last two of the zoo (a check that the benchmark
    runs: the transfer zoo's first takes seconds to shrink)."""
    return items[-2:] if is_quick() else items


def summary(zoo: str, reports: list[Report], check_seconds: float) -> Ratio:
    seconds = [r.seconds for r in reports]
    over = [r.steps - r.shortest for r in reports if r.shortest is not None]
    length = (
        f"report at most {max(over):+d} steps over the shortest known"
        if over
        else f"reports of {min(r.steps for r in reports)}-{max(r.steps for r in reports)} steps"
    )
    median = statistics.median(seconds)
    return against_check(
        f"{zoo} zoo, {len(reports)} bugs reported: median {median:.2f} s, worst "
        f"{max(seconds):.2f} s; {length}",
        "median seconds to a shrunk report",
        median,
        check_seconds=check_seconds,
        unit="bug",
        rounds=len(reports),
    )


def run() -> list[Ratio]:
    check_seconds = clean_check_seconds()
    out = []
    for zoo, hunts in ZOOS.items():
        reports = list(hunts())
        for r in reports:
            shortest = "" if r.shortest is None else f" (shortest known {r.shortest})"
            print(
                f"  {zoo:<18}{r.bug:<44}{r.rule:<26}{r.seconds:>7.2f} s {r.steps:>3} steps"
                f"{shortest}",
                flush=True,
            )
        out.append(summary(zoo, reports, check_seconds))
    return out
