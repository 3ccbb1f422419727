"""The exactly-once part of the bug zoo (issue 14 items 2, 3 and 5): ``ExactlyOnceSuite``
catches every executor of ``tests/zoo/exactly_once.py`` with the rule it breaks, shrunk to
the steps that matter, and passes the careful one.

The zoo hunts as CI does (``EXACTLY_ONCE.hunting()``: the reference suite's size under the
active profile, derandomized, without the example database, so a detection time never comes
from an earlier run), with one report per run, shrunk, and without Hypothesis's explain
phase (it only annotates the report, and costs more than the search). Each bug is hunted
once per run, whichever test asks first (``detection``), so the table of detection times
never depends on the order the tests run in."""

from __future__ import annotations

import time
import unittest
from functools import cache

import pytest
from hypothesis import Phase, settings

from machines.testing._harness.sizes import EXACTLY_ONCE
from machines.testing.exactly_once.suite import (
    RULES,
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    RuleBroken,
)
from machines.testing.profiles import run_suite
from tests.zoo import detection_table
from tests.zoo.exactly_once import BUGS, AttemptsAsMoves, Ledger, LedgerAdapter, Unfenced

ZOO = settings(EXACTLY_ONCE.hunting(), phases=[Phase.generate, Phase.shrink])
"""The reference suite's hunt, its report shrunk to the steps that matter."""


def suite_for(kind: type[Ledger], history: bool) -> type[ExactlyOnceSuite]:
    class ZooSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return LedgerAdapter(kind, history=history)

    return ZooSuite


def steps_of(failure: BaseException) -> list[str]:
    """The steps of the counterexample Hypothesis reported."""
    notes = getattr(failure, "__notes__", [])
    return [line for line in notes if line.startswith("state.step(")]


def test_the_careful_executor_passes() -> None:
    """issue 14 item 2: the zoo's verdicts mean something: an executor written from scratch
    that keeps every promise passes, its history judged too."""
    run_suite(suite_for(Ledger, history=True), ZOO)


@cache
def detection(kind: type[Ledger]) -> tuple[RuleBroken, float, int]:
    """``kind`` hunted once per run, by what the suite observed alone (no history exposed,
    except for the bug in the history): what it raised, the seconds to the shrunk report,
    and the steps in it."""
    started = time.perf_counter()
    with pytest.raises(RuleBroken) as caught:
        run_suite(suite_for(kind, history=kind is AttemptsAsMoves), ZOO)
    return caught.value, time.perf_counter() - started, len(steps_of(caught.value))


@pytest.mark.parametrize("kind", list(BUGS), ids=lambda kind: kind.__name__)
def test_each_zoo_bug_is_caught_naming_its_rule(kind: type[Ledger]) -> None:
    """issue 14 items 2 and 3: caught in the ci profile by what the suite observed alone,
    with one report naming the broken rule first, shrunk to the steps that matter."""
    expected = BUGS[kind]
    broken, _, steps = detection(kind)
    assert str(broken).startswith(f"{expected.rule}: "), str(broken)
    assert steps == expected.steps, getattr(broken, "__notes__", [])


def test_the_zoo_breaks_every_rule() -> None:
    """issue 14 item 2: every rule of the suite has a bug in the zoo that breaks it (the
    adapter's own check is covered in ``tests/test_exactly_once_suite.py``)."""
    assert {expected.rule for expected in BUGS.values()} == set(RULES) - {"adapter-check"}
    assert len(BUGS) >= 8


def test_detection_table(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 14 item 2: every bug caught naming its rule, with the detection times (each
    bug hunted here unless a test above already did)."""
    found = {kind.__name__: detection(kind) for kind in BUGS}
    wrong = [kind.__name__ for kind in BUGS if found[kind.__name__][0].rule != BUGS[kind].rule]
    assert not wrong, wrong
    caught = {name: (broken.rule, seconds) for name, (broken, seconds, _) in found.items()}
    with capsys.disabled():
        print(detection_table("exactly-once", caught))


def test_an_executor_without_lease_fencing_fails_naming_the_rule() -> None:
    """issue 14 item 5, the issue's headline: an executor written outside
    ``machines.systems`` whose lease fencing is off, run the guide's way
    (``TestX = Suite.TestCase`` under the loaded profile), fails with one report that names
    the broken rule and shows the takeover in one step."""

    class UnfencedSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return LedgerAdapter(Unfenced, history=False)

    test_unfenced = UnfencedSuite.TestCase("runTest")
    outcome = unittest.TestResult()
    test_unfenced.run(outcome)
    assert len(outcome.failures) == 1 and not outcome.errors, outcome.errors
    report = outcome.failures[0][1]
    assert "RuleBroken: indeterminate-stays: call 1 (worker) of k1 was told result" in report
    assert "distinct failures" not in report
    assert report.count("state.step(") == 1
    assert "behaviour=Behaviour.TAKEN_OVER" in report


class ShortLease(Ledger):
    """A careful executor with a half-second lease."""

    lease = 0.5


class SweepingAdapter(LedgerAdapter):
    """Parks every key whose lease ran out each time the clock moves, as a sweeper that
    runs beside the executor would (the README recommends one)."""

    def advance_clock(self, seconds: float) -> None:
        super().advance_clock(seconds)
        ledger = self.executor
        with ledger.tx():
            for key, version in list(
                self.db.execute(
                    "SELECT key, version FROM effects "
                    "WHERE state = 'in_flight' AND lease_until < ?",
                    (self.now,),
                )
            ):
                ledger.park_row(key, version)


def test_an_executor_with_a_short_lease_and_a_sweeper_passes_when_it_declares_its_lease() -> None:
    """Outsider batch 45 (a 9): the reference executor with a 0.5 s lease and a sweeper
    failed explicit-exit (a guarantee), because the suite judged every reclaim by the
    30 s lease it assumed. The suite now judges by the lease the suite class declares
    (``lease_seconds``, at most ``LEASE``)."""

    class ShortLeaseSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return SweepingAdapter(ShortLease)

    from machines.testing.exactly_once.steps import Behaviour, Call, Reclaim, Wait

    assumed = ShortLeaseSuite()
    with pytest.raises(RuleBroken) as caught:
        for action in (Call("k1", Behaviour.CRASH_AFTER_SENDING), Wait(1.0), Reclaim("k1")):
            assumed.step(action)
            assumed.promises_kept()
    assert caught.value.rule == "explicit-exit", str(caught.value)
    assert "while its holder's lease was live (until 30, now 1)" in str(caught.value)
    declared = type("DeclaresItsLease", (ShortLeaseSuite,), {"lease_seconds": 0.5})
    run_suite(declared, ZOO)
    declared.run(ZOO)  # the tour too


@pytest.mark.parametrize("lease", [0, -1, 30.5, float("inf"), float("nan"), "30", None, True])
def test_a_lease_the_suite_cannot_judge_is_refused_where_the_suite_is_defined(
    lease: object,
) -> None:
    """``lease_seconds`` is a number of seconds above zero and at most ``LEASE`` (the
    suite's waits run past it); anything else fails where the class is defined."""
    from machines.testing.contract import AdapterContractError

    with pytest.raises(AdapterContractError, match="LongLease sets lease_seconds"):
        type("LongLease", (ExactlyOnceSuite,), {"lease_seconds": lease})
