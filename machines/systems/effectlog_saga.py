"""The saga's judgement of each effect of a failed session (``EffectLog.compensate``):
which to leave alone and why (not Compensable, already settled, still running in this
process or in a live one on this host, its tool rewritten), and how an undo is attempted
(to the end, retried only when it was not sent, never recorded as done when it did not
run), and its step on each effect (``undo``)."""

from __future__ import annotations

import inspect
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from machines.errors import message_of
from machines.runtime.history import TransitionEvent
from machines.spec.jsonvalue import describe
from machines.spec.states import EffectState
from machines.store.records import Row, Store
from machines.systems import arguments
from machines.systems import effectlog_runs as runs
from machines.systems.effectlog_errors import EffectNotFound
from machines.systems.effectlog_runs import NOTE_PROOF, PROCESS, reveals, run_start
from machines.systems.verdicts import Classifier, Verdict, verdict_of

MACHINE = "effect"
SAFE = "safe"
COMPENSABLE = "compensable"

Compensation = Callable[[Row], object]
"""Undoes one effect; gets the effect's row (tool, signature, data). Raising means failure."""

_NOT_COMPENSATED = {
    "pending": "it never ran (or provably did not take effect): nothing to undo",
    "committed": (
        "committed is terminal and the spec cannot undo it (finding "
        "committed-cannot-be-undone); undo it by hand if it must be"
    ),
    "compensating": (
        "another saga is compensating it, or one stopped mid-way: whether its compensation "
        "ran is unknown; check it by hand"
    ),
    "compensated": "already compensated",
    "compensation_failed": "an earlier compensation gave up; a person must repair it",
    "replayed": "a replay: nothing ran",
}


def tool_rewritten(row: Row, history: Sequence[TransitionEvent]) -> str | None:
    """Why the saga leaves ``row`` alone when its tool is not the one its run was started
    with (its ``history`` says; a start recorded before this release names none): its data
    was rewritten outside machines, and the undo of another tool would be run."""
    started = [
        e.detail["tool"]
        for e in history
        if e.dest == EffectState.EXECUTING and e.detail is not None and "tool" in e.detail
    ]
    if not started or started[-1] == row.data.get("tool"):
        return None
    return (
        f"its tool is {describe(row.data.get('tool'))} but its run was started as "
        f"{describe(started[-1])}: the row was changed outside machines, so no undo runs; "
        "check it by hand (machines audit --from-store)"
    )


def not_compensable(row: Row) -> str | None:
    """Why the saga leaves ``row`` alone, or None when it must compensate it."""
    if row.context.get("tier") != COMPENSABLE:
        return f"{row.context.get('tier')} effects are never compensated; check it by hand"
    return _NOT_COMPENSATED.get(row.state)


def running_here(start: TransitionEvent | None) -> str | None:
    """Why the saga leaves an effect alone while this process is still making its run (the
    run its starting event ``start`` began): an undo now could be followed by the call
    landing (outsider batch 23: the refund ran, then the charge landed)."""
    if not runs.running_here(start):
        return None
    return (
        "its call is still running in this process: an undo now could be followed by the "
        "call landing; nothing is undone: compensate again once the call has returned"
    )


def this_process() -> dict[str, Any]:
    """This process, as a saga in another one can tell whether it still runs: its host,
    pid and start time (in clock ticks since boot, from Linux's ``/proc``; None elsewhere,
    where a live process cannot be told from a new one given the same pid). Read once per
    process (by pid: a forked child is another), not on every claim."""
    pid = os.getpid()
    found = _THIS_PROCESS.get(pid)
    if found is None:
        found = _THIS_PROCESS[pid] = {
            "host": socket.gethostname(),
            "pid": pid,
            "since": _started(pid),
        }
    return dict(found)


_THIS_PROCESS: dict[int, dict[str, Any]] = {}


