"""What a transfer engine recorded, judged as it grows.

An engine exposes, per request, the moves of the request and of each of its nodes
(``EngineHistory``). ``Histories`` keeps what each chain was when last judged and judges
what is new in it: a recorded move never changes, and the chain stays legal in the
bundled ``request`` and ``node`` definitions (never the ones the engine runs on: a mutated
copy must not judge itself), their guards judged on the one variable the suite observes, a
node's kind. It also names the states the oracle reads meaning from: those that release or
consume a request's reservation, and those that give up on a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from machines.spec import MachineSpec
from machines.spec.vocabulary import CONSUMES_RESERVATION, EFFECT_STARTED, RELEASES_RESERVATION
from machines.testing.verdict import Move, bundled, chain_break, moves_of


@dataclass(frozen=True)
class EngineHistory:
    """What an engine recorded about one request: its moves, and each node's by name."""

    request: Sequence[Move]
    nodes: Mapping[str, Sequence[Move]]


Grown = tuple[list[tuple[str, Move]], str | None]
"""The new moves of a history, as (node name, or "" for the request, move), and why the
history is not a legal growth of what was judged before (None when it is)."""


class Histories:
    """The histories an engine exposed so far, per request and node, and the bundled
    definitions they are judged by."""

    def __init__(self) -> None:
        self.request = bundled("request")
        self.node = bundled("node")
        self.releases = self.request.states_tagged(RELEASES_RESERVATION)
        self.consumes = self.request.states_tagged(CONSUMES_RESERVATION)
        self.gives_up = frozenset(
            name for name, state in self.node.states.items() if state.terminal
        ) - self.node.states_tagged(EFFECT_STARTED)
        self.seen: dict[tuple[str, str], tuple[Move, ...]] = {}

    def grown(self, request: str, history: EngineHistory, kinds: Mapping[str, str]) -> Grown:
        """The moves new in ``history`` of ``request`` since it was last judged, chain by
        chain (the request's, then each node's, whose kind is in ``kinds`` when the suite
        knows it) up to the first chain that is not a legal growth, and why that one is
        not."""
        chains: list[tuple[str, MachineSpec, object, dict[str, str]]] = [
            ("", self.request, history.request, {})
        ]
        for name, node_moves in history.nodes.items():
            context = {"kind": kinds[name]} if name in kinds else {}
            chains.append((name, self.node, node_moves, context))
        new: list[tuple[str, Move]] = []
        for name, spec, exposed, context in chains:
            where = f"{name}: " if name else ""
            before = self.seen.get((request, name), ())
            now = moves_of(exposed)
            if now is None:
                return new, (
                    f"{where}the history is not a sequence of moves (a {type(exposed).__name__})"
                )
            if now[: len(before)] != before:
                return new, f"{where}recorded moves were rewritten"
            if len(now) == len(before):
                continue
            self.seen[(request, name)] = now
            why = _illegal(spec, now, context, len(before))
            if why is not None:
                return new, where + why
            new.extend((name, move) for move in now[len(before) :])
        return new, None


def _illegal(
    spec: MachineSpec, moves: Sequence[Move], context: Mapping[str, str], judged: int
) -> str | None:
    """Why ``moves`` is not a legal chain of ``spec`` (guards judged only on the variables
    in ``context``), or None; the first ``judged`` moves are known good."""
    found = chain_break(moves, spec, context, judged=judged, observed=True)
    if found is None:
        return None
    number, move, at, how, _, _ = found
    if how == "disconnected":
        return f"move #{number} ({move}) starts from {move.source}, not {at}"
    return f"move #{number} ({move}) is not an edge of the bundled '{spec.name}'"
