"""``machines migrate``: a store moved to the definitions of a directory, in one
transaction, losing nothing (``machines.store.migration``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from machines.cli.command import Command, Parsers, problem
from machines.errors import MachinesError, printable


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("url", metavar="STORE_URL", help="sqlite:///path or postgresql://...")
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="the definitions to migrate the store to, every machine in it (default: "
        "$MACHINES_SPEC_DIR, else [tool.machines] spec_dir in pyproject.toml)",
    )
    command.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="MACHINE:OLD_STATE=NEW_STATE",
        help="move the entities in a state the new definition removes to one of its states "
        "(each gets one history event by the migration actor); repeat for each state",
    )
    command.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.spec.loader import definition_paths, load
    from machines.spec.project import project_definitions
    from machines.store.migration import StateMap, migrate
    from machines.store.records import shown_url

    try:
        maps = [StateMap.parse(text) for text in args.map]
        specs = {
            spec.name: spec
            for spec in map(
                load, definition_paths(project_definitions(args.spec_dir, "migrate the store to"))
            )
        }
        plan = migrate(args.url, specs, maps, dry_run=args.dry_run)
    except (OSError, MachinesError) as exc:
        print(printable(f"machines migrate: {problem(exc)}", lines=True))
        return 2
    for line in plan.lines():
        print(printable(line))
    where = shown_url(args.url)
    if plan.refused:
        print(f"machines migrate: {where}: REFUSED; nothing changed")
        return 1
    if plan.nothing_to_do:
        verdict = "nothing to do"
    elif args.dry_run:
        verdict = "dry run: nothing changed"
    else:
        verdict = "migrated"
    print(f"machines migrate: {where}: {verdict}")
    return 0


COMMAND = Command(
    "migrate",
    help="move a store's tables to changed definitions, keeping every entity and its "
    "history (one transaction)",
    description="Installs the new version of each changed definition (its legal moves and "
    "triggers) and keeps every entity, its context, data and whole history; the store "
    "records every version, and each history event names the one it was made under. "
    "Refused, changing nothing, when live entities sit in a state the new definition "
    "removes and no --map covers it, a map is into a state the new definition lacks or "
    "out of a terminal state into a non-terminal one, a map is a move the definitions' "
    "rules refuse to the automatic migration actor (out of a state kept for people, into "
    "a state that releases a reservation while money may be moving, out of a state "
    "that says the effect may have run or how an entity ended into one that says "
    "otherwise), or live entities "
    "hold a context the new definition refuses; a store whose guards were tampered with "
    "is repaired first (machines repair). On PostgreSQL the tables are locked for the whole "
    "transaction: a worker waits, then meets the new schema whole. Exit 0 migrated or "
    "nothing to do, 1 refused, 2 unreadable input (a definition, a --map, the store).",
    arguments=_arguments,
    run=_run,
)
