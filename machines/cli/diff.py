"""``machines diff``: what changed between two versions of the definitions, each change
breaking, widening or wording (``machines.spec.diff``), and the exit code a CI gate reads.
The old version is a file or directory, or (``--base GIT_REV``) the same path at a git
revision, read through ``git show`` into a temporary directory so that a derivation's node
machine is found beside it, as in the working tree."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from machines.cli.command import Command, Parsers, problem
from machines.cli.output import (
    Document,
    add_format,
    document,
    failed,
    is_json,
    odd_names,
    printable_naming,
    write_json,
)
from machines.errors import MachinesError, SpecError, SpecUnreadable
from machines.spec import MachineSpec
from machines.spec.canonical import DIGEST_CHARS
from machines.spec.diff import KINDS, REWRITTEN, WORDING, DiffReport, diff_report
from machines.spec.files import DIRECTORY_SUFFIXES, MAX_DEFINITION_BYTES
from machines.spec.loader import definition_paths, keeps_its_rules, read_definition, resolve
from machines.spec.project import definitions_dir

DEFAULT_SPEC_DIR = Path("spec")
"""What ``--base`` compares when no NEW is given and nothing names the project's
definitions (``machines.spec.project.definitions_dir``): the working folder's ``spec/``."""

GIT_TIMEOUT = 60
"""Seconds one git command may take (it reads a handful of small files)."""

Side = dict[str, MachineSpec]


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "old",
        nargs="?",
        metavar="OLD",
        help="the old version: a definition file (.yaml, .yml, .json; or a bundled "
        "machine's name) or a directory of definitions",
    )
    command.add_argument(
        "new",
        nargs="?",
        metavar="NEW",
        help="the new version, a file if OLD is one, else a directory; with --base, the only "
        "path given: the working tree's file or directory (default: the project's "
        f"definitions, $MACHINES_SPEC_DIR or [tool.machines] spec_dir, else {DEFAULT_SPEC_DIR})",
    )
    command.add_argument(
        "--base",
        metavar="GIT_REV",
        help="compare NEW with the same path at this git revision (read with git show), "
        "as a pull request's gate does: --base origin/main",
    )
    add_format(command)


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    parser = parsers[1]["diff"]
    base: str | None = args.base
    if base is not None and args.new is not None:
        parser.error("with --base give one path at most (NEW): the old version is NEW at GIT_REV")
    if base is None and args.new is None:
        parser.error("diff needs OLD and NEW, or --base GIT_REV [NEW]")
    names = odd_names(*(Path(p) for p in (args.old, args.new) if p is not None))
    try:
        if base is None:
            old_label, new_label = str(args.old), str(args.new)
            old, new = _read_pair(Path(args.old), Path(args.new))
        else:
            target = Path(args.old) if args.old is not None else _project_definitions()
            names = odd_names(target)
            new = _read(target, loads=True)
            old_label, old = _at_revision(base, target)
            new_label = str(target)
    except (OSError, MachinesError) as exc:
        return failed(args, problem(exc), 2, names)
    report = diff_report(old, new)
    code = 1 if report.breaking else 0
    if is_json(args):
        write_json(report_document(report, old_label, new_label, code))
    else:
        print_report(report, old_label, new_label, sys.stdout, names)
    return code


COMMAND = Command(
    "diff",
    help="list what changed between two versions of the definitions, each change breaking, "
    "widening or wording: the gate of a pull request",
    description="Exit 0 when no change is breaking, 1 when one is, 2 on unreadable input (a "
    "definition that does not read, a new one that breaks its own rules as machines.load "
    "refuses it, a missing path, a revision or path git does not know). "
    "OLD and NEW are two definition files or two directories of definitions, compared "
    "machine by machine; --base GIT_REV [NEW] compares NEW (default: the project's "
    "definitions) with itself at that revision. A change is breaking when something legal "
    "becomes illegal or something an entity or a service relies on goes away: a machine, "
    "state, transition, actor, "
    "context value, tag or annotation removed, an edge's actors or guard values narrowed (a "
    "guard added), a state made terminal, the initial state or a database value changed, "
    "an actor made automatic or not, a context variable added, a forbidden move or a rule "
    "added or changed, any change to the derivation. It is widening when something illegal "
    "becomes legal: a machine, state, transition, actor, context value or tag added, a "
    "guard widened or removed, a terminal state given an exit, a forbidden move or a rule "
    "removed. It is wording when only what a person reads differs (titles, descriptions, "
    "reasons, evidence, findings): the semantic digest stays the same and a store needs no "
    "migration. Each change has an id (state-removed, guard-widened, ...): the table is in "
    "machines.spec.diff. Prints one line per change and each machine's semantic digest "
    "before and after.",
    arguments=_arguments,
    run=_run,
)


