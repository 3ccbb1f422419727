"""Find definition files and read them, within bounds, failing closed.

A definition is untrusted input, so reading one is bounded before it starts. A definition
is a regular file of at most ``MAX_DEFINITION_BYTES``: it is opened without blocking (a
FIFO cannot hang the reader), judged by ``fstat`` on the opened descriptor (a FIFO,
device, socket or directory is refused) and read no further than the limit (``/dev/zero``
or a growing file cannot exhaust memory). A directory of definitions holds at most
``MAX_DEFINITIONS``. Every ``OSError`` (permissions, a name too long, a symlink loop, ...)
is a ``SpecUnreadable`` naming the path and the system's reason. Nothing here imports the
rest of the package but its errors.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from machines.errors import SpecUnreadable

MAX_DEFINITION_BYTES = 1 << 20
"""The largest definition file read (1 MiB). The bundled ones are 9-20 kB, so this leaves
room for a machine fifty times the largest, while bounding what one file can cost: a
definition of this size parses in a few seconds and ~100 MB."""

MAX_DEFINITIONS = 256
"""The most definitions a directory may hold. A system has a handful (four are bundled);
the bound keeps one ``machines check`` to at most 256 files of at most 1 MiB each."""

MAX_VALUATIONS = 100_000
"""The most combinations of context values a definition may have (one value of each
variable). The structural checks walk the machine under every combination: 12 values of
each of 6 variables are 2,985,984 of them, and took 28 s and 1.6 GB from a file of 911
bytes (outsider batch 35, c 2)."""

MAX_VALUATION_MOVES = 5_000_000
"""The most combinations of context values times transitions: the work of one walk of
the machine under every combination (about a second per million)."""

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
)
"""Read-only, and never waiting for a writer (a FIFO), never kept by a child process,
never made the controlling terminal; the flags a system lacks are left out."""


SPEC_DIR_VARIABLE = "MACHINES_SPEC_DIR"
"""The environment variable that points a test run at another directory of definitions:
``machines mutate --spec-dir DIR -- COMMAND`` sets it to each mutant's directory, and
``spec_dir_under_test`` (which the conformance suite uses) reads it."""

MUTANT_VARIABLE = "MACHINES_MUTANT"
"""The environment variable that names, during ``machines mutate -- COMMAND``, the mutant
the command is run against (its id, file, line and what it changed), for the command's
own messages; nothing in the package reads it."""


def spec_dir_under_test(default: str | os.PathLike[str]) -> Path:
    """The directory of definitions a test should load: ``$MACHINES_SPEC_DIR`` when it is
    set and not empty (``machines mutate`` sets it to each mutant), else ``default``. A
    test suite that loads its definitions through this is one that spec mutation can
    judge."""
    override = os.environ.get(SPEC_DIR_VARIABLE, "")
    return Path(override) if override else as_path(default)


def as_path(value: object) -> Path:
    """``value`` as a ``Path``, or ``SpecUnreadable`` when it is neither a ``str`` nor a
    ``Path`` (a definition is named by one or the other)."""
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        return Path(value)
    raise SpecUnreadable(
        None, [f"a definition is named by a str or a Path, not a {type(value).__name__}"]
    )


def real_path(path: Path) -> Path:
    """The canonical path (``Path.resolve`` raises on a symlink loop; this does not)."""
    return Path(os.path.realpath(path))


DIRECTORY_SUFFIXES = (".yaml", ".yml")
"""What a definition in a directory of them ends in (a ``.json`` export is read only when
named alone: a folder holds a project's own YAML)."""


def definition_paths(spec_dir: str | Path) -> list[Path]:
    """The ``*.yaml`` and ``*.yml`` files of ``spec_dir``, sorted by name; ``SpecUnreadable``
    when the directory cannot be listed, holds none, holds more than ``MAX_DEFINITIONS``,
    or holds one machine twice (``refund.yaml`` and ``refund.yml``)."""
    directory = as_path(spec_dir)
    names: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(DIRECTORY_SUFFIXES):
                    if entry.is_symlink():
                        _refuse_a_link_out(directory, Path(entry.path))
                    names.append(entry.name)
                    if len(names) > MAX_DEFINITIONS:
                        break
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SpecUnreadable(directory, ["not a directory of definitions"]) from exc
    except (OSError, ValueError) as exc:
        raise SpecUnreadable(directory, [f"cannot list the directory: {os_reason(exc)}"]) from exc
    if not names:
        raise SpecUnreadable(directory, ["no *.yaml or *.yml definitions in this directory"])
    if len(names) > MAX_DEFINITIONS:
        raise SpecUnreadable(
            directory,
            [
                f"more than {MAX_DEFINITIONS} definitions in this directory; a system "
                "has a handful: point at the directory of one system"
            ],
        )
    stems: dict[str, str] = {}
    for name in sorted(names):
        stem = name.rsplit(".", 1)[0]
        if stem in stems:
            raise SpecUnreadable(
                directory,
                [f"{stems[stem]} and {name} both define machine {stem!r}: keep one of them"],
            )
        stems[stem] = name
    return [directory / name for name in sorted(names)]


def resolves_inside(path: Path, root: Path, *, strict: bool = False) -> bool:
    """Whether ``path``, its links followed, is ``root`` or below it (``strict``: and it
    exists; a dangling link is not inside). A loop of links is not."""
    try:
        return path.resolve(strict=strict).is_relative_to(root.resolve(strict=strict))
    except (OSError, RuntimeError, ValueError):
        return False


def _refuse_a_link_out(directory: Path, link: Path) -> None:
    """A definition that is a link to a file outside its directory is refused, naming the
    link: a pull request's ``specs/notes.yaml`` linked to a CI machine's credentials would
    have them read, and quoted in an error, into the job's log."""
    if not resolves_inside(link, directory, strict=True):
        raise SpecUnreadable(
            link,
            [
                "a link to a file outside this directory of definitions; a definition is a "
                "file of the directory itself (copy it in, or point --spec-dir at its own)"
            ],
        )


def stat_definition(path: Path) -> os.stat_result:
    """``os.stat`` of a definition file, or ``SpecUnreadable`` saying why it cannot be one
    (missing, not a regular file, too large, not permitted, a name too long, ...)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        raise SpecUnreadable(path, [_os_problem(exc)]) from exc
    _refuse_unless_definition(path, info)
    return info


def read_text(path: Path) -> str:
    """The text of the definition file at ``path``. Judged on the opened descriptor, so
    what is read is what was judged."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError) as exc:
        raise SpecUnreadable(path, [_os_problem(exc)]) from exc
    try:
        _refuse_unless_definition(path, os.fstat(fd))
        data = _read_at_most(fd, MAX_DEFINITION_BYTES + 1)
    except OSError as exc:
        raise SpecUnreadable(path, [_os_problem(exc)]) from exc
    finally:
        os.close(fd)
    if len(data) > MAX_DEFINITION_BYTES:  # it grew after fstat
        raise SpecUnreadable(path, [_too_large(len(data), "more than ")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecUnreadable(
            path, [f"line {line}: cannot read the file: it is not UTF-8 ({exc}); save it as UTF-8"]
        ) from exc


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


def _refuse_unless_definition(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((k for is_kind, k in _NOT_REGULAR if is_kind(info.st_mode)), "not a file")
        raise SpecUnreadable(path, [f"{kind}, not a definition file; a definition is a YAML file"])
    if info.st_size > MAX_DEFINITION_BYTES:
        raise SpecUnreadable(path, [_too_large(info.st_size)])


def _too_large(size: int, more: str = "") -> str:
    return (
        f"the file is {more}{size:,} bytes; a definition may be at most "
        f"{MAX_DEFINITION_BYTES:,} bytes (1 MiB): split the machine or shorten its texts"
    )


def os_reason(exc: OSError | ValueError) -> str:
    """Why the system refused a path, in a few words (never the path itself: the message
    names it already)."""
    if isinstance(exc, ValueError):  # os.* refuse a NUL, or a lone surrogate, in a name
        return "the name holds a NUL character or one the system cannot encode"
    return exc.strerror or type(exc).__name__


def _os_problem(exc: OSError | ValueError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    return f"cannot read the file: {os_reason(exc)}"
