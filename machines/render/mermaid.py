"""Mermaid ``stateDiagram-v2`` for one machine (GitHub and many wikis draw it inline)."""

from __future__ import annotations

from machines.render.view import DiagramView
from machines.spec import MachineSpec


def to_mermaid(spec: MachineSpec) -> str:
    view = DiagramView.of(spec)
    lines = [
        "---",
        f'title: "{view.name} - {view.title}"',
        "---",
        "stateDiagram-v2",
        "    direction TB",
        f"    [*] --> {view.initial}",
    ]
    for edge in view.edges:
        arrow = "-->"
        lines.append(f"    {edge.source} {arrow} {edge.dest}: {_escape(edge.label)}")
    for state in view.states:
        if state in view.terminal:
            lines.append(f"    {state} --> [*]")
    lines += [
        "    classDef terminal fill:#e8eaf6,stroke:#3949ab",
        "    classDef failclosed fill:#ffebee,stroke:#c62828,stroke-width:3px",
    ]
    if view.terminal:
        lines.append(f"    class {','.join(s for s in view.states if s in view.terminal)} terminal")
    if view.fail_closed:
        lines.append(
            f"    class {','.join(s for s in view.states if s in view.fail_closed)} failclosed"
        )
    return "\n".join(lines) + "\n"


def _escape(label: str) -> str:
    """Mermaid ends a transition label at a colon or semicolon; say them in words."""
    return label.replace(":", " ").replace(";", ",")
