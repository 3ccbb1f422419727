"""``machines audit``: a recorded history or a whole store judged against the definitions
and the invariants (``machines.checks.audit``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from machines.checks.audit import PersonMove
from machines.checks.breaches import Breach
from machines.cli.command import Command, Parsers, problem
from machines.cli.output import (
    Document,
    add_format,
    document,
    failed,
    is_json,
    odd_names,
    write_json,
)
from machines.errors import MachinesError, counted, printable
from machines.spec.loader import definition_paths, read_definition
from machines.spec.project import definitions_dir


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
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="judge against these definitions (default: $MACHINES_SPEC_DIR, else "
        "[tool.machines] spec_dir in pyproject.toml, else the bundled ones)",
    )
    command.add_argument(
        "--save-heads",
        metavar="FILE",
        type=Path,
        help="with --from-store: write every entity's chained head to FILE (keep it, or "
        "the digest printed, where the database's owner cannot write)",
    )
    command.add_argument(
        "--check-heads",
        metavar="FILE",
        type=Path,
        help="with --from-store: report every entity whose history up to the head kept "
        "in FILE was rewritten, or that is gone, or whose finished data changed",
    )
    add_format(command)


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    from machines.checks import heads
    from machines.checks.audit import audit_events, judge_store, read_log
    from machines.store.records import shown_url

    file: Path | None = args.file
    url: str | None = args.from_store
    if (file is None) == (url is None):
        parsers[0].error("audit needs a FILE or --from-store URL (one of them)")
    if url is None and (args.save_heads or args.check_heads):
        parsers[0].error("--save-heads and --check-heads need --from-store URL")
    events: int | None = None
    entities: int | None = None
    versions: dict[str, list[int]] | None = None
    repairs: list[str] = []
    kept: str | None = None
    checked: str | None = None
    people: list[Document] = []
    said_people: list[str] = []
    spec_dir: Path | None = None
    bundled = False
    try:
        found_dir = definitions_dir(args.spec_dir)
        spec_dir, bundled = found_dir.spec_dir, found_dir.bundled
        paths = definition_paths(spec_dir)
        specs = {spec.name: spec for spec in map(read_definition, paths)}
        if file is not None:
            log = read_log(file)
            breaches = audit_events(log, specs)
            events, entities = len(log), len({(e.machine, e.entity) for e in log})
            what = f"{counted(events, 'event')} of {counted(entities, 'entity', 'entities')}"
        else:
            assert url is not None
            if args.save_heads is not None:
                heads.check_replaceable(args.save_heads)
            against = None
            if args.check_heads is not None:
                against, read_digest = heads.load(args.check_heads)
                kept_before = sum(k[0] != heads.DEFINITIONS for k in against)
                checked = (
                    f"checked against the heads of "
                    f"{counted(kept_before, 'entity', 'entities')} kept in {args.check_heads} "
                    f"(sha256 {read_digest})"
                )
            found = judge_store(url, specs, against, keep_heads=args.save_heads is not None)
            breaches = found.breaches
            if args.save_heads is not None:
                digest = heads.save(args.save_heads, found.heads)
                entities = sum(k[0] != heads.DEFINITIONS for k in found.heads)
                kept = (
                    f"kept the heads of {counted(entities, 'entity', 'entities')}, the registry "
                    f"and the record of repairs in {args.save_heads} (sha256 {digest})"
                )
            versions = {m: list(v) for m, v in found.versions.items()}
            repairs = list(found.repairs)
            people = [_person(m) for m in found.people]
            said_people = [m.describe() for m in found.people]
            what = f"the store {shown_url(url)}, judged by {found.judged_by()}"
    except (OSError, MachinesError) as exc:
        message = problem(exc)
        if bundled:  # outsider batch 46 (b 44): the fallback was not named
            message += (
                "; the store was judged by this package's bundled definitions, for want of "
                "a project's (no --spec-dir, $MACHINES_SPEC_DIR or [tool.machines] spec_dir):"
                " give yours with --spec-dir"
            )
        return failed(args, message, 2, odd_names(args.spec_dir, spec_dir, file))
    code = 1 if breaches else 0
    if is_json(args):
        write_json(
            document(
                "audit",
                code,
                file=None if file is None else str(file),
                store=None if url is None else shown_url(url),
                events=events,
                entities=entities,
                versions=versions,
                repairs=repairs,
                kept=kept,
                checked=checked,
                people=people,
                breaches=[_breach(b) for b in breaches],
            )
        )
        return code
    for line in repairs:
        print(printable(line))
    for said in (checked, kept):
        if said is not None:
            print(printable(said))
    if people:
        print(f"moves by people: {len(people)} (the last {min(len(people), SHOWN_PEOPLE)}):")
        for line in said_people[-SHOWN_PEOPLE:]:
            print(f"  {printable(line)}")
    for breach in breaches:
        for line in breach.lines():
            print(printable(line))
    verdict = f"FAILED: {len(breaches)} breach(es)" if breaches else "OK: no breach"
    print(printable(f"machines audit: {what}: {verdict}"))
    return code


SHOWN_PEOPLE = 20
"""The most moves by people the text report lists (the JSON report has every one)."""


def _person(move: PersonMove) -> Document:
    return {
        "machine": move.machine,
        "key": move.key,
        "seq": move.seq,
        "trigger": move.trigger,
        "actor": move.actor,
        "by": move.by,
        "at": move.at,
    }


def _breach(breach: Breach) -> Document:
    return {
        "invariant": breach.invariant,
        "machine": breach.machine,
        "key": breach.key,
        "message": breach.message,
        "events": [event.to_dict() for event in breach.events],
    }


COMMAND = Command(
    "audit",
    help="check a recorded history (JSON Lines of transition events) or a whole store "
    "against the definitions and the invariants",
    description="Exit 0 when every event is legal and every invariant holds, 1 on any "
    "breach (each printed with the events involved; an event naming a state, trigger, "
    "actor or context variable the definition lacks is one), 2 on unreadable input (a "
    "line that is not a well-formed event, named by its number; a missing store; a store "
    "whose current definitions are not those given, a heads file it cannot read or write). "
    "A store's events are each judged by the definition version they were made under, "
    "which the report names. --save-heads keeps every entity's hash-chained head in a "
    "file; --check-heads reports any history rewritten before a kept head, even by the "
    "database's owner with the guards off.",
    arguments=_arguments,
    run=_run,
)
