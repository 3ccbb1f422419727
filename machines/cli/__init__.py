"""The ``machines`` command line: one module per command (``check``, ``diff``,
``export``, ``mutate``, ``explore``, ``audit``, ``migrate``, ``repair``, ``diagrams``,
``docs``), each a ``Command`` that adds its arguments and runs; here the parser made of
them and ``main``, which turns every failure into a one-line message and an exit code.
Nothing in the package imports it."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO

from machines.cli import (
    audit,
    check,
    desk,
    diagrams,
    diff,
    docs,
    explore,
    export,
    init,
    migrate,
    mutate,
    pending,
    repair,
)
from machines.cli.command import Parsers, package_version, problem, shown
from machines.cli.output import failed
from machines.errors import MachinesError
from machines.store.records import hide_passwords

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from machines.render.site import SiteFacts
    from machines.spec import MachineSpec

COMMANDS = (
    init.COMMAND,
    check.COMMAND,
    diff.COMMAND,
    export.COMMAND,
    mutate.COMMAND,
    explore.COMMAND,
    audit.COMMAND,
    migrate.COMMAND,
    repair.COMMAND,
    pending.COMMAND,
    desk.COMMAND,
    diagrams.COMMAND,
    docs.COMMAND,
)
"""Every command, in the order ``machines --help`` lists them: a new command is a module
with its ``COMMAND``, named here."""

HELP_WIDTH = 80
"""Help is wrapped at a fixed width, so the generated CLI page is the same everywhere, and
narrow enough that the site shows each line whole in a code block (about 80 columns fit)."""

EXIT_INTERRUPTED = 130
"""Ctrl-C: the shell's code for a process ended by SIGINT (128 + 2)."""

EXIT_BROKEN_PIPE = 141
"""The reader of the output went away (``machines check | head``): the shell's code for a
process ended by SIGPIPE (128 + 13), as other command-line tools end."""

EPILOG = (
    "Exit codes: 0 when all is well, 1 when a check finds a problem, 2 on a bad argument or "
    f"unreadable input, {EXIT_INTERRUPTED} when interrupted (Ctrl-C), {EXIT_BROKEN_PIPE} "
    "when the output pipe closed early."
)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=HELP_WIDTH)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that its help, version and usage text is not lost in
    silence: argparse drops an ``OSError`` writing it (a full disk) and exits 0."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        """argparse's usage error, with the password of any store URL it echoes hidden."""
        super().error(hide_passwords(message))


def build_parser() -> Parsers:
    """The ``machines`` parser and each command's own (for the generated CLI page)."""
    parser = _Parser(
        prog="machines",
        description="Formally tested state machine definitions for side effects.",
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"machines {package_version()}",
        help="print the installed version (machines X.Y.Z) and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.arguments(
            commands.add_parser(
                command.name,
                help=command.help,
                description=command.description,
                formatter_class=_formatter,
            )
        )
    return parser, dict(commands.choices)


def site_facts(specs: Sequence[MachineSpec]) -> SiteFacts:
    """What the site says beyond the definitions (``docs.facts``), every command's help
    among it."""
    return docs.facts(specs, build_parser())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Every failure ends in a one-line message and exit
    2 (or the codes of ``EPILOG``), never in a traceback: a typed error of the package or
    an operating-system error is reported with what it names, and argparse refuses bad
    arguments with its usage line."""
    parsers = build_parser()
    parser = parsers[0]
    arguments = _arguments(parser, argv)
    if sys.stdout is None:  # started with its standard output closed (``>&-``)
        if sys.stderr is not None:
            print(
                "machines: standard output is closed, so nothing can be printed; run it "
                "with its output open (to a file, a pipe or /dev/null)",
                file=sys.stderr,
            )
        return 2
    _tolerate_unencodable(sys.stdout)
    try:
        try:
            args = parser.parse_args(arguments)
        except SystemExit:  # --help, --version or a usage error: its text is out, flush it
            sys.stdout.flush()
            raise
        except BrokenPipeError:
            raise
        except OSError as exc:  # the help or the version could not be written
            return _unwritten(exc)
        code = _reported(parsers, args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:  # from the output or from a message about a failure
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # the output cannot be written (a full disk): not even the error
        _discard_stdout()
        return _unwritten(exc)


def _unwritten(exc: OSError) -> int:
    """Exit 2, saying on stderr (when it can) that the text asked for was not written."""
    with contextlib.suppress(OSError, AttributeError):
        print(f"machines: cannot write the text asked for: {problem(exc)}", file=sys.stderr)
    return 2


def _reported(parsers: Parsers, args: argparse.Namespace) -> int:
    """The command run, with Ctrl-C and every error it may raise told in one line of
    stderr (and, with ``--format json``, in the error document on stdout)."""
    command = next(c for c in COMMANDS if c.name == args.command)
    try:
        return command.run(args, parsers)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        return failed(args, "interrupted", EXIT_INTERRUPTED)
    except (MachinesError, OSError) as exc:
        return failed(args, problem(exc), 2)


def _arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> list[str]:
    """The command line, refused (exit 2) if an argument is not one a shell can pass: not
    a string, a NUL character, or text no file name can hold (a lone surrogate)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    for number, argument in enumerate(arguments, start=1):
        if not isinstance(argument, str):
            parser.error(f"argument {number} is a {type(argument).__name__}, not a string")
        if "\x00" in argument:
            parser.error(f"argument {number} ({shown(argument)}) holds a NUL character")
        try:
            os.fsencode(argument)
        except UnicodeEncodeError:
            parser.error(
                f"argument {number} ({shown(argument)}) holds a lone surrogate, which no "
                "file name or text can hold"
            )
    return arguments


def _tolerate_unencodable(stream: TextIO) -> None:
    """Let ``stream`` print any text (a file name of undecodable bytes, echoed back) by
    escaping what its encoding cannot hold, instead of raising in the middle of a report."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="backslashreplace")


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still
    buffered does not fail again on the closed pipe (the recipe of Python's signal docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing to flush into a pipe
