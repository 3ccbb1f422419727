"""The exactly-once suite's tour (issue 28): every kind of call and every next step it can
meet, walked once before the random runs. Every bug of the exactly-once zoo is caught by
the tour alone, naming its rule, with a report exactly as short as the shortest known
(``Expect.steps``); careful executors pass; a report replays as it stands."""

from __future__ import annotations

import pytest

from machines.testing.exactly_once.steps import Behaviour, Call, Decide, Reclaim, Restart, Wait
from machines.testing.exactly_once.suite import ExactlyOnceSuite
from machines.testing.exactly_once.tour import take_tour, tour_runs
from machines.testing.profiles import hunting
from machines.testing.verdict import RuleBroken
from tests.test_zoo_exactly_once import suite_for
from tests.zoo.exactly_once import BUGS, AttemptsAsMoves, Ledger


def steps_of(report: RuleBroken) -> list[str]:
    return [n for n in getattr(report, "__notes__", []) if n.startswith("state.step(")]


@pytest.mark.parametrize("kind", list(BUGS), ids=lambda kind: kind.__name__)
def test_the_tour_alone_catches_each_zoo_bug_with_the_shortest_report(kind: type[Ledger]) -> None:
    expected = BUGS[kind]
    with pytest.raises(RuleBroken) as caught:
        take_tour(suite_for(kind, history=kind is AttemptsAsMoves), kind.__name__)
    assert caught.value.rule == expected.rule, str(caught.value)
    shortest = expected.steps if expected.tour_steps is None else expected.tour_steps
    assert len(steps_of(caught.value)) == shortest, caught.value.__notes__


def test_careful_executors_pass_the_tour() -> None:
    take_tour(suite_for(Ledger, history=True), "Careful")
    take_tour(ExactlyOnceSuite, "ExactlyOnceSuite")


def test_a_tour_report_replays_as_it_stands() -> None:
    from tests.zoo.exactly_once import IgnoresReclaim

    suite = suite_for(IgnoresReclaim, history=False)
    with pytest.raises(RuleBroken) as caught:
        take_tour(suite, "Suite")
    names = {c.__name__: c for c in (Call, Wait, Restart, Reclaim, Decide, Behaviour)}
    actions = [eval(line[len("state.step(action=") : -1], names) for line in steps_of(caught.value)]
    state = suite()
    with pytest.raises(RuleBroken) as again:
        state.promises_kept()
        for action in actions:
            state.step(action)
            state.promises_kept()
    assert again.value.rule == caught.value.rule
    assert "found by the tour (1744 runs planned); the run:" in caught.value.__notes__


def test_run_takes_the_tour_before_the_dice() -> None:
    from tests.zoo.exactly_once import DecisionReruns

    with pytest.raises(RuleBroken) as caught:
        suite_for(DecisionReruns, history=False).run(hunting(1, 1))
    assert caught.value.rule == "explicit-exit"
    assert any(n.startswith("found by the tour") for n in caught.value.__notes__)


def test_the_tour_meets_every_behaviour_after_every_way_out() -> None:
    runs = tour_runs()
    assert len(runs) == len({tuple(run) for run in runs}) == 1744
    thirds = {(run[1], run[2]) for run in runs if len(run) == 3}
    for out in (Restart(), Reclaim("k1"), Decide("k1", True), Decide("k1", False)):
        assert {(out, Call("k1", b)) for b in Behaviour} <= thirds
