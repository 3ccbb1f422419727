"""``python -m code_mutants [--list] [--no-baseline] [--timeout S] [--json PATH] [ID...]``.

Runs every code mutant (or those named), after checking that their detectors pass on the
unmutated tree, and prints the kill table. Exit 0 when every mutant was killed or is
justified as equivalent, 1 when one survived or could not be run, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from code_mutants.run import TIMEOUT, Kill, baseline, row, run_all, select, table
from machines.cli import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m code_mutants", description=__doc__)
    parser.add_argument("ids", nargs="*", metavar="ID", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the run on the unmutated tree"
    )
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per mutant")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        mutants = select(args.ids or None)
    except KeyError as unknown:
        print(f"python -m code_mutants: {unknown.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutants:
            print(f"{m.id:<34} {m.path}\n    bug: {m.bug}\n    breaks: {m.breaks}")
            if m.equivalent is not None:
                print(f"    equivalent: {m.equivalent}")
        return 0
    if not args.no_baseline:
        print("baseline: the detectors on the unmutated tree ...", file=sys.stderr, flush=True)
        failed = baseline(mutants, args.timeout)
        if failed is not None:
            print(f"python -m code_mutants: {failed}", file=sys.stderr)
            return 1

    def progress(k: Kill) -> None:
        print(row(k), file=sys.stderr, flush=True)

    kills = run_all(mutants, args.timeout, progress)
    print(table(kills))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = [
            {
                "id": k.mutant.id,
                "path": k.mutant.path,
                "outcome": k.outcome,
                "detector": k.detector,
                "evidence": k.evidence,
                "seconds": k.seconds,
            }
            for k in kills
        ]
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if all(k.outcome in ("killed", "equivalent") for k in kills) else 1


def _main_quietly() -> int:
    """``main``, ending quietly when what reads its output stops reading
    (``python -m code_mutants --list | head``) or on Ctrl-C."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("python -m code_mutants: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(_main_quietly())
