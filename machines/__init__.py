"""machines: formally tested state machine definitions for side effects.

The public API; its reference is the site's API page (``docs/api.md``).
"""

from machines.checks.report import Report, check
from machines.derive import derive_request_state
from machines.errors import (
    ContextError,
    EffectError,
    EffectFailed,
    EffectIndeterminate,
    EffectInProgress,
    InvalidArgument,
    InvalidNodeState,
    InvalidStateTransition,
    MachinesError,
    SpecError,
    SpecUnreadable,
    SpecViolation,
    UnknownName,
)
from machines.runtime import AsyncEntityMachine, EntityMachine, Hooks
from machines.runtime.history import History, HistoryView, TransitionEvent
from machines.spec import MachineSpec
from machines.spec.jsonvalue import UnstorableValue
from machines.spec.loader import load
from machines.spec.routing import Stepper
from machines.spec.states import EffectState, NodeState, OutcomeState, RequestState

__all__ = [
    "AsyncEntityMachine",
    "ContextError",
    "EffectError",
    "EffectFailed",
    "EffectInProgress",
    "EffectIndeterminate",
    "EffectState",
    "EntityMachine",
    "History",
    "HistoryView",
    "Hooks",
    "InvalidArgument",
    "InvalidNodeState",
    "InvalidStateTransition",
    "MachineSpec",
    "MachinesError",
    "NodeState",
    "OutcomeState",
    "Report",
    "RequestState",
    "SpecError",
    "SpecUnreadable",
    "SpecViolation",
    "Stepper",
    "TransitionEvent",
    "UnknownName",
    "UnstorableValue",
    "check",
    "derive_request_state",
    "load",
]
