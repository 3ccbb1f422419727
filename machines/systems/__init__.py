"""Reference systems built on the specs, the runtime's decisions and a store."""

from machines.systems.effectlog import (
    EffectAwaitingApproval,
    EffectClosed,
    EffectLog,
    EffectNotFound,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectStillExecuting,
    UndoStep,
)
from machines.systems.exactly_once import ExactlyOnce, Verdict, fail_closed, not_sent

__all__ = [
    "EffectAwaitingApproval",
    "EffectClosed",
    "EffectLog",
    "EffectNotFound",
    "EffectNotRecorded",
    "EffectOutcomeUnknown",
    "EffectRejected",
    "EffectStillExecuting",
    "ExactlyOnce",
    "UndoStep",
    "Verdict",
    "fail_closed",
    "not_sent",
]
