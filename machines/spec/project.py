"""Where a project keeps its definitions, and where ``machines`` writes for it.

Every command that reads definitions asks ``definitions_dir`` which ones, in this order:

1. ``--spec-dir DIR``, given on the command line;
2. ``$MACHINES_SPEC_DIR`` (``machines mutate`` sets it for each mutant; a user may too);
3. ``spec_dir`` in the ``[tool.machines]`` table of the nearest ``pyproject.toml`` (in the
   working folder or one above it), relative to that file;
4. the definitions bundled with this package, said as such.

The same table names where ``machines diagrams`` and ``machines docs`` write
(``diagrams_dir``, ``docs_dir``). A table with a key this module does not know, a value
that is not a non-empty string, or a ``pyproject.toml`` that is not TOML is an
``InvalidArgument`` naming the file and the key: a misspelt ``spec-dir`` must not silently
fall back to the bundled definitions.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from machines.errors import DISTRIBUTION, InvalidArgument, SpecUnreadable
from machines.spec.files import SPEC_DIR_VARIABLE, definition_paths, os_reason, resolves_inside
from machines.spec.loader import DEFINITION_SUFFIXES, bundled_spec_dir
from machines.spec.routing import suggest

PYPROJECT = "pyproject.toml"
TABLE = ("tool", "machines")
KEYS: Mapping[str, str] = {
    "spec_dir": "the folder of the project's definitions",
    "diagrams_dir": "where machines diagrams writes (default: diagrams)",
    "docs_dir": "where machines docs writes (default: docs)",
}
"""Every key of ``[tool.machines]``, with what it names (each a folder, relative to the
``pyproject.toml`` that holds it)."""


@dataclass(frozen=True)
class Definitions:
    """The folder of definitions a command acts on, and how it was chosen (``source``, as
    a message says it)."""

    spec_dir: Path
    source: str

    @property
    def bundled(self) -> bool:
        """Whether these are this package's own definitions, chosen for want of any other."""
        return self.source == BUNDLED


BUNDLED = "the bundled definitions (no --spec-dir, MACHINES_SPEC_DIR or [tool.machines] spec_dir)"


@dataclass(frozen=True)
class Settings:
    """The ``[tool.machines]`` table of a project's ``pyproject.toml`` (``path``), its
    folders resolved against that file's folder."""

    path: Path
    folders: Mapping[str, Path]


def project_settings(start: Path | None = None) -> Settings | None:
    """The ``[tool.machines]`` table of the nearest ``pyproject.toml`` at or above
    ``start`` (default: the working folder) that has one, or None."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        path = folder / PYPROJECT
        if not path.is_file():
            continue
        table = _table(path)
        if table is not None:
            return Settings(path, _folders(path, table))
    return None


def in_this_package(start: Path | None = None) -> bool:
    """Whether the nearest ``pyproject.toml`` at or above ``start`` (default: the working
    folder) is this package's own: its checkout, where ``machines docs`` writes the
    package's reference pages."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        path = folder / PYPROJECT
        if path.is_file():
            project = _document(path).get("project")
            return isinstance(project, dict) and project.get("name") == DISTRIBUTION
    return False


