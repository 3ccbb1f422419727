"""Ending everything a test command started, even what left its process group.

``machines mutate`` runs each command in a session of its own and kills that process group
when the command ends, times out or mutate is stopped. A process the command started in a
session of its own (``setsid``, a daemon's double fork) is in no group of the command's,
and outlived mutate (issue 27, outsider batch 19, b15). So, while mutate runs, it is a child
subreaper (Linux, ``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan anywhere below it is
adopted by it rather than by init, so it can still be found and ended. A command is ended
with every process below it (read from ``/proc``) and every orphan adopted from it (one
whose environment names the command's own copy of the definitions; any adopted orphan
when no other command runs); whatever is left is ended when the run ends. Where ``prctl``
or ``/proc`` is missing, what can be done is: the tree below the command while it lives,
else the process group alone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

ROUNDS = 50
"""How many times ``end`` looks again for what is left (a process may fork while its
siblings are killed); each round that finds nothing ends it."""

Started = TypeVar("Started", bound="subprocess.Popen[bytes]")

Table = dict[int, tuple[int, str]]
"""Every process: its parent's pid and its state letter (``Z``: a zombie), by pid."""


class _Reaper:
    """What this process knows while it reaps: how many ``reaping`` blocks are open, its
    children before the first (never touched), the commands it runs now (its own
    children, each ended by ``end``), and the subreaper setting to restore."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cycle = threading.Lock()
        """Held while the first block sets up, while a block ends (the last one ending
        every orphan) and while ``when_ended`` looks: an action asked for while the
        orphans are being ended waits for them, rather than running before."""
        self.starting = threading.Lock()
        """Held while a command starts and while what is left is looked for and killed:
        a command just started is its parent's child before ``start`` counts it, and
        would look like an adopted orphan."""
        self.depth = 0
        self.before: frozenset[int] = frozenset()
        self.started: set[int] = set()
        self.previous: int | None = None
        self.afterwards: list[Callable[[], object]] = []
        """What to do once every orphan is ended (remove a copy one could write into)."""


_REAPER = _Reaper()


@contextmanager
def reaping() -> Iterator[None]:
    """For the block, this process adopts every orphan of its descendants (where it can),
    and at its end every adopted orphan still running is ended with what it started, and
    the subreaper setting is restored. Blocks nest (the outermost one counts)."""
    with _REAPER.cycle:
        with _REAPER.lock:
            _REAPER.depth += 1
            first = _REAPER.depth == 1
        if first:
            _REAPER.before = frozenset(_children(_table()))
            _REAPER.previous = _subreaper(1)
    try:
        yield
    finally:
        todo: list[Callable[[], object]] = []
        with _REAPER.cycle:
            with _REAPER.lock:
                _REAPER.depth -= 1
                last = _REAPER.depth == 0
            if last:
                _end_all(lambda table: _below(_adopted(table), table))
                if _REAPER.previous is not None:
                    _subreaper(_REAPER.previous)
                with _REAPER.lock:
                    todo, _REAPER.afterwards = _REAPER.afterwards, []
        for action in todo:
            action()


def when_ended(action: Callable[[], object]) -> None:
    """``action`` once the outermost ``reaping`` block has ended every orphan (at once,
    outside one): a command's copy is removed again then, since an orphan left running
    while other commands ran could have written into it after it was first removed."""
    with _REAPER.cycle, _REAPER.lock:
        if _REAPER.depth > 0:
            _REAPER.afterwards.append(action)
            return
    action()


def start(popen: Callable[[], Started]) -> Started:
    """``popen()``, a command this process runs now (its own child, waited for by its
    ``Popen``), counted as one: never reaped here, never taken for an orphan, and while it
    runs no other command's unmarked leftovers are taken for its."""
    with _REAPER.starting:
        process = popen()
        with _REAPER.lock:
            _REAPER.started.add(process.pid)
    return process


def end(pid: int, marker: bytes | None = None) -> None:
    """End the command ``pid`` and all it started: its process group, every process
    below it, and every orphan adopted from it (one whose environment holds ``marker``,
    ``NAME=value``; any adopted orphan when no other command runs). The command itself is
    left for its ``Popen`` to wait for; ``start`` no longer counts it afterwards."""
    seen = _below({pid}, _table()) - {pid}  # while the tree holds: its parents may die first
    _signal_group(pid)

    def doomed(table: Table) -> set[int]:
        with _REAPER.lock:
            alone = _REAPER.started <= {pid}
        found = _below({pid} | seen, table) - {pid}
        leftovers = {a for a in _adopted(table) if alone or _marked(a, marker)}
        return found | _below(leftovers, table)

    _end_all(doomed)
    with _REAPER.lock:
        _REAPER.started.discard(pid)


def _end_all(doomed: Callable[[Table], set[int]]) -> None:
    """Kill what ``doomed(table)`` names until it names nothing alive, reaping every
    adopted orphan that died (a zombie would stay in the table)."""
    for _ in range(ROUNDS):
        with _REAPER.starting:
            table = _table()
            alive = {p for p in doomed(table) if p in table and table[p][1] != "Z"}
            for pid in alive:
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            _reap()
        if not alive:
            return
        time.sleep(0.01)


def _signal_group(pid: int) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows has no process groups of this kind
            os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def _reap() -> None:
    """Wait for every adopted orphan that has ended (never a command ``start`` counts:
    its ``Popen`` waits for it, and would take its exit code for 0 if reaped here)."""
    for pid in _adopted(_table(), zombies=True):
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _adopted(table: Table, zombies: bool = False) -> set[int]:
    """This process's children it did not start: orphans adopted while it reaps."""
    with _REAPER.lock:
        known = _REAPER.before | _REAPER.started
    return {p for p in _children(table) if p not in known and (zombies or table[p][1] != "Z")}


def _children(table: Table) -> set[int]:
    me = os.getpid()
    return {pid for pid, (parent, _) in table.items() if parent == me}


def _below(roots: set[int], table: Table) -> set[int]:
    """``roots`` and every process whose parent chain leads to one of them."""
    found, frontier = set(roots), set(roots)
    while frontier:
        frontier = {p for p, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def _table() -> Table:
    """Every process ``/proc`` lists (none where there is no ``/proc``)."""
    table: Table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read().decode("ascii", "replace")
        except OSError:
            continue  # it ended while the table was read
        fields = stat.rsplit(")", 1)[-1].split()  # the name in parentheses may hold spaces
        if len(fields) >= 2 and fields[1].isdigit():
            table[int(entry)] = (int(fields[1]), fields[0])
    return table


def _marked(pid: int, marker: bytes | None) -> bool:
    if marker is None:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            return marker in file.read().split(b"\0")
    except OSError:
        return False


def _subreaper(value: int) -> int | None:
    """Set this process's child-subreaper flag to ``value``; the flag before, or None
    where it cannot be set (not Linux, no ``prctl``)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    previous = ctypes.c_int(0)
    if prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
        return None
    if prctl(PR_SET_CHILD_SUBREAPER, value, 0, 0, 0) != 0:
        return None
    return previous.value
