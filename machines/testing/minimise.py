"""The suites' own minimiser: the shortest run it can find that still breaks the same rule.

Hypothesis shrinks a failing run by trying smaller choices, which on a stateful suite can
take minutes; the suites instead replay the recorded steps with some left out (delta
debugging, Zeller and Hildebrandt's ``ddmin``: drop halves, then quarters, down to single
steps) until no single step can go, or until a time budget is spent, and report the
shortest run found. A candidate is judged by running it again on a fresh implementation,
so the report is a run that fails as it stands.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

Step = TypeVar("Step")

MINIMISE_SECONDS = 5.0
"""How long a suite spends minimising one report by default: enough to take a few thousand
replays of a fast implementation down to the steps that matter; a slow implementation gets
the shortest run found by then."""


def ddmin(
    steps: Sequence[Step],
    fails: Callable[[list[Step]], bool],
    seconds: float = MINIMISE_SECONDS,
    *,
    timer: Callable[[], float] = time.monotonic,
) -> list[Step]:
    """A sublist of ``steps`` (in order) for which ``fails`` holds, as short as ``ddmin``
    gets within ``seconds``: 1-minimal (no single step can be left out) when time allows.
    ``fails(list(steps))`` is assumed to hold; ``fails`` is never asked twice about the
    same candidate."""
    deadline = timer() + seconds
    asked: dict[tuple[int, ...], bool] = {}
    current = list(range(len(steps)))

    def still_fails(candidate: list[int]) -> bool:
        key = tuple(candidate)
        if key not in asked:
            asked[key] = fails([steps[i] for i in candidate])
        return asked[key]

    parts = 2
    while len(current) >= 2 and timer() < deadline:
        size = -(-len(current) // parts)
        chunks = [current[i : i + size] for i in range(0, len(current), size)]
        for chunk in chunks:
            if timer() >= deadline:
                break
            rest = [i for i in current if i not in set(chunk)]
            if rest and still_fails(rest):
                current, parts = rest, max(parts - 1, 2)
                break
        else:
            if parts >= len(current):
                break
            parts = min(len(current), parts * 2)
    return [steps[i] for i in current]
