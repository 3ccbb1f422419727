"""``machines mutate``: the definitions broken on purpose. Without ``--spec-dir``, the
catalog of ``machines.mutation``, each mutation shown caught by ``machines check`` or a
stateful suite; with ``--spec-dir DIR -- COMMAND``, the generic mutants of the user's own
definitions (``machines.mutation.user``), each handed to the user's own test command."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tabulate import tabulate

from machines.cli.command import Command, Parsers, whole
from machines.errors import InvalidArgument, MachinesError, install_command
from machines.spec.project import definitions_dir

MAX_EXAMPLES = 1_000_000
"""The largest ``mutate --examples``: the work grows linearly with it, and a larger count
is a typo rather than a plan (the default is 300)."""

DEFAULT_EXAMPLES = 300

MAX_JOBS = 256
"""The most mutants ``mutate --jobs`` runs at once."""

MAX_TIMEOUT = 86_400
"""The largest ``mutate --timeout``, in seconds: a day per run of the tests."""


def _arguments(command: argparse.ArgumentParser) -> None:
    from machines.mutation.user import DEFAULT_TIMEOUT

    command.add_argument(
        "ids",
        nargs="*",
        metavar="ID|COMMAND",
        help="only these mutations of the catalog; with --spec-dir, the test command, after --",
    )
    command.add_argument(
        "--examples",
        type=whole(1, MAX_EXAMPLES),
        default=None,
        metavar="N",
        help="most suite runs per mutation before it counts as surviving, 1 to "
        f"{MAX_EXAMPLES:,} (default {DEFAULT_EXAMPLES}; not with --spec-dir)",
    )
    command.add_argument(
        "--list",
        action="store_true",
        help="list the catalog (or the mutants of --spec-dir) and exit",
    )
    yours = command.add_argument_group(
        "your own definitions and tests",
        "machines mutate --spec-dir DIR -- COMMAND...: mutate every *.yaml definition in DIR, "
        "one change at a time, each in a temporary copy of DIR (DIR is only read), and run "
        "COMMAND against each with MACHINES_SPEC_DIR set to the copy and MACHINES_MUTANT "
        "naming the mutant. A mutant the definition's own rules refuse is killed without "
        "running COMMAND; COMMAND kills the others by failing. Exit 0 when every mutant is "
        "killed, 1 when one survives (a hole in your tests), 2 when COMMAND fails on the "
        "unmutated definitions, on a usage error or on definitions that do not load.",
    )
    yours.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="mutate your own definitions, the *.yaml and *.yml files of DIR (default, "
        "when a test command is given: $MACHINES_SPEC_DIR, else [tool.machines] spec_dir "
        "in pyproject.toml)",
    )
    yours.add_argument(
        "--timeout",
        type=whole(1, MAX_TIMEOUT),
        default=None,
        metavar="S",
        help=f"seconds per run of COMMAND, 1 to {MAX_TIMEOUT:,} (default {DEFAULT_TIMEOUT}); "
        "a mutant that makes it hang counts as killed, and the table says so",
    )
    yours.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="only the mutants whose id matches GLOB (repeatable), e.g. '*:drop-tag:*'",
    )
    yours.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out the mutants whose id matches GLOB (repeatable)",
    )
    yours.add_argument(
        "--jobs",
        type=whole(1, MAX_JOBS),
        default=1,
        metavar="N",
        help=f"run COMMAND on N mutants at a time, 1 to {MAX_JOBS} (default 1), each in its "
        "own copy of DIR; the verdicts are those of a serial run. Give it the cores your "
        "tests leave free",
    )
    yours.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not first run COMMAND on the unmutated definitions (it must pass there)",
    )


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    if args.spec_dir is None and (_a_command(args.ids) or _not_ids(args.ids)):
        try:
            found = definitions_dir(None)  # in a project: its definitions, as every command
        except MachinesError:
            found = None  # no project here: the words are mutation ids, judged as such
        if found is not None and not found.bundled and not _bundled_folder(found.spec_dir):
            args.spec_dir = found.spec_dir
    elif args.spec_dir is None and not args.ids and (args.list or args.only or args.skip):
        # listing or choosing mutants in a project: its own (outsider batch 30); the
        # catalog is of this package's definitions, which its own checkout names
        found = definitions_dir(None)
        if not found.bundled and not _bundled_folder(found.spec_dir):
            args.spec_dir = found.spec_dir
    elif args.spec_dir is None and not args.ids:
        try:
            found = definitions_dir(None)
        except MachinesError:  # no project named here: the catalog, or its usage errors
            found = None
        if found is not None and not found.bundled and not _bundled_folder(found.spec_dir):
            raise InvalidArgument(
                f"this project's definitions are in {found.spec_dir}; their mutants are "
                "judged by your own tests: give the command after --, e.g. machines mutate "
                "-- python -m pytest -q (the bundled catalog runs on this package's own "
                "definitions: name its mutations to run them)"
            )
    if args.spec_dir is not None:
        with _ending_as_interrupt():
            return _mutate_yours(args)
    for given, option in (
        (args.timeout is not None, "--timeout"),
        (args.only, "--only"),
        (args.skip, "--skip"),
        (args.no_baseline, "--no-baseline"),
        (args.jobs != 1, "--jobs"),
    ):
        if given:
            raise InvalidArgument(f"{option} is for your own definitions: give --spec-dir DIR")
    with _ending_as_interrupt():  # the mutant's temporary copy is removed on the way out
        return _run_catalog(args)


def _bundled_folder(folder: Path) -> bool:
    """Whether ``folder`` is this package's own definitions (its checkout's ``spec``)."""
    from machines.spec.loader import bundled_spec_dir

    try:
        return folder.resolve() == bundled_spec_dir().resolve()
    except OSError:
        return False


def _not_ids(ids: list[str]) -> bool:
    """Whether some of the words after the options name no mutation of the catalog: in a
    project they are its test command, even one not on the PATH, which then fails to run
    saying so (outsider batch 42, c 5b: ``-- pytest`` without pytest installed was refused
    as unknown mutations)."""
    from machines.mutation.catalog import CATALOG

    return bool(ids) and not set(ids) <= {m.id for m in CATALOG}


def _a_command(ids: list[str]) -> bool:
    """Whether the words after the options are a test command rather than mutation ids:
    the first is a program to run (on the PATH, or a file) and names no mutation of the
    catalog (a misspelt id stays one, and is refused as unknown)."""
    from machines.mutation.catalog import CATALOG

    if not ids or ids[0] in {m.id for m in CATALOG}:
        return False
    return shutil.which(ids[0]) is not None or Path(ids[0]).is_file()


def _run_catalog(args: argparse.Namespace) -> int:
    from machines.mutation.catalog import CATALOG, Kill, run_catalog, summary

    if not args.list and importlib.util.find_spec("hypothesis") is None:
        print(
            "machines mutate: the stateful suites need Hypothesis; "
            f"install it with: {install_command('testing')}",
            file=sys.stderr,
        )
        return 2

    if args.list:
        rows = [(m.id, m.machine, m.change.operator, m.description) for m in CATALOG]
        print(tabulate(rows, ("mutation", "machine", "operator", "the change"), tablefmt="plain"))
        return 0

    def progress(k: Kill) -> None:
        verdict = f"caught by {k.caught_by}" if k.caught_by else "SURVIVED"
        print(f"{k.mutation.id:<42} {verdict:<32} {k.seconds:6.2f} s", flush=True)
        print(f"    {k.evidence[:160]}", flush=True)

    examples = DEFAULT_EXAMPLES if args.examples is None else args.examples
    try:
        kills = run_catalog(args.ids or None, examples=examples, progress=progress)
    except KeyError as exc:
        print(f"machines mutate: {exc.args[0]}", file=sys.stderr)
        if args.ids and (len(args.ids) > 1 or not args.ids[0].islower()):
            print(
                f"machines mutate: if {args.ids[0]!r} is your test command, it is not a "
                "program on the PATH nor a file here: check its spelling, or give its path",
                file=sys.stderr,
            )
        return 2
    print("\n" + summary(kills))
    return 0 if all(k.caught_by for k in kills) else 1


ENDING = (signal.SIGTERM, signal.SIGHUP)
"""The signals that end mutate as Ctrl-C does: what a CI timeout sends, and what a
closed terminal or SSH session sends."""


@contextmanager
def _ending_as_interrupt() -> Iterator[None]:
    """Under SIGTERM or SIGHUP as under Ctrl-C: the command's processes are ended and the
    temporary copy removed before mutate exits, with your tests or the catalog's (batch 38,
    c U3: the catalog left its mutant's copy in the temporary folder)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a signal handler
        return
    previous = {number: signal.signal(number, _interrupt) for number in ENDING}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _mutate_yours(args: argparse.Namespace) -> int:
    from machines.mutation import user as mu

    if args.examples is not None:
        raise InvalidArgument("--examples is for the catalog's suites, not with --spec-dir")
    command: list[str] = args.ids
    mutants = mu.select(mu.plan(args.spec_dir), args.only, args.skip)
    width = max(len("mutant"), *(len(m.id) for m in mutants))
    if args.list:
        for m in mutants:
            print(f"{m.id:<{width}}  {m.change}")
        files = len({m.file for m in mutants})
        print(f"{len(mutants)} mutants of {files} definition{'s' * (files != 1)}")
        return 0
    mu.check_command(command)
    timeout = mu.DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    if not args.no_baseline:
        seconds = mu.baseline(args.spec_dir, command, timeout)
        print(f"baseline: the tests pass on the unmutated definitions ({seconds:.2f} s)\n")
    print(mu.header(width), flush=True)
    started, finished = time.monotonic(), 0

    def progress(outcome: mu.Outcome) -> None:
        nonlocal finished
        finished += 1
        print(mu.row(outcome, width), flush=True)
        print(mu.eta(finished, len(mutants), time.monotonic() - started), file=sys.stderr)

    outcomes = mu.run(mutants, args.spec_dir, command, timeout, progress, jobs=args.jobs)
    print("\n" + mu.summary(outcomes))
    return 0 if all(o.killed for o in outcomes) else 1


COMMAND = Command(
    "mutate",
    help="break the definitions on purpose and show that every break is caught: the "
    "bundled catalog by machines check and the stateful suites, or (--spec-dir) your own "
    "definitions by your own tests",
    description="Exit 0 when every mutation is caught, 1 when one survives, 2 on a usage "
    "error (and, with --spec-dir, when the tests fail on the unmutated definitions).",
    arguments=_arguments,
    run=_run,
)
