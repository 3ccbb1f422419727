"""The exhaustive explorer: distinct states per second per system.

States per second depend on the machine, so each exploration is compared, in the same
process and alternating rounds, with the same breadth-first search over a recording of
the very same state graph (every state's successors looked up in a dict): the ratio is
how much of the search's own ceiling the model keeps. The absolute rate is in the
"per unit" column (nanoseconds per distinct state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import cast

from benchmarks.harness import Ratio, _compare
from machines.explore import Model, build_model, explore

SCOPES = (("transfer", "broad"), ("exactly-once", "default"))
ROUNDS = 3


class _Recorded:
    """A model whose successors are read from a recorded graph: the search's ceiling."""

    name = "recorded"
    scope = "graph"

    def __init__(self, model: Model, graph: dict[int, list[int]]) -> None:
        self.flag_floor = model.flag_floor
        self._initial = list(model.initial())
        self.successors = graph.__getitem__

    def initial(self) -> Sequence[int]:
        return self._initial


def _record(system: str, scope: str) -> tuple[_Recorded, int]:
    model = build_model(system, scope)
    graph: dict[int, list[int]] = {}
    expand = model.successors

    def recording(state: int) -> list[int]:
        found = graph[state] = expand(state)
        return found

    model.successors = recording  # type: ignore[method-assign]
    states = explore(model).states
    return _Recorded(model, graph), states


def _timer(make: Callable[[], Model]) -> Callable[[], float]:
    def timed() -> float:
        return explore(make()).seconds

    return timed


def run() -> list[Ratio]:
    results = []
    for system, scope in SCOPES:
        recorded, states = _record(system, scope)
        results.append(
            _compare(
                f"explore {system} / {scope} ({states:,} states)",
                (f"{system} model, fresh", _timer(partial(build_model, system, scope))),
                ("BFS over the recorded graph", _timer(partial(cast, Model, recorded))),
                units=states,
                unit="distinct state",
                goal=None,
                rounds=ROUNDS,
                throughput=True,
            )
        )
    return results
