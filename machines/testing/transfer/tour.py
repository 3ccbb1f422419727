"""The transfer suite's tour: every start the suite knows, and what can meet it next,
walked once before the random runs.

Each start is a corner of a transfer's life (a plan just received, a signature awaited, a
submit that timed out, a failure after money moved, ...) followed by what happens next
there. The tour sets each one up on a fresh engine and then, each on a fresh engine again:
nothing more; the first engine stepping the request six times; the other engine stepping
it after the submit timeout; a person doing what fits its state. The venue gives the
answer that moves the plan on and no process dies, so a bug the tour shows is one of the
plain paths; the random runs twist them.
"""

from __future__ import annotations

from collections.abc import Sequence

from machines.testing.recorded import Step
from machines.testing.transfer.adapter import ENGINES, SUBMIT_TIMEOUT
from machines.testing.transfer.scenarios import LIVE, PLANS, Start
from machines.testing.transfer.venue import ANSWERS

TWISTS = {call: set(answers[1:]) for call, answers in ANSWERS.items()}
"""Every unhappy answer allowed (the tour draws none: it takes the first choice)."""


def _submit(start: Start, plan: str) -> Step:
    scenario, then = start
    return Step("submit", {"plans": [plan] * LIVE, "twists": TWISTS}, draws=(scenario, then))


def _step(engine: str, times: int, wait: float) -> Step:
    arguments = {"engine": engine, "times": times, "fault": None, "wait": wait}
    return Step("step", arguments, draws=())


FOLLOWS: tuple[tuple[Step, ...], ...] = (
    (),
    (_step(ENGINES[0], 6, 0.0),),
    (_step(ENGINES[1], 6, SUBMIT_TIMEOUT + 1),),
    (Step("someone_acts", {}, draws=()),),
)


def tour_runs(starts: Sequence[Start]) -> list[list[Step]]:
    """Every run of the tour over ``starts``, shortest first; a fresh start once with each
    plan."""
    firsts = [_submit(start, "withdraw") for start in starts]
    fresh = [start for start in starts if start[1] is None]
    firsts += [_submit(start, plan) for start in fresh[:1] for plan in sorted(PLANS)]
    return [[first, *follow] for follow in FOLLOWS for first in firsts]
