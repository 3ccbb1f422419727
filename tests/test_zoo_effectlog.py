"""The effect-log part of the bug zoo against ``EffectLogSuite`` (issue 14 item 2): every
buggy log written from scratch is caught, under a rule it breaks, by what the suite saw
alone (the bugs' adapters check nothing and, but for the history bug, expose no
history); the careful one, which exposes its history, passes.

Detection hunts as CI does (``EFFECT_LOG_HUNT.hunting()``: sized by the active profile,
derandomized) with the ``generate`` phase only: the time is how long the
suite takes to see the bug; shrinking the report is timed apart, on a few bugs, in
``test_one_report_per_bug``. Each bug is hunted once per run, whichever test asks first
(``detection``), so the table never depends on the order the tests run in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import cache

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from machines.testing._harness.sizes import EFFECT_LOG, EFFECT_LOG_HUNT
from machines.testing.effectlog.suite import (
    CALLS,
    RULES,
    EffectLogAdapter,
    EffectLogSuite,
    RuleBroken,
)
from tests.zoo import detection_table
from tests.zoo.effectlog import BUGS, Bug, UserAdapter, adapter_for

DETECT = EFFECT_LOG_HUNT.hunting()
"""A hunt: derandomized, generate phase only, sized so that no bug of the zoo is caught by
luck (``EFFECT_LOG_HUNT``)."""
CAREFUL = EFFECT_LOG.hunting()
"""The careful log's run: the reference log's size, derandomized."""


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


@cache
def detection(name: str) -> tuple[RuleBroken, float]:
    """The bug named ``name`` hunted once per run: what the suite raised, and when."""
    return caught(next(bug for bug in BUGS if bug.name == name), DETECT)


def test_the_careful_log_written_from_scratch_passes() -> None:
    """issue 14 item 2: the correct user log (its own class and storage, exposing its
    history) passes a run of the hunt's size."""
    run_state_machine_as_test(suite_for(UserAdapter), settings=CAREFUL)


@pytest.mark.parametrize("bug", BUGS, ids=[bug.name for bug in BUGS])
def test_each_bug_is_caught(bug: Bug) -> None:
    """issue 14 item 2: each buggy log is caught in the ci profile, by a rule it breaks."""
    assert adapter_for(bug)().history("charge-1") is None or bug.history
    broken, _ = detection(bug.name)
    assert broken.rule in bug.rules, str(broken)
    assert str(broken).startswith(f"{broken.rule}: ")


def test_the_zoo_table(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 14 item 2: every bug caught under a rule it breaks, with the detection times,
    median and maximum (each bug hunted here unless a test above already did)."""
    found = {bug.name: detection(bug.name) for bug in BUGS}
    rules = {bug.name: bug.rules for bug in BUGS}
    wrong = [name for name, (broken, _) in found.items() if broken.rule not in rules[name]]
    assert not wrong, wrong
    with capsys.disabled():
        print(detection_table("effect-log", {n: (b.rule, t) for n, (b, t) in found.items()}))


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
    broken, _ = caught(bug, settings(DETECT, phases=[Phase.generate, Phase.shrink]))
    report = "\n".join(getattr(broken, "__notes__", []))
    assert broken.rule == bug.rules[0]
    assert report.count("state = ") == 1, report
    assert len(list(_steps(report))) <= 3, report
    signature = str(broken).split(": ")[1]
    assert signature in CALLS