def print_report(
    report: DiffReport, old: str, new: str, out: TextIO, names: Iterable[str] = ()
) -> None:
    """``report`` as ``machines diff`` prints it: a line per change, the counts, each
    machine's semantic digests, the verdict. Every line is escaped (``printable_naming``,
    ``names`` whole): the paths compared and what the definitions say are a pull
    request's."""
    names = tuple(names)

    def w(text: str) -> None:
        out.write(printable_naming(text, names))

    for c in report.changes:
        w(f"{c.machine}: {'BREAKING' if c.breaking else c.kind}: {c.message}\n")
    counts = ", ".join(f"{report.count(kind)} {kind}" for kind in KINDS)
    w(f"machines diff: {old} -> {new}: {counts}\n")
    semantic = {c.machine for c in report.changes if c.kind != WORDING}
    for m in report.machines:  # batch 44 b 20: "no change", then the store refused it
        changed = m.old_semantic and m.new_semantic and not m.same_semantics
        if changed and m.machine not in semantic:
            w(f"{m.machine}: {REWRITTEN}\n")
    width = max((len(m.machine) for m in report.machines), default=0)
    for m in report.machines:
        absent = "(none)".ljust(DIGEST_CHARS)
        before, after = m.old_semantic or absent, m.new_semantic or absent
        same = " (same)" if m.same_semantics else ""
        w(f"  {m.machine:<{width}}  {before} -> {after}{same}\n")
    breaking = report.count("breaking")
    w(f"FAILED: {breaking} breaking change(s)\n" if breaking else "OK: no breaking change\n")


def report_document(report: DiffReport, old: str, new: str, exit_code: int) -> Document:
    """``report`` as the JSON document of ``machines diff --format json`` (its schema:
    ``schemas/diff.schema.json``)."""

    def side(semantic: str | None, presentation: str | None) -> Document | None:
        if semantic is None:
            return None
        return {"semantic_digest": semantic, "presentation_digest": presentation}

    return document(
        "diff",
        exit_code,
        old=old,
        new=new,
        breaking=report.breaking,
        counts={kind: report.count(kind) for kind in KINDS},
        changes=[
            {"machine": c.machine, "kind": c.kind, "what": c.what, "message": c.message}
            for c in report.changes
        ],
        machines=[
            {
                "name": m.machine,
                "old": side(m.old_semantic, m.old_presentation),
                "new": side(m.new_semantic, m.new_presentation),
            }
            for m in report.machines
        ],
    )


def _read_pair(old: Path, new: Path) -> tuple[Side, Side]:
    """Both sides, which must be of one kind: two files or two directories."""
    if old.is_dir() != new.is_dir():
        directory, file = (old, new) if old.is_dir() else (new, old)
        raise SpecUnreadable(
            None,
            [
                f"{directory} is a directory and {file} is not: give two definition files "
                "or two directories of definitions"
            ],
        )
    return _read(old), _read(new, loads=True)


def _read(path: Path, *, loads: bool = False) -> Side:
    """The machines of a definition file or of a directory of them, by name. Every
    definition that does not read is named (a ``SpecError`` listing them all). With
    ``loads`` (the new side), one that breaks its own structural rules, as ``load`` refuses
    it, is named too: a gate must not pass a definition no system can load. The old side
    needs only to read, so that a change that fixes a broken definition can pass."""
    paths = definition_paths(path) if path.is_dir() else [resolve(path)]
    specs: Side = {}
    problems: list[str] = []
    for file in paths:
        try:
            spec = read_definition(file)
            if loads:
                keeps_its_rules(spec)
        except SpecError as exc:
            problems.append(str(exc))
            continue
        specs[spec.name] = spec  # one per name: a definition's file is named after it
    if problems:
        raise SpecError(None, problems)
    return specs


