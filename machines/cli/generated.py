"""What ``machines diagrams`` and ``machines docs`` share: files generated from the
definitions, written into a directory or, with ``--check``, compared with it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from machines.cli.command import Command, Parsers, problem, shown
from machines.errors import SpecError
from machines.spec.loader import bundled_spec_dir, definition_paths, read_definition

if TYPE_CHECKING:
    from machines.spec import MachineSpec


Generator = Callable[[Sequence["MachineSpec"], Parsers], Mapping[str, str]]
"""The files a command generates from the definitions, by their path in the directory."""


def generator(name: str, help: str, what: str, files_of: Generator) -> Command:
    """The command ``name`` that writes the files ``files_of`` makes into ``name/`` (or
    ``--out``), or with ``--check`` compares them; ``what`` is one of them in its help."""
    return Command(
        name,
        help=help,
        description="Exit 0 when written (or, with --check, current), 1 when --check finds "
        f"a stale or missing {what}, 2 on unreadable definitions.",
        arguments=lambda command: _arguments(command, name),
        run=lambda args, parsers: _generate(name, args, lambda specs: files_of(specs, parsers)),
    )


def _arguments(command: argparse.ArgumentParser, folder: str) -> None:
    command.add_argument(
        "--out", type=Path, default=Path(folder), help=f"where to write (default {folder}/)"
    )
    command.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    command.add_argument("--spec-dir", type=Path, default=None)


def _generate(
    what: str,
    args: argparse.Namespace,
    files_of: Callable[[Sequence[MachineSpec]], Mapping[str, str]],
) -> int:
    from machines.render.files import sync

    out: Path = args.out
    check_only: bool = args.check
    if out.exists() and not out.is_dir():
        print(f"machines {what}: --out {shown(str(out))} is not a directory", file=sys.stderr)
        return 2
    try:
        paths = definition_paths(args.spec_dir or bundled_spec_dir())
        specs = [read_definition(p) for p in paths]
    except SpecError as exc:
        print(f"machines {what}: {exc}", file=sys.stderr)
        return 2
    files = files_of(specs)
    try:
        changed = sync(files, out, check=check_only)
    except OSError as exc:
        doing = "read" if check_only else "write"
        print(
            f"machines {what}: cannot {doing} {problem(exc)}; choose an --out directory "
            f"you can {doing}",
            file=sys.stderr,
        )
        return 2
    if check_only:
        if changed:
            names = ", ".join(str(p) for p in changed)
            print(f"machines {what}: stale or missing: {names}; run: machines {what}")
            return 1
        print(f"machines {what}: {len(files)} generated files in {out}/ are current")
        return 0
    print(f"machines {what}: {len(changed)} of {len(files)} files written into {out}/")
    return 0
