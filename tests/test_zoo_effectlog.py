"""The effect-log part of the bug zoo against ``EffectLogSuite`` (issue 14 item 2): every
buggy log written from scratch is caught, under a rule it breaks, by what the suite saw
alone (the bugs' adapters check nothing and, but for the history bug, expose no
history); the careful one, which exposes its history, passes.

Detection runs the suite as CI runs it (the ``ci`` profile's size, derandomized) with the
``generate`` phase only: the time is how long the suite takes to see the bug; shrinking
the report is timed apart, on a few bugs, in ``test_one_report_per_bug``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from machines.testing.effectlog import (
    CALLS,
    RULES,
    EffectLogAdapter,
    EffectLogSuite,
    RuleBroken,
)
from tests.zoo import detection_table
from tests.zoo.effectlog import BUGS, Bug, UserAdapter, adapter_for

CI = settings(
    max_examples=200,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
"""The suite's size in CI (``scaled(200, 30)`` under the ``ci`` profile), pinned so that a
catch never depends on the profile that runs this file."""
DETECT = settings(CI, phases=[Phase.generate])

CAUGHT: dict[str, tuple[str, float]] = {}
"""Bug -> (the rule named, seconds to detection), filled by the tests below."""


def suite_for(adapter: type[EffectLogAdapter]) -> type[EffectLogSuite]:
    class OnThisLog(EffectLogSuite):
        def make_adapter(self) -> EffectLogAdapter:
            return adapter()

    OnThisLog.__name__ = f"EffectLogSuiteOn{adapter.__name__}"
    return OnThisLog


def caught(bug: Bug, run: settings) -> tuple[RuleBroken, float]:
    started = time.perf_counter()
    with pytest.raises(RuleBroken) as failure:
        run_state_machine_as_test(suite_for(adapter_for(bug)), settings=run)
    return failure.value, time.perf_counter() - started


def test_the_careful_log_written_from_scratch_passes() -> None:
    """issue 14 item 2: the correct user log (its own class and storage, exposing its
    history) passes the full ci-sized run, shrinking included."""
    run_state_machine_as_test(suite_for(UserAdapter), settings=CI)


@pytest.mark.parametrize("bug", BUGS, ids=[bug.name for bug in BUGS])
def test_each_bug_is_caught(bug: Bug) -> None:
    """issue 14 item 2: each buggy log is caught in the ci profile, by a rule it breaks."""
    assert adapter_for(bug)().history("charge-1") is None or bug.history
    broken, seconds = caught(bug, DETECT)
    assert broken.rule in bug.rules, str(broken)
    assert str(broken).startswith(f"{broken.rule}: ")
    CAUGHT[bug.name] = (broken.rule, seconds)


def test_the_zoo_table(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 14 item 2: the detection times, per bug, with median and maximum (runs after
    the tests above; pytest keeps file order)."""
    missing = [bug.name for bug in BUGS if bug.name not in CAUGHT]
    if missing:
        pytest.skip(f"the zoo did not run in full here (missing {', '.join(missing)})")
    with capsys.disabled():
        print(detection_table("effect-log", CAUGHT))


def test_the_zoo_covers_every_promise_of_the_suite() -> None:
    """issue 14 item 2: every rule a log can break by its behaviour has a bug that breaks
    it first (the cross-checks of what an adapter reports are tested on their own)."""
    behavioural = set(RULES) - {"history-agrees", "adapter-check", "contract", "saga-completes"}
    assert behavioural <= {bug.rules[0] for bug in BUGS}
    assert len(BUGS) >= 6


def _steps(report: str) -> Iterator[str]:
    for line in report.splitlines():
        if line.startswith("state.") and not line.startswith(("state.judged", "state.teardown")):
            yield line


@pytest.mark.parametrize("name", ["RetriesAfterSending", "AcksBeforeDurable", "RunsWhenAskedAgain"])
def test_one_report_per_bug(name: str) -> None:
    """issue 14 item 6 (this suite's part): a failing run reports one bug, once, under one
    rule, shrunk to the steps that matter (every breach is raised from the one invariant,
    so Hypothesis sees one bug; no report_multiple_bugs=False is needed)."""
    bug = next(b for b in BUGS if b.name == name)
    broken, _ = caught(bug, CI)
    report = "\n".join(getattr(broken, "__notes__", []))
    assert broken.rule == bug.rules[0]
    assert report.count("state = ") == 1, report
    assert len(list(_steps(report))) <= 3, report
    signature = str(broken).split(": ")[1]
    assert signature in CALLS
