"""``machines diagrams``: every machine drawn as Graphviz DOT and SVG and as Mermaid."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from machines.cli.command import Parsers
from machines.cli.generated import generator

if TYPE_CHECKING:
    from machines.spec import MachineSpec


def _files(specs: Sequence[MachineSpec], parsers: Parsers) -> dict[str, str]:
    from machines.render.files import INSTALL_GRAPHVIZ, diagram_files

    files, drawn = diagram_files(specs)
    if not drawn:
        print(f"machines diagrams: {INSTALL_GRAPHVIZ}", file=sys.stderr)
    return files


COMMAND = generator(
    "diagrams",
    help="draw every machine as Graphviz DOT and SVG and as Mermaid, into diagrams/",
    what="file",
    files_of=_files,
)
