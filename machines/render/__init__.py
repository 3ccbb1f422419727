"""Pictures of the machines, drawn from the definitions: Graphviz DOT (and SVG through the
``dot`` binary) and Mermaid ``stateDiagram-v2``. Both read one ``DiagramView`` of a spec,
so the two drawings always agree on what is highlighted and why."""

from machines.render.dot import to_dot
from machines.render.mermaid import to_mermaid
from machines.render.view import DiagramView, Edge

__all__ = ["DiagramView", "Edge", "to_dot", "to_mermaid"]
