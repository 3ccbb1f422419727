"""Apply a code mutant in a temporary copy of the tree, run its detectors there, and say
what became of it; the kill table.

Each mutant gets a fresh copy of ``machines/``, ``spec/``, ``code_mutants/``, ``tests/`` and
``pyproject.toml`` (the checkout is never touched), with its one patch applied, and a
fresh Python process (``python -m code_mutants.hunt``) whose ``machines`` is the copy's, in
the ``ci`` profile.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from code_mutants.catalog import CATALOG, CodeMutant
from code_mutants.hunt import MARK

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("machines", "spec", "code_mutants", "tests", "pyproject.toml")
TIMEOUT = 900.0
"""Seconds one mutant's detectors may take before the run counts as a hang (a catch: a
suite that never ends fails CI too)."""

Outcome = Literal["killed", "survived", "equivalent", "error"]


class StaleMutant(Exception):
    """The mutant's snippet is not in its file exactly once, or the patch does not
    compile: the catalog drifted from the code."""


@dataclass(frozen=True)
class Kill:
    """What became of one mutant: caught (by which detector, with what evidence, after how
    many seconds), survived (justified as equivalent, or not), or could not be run."""

    mutant: CodeMutant
    outcome: Outcome
    detector: str | None
    evidence: str
    seconds: float


def select(ids: Iterable[str] | None) -> list[CodeMutant]:
    """The mutants named by ``ids`` (all when None); an unknown id is a ``KeyError``."""
    if ids is None:
        return list(CATALOG)
    known = {m.id: m for m in CATALOG}
    wanted = list(ids)
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise KeyError(f"unknown mutant(s) {', '.join(unknown)}; see python -m code_mutants --list")
    return [known[i] for i in wanted]


def patched(mutant: CodeMutant, source: str) -> str:
    """``source`` with the mutant's patch applied; ``StaleMutant`` when it cannot be."""
    found = source.count(mutant.old)
    if found != 1:
        raise StaleMutant(f"{mutant.id}: its snippet occurs {found} times in {mutant.path}")
    text = source.replace(mutant.old, mutant.new)
    try:
        compile(text, mutant.path, "exec")
    except SyntaxError as error:
        raise StaleMutant(
            f"{mutant.id}: the patched {mutant.path} does not compile: {error}"
        ) from None
    return text


def copy_tree(dest: Path, mutant: CodeMutant | None = None) -> Path:
    """The parts of the checkout the detectors need, under ``dest``, with ``mutant``."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    if mutant is not None:
        target = dest / mutant.path
        target.write_text(patched(mutant, target.read_text()))
    return dest


@dataclass(frozen=True)
class Hunt:
    """What a hunt process reported: the detector that caught something (None: none did),
    its evidence, the seconds it took, the detectors it could not run, or an error."""

    detector: str | None = None
    evidence: str = ""
    seconds: float = 0.0
    skipped: tuple[str, ...] = ()
    error: str | None = None


def hunt(tree: Path, detectors: Sequence[str], timeout: float = TIMEOUT) -> Hunt:
    """Run ``detectors`` in a fresh process on ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHONPATH": str(tree), "HYPOTHESIS_PROFILE": "ci", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "code_mutants.hunt", *detectors],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        seconds = time.perf_counter() - started
        return Hunt("timeout", f"still running after {seconds:.0f} s (a hang)", seconds)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Hunt(error=f"the hunt crashed (exit {done.returncode}): {' | '.join(tail)}")
    said = json.loads(lines[-1].removeprefix(MARK))
    if "error" in said:
        return Hunt(error=str(said["error"]))
    return Hunt(said["detector"], said["evidence"], float(said["seconds"]), tuple(said["skipped"]))


def kill(mutant: CodeMutant, timeout: float = TIMEOUT) -> Kill:
    """Apply ``mutant`` in a fresh copy and run its detectors until one catches it."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as tmp:
        try:
            tree = copy_tree(Path(tmp), mutant)
        except StaleMutant as stale:
            return Kill(mutant, "error", None, str(stale), 0.0)
        found = hunt(tree, mutant.detectors, timeout)
    if found.error is not None:
        return Kill(mutant, "error", None, found.error, found.seconds)
    if found.detector is not None:
        return Kill(mutant, "killed", found.detector, found.evidence, found.seconds)
    if mutant.equivalent is not None:
        return Kill(mutant, "equivalent", None, mutant.equivalent, found.seconds)
    skipped = f" (not run: {'; '.join(found.skipped)})" if found.skipped else ""
    return Kill(
        mutant, "survived", None, f"no detector checks: {mutant.breaks}{skipped}", found.seconds
    )


def baseline(mutants: Sequence[CodeMutant], timeout: float = TIMEOUT) -> str | None:
    """Run every detector the mutants use on an unmutated copy: None when all pass, else
    what failed (then no mutant's result would mean anything)."""
    detectors = list(dict.fromkeys(d for m in mutants for d in m.detectors))
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as tmp:
        found = hunt(copy_tree(Path(tmp)), detectors, timeout)
    if found.error is not None:
        return found.error
    if found.detector is not None:
        return f"{found.detector} fails on the unmutated tree: {found.evidence}"
    return None


def run_all(
    mutants: Sequence[CodeMutant],
    timeout: float = TIMEOUT,
    progress: Callable[[Kill], None] | None = None,
) -> list[Kill]:
    kills = []
    for mutant in mutants:
        result = kill(mutant, timeout)
        kills.append(result)
        if progress is not None:
            progress(result)
    return kills


def row(k: Kill) -> str:
    """One line of the kill table."""
    by = k.detector or "-"
    return f"{k.mutant.id:<34} {k.outcome:<10} {by:<22} {k.seconds:>7.2f}  {k.evidence[:110]}"


HEADER = f"{'mutant':<34} {'outcome':<10} {'caught by':<22} {'seconds':>7}  evidence"


def table(kills: Sequence[Kill]) -> str:
    """The kill table and its summary: counts, and median and maximum seconds to a kill."""
    lines = [HEADER, "-" * len(HEADER), *map(row, kills), ""]
    killed = [k for k in kills if k.outcome == "killed"]
    counts = {o: sum(k.outcome == o for k in kills) for o in ("killed", "equivalent")}
    lines.append(
        f"killed {counts['killed']}/{len(kills)}, equivalent {counts['equivalent']}, "
        f"survived {sum(k.outcome == 'survived' for k in kills)}, "
        f"errors {sum(k.outcome == 'error' for k in kills)}"
    )
    if killed:
        seconds = [k.seconds for k in killed]
        lines.append(
            f"seconds to a kill: median {statistics.median(seconds):.2f}, max {max(seconds):.2f}"
        )
    for k in kills:
        if k.outcome in ("survived", "error"):
            lines.append(f"{k.outcome.upper()}: {k.mutant.id} ({k.mutant.path}): {k.evidence}")
    return "\n".join(lines)
