"""``machines export``: one machine printed for other tools (``machines.render.export`` holds the
formats)."""

from __future__ import annotations

import argparse
import sys

from machines.cli.command import Command, Parsers
from machines.errors import SpecError, SpecUnreadable
from machines.render.export import FORMATS, export
from machines.spec.loader import load


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("machine", help="a bundled machine name or a path to a YAML file")
    command.add_argument("--format", choices=FORMATS, default="json")


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    try:
        spec = load(args.machine)
    except SpecUnreadable as exc:
        print(f"machines export: {exc}", file=sys.stderr)
        return 2
    except SpecError as exc:
        print(f"machines export: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(export(spec, args.format))
    return 0


COMMAND = Command(
    "export",
    help="print one machine for other tools: json (any language), sql or postgresql (the "
    "store schema for SQLite or PostgreSQL), mermaid or dot (its diagram)",
    description=None,
    arguments=_arguments,
    run=_run,
)
