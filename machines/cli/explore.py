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
from machines.explore import SYSTEMS, Exploration, ProgressBar, build_model, explore, scopes_of


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
        help="explore another copy of the definitions (default: the bundled ones)",
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
        models = [
            build_model(
                args.system,
                scope,
                rules=args.rules,
                spec_dir=args.spec_dir,
                symmetry=not args.no_symmetry,
            )
            for scope in chosen
        ]
    except MachinesError as exc:  # an unknown scope or rule set, unreadable definitions
        return failed(args, str(exc), 2, names)
    text = not is_json(args)
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
