"""What every command of ``machines`` is and shares: the ``Command`` record the parser is
built from, the argument type of a bounded count, how a failure is told in one line,
and the version of the installed package."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from machines.errors import DISTRIBUTION, MachinesError

Parsers = tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]
"""What ``build_parser`` returns: the ``machines`` parser and each command's own, by name."""


@dataclass(frozen=True)
class Command:
    """One command: its name, its line in ``machines --help`` (``help``) and the text of its
    own help (``description``), the ``arguments`` it adds to its parser, and ``run``, which
    does it and returns the exit code. ``run`` is given the parsers: ``audit`` refuses an
    argument through them and ``docs`` prints every command's help into the site."""

    name: str
    help: str
    description: str | None
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Parsers], int]


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (no upper bound: None)."""
    bounds = f"from {low:,} to {high:,}" if high is not None else f"of at least {low:,}"

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{shown(text)} is not a whole number {bounds}"
            ) from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number {bounds}")
        return value

    return whole


def shown(text: str, limit: int = 120) -> str:
    """``text`` quoted and cut for a message: an argument may be megabytes long."""
    return repr(text if len(text) <= limit else f"{text[: limit - 3]}...")


def problem(exc: MachinesError | OSError) -> str:
    """What went wrong, for one line of stderr: an OS error names its file and reason."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{shown(os.fsdecode(exc.filename))}: " if exc.filename is not None else ""
        return f"{where}{exc.strerror}"
    return str(exc)


def package_version() -> str:
    """The installed distribution's version (``effect-machines``), or, run from a checkout
    that was never installed, a text that says so rather than a guess."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"(unknown: no {DISTRIBUTION} distribution is installed; run from a checkout)"
