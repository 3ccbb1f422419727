"""``machines repair``: a store's guards put back as machines installed them, recorded
(``machines.store.repair``)."""

from __future__ import annotations

import argparse
import getpass
import shlex
from pathlib import Path

from machines.cli.command import Command, Parsers, problem
from machines.errors import MachinesError, printable


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("url", metavar="STORE_URL", help="sqlite:///path or postgresql://...")
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="the definitions the store serves, every machine in it (default: "
        "$MACHINES_SPEC_DIR, else [tool.machines] spec_dir in pyproject.toml)",
    )
    command.add_argument(
        "--by",
        default=None,
        metavar="NAME",
        help="who repairs, as the record names them (default: the login name)",
    )
    command.add_argument(
        "--dry-run", action="store_true", help="list what differs and change nothing"
    )


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.spec.loader import definition_paths, load
    from machines.spec.project import project_definitions
    from machines.store.records import shown_url
    from machines.store.repair import repair

    by = args.by
    if by is None:
        try:
            by = getpass.getuser()
        except (OSError, KeyError):
            print("machines repair: no login name to record the repair by; give --by NAME")
            return 2
    try:
        spec_dir = project_definitions(args.spec_dir, "repair the store's guards by")
        specs = {spec.name: spec for spec in map(load, definition_paths(spec_dir))}
        done = repair(args.url, specs, by=by, dry_run=args.dry_run)
    except (OSError, MachinesError) as exc:
        print(printable(f"machines repair: {problem(exc)}", lines=True))
        return 2
    where = shown_url(args.url)
    for line in done.lines():
        print(printable(line))
    if not done.differences:
        print(f"machines repair: {where}: the guards are as installed; nothing to repair")
    elif args.dry_run:
        count = len(done.differences)
        print(f"machines repair: {where}: dry run: {count} differences; nothing changed")
    else:
        print(
            f"machines repair: {where}: repaired {len(done.differences)} differences (recorded); "
            "judge the data written meanwhile: "
            + shlex.join(["machines", "audit", "--from-store", where, "--spec-dir", str(spec_dir)])
        )
    return 0


COMMAND = Command(
    "repair",
    help="put a store's guards back as machines installed them (explicit and recorded)",
    description="A store refuses to open when its guards differ from the generated ones (a "
    "trigger dropped, disabled or replaced, a forged legal move, a registry row added by "
    "hand). The owner repairs it: in one transaction the guards of each machine's current "
    "version are installed again and forged registry rows removed, and the repair is "
    "recorded in the store (machines audit names it). The data written meanwhile is left "
    "as it is for the audit to judge. Exit 0 repaired or nothing to repair, 2 unreadable "
    "input or a store that cannot be repaired (nothing changed).",
    arguments=_arguments,
    run=_run,
)
