"""``machines explore``: every reachable state of a reference system searched in small
scopes (``machines.explore``), the invariants checked on every move."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from machines.cli.command import Command, Parsers, whole
from machines.cli.output import (
    Document,
    add_format,
    command_line,
    document,
    failed,
    flag,
    is_json,
    odd_names,
    printable_naming,
    write_json,
)
from machines.errors import MachinesError
from machines.explore import (
    MACHINES_OF,
    SYSTEMS,
    Exploration,
    ProgressBar,
    build_model,
    explore,
    scopes_of,
)
from machines.spec.files import definition_paths
from machines.spec.project import definitions_dir


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("system", choices=SYSTEMS)
    command.add_argument(
        "--scope",
        action="append",
        metavar="NAME",
        help="a scope to explore (repeatable; default: the system's default scopes; "
        "'all' for every scope)",
    )
    command.add_argument(
        "--rules", default=None, help="transfer only: the derivation rule set (e.g. qtg-v3)"
    )
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="explore another copy of the definitions (default: the project's, from "
        "$MACHINES_SPEC_DIR or [tool.machines] spec_dir, when they hold the system's "
        "machines; else the bundled ones)",
    )
    command.add_argument(
        "--max-states",
        type=whole(1),
        default=None,
        metavar="N",
        help="stop a scope after N distinct states, N >= 1 (it is then reported as not exhausted)",
    )
    command.add_argument(
        "--no-symmetry", action="store_true", help="explore symmetric twins separately"
    )
    add_format(command)


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    every, default = scopes_of(args.system)
    chosen = args.scope or list(default)
    if "all" in chosen:
        chosen = list(every)
    names = odd_names(args.spec_dir)  # a folder named as the user likes, named back
    try:
        spec_dir, definitions = _definitions(args)
        names = odd_names(spec_dir)
        models = [
            build_model(
                args.system,
                scope,
                rules=args.rules,
                spec_dir=spec_dir,
                symmetry=not args.no_symmetry,
            )
            for scope in chosen
        ]
    except MachinesError as exc:  # an unknown scope or rule set, unreadable definitions
        return failed(args, str(exc), 2, names)
    text = not is_json(args)
    if text:
        print(printable_naming(f"machines explore {args.system}: {definitions}", names))
    results = []
    for model in models:
        bar = ProgressBar(sys.stderr, f"{model.name} / {model.scope}")
        result = explore(model, max_states=args.max_states, progress=bar)
        bar.done()
        results.append(result)
        if text:
            print(result.summary(), flush=True)
            for violation in result.violations:
                print(violation.render(), flush=True)
    states = sum(r.states for r in results)
    seconds = sum(r.seconds for r in results)
    broken = sum(len(r.violations) for r in results)
    exhausted = sum(r.complete for r in results)
    code = 1 if broken else 0
    if not text:
        write_json(
            document(
                "explore",
                code,
                system=args.system,
                definitions=definitions,
                rules=args.rules,
                symmetry=not args.no_symmetry,
                max_states=args.max_states,
                scopes=[_exploration(r) for r in results],
                states=states,
                seconds=round(seconds, 3),
                exhausted=exhausted,
                violations=broken,
            )
        )
        return code
    print(
        f"\n{'FAILED' if broken else 'OK'}: {exhausted} of {len(results)} scope(s) exhausted, "
        f"{states:,} distinct states in {seconds:.2f} s ({states / max(seconds, 1e-9):,.0f} "
        f"states/s); {broken} invariant violation(s)"
    )
    if exhausted < len(results):
        again = [*_given(args), *(a for s in args.scope or () for a in ("--scope", s))]
        print(
            printable_naming(
                f"{len(results) - exhausted} scope(s) stopped at --max-states "
                f"{args.max_states:,}: the verdict covers the states seen only; "
                f"{command_line('explore', again)} searches to the end",
                names,
            )
        )
    return code


def _definitions(args: argparse.Namespace) -> tuple[Path | None, str]:
    """The definitions explored (None: the bundled ones) and how they were chosen, as
    every command finds a project's (``definitions_dir``). A project whose folder holds
    none of the system's machines (a project of its own machines only) explores the
    bundled ones, and says so."""
    found = definitions_dir(args.spec_dir)
    if found.bundled:
        return None, "the bundled definitions"
    wanted = MACHINES_OF[args.system]
    held = {path.stem for path in definition_paths(found.spec_dir)}
    if args.spec_dir is None and not held & set(wanted):
        return None, (
            f"the bundled definitions ({found.spec_dir}, chosen by {found.source}, holds no "
            f"{' or '.join(wanted)} machine)"
        )
    return found.spec_dir, f"{found.spec_dir} (chosen by {found.source})"


def _given(args: argparse.Namespace) -> list[str]:
    """The options of this run but ``--scope`` and ``--max-states``, to repeat in a
    suggestion."""
    return [
        args.system,
        *flag("--rules", args.rules),
        *flag("--spec-dir", args.spec_dir),
        *(["--no-symmetry"] if args.no_symmetry else []),
    ]


def _exploration(result: Exploration) -> Document:
    return {
        "model": result.system,
        "scope": result.scope,
        "complete": result.complete,
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "seconds": round(result.seconds, 3),
        "violations": [
            {
                "invariant": v.invariant,
                "message": v.message,
                "trace": list(v.trace),
                "moves": v.moves,
                "state": v.state,
            }
            for v in result.violations
        ],
    }


COMMAND = Command(
    "explore",
    help="exhaustively explore every reachable state of a reference system in small "
    "scopes, checking the invariants on every move",
    description="Exit 0 when every scope holds every invariant, 1 on a violation (its "
    "shortest trace is printed), 2 on a bad argument or unreadable definitions.",
    arguments=_arguments,
    run=_run,
)
