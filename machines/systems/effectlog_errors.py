"""What a caller of the effect log is told when nothing ran, or when what ran could not be
recorded: one error per situation, each saying what state the effect is in and what to do.
They are ``EffectError``s; ``machines.systems.effectlog`` raises them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from machines.errors import EffectError, message_of, shown_time
from machines.spec.jsonvalue import describe
from machines.store.records import Row


class EffectNotFound(EffectError, LookupError):
    """No effect is recorded under the signature (``EffectLog``) or key (``ExactlyOnce``)."""

    def __init__(self, key: str, named: str = "call signature") -> None:
        super().__init__(
            key, f"no effect is recorded under {named} {describe(key)}; check the {named}"
        )


class EffectAwaitingApproval(EffectError):
    """An Irreversible call is ``pending``: it runs only after a human approves it."""

    def __init__(self, key: str, last_error: Mapping[str, Any] | None) -> None:
        self.last_error = last_error
        again = (
            f" again (its approved run failed: {last_error.get('type')}: "
            f"{last_error.get('message')}; approval is consumed by a run)"
            if last_error
            else ""
        )
        super().__init__(
            key,
            f"irreversible effect '{key}' is pending approval{again}; nothing ran. A human "
            "must approve(...) or reject(...) it, then call again",
        )


class EffectRejected(EffectError):
    """A human rejected the Irreversible call; it never runs and the session halts."""

    def __init__(self, key: str, by: str | None) -> None:
        self.by = by
        super().__init__(
            key,
            f"irreversible effect '{key}' was rejected by {by or 'a human'}; it never runs. "
            "Halt the session",
        )


class EffectStillExecuting(EffectError):
    """The effect is ``executing``: another caller is running it now, or a run ended with
    an unknown outcome. Nothing runs it again; call again later for the cached result, or
    let the session's saga compensate it. (Catch this to handle ``EffectOutcomeUnknown``
    too.)"""

    def __init__(
        self,
        key: str,
        runner: str | None,
        started_at: float | None,
        *,
        why: str = "it is still running, or its outcome is unknown",
        todo: str = "Call again later for the cached result, or compensate the failed session",
    ) -> None:
        self.runner = runner
        self.started_at = started_at
        since = f" since {shown_time(started_at)}" if started_at is not None else ""
        super().__init__(
            key,
            f"effect '{key}' is executing under {runner or 'an unknown runner'}{since}: "
            f"{why}; nothing runs it again. {todo}",
        )


class EffectOutcomeUnknown(EffectStillExecuting):
    """This call's run raised an error that does not prove the call had no effect; the
    effect stays ``executing`` (the original error is the ``__cause__``)."""

    def __init__(
        self, key: str, runner: str | None, started_at: float | None, error: Exception
    ) -> None:
        self.error_type = type(error).__name__
        self.error_message = message_of(error)
        super().__init__(
            key,
            runner,
            started_at,
            why=f"it raised {self.error_type}: {self.error_message} after it was sent, so "
            "whether it took effect is unknown",
            todo="Check upstream by hand, or compensate the failed session",
        )


class EffectNotRecorded(EffectError):
    """The run finished but its outcome could not be written. ``result`` holds the value
    the run returned (``None`` after an error), so it is not lost; the log keeps the effect
    as it was (``executing``, unless something else moved it meanwhile)."""

    def __init__(self, key: str, reason: str, result: Any = None) -> None:
        self.reason = reason
        self.result = result
        super().__init__(
            key,
            f"effect '{key}' ran but its outcome could not be recorded: {reason}. The log "
            "keeps the effect as it stood (executing, unless the saga took it over), so "
            "nothing runs it again; record the outcome by hand or compensate the session",
        )


class EffectClosed(EffectError):
    """The effect is being undone or has ended without a result to replay (compensating,
    compensated, compensation_failed, replayed): it never runs again."""

    def __init__(self, key: str, state: str) -> None:
        self.state = state
        super().__init__(
            key,
            f"effect '{key}' is '{state}': it has no result to replay and never runs "
            "again; use a new call signature if the call must be made afresh",
        )


class EffectRewritten(EffectClosed):
    """The effect could be run again (``pending`` or ``approved``), but its row was written
    outside a move, or a move out of ``executing`` was made by someone else than the run's
    runner: the log does neither, and either could reopen a call that was sent (a run that
    ended with an unknown outcome, its runner dead). Nothing runs it under this signature;
    the audit names it (``exactly-once``)."""

    def __init__(self, key: str, state: str, why: str) -> None:
        self.why = why
        EffectError.__init__(
            self,
            key,
            f"effect '{key}' is '{state}', but {why}: it may have run already, so nothing "
            "runs it under this signature. Check upstream by hand, then use a new call "
            "signature if the call must be made afresh",
        )
        self.state = state


def rewritten(row: Row, why: str | None = None) -> EffectRewritten | None:
    """Why ``row`` (an effect the log may run again) must not run: ``why``, or, if it was
    written outside a move, that (every write raises the version by one and every move the
    move count too, so anything else the row went through shows as a gap between the
    two); None when neither."""
    if why is None and row.version != row.moves + 1:
        why = (
            f"its row was written outside a move (version {row.version} after {row.moves} "
            "move(s); the log writes an effect it may run again only by moves)"
        )
    return None if why is None else EffectRewritten(row.key, row.state, why)


def still_executing(row: Row) -> EffectStillExecuting:
    """What a caller of an ``executing`` effect is told: still running, or (when its run
    wrote so) ended with an unknown outcome."""
    runner, started_at = row.data.get("runner"), row.data.get("started_at")
    note = row.data.get("unknown_outcome")
    if not isinstance(note, Mapping):
        return EffectStillExecuting(row.key, runner, started_at)
    return EffectStillExecuting(
        row.key,
        runner,
        started_at,
        why=f"its run ended with an unknown outcome: {note.get('reason')}",
        todo="Check upstream by hand, or compensate the failed session",
    )
