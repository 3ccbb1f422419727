"""Run a user's own test command against every mutant of their definitions.

Each mutant is written into a fresh temporary copy of the user's directory of definitions
(the directory itself is only read). A mutant the loader refuses breaks one of the
definition's own rules: the rule guards that change, so it counts as killed without running
the command. Every other mutant is handed to the command, run in the current directory with
``MACHINES_SPEC_DIR`` set to the copy and ``MACHINES_MUTANT`` naming the mutant; the command
kills it by failing (any exit but 0), or by running past the timeout (a hang, said so). A
mutant the command passes survives: the tests do not notice that change to the definitions.

Nothing is judged before the command has passed once on an unmutated copy (the baseline):
a command that fails there would "kill" every mutant.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from machines.errors import InvalidArgument, SpecError
from machines.mutation import reaping
from machines.mutation.operators import Mutant, mutants_of
from machines.spec.files import (
    MUTANT_VARIABLE,
    SPEC_DIR_VARIABLE,
    definition_paths,
    os_reason,
    real_path,
)
from machines.spec.loader import load
from machines.spec.routing import shown

_MUTANT_LINE = re.compile(r"^line \d+: ")
"""The loader's "line N: " before a problem: a line of the mutant as written out, not of
the user's file (the mutant's id names that line)."""

DEFAULT_TIMEOUT = 300
"""Seconds one run of the command may take (the baseline's too) before it counts as hung."""

NO_TESTS_RAN = 5
"""pytest's exit code when it collected no test: at the baseline a usage problem (the
command tests nothing, so it would pass every mutant), not a failure of the tests."""

HYPOTHESIS_STORAGE = "HYPOTHESIS_STORAGE_DIRECTORY"
"""Where Hypothesis keeps its example database: set to each run's own temporary folder, so
that an example one mutant failed on is neither replayed against the next mutant nor kept
in the user's own database."""

RULES = "the definition's rules"
"""How the table says a mutant the loader refused was caught."""

EVIDENCE_LIMIT = 160

_NOT_COPIED = ("__pycache__", ".git", ".pytest_cache", ".mypy_cache")
_SKIPPED = shutil.ignore_patterns(*_NOT_COPIED)


@dataclass(frozen=True)
class Outcome:
    """What became of one mutant: killed or not, by what (the definition's rules, an exit
    code, a signal or the timeout), the evidence (the rule's message, or the last line the
    command printed) and the seconds it took."""

    mutant: Mutant
    killed: bool
    by: str
    evidence: str
    seconds: float


def plan(spec_dir: Path) -> list[Mutant]:
    """Every mutant of every definition in ``spec_dir``; ``SpecError`` when the directory
    holds no definition or one that does not load (a mutant of a broken definition would
    be caught by the rule it already breaks)."""
    paths = definition_paths(spec_dir)
    for path in paths:
        try:
            load(path)
        except SpecError as error:
            raise SpecError(
                None,
                [
                    f"the definitions must load before they are mutated; fix them first "
                    f"(machines check --spec-dir {spec_dir} says more): {error}"
                ],
            ) from error
    return [mutant for path in paths for mutant in mutants_of(path)]


def select(
    mutants: Sequence[Mutant], only: Sequence[str] = (), skip: Sequence[str] = ()
) -> list[Mutant]:
    """The mutants whose id matches one of the globs ``only`` (every mutant when there is
    none) and none of ``skip``; ``InvalidArgument`` when a glob matches no mutant (a typo
    would otherwise run everything, or nothing, and pass), or nothing is left."""
    for option, patterns in (("--only", only), ("--skip", skip)):
        unmatched = [p for p in patterns if not any(_matches(m, [p]) for m in mutants)]
        if unmatched:
            raise InvalidArgument(
                f"{option} {', '.join(map(repr, unmatched))} matches no mutant; --list "
                "shows their ids (refund.yaml:48:drop-transition:approve; a glob such as "
                "'*:drop-tag:*' names an operator)"
            )
    chosen = [m for m in mutants if (not only or _matches(m, only)) and not _matches(m, skip)]
    if not chosen:
        raise InvalidArgument("--only and --skip leave no mutant to run")
    return chosen


def _matches(mutant: Mutant, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(mutant.id, p) for p in patterns)


def check_command(command: Sequence[str]) -> None:
    """``InvalidArgument`` unless ``command`` names a program that can be run."""
    if not command:
        raise InvalidArgument(
            "give the test command after --: machines mutate --spec-dir DIR -- COMMAND..."
        )
    if shutil.which(command[0]) is None:
        raise InvalidArgument(
            f"the command {command[0]!r} is not found (or not executable); give the test "
            "command after --, e.g. -- python -m pytest -q"
        )


def baseline(spec_dir: Path, command: Sequence[str], timeout: float) -> float:
    """Run ``command`` on an unmutated copy of ``spec_dir``; its seconds when it passes,
    else ``InvalidArgument`` saying that the tests must pass first, and how they failed."""
    with _copy_folder("machines-mutant-baseline-") as tmp:
        copy = _copy(spec_dir, Path(tmp))
        code, seconds, said = _run_command(command, copy, None, timeout, Path(tmp) / "output")
    if code == 0:
        return seconds
    if code is None:
        problem = f"did not finish within the timeout of {timeout:g} s"
    elif code == NO_TESTS_RAN:
        problem = (
            f"exited {NO_TESTS_RAN}, pytest's code for 'no tests ran': a command that tests "
            "nothing would pass every mutant; point it at your tests"
        )
    else:
        problem = f"failed ({_exit(code)})"
    tail = "".join(f"\n    {line}" for line in said[-10:])
    raise InvalidArgument(
        f"the tests must pass on the unmutated definitions first: {' '.join(command)} "
        f"{problem} with {SPEC_DIR_VARIABLE} set to a copy of {spec_dir}"
        + (f"; its last lines:{tail}" if tail else "")
    )


class Running:
    """The commands running now, across the worker threads of ``run(jobs=N)``: on
    Ctrl-C or SIGTERM every one is ended (with what it started) and no other starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processes: set[subprocess.Popen[bytes]] = set()
        self.stopped = False

    def add(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._processes.add(process)
            stopped = self.stopped
        if stopped:
            _end(process)

    def discard(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._processes.discard(process)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            running = list(self._processes)
        for process in running:
            _end(process)


class Stopped(Exception):
    """A mutant not started because the run was interrupted."""


def run(
    mutants: Sequence[Mutant],
    spec_dir: Path,
    command: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[Outcome], None] | None = None,
    jobs: int = 1,
) -> list[Outcome]:
    """``kill`` each mutant, ``jobs`` at a time (each in its own copy of ``spec_dir``,
    with the command in a session of its own); the outcomes in the order of ``mutants``
    whatever order they finish in, each handed to ``progress`` as it finishes."""
    if type(jobs) is not int or jobs < 1:
        raise InvalidArgument(f"jobs must be a whole number from 1, not {jobs!r}")
    with reaping.reaping():  # what a command leaves in a session of its own is ended too
        return _run(mutants, spec_dir, command, timeout, progress, jobs)


def _run(
    mutants: Sequence[Mutant],
    spec_dir: Path,
    command: Sequence[str],
    timeout: float,
    progress: Callable[[Outcome], None] | None,
    jobs: int,
) -> list[Outcome]:
    if jobs == 1:
        outcomes = []
        for mutant in mutants:
            outcome = kill(mutant, spec_dir, command, timeout)
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
        return outcomes
    running = Running()
    done: dict[int, Outcome] = {}
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="machines mutate")
    try:
        futures = {
            pool.submit(kill, mutant, spec_dir, command, timeout, running): i
            for i, mutant in enumerate(mutants)
        }
        for future in as_completed(futures):
            outcome = future.result()
            done[futures[future]] = outcome
            if progress is not None:
                progress(outcome)
    except BaseException:
        running.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [done[i] for i in range(len(mutants))]


@contextmanager
def _copy_folder(prefix: str) -> Iterator[str]:
    """A temporary folder for one command's copy of the definitions, inside a ``reaping``
    block. Its removal is asked for at once, to run when every orphan is ended (a process
    the command left running could write into it again): removing it as the block ends
    could fail while such a process writes into it, and leave it (CI found one left)."""
    with (
        tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp,
        reaping.reaping(),
    ):
        reaping.when_ended(functools.partial(shutil.rmtree, tmp, ignore_errors=True))
        yield tmp


def kill(
    mutant: Mutant,
    spec_dir: Path,
    command: Sequence[str],
    timeout: float,
    running: Running | None = None,
) -> Outcome:
    """Write ``mutant`` into a fresh copy of ``spec_dir``; the definition's rules judge it
    first, then ``command``."""
    started = time.perf_counter()
    with _copy_folder("machines-mutant-") as tmp:
        copy = _copy(spec_dir, Path(tmp))
        (copy / mutant.file).write_text(mutant.text(), encoding="utf-8")
        try:
            for path in definition_paths(copy):
                load(path)
        except SpecError as error:
            problem = (error.problems[0] if error.problems else str(error)).splitlines()[0]
            evidence = _MUTANT_LINE.sub("", problem)
            return Outcome(mutant, True, RULES, _clip(evidence), time.perf_counter() - started)
        code, _, said = _run_command(command, copy, mutant, timeout, Path(tmp) / "output", running)
    seconds = time.perf_counter() - started
    last = _clip(said[-1]) if said else ""
    if code is None:
        return Outcome(mutant, True, f"timeout ({timeout:g} s)", "a hang counts as killed", seconds)
    return Outcome(mutant, code != 0, _exit(code), last, seconds)


def _copy(spec_dir: Path, into: Path) -> Path:
    _refuse_special_files(spec_dir)
    target = into / (real_path(spec_dir).name or "specs")
    try:
        shutil.copytree(spec_dir, target, ignore=_SKIPPED)
    except (OSError, shutil.Error) as exc:
        reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)[:200]
        raise SpecError(spec_dir, [f"cannot copy the directory of definitions: {reason}"]) from exc
    return target


def _refuse_special_files(spec_dir: Path) -> None:
    """Each mutant gets a copy of the directory: only folders and regular files are copied.
    A symbolic link or a special file (a FIFO, a device such as ``/dev/zero``) is refused,
    named, before anything is copied: a link to ``/dev/zero`` was read without end."""
    try:
        for folder, folders, files in os.walk(spec_dir):
            folders[:] = [f for f in folders if f not in _NOT_COPIED]
            for name in (*folders, *files):
                path = Path(folder, name)
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode) or not (
                    stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
                ):
                    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a special file"
                    raise SpecError(
                        spec_dir,
                        [
                            f"{shown(str(path))} is {kind}: each mutant gets a copy of the "
                            "directory of definitions, which may hold only folders and "
                            "regular files; move it out or replace it by a copy"
                        ],
                    )
    except OSError as exc:
        reason = os_reason(exc)
        raise SpecError(spec_dir, [f"cannot read the directory of definitions: {reason}"]) from exc


def _run_command(
    command: Sequence[str],
    spec_copy: Path,
    mutant: Mutant | None,
    timeout: float,
    log: Path,
    running: Running | None = None,
) -> tuple[int | None, float, list[str]]:
    """The command's exit code (None: still running at the timeout, then ended), its
    seconds and the last lines it printed. ``running``: the run this command belongs to
    (``Stopped`` if it was interrupted before the command started)."""
    if running is not None and running.stopped:
        raise Stopped(mutant.id if mutant else "baseline")
    env = dict(os.environ)
    env[SPEC_DIR_VARIABLE] = str(spec_copy)
    env[HYPOTHESIS_STORAGE] = str(log.parent / "hypothesis")
    if mutant is None:
        env.pop(MUTANT_VARIABLE, None)
    else:
        env[MUTANT_VARIABLE] = mutant.describe()
    started = time.perf_counter()
    with log.open("wb") as out:
        try:
            process = reaping.start(
                lambda: subprocess.Popen(
                    list(command),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        except (OSError, ValueError) as exc:
            reason = os_reason(exc)
            raise InvalidArgument(f"cannot run the command {command[0]!r}: {reason}") from exc
        if running is not None:
            running.add(process)
        code: int | None = None
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # done, timed out, Ctrl-C or SIGTERM: end it and all it left running
            _end(process, f"{SPEC_DIR_VARIABLE}={spec_copy}".encode())
            if running is not None:
                running.discard(process)
    seconds = time.perf_counter() - started
    return code, seconds, _last_lines(log)


def _end(process: subprocess.Popen[bytes], marker: bytes | None = None) -> None:
    """End the command if it still runs, and every process it started and left behind:
    its process group (it runs in a session of its own), and with ``reaping`` what left
    the group too (``marker``: its ``MACHINES_SPEC_DIR=copy``, which names its orphans)."""
    reaping.end(process.pid, marker)
    process.wait()


def _last_lines(log: Path, limit: int = 8192) -> list[str]:
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - limit))
        text = f.read().decode("utf-8", "backslashreplace")
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def eta(finished: int, total: int, elapsed: float) -> str:
    """A progress line: how many mutants are done, and about how long the rest will take
    at the pace so far."""
    left = (total - finished) * elapsed / finished if finished else 0.0
    rest = f", about {_duration(left)} left" if finished < total else f" in {_duration(elapsed)}"
    return f"mutate: {finished}/{total} mutants{rest}"


def _duration(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def _exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit {code}"


def _clip(text: str) -> str:
    return text if len(text) <= EVIDENCE_LIMIT else f"{text[: EVIDENCE_LIMIT - 3]}..."


# -- the table -------------------------------------------------------------------------------


def header(width: int) -> str:
    """The kill table's heading, for ids up to ``width`` characters."""
    return f"{'mutant':<{width}}  {'verdict':<8}  {'by':<22}  {'seconds':>7}  what changed"


def row(outcome: Outcome, width: int) -> str:
    """One row of the kill table; a mutant the rules caught, or that hung, has a second
    line with the rule's message."""
    verdict = "killed" if outcome.killed else "SURVIVED"
    line = (
        f"{outcome.mutant.id:<{width}}  {verdict:<8}  {outcome.by:<22}  "
        f"{outcome.seconds:7.2f}  {outcome.mutant.change}"
    )
    if outcome.by == RULES:
        line += f"\n{'':<{width}}  caught by the definition's own rules: {outcome.evidence}"
    return line


def table(outcomes: Sequence[Outcome]) -> str:
    """The whole kill table and its summary."""
    width = max([len("mutant"), *(len(o.mutant.id) for o in outcomes)])
    return "\n".join([header(width), *(row(o, width) for o in outcomes), "", summary(outcomes)])


def summary(outcomes: Sequence[Outcome]) -> str:
    """How many mutants were killed and by what, and each survivor."""
    killed = [o for o in outcomes if o.killed]
    by_rules = sum(o.by == RULES for o in killed)
    hung = sum(o.by.startswith("timeout") for o in killed)
    lines = [
        f"killed {len(killed)}/{len(outcomes)} mutants: {len(killed) - by_rules} by the tests"
        f"{f' ({hung} of them hung past the timeout)' if hung else ''}, {by_rules} by the "
        "definitions' own rules"
    ]
    survivors = [o for o in outcomes if not o.killed]
    if survivors:
        lines.append(
            f"SURVIVED {len(survivors)}: each is a change to the definitions your tests do "
            "not notice, a hole in them:"
        )
        lines += [f"  {o.mutant.describe()}" for o in survivors]
        if len(killed) == by_rules:
            lines.append(
                f"the tests killed no mutant: do they load the definitions from "
                f"${SPEC_DIR_VARIABLE} (machines.spec.files.spec_dir_under_test reads it)?"
            )
    return "\n".join(lines)