def running_elsewhere(row: Row, history: Sequence[TransitionEvent]) -> str | None:
    """Why the saga leaves ``row`` alone while the process that started its run (another
    one on this host, as the run's starting event says) is alive and its runner wrote no
    note of how the run ended: its call may still land (batch 23, A4, across processes).
    Both are read where no data-only write reaches: the event is history, and a note
    counts only when it reveals the run's secret (``effectlog_runs``; batch 25: a rewritten
    host or a forged note had the refund run before the charge). A process that died, or
    one on another host, cannot be told from a run that is over; the saga undoes it, as a
    process that died after sending needs."""
    start = run_start(history)
    note = row.data.get("unknown_outcome")
    if start is None or (isinstance(note, Mapping) and reveals(start, note, NOTE_PROOF)):
        return None
    process = (start.detail or {}).get(PROCESS)
    if not isinstance(process, Mapping):
        return None
    pid, since = process.get("pid"), process.get("since")
    if type(pid) is not int or type(since) is not int or pid <= 0 or pid == os.getpid():
        return None
    if process.get("host") != socket.gethostname() or _started(pid) != since:
        return None
    return (
        f"its run was started by process {pid} on this host, which is still alive, and has "
        "not said how it ended: an undo now could be followed by the call landing; nothing "
        "is undone: compensate again once that call has returned (or its process has ended)"
    )


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name in parentheses may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def undo_attempts(
    action: Compensation, row: Row, retries: int, classify: Classifier
) -> tuple[int, str | None]:
    """Run ``action`` up to 1 + ``retries`` times: (attempts made, last error or None).
    An undo is an effect too (a refund sent twice is money paid twice): a failed attempt
    is tried again only when ``classify`` says it was not sent (``Verdict.RETRY``)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            ran = action(row)
            if inspect.isawaitable(ran):
                if inspect.iscoroutine(ran):
                    ran.close()  # never started: nothing of it ran
                return attempt, (
                    f"the compensation returned {describe(ran)}, which compensate does not "
                    "await: the undo did not run"
                )
        except Exception as exc:
            error = f"{type(exc).__name__}: {message_of(exc)}"
            verdict = verdict_of(classify, exc)
            if verdict is not Verdict.RETRY or attempt > retries:
                if verdict is Verdict.INDETERMINATE:
                    error += " (it may have been sent, so it was not tried again)"
                return attempt, error
        else:
            return attempt, None


class UndoStep(NamedTuple):
    """What the saga did with one effect: its signature, the state it ended in, and why."""

    signature: str
    state: str
    reason: str


def undo(
    store: Store,
    key: str,
    session: str,
    compensations: Mapping[str, Compensation],
    retries: int,
    classify: Classifier,
    now: Callable[[], float],
) -> UndoStep:
    """The saga's step on one effect of ``session``: left alone with the reason, or moved
    ``compensate`` and its tool's compensation attempted, each move its own transaction."""
    with store.transaction() as tx:
        row = tx.get(MACHINE, key)
        if row is None:
            raise EffectNotFound(key)
        history = tx.history(MACHINE, key)
        skip = not_compensable(row) or running_here(run_start(history))
        skip = skip or running_elsewhere(row, history)
        skip = skip or tool_rewritten(row, history)
        if skip is not None:
            return UndoStep(key, row.state, skip)
        row = tx.move(
            row,
            "compensate",
            actor="saga",
            detail={"session": session, "reason": "the session failed: undo newest first"},
            data={**row.data, "compensation": {"session": session, "started_at": now()}},
        )
    tool = row.data.get("tool")
    action = compensations.get(tool) if isinstance(tool, str) else None
    if action is None:
        error: str | None = f"no compensation is registered for tool {tool!r}"
        return _finish(store, row, session, 0, error, now)
    attempts, error = undo_attempts(action, row, retries, classify)
    return _finish(store, row, session, attempts, error, now)


def _finish(
    store: Store,
    row: Row,
    session: str,
    attempts: int,
    error: str | None,
    now: Callable[[], float],
) -> UndoStep:
    trigger = "compensation_succeeded" if error is None else "compensation_exhausted"
    reason = (
        f"compensated after {attempts} attempt(s)"
        if error is None
        else f"compensation failed after {attempts} attempt(s): {error}; repair by hand"
    )
    record = {
        **arguments.stored_fields(row, "compensation"),
        "attempts": attempts,
        "error": error,
        "finished_at": now(),
    }
    done = store.move(
        row,
        trigger,
        actor="saga",
        detail={"session": session, "attempts": attempts, "reason": reason},
        data={**row.data, "compensation": record},
    )
    return UndoStep(row.key, done.state, reason)
