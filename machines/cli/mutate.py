"""``machines mutate``: the definitions broken on purpose (``machines.mutation``'s catalog),
each mutation shown caught by ``machines check`` or a stateful suite."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from machines.cli.command import Command, Parsers, whole
from machines.errors import install_command

MAX_EXAMPLES = 1_000_000
"""The largest ``mutate --examples``: the work grows linearly with it, and a larger count
is a typo rather than a plan (the default is 300)."""


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("ids", nargs="*", metavar="ID", help="only these mutations")
    command.add_argument(
        "--examples",
        type=whole(1, MAX_EXAMPLES),
        default=300,
        metavar="N",
        help="most suite runs per mutation before it counts as surviving, 1 to "
        f"{MAX_EXAMPLES:,} (default 300)",
    )
    command.add_argument("--list", action="store_true", help="list the catalog and exit")


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.mutation import CATALOG, Kill, run_catalog, summary

    if not args.list and importlib.util.find_spec("hypothesis") is None:
        print(
            "machines mutate: the stateful suites need Hypothesis; "
            f"install it with: {install_command('testing')}",
            file=sys.stderr,
        )
        return 2

    if args.list:
        for m in CATALOG:
            print(f"{m.id:<42} {m.machine:<8} {m.description}")
        return 0

    def progress(k: Kill) -> None:
        verdict = f"caught by {k.caught_by}" if k.caught_by else "SURVIVED"
        print(f"{k.mutation.id:<42} {verdict:<32} {k.seconds:6.2f} s", flush=True)
        print(f"    {k.evidence[:160]}", flush=True)

    try:
        kills = run_catalog(args.ids or None, examples=args.examples, progress=progress)
    except KeyError as exc:
        print(f"machines mutate: {exc.args[0]}", file=sys.stderr)
        return 2
    print("\n" + summary(kills))
    return 0 if all(k.caught_by for k in kills) else 1


COMMAND = Command(
    "mutate",
    help="break the definitions on purpose (a catalog of mutations) and show that "
    "machines check or the stateful suites catch every one",
    description="Exit 0 when every mutation is caught, 1 when one survives.",
    arguments=_arguments,
    run=_run,
)
