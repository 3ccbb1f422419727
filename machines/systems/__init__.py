"""Reference systems built on the specs, the runtime's decisions and a store."""

from machines.systems.effectlog import (
    EffectAwaitingApproval,
    EffectClosed,
    EffectLog,
    EffectNotFound,
    EffectNotRecorded,
    EffectOutcomeUnknown,
    EffectRejected,
    EffectRewritten,
    EffectStillExecuting,
    UndoStep,
)
from machines.systems.exactly_once import ExactlyOnce
from machines.systems.transfer import (
    CALLBACKS,
    CallbackFailed,
    Executor,
    ManualGate,
    Movement,
    PlanError,
    PlanNode,
    TransferConfigError,
    TransferEngine,
    TransferError,
    TransferRefused,
    UnknownTransfer,
)
from machines.systems.verdicts import Verdict, fail_closed, not_sent

__all__ = [
    "CALLBACKS",
    "CallbackFailed",
    "EffectAwaitingApproval",
    "EffectClosed",
    "EffectLog",
    "EffectNotFound",
    "EffectNotRecorded",
    "EffectOutcomeUnknown",
    "EffectRejected",
    "EffectRewritten",
    "EffectStillExecuting",
    "ExactlyOnce",
    "Executor",
    "ManualGate",
    "Movement",
    "PlanError",
    "PlanNode",
    "TransferConfigError",
    "TransferEngine",
    "TransferError",
    "TransferRefused",
    "UndoStep",
    "UnknownTransfer",
    "Verdict",
    "fail_closed",
    "not_sent",
]
