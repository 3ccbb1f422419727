"""``machines diagrams``: every machine drawn as Graphviz DOT and SVG and as Mermaid."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from machines.cli.command import Command, Parsers
from machines.cli.generated import add_arguments, generate

if TYPE_CHECKING:
    from machines.spec import MachineSpec


def _files(specs: Sequence[MachineSpec]) -> dict[str, str]:
    from machines.render.files import INSTALL_GRAPHVIZ, diagram_files

    files, drawn = diagram_files(specs)
    if not drawn:
        print(f"machines diagrams: {INSTALL_GRAPHVIZ}", file=sys.stderr)
    return files


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    return generate("diagrams", args, _files)


COMMAND = Command(
    "diagrams",
    help="draw every machine as Graphviz DOT and SVG and as Mermaid, into diagrams/",
    description="Exit 0 when written (or, with --check, current), 1 when --check finds "
    "a stale or missing file, 2 on unreadable definitions.",
    arguments=lambda command: add_arguments(command, "diagrams"),
    run=_run,
)