def _document(path: Path) -> Mapping[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{path}: not TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{path}: not TOML: not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise InvalidArgument(f"{path}: not TOML this reader can take: nested too deep") from None
    except OSError as exc:
        raise InvalidArgument(f"{path}: cannot read it: {os_reason(exc)}") from None


def _table(path: Path) -> Mapping[str, object] | None:
    found: object = _document(path)
    for part in TABLE:
        if not isinstance(found, dict) or part not in found:
            return None
        found = found[part]
    if not isinstance(found, dict):
        raise InvalidArgument(f"{path}: [tool.machines] must be a table")
    return found


def _folders(path: Path, table: Mapping[str, object]) -> dict[str, Path]:
    out = {}
    for key, value in table.items():
        if key not in KEYS:
            known = ", ".join(KEYS)
            raise InvalidArgument(f"{path}: [tool.machines] has no key {key!r} (it knows {known})")
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgument(
                f"{path}: [tool.machines] {key} must be a folder, as a non-empty string, "
                f"not {value!r}"
            )
        folder = path.parent / value
        if key in WRITTEN and not resolves_inside(folder, path.parent):
            raise InvalidArgument(
                f"{path}: [tool.machines] {key} = {value!r} is outside the project's folder "
                f"({path.parent}); machines writes only inside it: give a folder in it"
            )
        out[key] = folder
    return out


WRITTEN = frozenset({"diagrams_dir", "docs_dir"})
"""The keys that name where a command writes, which must stay inside the project."""


def definitions_dir(
    given: Path | None = None, *, start: Path | None = None, strict: bool = True
) -> Definitions:
    """The definitions a command acts on (see the module): ``given`` (``--spec-dir``),
    else ``$MACHINES_SPEC_DIR``, else the project's ``[tool.machines] spec_dir``, else the
    bundled ones, which with ``strict`` are refused when the working folder keeps
    definitions nothing names (a caller with a default of its own passes False)."""
    if given is not None:
        return Definitions(given, "--spec-dir")
    variable = os.environ.get(SPEC_DIR_VARIABLE, "")
    if variable:
        return Definitions(Path(variable), SPEC_DIR_VARIABLE)
    settings = project_settings(start)
    if settings is not None and "spec_dir" in settings.folders:
        return Definitions(settings.folders["spec_dir"], f"[tool.machines] of {settings.path}")
    if strict:
        _refuse_unnamed(start)
    return Definitions(bundled_spec_dir(), BUNDLED)


UNNAMED_FOLDERS = ("specs", "spec")
"""Where a project keeps definitions that nothing names (``machines init`` writes
``specs``): the bundled ones are never taken for them."""


def _refuse_unnamed(start: Path | None) -> None:
    """``InvalidArgument`` when the working folder, or a folder above it up to the project's
    root (its nearest ``pyproject.toml``), keeps definitions in one of ``UNNAMED_FOLDERS``
    that no setting names: a command would act on the bundled ones instead, and a CI job
    checking a broken definition of the user's would pass (outsider batches 28 and 33, the
    second from a subfolder). This package's own checkout, whose ``spec`` is the bundled
    folder, is not such a project."""
    here = (start or Path.cwd()).absolute()
    root = next((f for f in (here, *here.parents) if (f / PYPROJECT).is_file()), here)
    project = [here, *here.parents[: len(here.parts) - len(root.parts)]]  # up to its root
    for folder in (f / name for f in project for name in UNNAMED_FOLDERS):
        try:
            kept = folder.is_dir() and any(
                p.suffix.lower() in DEFINITION_SUFFIXES for p in folder.iterdir()
            )
            ours = kept and folder.resolve() == bundled_spec_dir().resolve()
        except OSError:
            continue  # a folder it cannot read is no project's definitions to name
        if kept and not ours and not in_this_package(start):
            given, setting = (os.path.relpath(folder, f) for f in (here, root))
            raise InvalidArgument(
                f"{folder} holds definitions, but nothing names them, and machines would "
                f"act on its bundled definitions instead: pass --spec-dir {given}, set "
                f"{SPEC_DIR_VARIABLE}, or add to your pyproject.toml:\n  [tool.machines]\n"
                f'  spec_dir = "{Path(setting).as_posix()}"'
            )


def machine_file(name: str, given: Path | None = None) -> str | Path:
    """The definition a command names by ``name``: a path when it says so (a definition's
    suffix, or a folder in it), else the machine of that name among the definitions
    ``definitions_dir(given)`` chooses (the bundled ones only for want of any other), else
    a file of that name; ``SpecUnreadable`` naming the folder and its machines when none
    is called so. A file or folder in the working folder never hides a machine."""
    candidate = Path(name)
    if candidate.suffix in DEFINITION_SUFFIXES or len(candidate.parts) > 1:
        return candidate
    found = definitions_dir(given)
    if found.bundled:
        return name
    paths = {p.stem: p for p in definition_paths(found.spec_dir)}
    if name not in paths:
        try:
            if candidate.is_file():
                return candidate
        except OSError:  # a name too long for the file system: the loader says so
            return candidate
        raise SpecUnreadable(
            found.spec_dir,
            [
                f"no machine {name!r} here{suggest(name, paths)} (chosen by {found.source}); "
                f"its machines: {', '.join(sorted(paths))}"
            ],
        )
    return paths[name]


def project_definitions(given: Path | None, doing: str) -> Path:
    """The definitions a command that writes (``doing``: what it does, for the message)
    acts on: as ``definitions_dir`` chooses, but never the bundled ones for want of any
    other (a command run in a user's project must not draw, document or migrate this
    package's machines); ``InvalidArgument`` saying how to name them."""
    found = definitions_dir(given)
    if found.bundled:
        raise InvalidArgument(
            f"which definitions should it {doing}? Give --spec-dir DIR, set "
            f"{SPEC_DIR_VARIABLE}, or add to your pyproject.toml:\n  [tool.machines]\n"
            '  spec_dir = "specs"'
        )
    return found.spec_dir


def output_dir(key: str, default: Path, *, start: Path | None = None) -> Path:
    """Where a command writes (``diagrams_dir``, ``docs_dir``): the project's setting, or
    ``default`` in the project's folder (the one its ``pyproject.toml`` is in, wherever in
    the project the command runs), or ``default`` in the working folder outside a project;
    ``InvalidArgument`` when it leads out of that folder (a symbolic link), as checked by
    ``written_inside``."""
    settings = project_settings(start)
    if settings is None:
        return written_inside(default, start or Path.cwd(), key, instead=_OUT)
    folder = settings.folders.get(key, settings.path.parent / default)
    return written_inside(folder, settings.path.parent, key, instead=_OUT)


_OUT = ", or name the folder to write with --out"


def written_inside(folder: Path, root: Path, what: str, *, instead: str = "") -> Path:
    """``folder`` when it, with every symbolic link on the way resolved, is in ``root``
    (the project's folder): a command writes there by default, and a link planted in the
    project (``diagrams -> /etc``) must not carry its files elsewhere. ``InvalidArgument``
    naming where it leads otherwise, and ``instead`` (what else the user may do). A folder
    given on the command line is not checked: the user chose it."""
    where = root / folder
    if resolves_inside(where, root):
        return folder
    try:
        leads = str(where.resolve())
    except (OSError, RuntimeError):
        leads = "a loop of links"
    raise InvalidArgument(
        f"{where} ({what}) leads out of the project's folder {root} (to {leads}); machines "
        f"writes only inside it: remove the link{instead}"
    )
