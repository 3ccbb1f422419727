"""machines: formally tested state machine definitions for side effects.

Public API only; see DESIGN.md section 4.
"""

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

__all__ = [
    "ContextError",
    "InvalidNodeState",
    "InvalidStateTransition",
    "MachineSpec",
    "MachinesError",
    "SpecError",
    "SpecUnreadable",
    "SpecViolation",
    "UnknownName",
    "load",
]
