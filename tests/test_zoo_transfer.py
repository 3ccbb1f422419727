"""The transfer part of the bug zoo against ``TransferSuite`` (issue 14 item 2): every
buggy engine written from scratch (``tests/zoo/transfer.py``) is caught, under a rule it
breaks, by what the suite saw; the careful engine passes.

Detection hunts as CI does (``TRANSFER_HUNT.hunting()``: sized by the active profile,
derandomized) with the ``generate`` phase only: the time is how long the
suite takes to see the bug; shrinking is timed apart, on one bug, in
``test_one_report_per_bug``. Each bug is hunted once per run, whichever test asks first
(``detection``), so the table never depends on the order the tests run in."""

from __future__ import annotations

import time
from functools import cache

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from machines.testing._harness.sizes import TRANSFER, TRANSFER_HUNT, Size
from machines.testing.transfer.oracle import RULES
from machines.testing.transfer.suite import TransferAdapter, TransferSuite, Venue
from machines.testing.verdict import RuleBroken
from tests.zoo import detection_table
from tests.zoo.transfer import BUGS, SUBMITTED, Bug, Engine, Node, Record, ZooAdapter, adapter_for

DETECT = TRANSFER_HUNT.hunting()
"""A hunt: derandomized, generate phase only, sized so that no bug of the zoo is caught by
luck (``TRANSFER_HUNT``)."""
CAREFUL = TRANSFER.hunting()
"""The careful engine's run: the reference engine's size, derandomized."""


def suite_for(adapter: type[ZooAdapter]) -> type[TransferSuite]:
    class OnThisEngine(TransferSuite):
        def make_adapter(self, venue: Venue) -> TransferAdapter:
            return adapter(venue)

    OnThisEngine.__name__ = f"TransferSuiteOn{adapter.engine.__name__}"
    return OnThisEngine


def caught(bug: Bug, run: settings) -> tuple[RuleBroken, float]:
    started = time.perf_counter()
    with pytest.raises(RuleBroken) as failure:
        run_state_machine_as_test(suite_for(adapter_for(bug.engine)), settings=run)
    return failure.value, time.perf_counter() - started


@cache
def detection(name: str) -> tuple[RuleBroken, float]:
    """The bug named ``name`` hunted once per run: what the suite raised, and when."""
    return caught(BUGS[name], DETECT)


def test_the_careful_engine_written_from_scratch_passes() -> None:
    """issue 14 item 2: the correct user engine (its own classes and storage, exposing its
    history) passes the full ci-sized run."""
    run_state_machine_as_test(suite_for(ZooAdapter), settings=CAREFUL)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_each_bug_is_caught(name: str) -> None:
    """issue 14 item 2: each buggy engine is caught in the ci profile, by a rule it breaks."""
    broken, _ = detection(name)
    assert broken.rule in BUGS[name].rules, str(broken)
    assert str(broken).startswith(f"{broken.rule}: ")


HISTORY_RULES = frozenset({"legal-history", "sent-work-kept"})
"""Rules about what an engine records (a node's history), judged against what the suite
saw: a bug about them needs the history the engine exposes."""


@pytest.mark.parametrize(
    "name", sorted(n for n, bug in BUGS.items() if bug.rules[0] not in HISTORY_RULES)
)
def test_each_bug_is_caught_by_what_the_suite_saw_alone(name: str) -> None:
    """issue 14 item 1: with its history hidden (``history()`` returns None) and no checks
    of its own, each bug but those about the recorded history is still caught: by the
    venue's calls, the callbacks, the reservations announced and what each operation was
    told, not by what the engine says."""
    bug = BUGS[name]
    adapter = adapter_for(bug.engine)
    blind = type(adapter.__name__, (adapter,), {"history": lambda self, request_id: None})
    with pytest.raises(RuleBroken) as failure:
        run_state_machine_as_test(suite_for(blind), settings=DETECT)
    assert failure.value.rule in bug.rules, str(failure.value)


def test_the_zoo_table(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 14 item 2: every bug caught under a rule it breaks, with the detection times,
    median and maximum (each bug hunted here unless a test above already did)."""
    found = {name: detection(name) for name in sorted(BUGS)}
    wrong = [name for name, (broken, _) in found.items() if broken.rule not in BUGS[name].rules]
    assert not wrong, wrong
    with capsys.disabled():
        print(detection_table("transfer", {n: (b.rule, t) for n, (b, t) in found.items()}))


def test_the_zoo_covers_every_promise_of_the_suite() -> None:
    """issue 14 item 2: every rule an engine can break by its behaviour has a bug that is
    about it (``request-kept`` and ``adapter-check`` judge what an adapter reports;
    ``contract``, an error that escapes a step, has its own test below)."""
    behavioural = set(RULES) - {"request-kept", "adapter-check", "contract"}
    assert behavioural <= {bug.rules[0] for bug in BUGS.values()}
    assert len(BUGS) >= 6


def _steps(report: str) -> list[str]:
    return [
        line
        for line in report.splitlines()
        if line.startswith("state.") and not line.startswith(("state.judge", "state.teardown"))
    ]


def test_one_report_per_bug() -> None:
    """issue 14 item 6 (this suite's part): a failing run reports one bug, once, under one
    rule, shrunk to the steps that matter: every breach is raised from the one invariant,
    so Hypothesis sees one bug. Shrinking a long run is slow, so this one is sized down
    to 15 steps; the detection tests above run the ci size."""
    bug = BUGS["releases the reservation when a node fails"]
    short = Size(TRANSFER_HUNT.examples, 15).hunting()
    broken, _ = caught(bug, settings(short, phases=[Phase.generate, Phase.shrink]))
    report = "\n".join(getattr(broken, "__notes__", []))
    assert broken.rule in bug.rules, str(broken)
    assert report.count("state = ") == 1, report
    assert len(_steps(report)) <= 4, report


class LetsTheVenuesErrorOut(Engine):
    """A send that forgets its try: the venue's ConnectionError escapes ``step()``."""

    def send(self, request_id: str, name: str, sent: Record) -> None:
        answer = self.venue.submit(Node(request_id, name))
        self.record(request_id, name, sent, SUBMITTED.get(answer, "lose_track"), "executor")


def test_an_error_that_escapes_a_step_is_a_broken_rule_with_a_replayable_run() -> None:
    """Outsider batch 25 (b 5): an engine that let the venue's ConnectionError out of
    ``step()`` was reported by ``run()`` as a bare exception, with no rule and no steps
    (from the tour, not even Hypothesis' steps). It breaks ``contract``, reported with the
    shortest run that raises it, which replays."""
    suite = suite_for(adapter_for(LetsTheVenuesErrorOut))
    with pytest.raises(RuleBroken) as failure:
        suite.run()
    report = str(failure.value)
    assert failure.value.rule == "contract" and "ConnectionError escaped the step" in report
    assert "replay(steps)" in report
