"""What ``machines diagrams`` and ``machines docs`` share: files generated from the
definitions, written into a directory or, with ``--check``, compared with it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from machines.cli.command import problem, shown
from machines.errors import SpecError
from machines.loader import bundled_spec_dir, definition_paths, read_definition

if TYPE_CHECKING:
    from machines.spec import MachineSpec


def add_arguments(command: argparse.ArgumentParser, folder: str) -> None:
    """The arguments of a command that generates files into ``folder`` by default."""
    command.add_argument(
        "--out", type=Path, default=Path(folder), help=f"where to write (default {folder}/)"
    )
    command.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    command.add_argument("--spec-dir", type=Path, default=None)


def generate(
    what: str,
    args: argparse.Namespace,
    files_of: Callable[[Sequence[MachineSpec]], Mapping[str, str]],
) -> int:
    """Command ``what``: the files ``files_of`` makes of the definitions (by their path in
    the directory), written into ``args.out`` or, with ``args.check``, compared with it
    (exit 1 if one is stale)."""
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
