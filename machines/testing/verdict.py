"""What every suite's verdict is made of: a broken rule, a recorded move, and the judgement
of a history an implementation exposes against a definition.

Each suite has its own rules (``RULES`` in its module) but reports them the same way: a
``RuleBroken`` whose message starts with the rule's short stable name, so a user's CI can
tell one broken promise from another. A history is judged against the definition the suite
was given (the bundled one, ``bundled``), never against the one the implementation runs on.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from machines.errors import MachinesError, message_of
from machines.loader import load
from machines.spec import MachineSpec


@functools.cache
def bundled(name: str) -> MachineSpec:
    """The bundled definition ``name``, the published promise a suite judges by: loaded at
    first use, never when a module of ``machines.testing`` is imported, then kept."""
    return load(name)


class RuleBroken(AssertionError):
    """The implementation under test broke ``rule``; the message starts with the rule's
    name, then says what happened, step by step."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(message if message.startswith(f"{rule}:") else f"{rule}: {message}")


class Move(NamedTuple):
    """One recorded state change, in the names of the suite's definition."""

    source: str
    trigger: str
    dest: str
    actor: str

    def __str__(self) -> str:
        return f"{self.source} --{self.trigger} ({self.actor})--> {self.dest}"


def moves_of(moves: object) -> tuple[Move, ...] | None:
    """A history an adapter returned, as ``Move``s; None when it is not a sequence of moves
    with four ``str`` attributes ``source``, ``trigger``, ``dest`` and ``actor``."""
    if not isinstance(moves, Sequence) or isinstance(moves, str | bytes):
        return None
    out = []
    try:
        for move in moves:
            parts = (move.source, move.trigger, move.dest, move.actor)
            if not all(type(part) is str for part in parts):
                return None
            out.append(Move(*parts))
    except Exception:  # a hostile sequence or move: user code
        return None
    return tuple(out)


def chain_problem(
    chain: Sequence[Move], spec: MachineSpec, context: Mapping[str, str] | None = None
) -> str | None:
    """What makes ``chain`` not a legal history of ``spec`` (its guards judged against
    ``context``): the first move that does not continue from the last, or that the
    definition refuses, or that leads elsewhere. None when the chain is legal."""
    state = spec.initial
    for i, (source, trigger, dest, actor) in enumerate(chain, start=1):
        if source != state:
            return f"move {i} starts from {source}, not from {state}"
        try:
            legal = spec.step(source, trigger, actor=actor, **(context or {}))
        except MachinesError as refused:
            return f"move {i} is not allowed ({message_of(refused, 160)})"
        if legal != dest:
            return f"move {i} ({trigger}) leads to {legal}, not {dest}"
        state = dest
    return None


def show_chain(chain: Sequence[Move]) -> str:
    """A history as one line: ``pending --execute--> executing --commit--> committed``."""
    if not chain:
        return "(empty)"
    return chain[0].source + "".join(f" --{m.trigger}--> {m.dest}" for m in chain)
