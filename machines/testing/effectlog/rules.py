"""The vocabulary of ``EffectLogSuite``: the behaviours and sagas it plays, its rules, what
a caller can be told, and how a history a log exposes is judged against a definition.

Each rule has a short stable name, the first word of every failure that breaks it, so a
user's CI can tell one broken promise from another; ``RULES`` says what each promises.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from machines.errors import EffectFailed, MachinesError
from machines.spec.registry import judged_by, policies_of
from machines.systems.effectlog import (
    EffectAwaitingApproval,
    EffectClosed,
    EffectNotRecorded,
    EffectRejected,
    EffectStillExecuting,
)
from machines.testing.faults import NotSent, SimulatedCrash


class Behaviour(enum.Enum):
    """What happens in one call: what the tool (the upstream) does when the log runs it, or
    a fault around it."""

    RETURN = "the tool returns a value"
    NOT_SENT = "the tool fails before sending"
    TIMEOUT = "the tool times out after sending"
    CANCELLED = "the caller is cancelled after the tool sent"
    INTERRUPTED = "the caller is interrupted (Ctrl-C) after the tool sent"
    CLAIM_FAILS = "the log's first write fails (if the tool runs, a duplicate caller arrives)"
    CRASH_AT_CLAIM = "the process dies at the log's first write"
    CRASH_AFTER_SENDING = "the process dies after the tool sent, before the result is stored"
    STORE_FAILS_AFTER = "the tool returns, then the log's next write fails"
    UNSTORABLE = "the tool returns a result JSON cannot hold"
    DUPLICATE_DURING = "a duplicate caller arrives while the tool runs"
    AFTER_RESTART = "the process restarted just before the call"


TROUBLE = frozenset(
    {
        Behaviour.TIMEOUT,
        Behaviour.CANCELLED,
        Behaviour.INTERRUPTED,
        Behaviour.CRASH_AFTER_SENDING,
        Behaviour.STORE_FAILS_AFTER,
        Behaviour.UNSTORABLE,
    }
)
"""Behaviours after which a log may rightly say the outcome is unknown."""


class Saga(enum.Enum):
    WORKS = "every compensation works"
    FAILS = "every compensation fails"
    DIES = "the process dies inside the first compensation"


RULES: Mapping[str, str] = judged_by("effect-log suite")
"""Every rule the suite judges by: its stable name (the start of a failure message) and
what it promises."""
RUNS_AGAIN = "not-sent-runs-again"
"""The policy that a call whose tool proved nothing was sent leaves the signature free."""
POLICIES: frozenset[str] = policies_of("effect-log suite")
"""The rules that are this package's policies, judged unless a suite leaves them out
(``EffectLogSuite.policies``)."""

IRREVERSIBLE = "irreversible"
CANCELLATIONS = (asyncio.CancelledError, KeyboardInterrupt)
"""What a cancelled or interrupted caller raises inside the tool."""


class Call(NamedTuple):
    """One call signature of the suite: its tier, its tool, and the session it belongs to."""

    tier: str
    tool: str
    session: str


class Told(enum.Enum):
    """What a caller was told, by kind."""

    VALUE = "a result"
    NOT_SENT = "the tool's proof that nothing was sent"
    TOOL_ERROR = "the tool's own error"
    CANCELLED = "its own cancellation"
    UNKNOWN = "that the outcome is unknown or still running"
    AWAITING = "that a human must approve it first"
    REJECTED = "that a human rejected it"
    CLOSED = "that it is closed (being undone or undone)"
    FAILED = "that the log could not record the call"
    CRASHED = "nothing: the process died"


def told_kind(error: BaseException, raised: Sequence[BaseException], fault: bool) -> Told | None:
    """What kind of answer ``error`` is, given what the tool ``raised`` in the call and
    whether the suite made a write fail in it; None when the contract allows no such
    error."""
    if isinstance(error, SimulatedCrash):
        return Told.CRASHED
    if any(error is own for own in raised):
        if isinstance(error, NotSent):
            return Told.NOT_SENT
        return Told.CANCELLED if isinstance(error, CANCELLATIONS) else Told.TOOL_ERROR
    kinds: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], Told], ...] = (
        (NotSent, Told.NOT_SENT),
        (EffectFailed, Told.NOT_SENT),  # "provably did not happen", whatever else it is
        (CANCELLATIONS, Told.CANCELLED),
        (EffectAwaitingApproval, Told.AWAITING),
        (EffectRejected, Told.REJECTED),
        (EffectClosed, Told.CLOSED),
        (EffectStillExecuting, Told.UNKNOWN),
        (EffectNotRecorded, Told.UNKNOWN),
        (MachinesError, Told.FAILED),
    )
    for kind, told in kinds:
        if isinstance(error, kind):
            return told
    return Told.FAILED if fault and isinstance(error, Exception) else None
