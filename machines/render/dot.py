"""Graphviz DOT for one machine: deterministic text, the same spec gives the same bytes."""

from __future__ import annotations

from collections.abc import Collection

from machines.render.view import (
    FAIL_CLOSED_COLOR,
    FAIL_CLOSED_FILL,
    PERSON_COLOR,
    TERMINAL_FILL,
    DiagramView,
    Edge,
    visible,
)
from machines.spec import MachineSpec

FONT = "Helvetica"


CURRENT_FILL = "#fde68a"
"""The fill of the state an entity is in, on its picture."""
TAKEN_COLOR = "#15803d"
"""The color of the moves an entity took, on its picture."""


def to_dot(
    spec: MachineSpec,
    current: str | None = None,
    taken: Collection[tuple[str, str, str]] = (),
) -> str:
    """The machine's diagram; with ``current`` (a state) and ``taken`` ((source, trigger,
    dest) moves), one entity's picture: where it is, and the way it came."""
    view = DiagramView.of(spec)
    lines = [
        f"digraph {_quote(view.name)} {{",
        f'  graph [rankdir=TB, fontname="{FONT}", labelloc=t, bgcolor="white", '
        f"label={_quote(f'{view.name}: {view.title}')}];",
        f'  node [shape=box, style="rounded,filled", fillcolor="white", fontname="{FONT}"];',
        f'  edge [fontname="{FONT}", fontsize=10];',
        '  "__initial__" [shape=point, width=0.18, label=""];',
    ]
    for state in view.states:
        style = _state_style(view, state)
        if state == current:
            here = f'fillcolor="{CURRENT_FILL}", penwidth=3'
            style = f" [{style[2:-1]}, {here}]" if style else f" [{here}]"
        lines.append(f"  {_quote(state)}{style};")
    lines.append(f'  "__initial__" -> {_quote(view.initial)};')
    for edge in view.edges:
        style = _edge_style(edge)
        if (edge.source, edge.trigger, edge.dest) in taken:
            style += f', color="{TAKEN_COLOR}", fontcolor="{TAKEN_COLOR}", penwidth=3'
        lines.append(f"  {_quote(edge.source)} -> {_quote(edge.dest)} [{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _state_style(view: DiagramView, state: str) -> str:
    attrs = []
    if state in view.terminal:
        fill = FAIL_CLOSED_FILL if state in view.fail_closed else TERMINAL_FILL
        attrs += [f'fillcolor="{fill}"', "peripheries=2"]
    elif state in view.fail_closed:
        attrs.append(f'fillcolor="{FAIL_CLOSED_FILL}"')
    if state in view.fail_closed:
        attrs += [
            f'color="{FAIL_CLOSED_COLOR}"',
            "penwidth=2.5",
            f'fontcolor="{FAIL_CLOSED_COLOR}"',
        ]
    return f" [{', '.join(attrs)}]" if attrs else ""


def _edge_style(edge: Edge) -> str:
    """Dashed when a person moves it; red and thick when it leaves a fail-closed state
    (those are its only ways out), else blue for a person's move."""
    attrs = [f"label={_quote(edge.label)}"]
    if edge.by_person:
        attrs.append("style=dashed")
    color = FAIL_CLOSED_COLOR if edge.fail_closed_exit else PERSON_COLOR if edge.by_person else ""
    if color:
        attrs += [f'color="{color}"', f'fontcolor="{color}"']
    if edge.fail_closed_exit:
        attrs.append("penwidth=2")
    if edge.amendment:
        attrs.append(f"tooltip={_quote(f'amended: finding {edge.amendment}')}")
    return ", ".join(attrs)


_ESCAPES = {"\\": "\\\\", '"': '\\"', "&": "&amp;", "\n": "\\n"}


def _quote(text: str) -> str:
    """A DOT double-quoted string that Graphviz shows as ``text``: quotes and backslashes
    escaped, ``&`` as an entity (Graphviz reads entities in labels), a line break as
    Graphviz's own, any other unprintable character by its escape (``visible``)."""
    inner = "".join(
        _ESCAPES.get(c, c) for char in text for c in (char if char == "\n" else visible(char))
    )
    return f'"{inner}"'
