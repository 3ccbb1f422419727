"""Move lists drawn from the bundled definitions: every transition of every machine."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import machines
from machines.spec import MachineSpec

MACHINES = ("effect", "outcome", "node", "request")


@dataclass(frozen=True)
class Move:
    machine: MachineSpec
    state: str
    trigger: str
    actor: str
    dest: str
    context: dict[str, str]  # a full valuation of the machine's context that the edge admits


def valuations(spec: MachineSpec) -> list[dict[str, str]]:
    names = list(spec.context)
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(spec.context[n].values for n in names))
    ]


def every_transition() -> list[Move]:
    """One move per transition (and per actor), with the first valuation its guard admits."""
    moves = []
    for name in MACHINES:
        spec = machines.load(name)
        for t in spec.transitions:
            context = next(v for v in valuations(spec) if t.admits(v))
            for actor in t.actors:
                moves.append(Move(spec, t.source, t.trigger, actor, t.dest, context))
    return moves