def _project_definitions() -> Path:
    """The definitions ``--base`` compares when no path is given: the project's, as every
    command finds them (``--spec-dir`` aside: this command takes a path instead), else
    ``DEFAULT_SPEC_DIR``; never the ones bundled with this package, which no working tree
    holds."""
    found = definitions_dir(None, strict=False)
    return DEFAULT_SPEC_DIR if found.bundled else found.spec_dir


def _at_revision(revision: str, target: Path) -> tuple[str, Side]:
    """The machines of ``target`` as they are at git ``revision`` (and the label that
    names them, ``REV:path``): the files of its directory copied out of git into a
    temporary directory, then read from there like any other."""
    if revision.startswith("-"):
        raise SpecUnreadable(None, [f"--base '{revision}': a git revision does not start with '-'"])
    directory = target if target.is_dir() else target.parent
    top = Path(_git(directory, "rev-parse", "--show-toplevel").decode().strip())
    where = Path(os.path.relpath(os.path.realpath(directory), os.path.realpath(top)))
    if where.parts[:1] == ("..",):
        raise SpecUnreadable(directory, [f"outside the git repository at {top}"])
    inside = "" if where == Path(".") else where.as_posix()
    label = f"{revision}:{inside or '.'}" + ("" if target.is_dir() else f"/{target.name}")
    try:
        _git(top, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except SpecUnreadable:
        raise SpecUnreadable(
            None, [f"--base '{revision}': git knows no such revision in {top}"]
        ) from None
    files = _listed(top, revision, inside)
    if not files:
        raise SpecUnreadable(None, [f"{label}: git knows no such directory at {revision}"])
    if not target.is_dir() and target.name not in files:
        raise SpecUnreadable(None, [f"{label}: git knows no such file at {revision}"])
    with tempfile.TemporaryDirectory(prefix="machines-diff-") as temporary:
        copy = Path(temporary)
        for name, size in files.items():
            path = f"{inside}/{name}" if inside else name
            if size > MAX_DEFINITION_BYTES:
                raise SpecUnreadable(
                    None,
                    [
                        f"{revision}:{path}: {size:,} bytes; a definition may be at most "
                        f"{MAX_DEFINITION_BYTES:,} bytes (1 MiB)"
                    ],
                )
            (copy / name).write_bytes(_git(top, "show", f"{revision}:{path}"))
        try:
            return label, _read(copy if target.is_dir() else copy / target.name)
        except SpecError as exc:
            # name the files by revision and path, not by the temporary copy
            named = str(exc).replace(str(copy), f"{revision}:{inside or '.'}")
            raise SpecError(None, [named]) from None


def _listed(top: Path, revision: str, inside: str) -> Mapping[str, int]:
    """The ``*.yaml`` and ``*.yml`` files directly in ``inside`` at ``revision``, with
    their sizes."""
    pathspec = ["--", f"{inside}/"] if inside else []
    listing = _git(top, "ls-tree", "-z", "-l", "--full-tree", revision, *pathspec)
    out: dict[str, int] = {}
    for entry in listing.decode("utf-8", "surrogateescape").split("\0"):
        if "\t" not in entry:
            continue
        meta, path = entry.split("\t", 1)
        _mode, kind, _object, size = meta.split()
        name = path.rsplit("/", 1)[-1]
        if kind == "blob" and name.endswith(DIRECTORY_SUFFIXES):
            out[name] = int(size)
    return out


def _git(cwd: Path, *arguments: str) -> bytes:
    """What ``git ARGUMENTS`` run in ``cwd`` prints; ``SpecUnreadable`` when git is
    missing or fails (with the first line of what it said)."""
    try:
        done = subprocess.run(
            ["git", *arguments],
            cwd=cwd,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise SpecUnreadable(
            None, ["--base needs git, which is not installed (not found on PATH)"]
        ) from None
    except subprocess.TimeoutExpired:
        raise SpecUnreadable(
            None, [f"git {arguments[0]} took more than {GIT_TIMEOUT} s; try again"]
        ) from None
    except OSError as exc:
        raise SpecUnreadable(cwd, [f"cannot run git here: {problem(exc)}"]) from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = said[0] if said else f"exit {done.returncode}"
        raise SpecUnreadable(cwd, [f"git {arguments[0]} failed: {reason}"])
    return done.stdout
