"""The exactly-once suite's tour: every kind of call, and every way the next step can
meet what it left, walked once before the random runs.

A key's life is short: one call leaves it running, held, parked, settled or free, and
the next step meets that. So the tour runs, on a fresh executor each time, every
behaviour of a first call alone; then followed by each thing that can happen next (a
second call of each behaviour, a call of the other key, a restart, a reclaim, a person's
decision either way, a second passing); the same again after the first caller's lease
has run out; and every call after a restart, a reclaim or a decision. A bug one of those
shows is reported as the steps of that run, the shortest that shows it, replayable as
Hypothesis prints its own (``state.step(action=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from machines.testing.exactly_once.steps import (
    KEYS,
    LEASE,
    Action,
    Behaviour,
    Call,
    Decide,
    Reclaim,
    Restart,
    Wait,
)
from machines.testing.verdict import RuleBroken


class Touring(Protocol):
    def step(self, action: Action) -> None: ...
    def promises_kept(self) -> None: ...
    def teardown(self) -> None: ...


def tour_runs() -> list[list[Action]]:
    """Every run of the tour, shortest first."""
    first, other = KEYS
    follows: list[Action] = [
        *(Call(first, b) for b in Behaviour),
        Call(other, Behaviour.RETURN),
        Restart(),
        Reclaim(first),
        Decide(first, True),
        Decide(first, False),
        Wait(1.0),
    ]
    opening = [Call(first, b) for b in Behaviour]
    runs: list[list[Action]] = [[call] for call in opening]
    runs += [[call, then] for call in opening for then in follows]
    runs += [[call, Wait(LEASE + 1), then] for call in opening for then in follows]
    exits: list[Action] = [Restart(), Reclaim(first), Decide(first, True), Decide(first, False)]
    runs += [[call, out, again] for call in opening for out in exits for again in opening]
    return runs


def take_tour(suite: Callable[[], Touring], name: str) -> None:
    """Walk every run of ``tour_runs`` on a fresh ``suite()``; raise the first
    ``RuleBroken``, with the run that shows it as replayable steps."""
    runs = tour_runs()
    for run in runs:
        machine = suite()
        try:
            machine.promises_kept()
            for action in run:
                machine.step(action)
                machine.promises_kept()
        except RuleBroken as broken:
            broken.add_note(f"found by the tour ({len(runs)} runs planned); the run:")
            for line in _replay(name, run):
                broken.add_note(line)
            raise
        finally:
            machine.teardown()


def _replay(name: str, run: Sequence[Action]) -> list[str]:
    lines = [f"state = {name}()", "state.promises_kept()"]
    for action in run:
        lines += [f"state.step(action={action!r})", "state.promises_kept()"]
    return [*lines, "state.teardown()"]
