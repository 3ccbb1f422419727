"""What a diagram shows of one machine, decided once for every renderer."""

from __future__ import annotations

from dataclasses import dataclass

from machines.spec import MachineSpec
from machines.spec.vocabulary import FAIL_CLOSED, describe_guard

TERMINAL_FILL = "#e8eaf6"
TERMINAL_STROKE = "#3949ab"
FAIL_CLOSED_COLOR = "#c62828"
FAIL_CLOSED_FILL = "#ffebee"
PERSON_COLOR = "#1565c0"
"""The palette every renderer draws with, so a state looks the same in DOT and Mermaid: a
terminal state filled blue-grey, a fail-closed one filled pale red with a red outline (it
wins over terminal), a person's move blue."""


def visible(char: str) -> str:
    """How a diagram shows one character of a definition's text: itself when printable,
    else its escape (``\\x00``, ``\\u2028``): renderers cannot draw a control character or
    a lone surrogate, and Graphviz writes broken UTF-8 for some."""
    return char if char.isprintable() else ascii(char)[1:-1]


@dataclass(frozen=True)
class Edge:
    """One transition as drawn."""

    source: str
    dest: str
    trigger: str
    actors: tuple[str, ...]
    guard: str  # "side_effects=none", "" when unguarded
    by_person: bool  # some actor is not automatic: drawn dashed
    fail_closed_exit: bool  # leaves a fail-closed state: only these ways out, highlighted
    amendment: str | None  # the finding that amended the seed here: marked

    @property
    def label(self) -> str:
        text = f"{self.trigger} ({', '.join(self.actors)})"
        if self.guard:
            text += f" [{self.guard}]"
        if self.amendment:
            text += " \u2020"  # dagger: see the amendment's finding
        return text


@dataclass(frozen=True)
class DiagramView:
    """A machine reduced to what its diagrams draw, in the definition's order."""

    name: str
    title: str
    initial: str
    states: tuple[str, ...]
    terminal: frozenset[str]
    fail_closed: frozenset[str]
    edges: tuple[Edge, ...]

    @classmethod
    def of(cls, spec: MachineSpec) -> DiagramView:
        fail_closed = spec.states_tagged(FAIL_CLOSED)
        edges = tuple(
            Edge(
                source=t.source,
                dest=t.dest,
                trigger=t.trigger,
                actors=t.actors,
                guard=describe_guard(t.when, "label"),
                by_person=any(not spec.actors[a].automatic for a in t.actors),
                fail_closed_exit=t.source in fail_closed,
                amendment=t.amendment,
            )
            for t in spec.transitions
        )
        return cls(
            name=spec.name,
            title=spec.title,
            initial=spec.initial,
            states=tuple(spec.states),
            terminal=frozenset(n for n, s in spec.states.items() if s.terminal),
            fail_closed=fail_closed,
            edges=edges,
        )
