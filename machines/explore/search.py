"""Exhaustive bounded exploration: breadth-first over every reachable state of a model.

A model (``machines.explore.transfer``, ``machines.explore.outcome``) encodes one reference
system in a small scope as plain ints and says, for each state, which states one action
leads to. Breadth-first search visits every reachable state once, so the first time an
invariant breaks, the path to it is a shortest counterexample, printed as the moves that
lead there. Models mark a breach by setting a flag above ``model.flag_floor`` in the
successor they return, so the hot loop checks one integer comparison per new state and
every invariant, state or edge, is checked on every state and every move.

Why ints and a parent map: a state is hashed and stored once (``seen`` maps a state to
the state it was first reached from); traces are rebuilt only for violations, by asking
the model which move leads from each state to the next (``Model.moves``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TextIO


class Model(Protocol):
    """What the explorer needs of a system in a scope."""

    name: str
    scope: str
    flag_floor: int
    """Every state at or above this value carries at least one invariant breach."""

    def initial(self) -> Sequence[int]: ...

    def successors(self, state: int) -> list[int]:
        """Every state one action leads to (duplicates allowed); the hot path."""
        ...

    def moves(self, state: int) -> list[tuple[str, int]]:
        """The same successors, each with a readable label of its action, before symmetry
        reduction (``canonical`` maps each to the one ``successors`` returns)."""
        ...

    def canonical(self, state: int) -> int:
        """The representative of ``state`` under the scope's symmetries (or ``state``)."""
        ...

    def breaches(self, state: int) -> list[tuple[str, str]]:
        """(invariant id, what is wrong) for a flagged state."""
        ...

    def describe(self, state: int) -> str: ...


@dataclass(frozen=True)
class Violation:
    """The first (shortest) breach of one invariant, with the moves that lead to it."""

    invariant: str
    message: str
    trace: tuple[str, ...]
    state: str

    @property
    def moves(self) -> int:
        return len(self.trace) - 1  # the first line names the initial state

    def render(self) -> str:
        steps = "\n".join(f"    {i}. {label}" for i, label in enumerate(self.trace))
        return (
            f"  {self.invariant}: {self.message}\n"
            f"    shortest trace ({self.moves} moves):\n{steps}\n"
            f"    reached: {self.state}"
        )


@dataclass
class Exploration:
    """What one exhaustive run saw."""

    system: str
    scope: str
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = False
    violations: list[Violation] = field(default_factory=list)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        how = "exhausted" if self.complete else "stopped at the bound (not exhausted)"
        found = (
            f"{len(self.violations)} invariant(s) broken"
            if self.violations
            else "no invariant broken"
        )
        return (
            f"{self.system} / {self.scope}: {how}: {self.states:,} distinct states, "
            f"{self.transitions:,} moves, depth {self.depth}, {self.seconds:.2f} s "
            f"({self.states_per_second:,.0f} states/s); {found}"
        )


Progress = Callable[[int, int, int], None]
"""Called after each BFS level with (depth, states so far, frontier size)."""


def explore(
    model: Model, *, max_states: int | None = None, progress: Progress | None = None
) -> Exploration:
    """Visit every state reachable from ``model.initial()`` (or the first ``max_states``),
    breadth first; report each broken invariant once, with a shortest trace. A state with
    a breach is not expanded further: what follows it is not interesting."""
    result = Exploration(model.name, model.scope)
    started = time.perf_counter()
    seen: dict[int, int] = {}
    frontier: list[int] = []
    for state in model.initial():
        if state not in seen:
            seen[state] = -1
            frontier.append(state)
    flagged: list[int] = [s for s in frontier if s >= model.flag_floor]
    successors = model.successors
    floor = model.flag_floor
    limit = max_states if max_states is not None else sys.maxsize
    moves = 0
    depth = 0
    while frontier and len(seen) < limit:
        following: list[int] = []
        append = following.append
        for state in frontier:
            if state >= floor:
                continue
            found = successors(state)
            moves += len(found)
            for nxt in found:
                if nxt not in seen:
                    seen[nxt] = state
                    append(nxt)
                    if nxt >= floor:
                        flagged.append(nxt)
        frontier = following
        if frontier:
            depth += 1
        if progress is not None:
            progress(depth, len(seen), len(frontier))
    result.seconds = time.perf_counter() - started
    result.states = len(seen)
    result.transitions = moves
    result.depth = depth
    result.complete = not frontier
    result.violations = _violations(model, seen, flagged)
    return result


def _violations(model: Model, seen: dict[int, int], flagged: list[int]) -> list[Violation]:
    """The first flagged state of each invariant (BFS order: a shortest trace)."""
    out: dict[str, Violation] = {}
    for state in flagged:
        for invariant, message in model.breaches(state):
            if invariant not in out:
                trace, reached = _trace(model, seen, state)
                out[invariant] = Violation(invariant, message, trace, model.describe(reached))
    return list(out.values())


def _trace(model: Model, seen: dict[int, int], state: int) -> tuple[tuple[str, ...], int]:
    """The moves from an initial state to ``state``, replayed on concrete states (the
    stored path holds representatives; a symmetric twin would name the wrong node), and
    the concrete state reached."""
    path = [state]
    while seen[path[-1]] != -1:
        path.append(seen[path[-1]])
    path.reverse()
    labels = [f"start: {model.describe(path[0])}"]
    actual = path[0]
    for representative in path[1:]:
        label, actual = next(
            (label, raw)
            for label, raw in model.moves(actual)
            if model.canonical(raw) == representative
        )
        labels.append(label)
    return tuple(labels), actual


class ProgressBar:
    """One line on a terminal, rewritten after each BFS level; silent elsewhere."""

    def __init__(self, out: TextIO, label: str) -> None:
        self.out = out
        self.label = label
        self.live = out.isatty()
        self.started = time.perf_counter()

    def __call__(self, depth: int, states: int, frontier: int) -> None:
        if not self.live:
            return
        rate = states / max(time.perf_counter() - self.started, 1e-9)
        self.out.write(
            f"\r  {self.label}: depth {depth:>3}  {states:>12,} states  "
            f"{frontier:>10,} in frontier  {rate:>10,.0f} states/s"
        )
        self.out.flush()

    def done(self) -> None:
        if self.live:
            self.out.write("\r" + " " * 100 + "\r")
            self.out.flush()
