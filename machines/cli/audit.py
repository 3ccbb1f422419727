"""``machines audit``: a recorded history or a whole store judged against the definitions
and the invariants (``machines.checks.audit``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from machines.cli.command import Command, Parsers, problem
from machines.errors import MachinesError
from machines.spec.loader import bundled_spec_dir, definition_paths, read_definition


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "file", nargs="?", type=Path, help="JSON Lines as History.write_jsonl writes them"
    )
    command.add_argument(
        "--from-store",
        metavar="URL",
        help="audit a store instead (sqlite:///path or postgresql://...): rows, data and "
        "histories; opened read-only, it is never created or changed",
    )
    command.add_argument("--spec-dir", type=Path, default=None)


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.checks.audit import audit_events, audit_store, read_log
    from machines.store.records import shown_url

    file: Path | None = args.file
    url: str | None = args.from_store
    if (file is None) == (url is None):
        parsers[0].error("audit needs a FILE or --from-store URL (one of them)")
    try:
        paths = definition_paths(args.spec_dir or bundled_spec_dir())
        specs = {spec.name: spec for spec in map(read_definition, paths)}
        if file is not None:
            events = read_log(file)
            breaches = audit_events(events, specs)
            what = (
                f"{len(events)} events of {len({(e.machine, e.entity) for e in events})} entities"
            )
        else:
            assert url is not None
            breaches = audit_store(url, specs)
            what = f"the store {shown_url(url)}"
    except (OSError, MachinesError) as exc:
        print(f"machines audit: {problem(exc)}", file=sys.stderr)
        return 2
    for breach in breaches:
        print(breach.describe())
    verdict = f"FAILED: {len(breaches)} breach(es)" if breaches else "OK: no breach"
    print(f"machines audit: {what}: {verdict}")
    return 1 if breaches else 0


COMMAND = Command(
    "audit",
    help="check a recorded history (JSON Lines of transition events) or a whole store "
    "against the definitions and the invariants",
    description="Exit 0 when every event is legal and every invariant holds, 1 on any "
    "breach (each printed with the events involved; an event naming a state, trigger, "
    "actor or context variable the definition lacks is one), 2 on unreadable input (a "
    "line that is not a well-formed event, named by its number; a missing store).",
    arguments=_arguments,
    run=_run,
)
