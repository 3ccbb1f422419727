"""How the report commands (``check``, ``diff``, ``audit``, ``explore``, ``pending``) print:
``--format text`` for a person, ``--format json`` for CI. A JSON run prints exactly one
document on stdout, even when it fails with exit 2 (then a document with ``error``), so a
pipeline can parse every run that got past argparse; the one-line message of a failure still
goes to stderr. Each document's shape is a JSON Schema shipped beside this module
(``schemas/``), which the tests hold every real output to; ``format_version`` changes when a
field is removed or changes its meaning, never for an added one."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from machines.cli.command import package_version
from machines.errors import MachinesError, printable

FORMATS = ("text", "json")
FORMAT_VERSION = 1
"""The version of every JSON document's shape (its ``format_version``)."""

Document = dict[str, Any]
Reporter = Literal["check", "diff", "audit", "explore", "pending"]
REPORTERS: tuple[Reporter, ...] = ("check", "diff", "audit", "explore", "pending")
"""The commands with a JSON report, each with its ``schemas/<command>.schema.json``."""


def add_format(command: argparse.ArgumentParser) -> None:
    """``--format text|json`` (stored as ``output``: ``export`` has a ``--format`` of its
    own, whose values are export formats)."""
    command.add_argument(
        "--format",
        dest="output",
        choices=FORMATS,
        default="text",
        help="text for a person (default), or json: one JSON document on stdout, even on "
        "exit 2 (the schema is on the 'JSON output' page of the documentation)",
    )


def is_json(args: argparse.Namespace) -> bool:
    """Whether this run prints a JSON document (a command without ``--format`` never)."""
    return getattr(args, "output", "text") == "json"


def document(command: Reporter, exit_code: int, **fields: Any) -> Document:
    """A report document: what every one starts with, then ``fields``."""
    return {
        "command": command,
        "format_version": FORMAT_VERSION,
        "version": package_version(),
        "exit_code": exit_code,
        **fields,
    }


def write_json(doc: Document) -> None:
    """``doc`` on stdout in one write, ASCII only (a lone surrogate of an undecodable file
    name is escaped, not an encoding error). A closed pipe raises ``BrokenPipeError``, which
    ``main`` ends with exit 141."""
    try:
        text = json.dumps(doc, indent=2, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:  # a NaN or an odd value in recorded data
        raise MachinesError(
            f"the report holds a value JSON cannot represent ({exc}); --format text shows it"
        ) from None
    sys.stdout.write(text + "\n")


def odd_names(*places: Path | None) -> tuple[str, ...]:
    """The names in ``places`` (paths the user gave: files, folders, and each entry of a
    folder) that a terminal cannot show as they are, longest first, for
    ``printable_naming``: a file in a pull request's folder of definitions may be named
    with an escape sequence or a line break, and every message about it names it."""
    found: set[str] = set()
    for place in places:
        if place is None:
            continue
        paths = [place]
        try:
            paths.append(place.absolute())
            if place.is_dir():
                paths.extend(place.iterdir())
        except OSError:
            pass  # a folder that cannot be listed is named by its own message
        for path in paths:
            found.update((*path.parts, path.stem))
    return tuple(sorted((n for n in found if not n.isprintable()), key=len, reverse=True))


def printable_naming(text: str, names: Iterable[str] = ()) -> str:
    """``text`` as ``printable(text, lines=True)`` shows it, except that each of
    ``names`` (``odd_names``) is escaped whole, its line breaks too: a report's own line
    breaks are kept, while a file name cannot start a line that looks like the report's
    (``OK: no violations``)."""
    for name in names:
        text = text.replace(name, printable(name))
    return printable(text, lines=True)


def failed(
    args: argparse.Namespace, message: str, exit_code: int, names: Iterable[str] = ()
) -> int:
    """A run that could not report: ``message`` on stderr (``names`` escaped whole, see
    ``printable_naming``), and with ``--format json`` the error document on stdout.
    Returns ``exit_code``."""
    print(printable_naming(f"machines {args.command}: {message}", names), file=sys.stderr)
    if is_json(args) and args.command in REPORTERS:
        write_json(document(args.command, exit_code, error=message))
    return exit_code


def command_line(command: str, arguments: Iterable[str]) -> str:
    """``machines COMMAND ARGUMENTS`` as a shell would need it typed (``shlex.join``), for a
    message that suggests a command: the arguments repeat the options the user gave."""
    return shlex.join(["machines", command, *arguments])


def flag(name: str, value: object, default: object = None) -> Sequence[str]:
    """``[name, value]`` for repeating an option the user gave, nothing when it is the
    default (so a suggested command is no longer than it needs to be)."""
    return [] if value == default else [name, str(value)]


def schema(command: Reporter) -> Document:
    """The JSON Schema (draft 2020-12) of ``command``'s document, as shipped."""
    text = resources.files("machines.cli").joinpath(f"schemas/{command}.schema.json")
    loaded: Document = json.loads(text.read_text(encoding="utf-8"))
    return loaded
