"""machines: formally tested state machine definitions for side effects.

Public API only; see DESIGN.md section 4.
"""

from machines.checker import Report, check
from machines.derive import derive_request_state
from machines.errors import (
    ContextError,
    InvalidNodeState,
    InvalidStateTransition,
    MachinesError,
    SpecError,
    SpecUnreadable,
    SpecViolation,
)
from machines.loader import load
from machines.spec import MachineSpec, UnknownName
from machines.states import EffectState, NodeState, OutcomeState, RequestState

__all__ = [
    "ContextError",
    "EffectState",
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
    "UnknownName",
    "check",
    "derive_request_state",
    "load",
]
