"""``machines export``: one machine printed for other tools, or as a definition that loads
back (``machines.render.export`` holds the formats)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from machines.cli.command import Command, Parsers
from machines.cli.output import odd_names, printable_naming
from machines.errors import InvalidArgument, SpecError, SpecUnreadable
from machines.render.export import FORMATS, export
from machines.spec.loader import load
from machines.spec.project import machine_file


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "machine",
        help="a machine of your definitions (--spec-dir, MACHINES_SPEC_DIR or "
        "[tool.machines] spec_dir; else a bundled one), or a path to a definition file",
    )
    command.add_argument(
        "--spec-dir", type=Path, default=None, help="the folder of definitions to look in"
    )
    command.add_argument(
        "--format",
        choices=FORMATS,
        default="json",
        help="yaml, json: the definition itself (machines.load reads it back, saved as "
        "NAME.yaml or NAME.json); sql, postgresql: the store schema; mermaid, dot: the "
        "diagram; python: typed names (enums of the states, triggers and actors, and a "
        "class with a method per trigger) that make a typo a mypy error (default: json)",
    )


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    try:
        spec = load(machine_file(args.machine, args.spec_dir))
    except (SpecUnreadable, InvalidArgument, SpecError) as exc:
        _said(args, exc)
        return 2  # a definition that does not load is input export cannot use, as for docs
    sys.stdout.write(export(spec, args.format))
    return 0


def _said(args: argparse.Namespace, exc: Exception) -> None:
    """Why the machine cannot be exported, escaped: it names a file of the user's folder,
    whose name may hold an escape sequence or a line break."""
    names = odd_names(Path(args.machine), args.spec_dir)
    print(printable_naming(f"machines export: {exc}", names), file=sys.stderr)


COMMAND = Command(
    "export",
    help="print one machine: yaml or json (the definition, for any language, and loadable "
    "again), sql or postgresql (the store schema for SQLite or PostgreSQL), mermaid or dot "
    "(its diagram), python (its typed names)",
    description="Exit 0 with the export on standard output, 2 when the definition cannot be "
    "read or does not load (machines check --spec-dir DIR says why in full).",
    arguments=_arguments,
    run=_run,
)
