"""Mermaid ``stateDiagram-v2`` for one machine (GitHub and many wikis draw it inline).

Text from a definition never reaches the output as it is: the title is a YAML string of
the front matter (quoted, every unprintable character escaped, so no line break or ``---``
can end the front matter early), a transition label is one line with Mermaid's special
characters spelled as its entity codes, and a state id must be a plain identifier (the
loader's names are; anything else is refused rather than mangled into another id).
"""

from __future__ import annotations

import re

from machines.errors import MachinesError
from machines.render.view import (
    FAIL_CLOSED_COLOR,
    FAIL_CLOSED_FILL,
    TERMINAL_FILL,
    TERMINAL_STROKE,
    DiagramView,
    visible,
)
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe

_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL = {":": " ", ";": ",", "#": "#35;", "<": "#lt;", ">": "#gt;", '"': "#quot;"}


def to_mermaid(spec: MachineSpec) -> str:
    view = DiagramView.of(spec)
    ids = {state: _id(spec, state) for state in view.states}
    lines = [
        "---",
        f"title: {_yaml_string(f'{view.name} - {view.title}')}",
        "---",
        "stateDiagram-v2",
        "    direction TB",
        f"    [*] --> {ids[view.initial]}",
    ]
    for edge in view.edges:
        arrow = "-->"
        lines.append(f"    {ids[edge.source]} {arrow} {ids[edge.dest]}: {_label(edge.label)}")
    for state in view.states:
        if state in view.terminal:
            lines.append(f"    {ids[state]} --> [*]")
    lines += [
        f"    classDef terminal fill:{TERMINAL_FILL},stroke:{TERMINAL_STROKE}",
        f"    classDef failclosed fill:{FAIL_CLOSED_FILL},stroke:{FAIL_CLOSED_COLOR},"
        "stroke-width:3px",
    ]
    if view.terminal:
        lines.append(
            f"    class {','.join(ids[s] for s in view.states if s in view.terminal)} terminal"
        )
    if view.fail_closed:
        lines.append(
            f"    class {','.join(ids[s] for s in view.states if s in view.fail_closed)} failclosed"
        )
    return "\n".join(lines) + "\n"


def _id(spec: MachineSpec, state: str) -> str:
    if not _ID.fullmatch(state):
        raise MachinesError(
            f"{spec.name}: state {describe(state)} cannot be a Mermaid id (letters, digits "
            "and _ only); the loader never makes such a name"
        )
    return state


def _yaml_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar: on one line, and read back exactly."""
    out = []
    for char in text:
        if char in '"\\':
            out.append(f"\\{char}")
        elif char.isprintable():
            out.append(char)
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return f'"{"".join(out)}"'


def _label(label: str) -> str:
    """A transition label ends at a line break and Mermaid reads ``:``, ``;``, ``#`` and
    HTML in it: keep it on one line and spell those out (a colon or semicolon in words)."""
    return "".join(_LABEL.get(c, c) for char in label for c in visible(char))
