"""``machines pending``: what waits on a person in a store, for a script or a runbook (the
desk's list, ``machines.desk.waiting``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from machines.cli.command import Command, Parsers, problem, whole
from machines.cli.output import add_format, document, failed, is_json, write_json
from machines.desk.waiting import MAX_LISTED, PAGE
from machines.errors import MachinesError, printable


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("url", help="the store (sqlite:///path or postgresql://...)")
    command.add_argument("--machine", help="only this machine")
    command.add_argument("--state", help="only this waiting state (with --machine)")
    command.add_argument(
        "--limit",
        type=whole(1, MAX_LISTED),
        default=PAGE,
        help=f"at most this many, up to {MAX_LISTED} (default: {PAGE})",
    )
    command.add_argument("--offset", type=whole(0), default=0, help="skip this many first")
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="the definitions the store was made for (default: $MACHINES_SPEC_DIR, else "
        "[tool.machines] spec_dir in pyproject.toml, else the bundled ones)",
    )
    add_format(command)


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.desk.serving import opened
    from machines.desk.waiting import counts, pending_entry, waiting
    from machines.store.integrity import guards_report, tampered
    from machines.store.records import shown_url

    try:
        with opened(args.url, args.spec_dir, read_only=True) as store:
            tampering = guards_report(store).tampering
            if tampering:  # what it would list cannot be trusted
                raise tampered(shown_url(args.url), tampering)
            found = waiting(
                store, machine=args.machine, state=args.state, limit=args.limit, offset=args.offset
            )
            counted = counts(store)
    except (MachinesError, OSError) as exc:
        return failed(args, problem(exc), 2)
    if is_json(args):
        write_json(
            document(
                "pending",
                0,
                store=shown_url(args.url),
                counts=[
                    {"machine": c.machine, "state": c.state, "entities": c.entities}
                    for c in counted
                ],
                pending=[pending_entry(w) for w in found],
            )
        )
        return 0
    for c in counted:
        print(f"{c.machine} {c.state}: {c.entities:,}")
    for w in found:
        days, rest = divmod(int(w.seconds), 86400)
        waited = (f"{days}d " if days else "") + time.strftime("%H:%M:%S", time.gmtime(rest))
        print(
            printable(
                f"  {w.machine} {w.row.key} in {w.row.state} for {waited} (version {w.version})"
            )
        )
    if not counted:
        print("nothing waits on a person")
    return 0


COMMAND = Command(
    "pending",
    help="list what waits on a person in a store (states only people leave, or tagged "
    "needs-human), the longest waiting first",
    description="Exit 0 when listed, 2 when the store cannot be read.",
    arguments=_arguments,
    run=_run,
)
