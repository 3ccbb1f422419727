"""String enums of every machine's states, for code that wants names a type checker sees.

Each member's value is the canonical state name (the seeds' DB value), so
``EffectState.COMPENSATION_FAILED == "compensation_failed"``. They are written out rather
than built at import time so that mypy and editors know them; ``tests/test_states.py``
fails when they drift from ``spec/``.
"""

from enum import StrEnum


class EffectState(StrEnum):
    PENDING = "pending"
    EXECUTING = "executing"
    COMMITTED = "committed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    APPROVED = "approved"
    REJECTED = "rejected"
    REPLAYED = "replayed"


class OutcomeState(StrEnum):
    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"


class NodeState(StrEnum):
    BLOCKED = "blocked"
    READY = "ready"
    PREPARING = "preparing"
    AWAITING_SIGNATURE = "awaiting_signature"
    SUBMITTING = "submitting"
    SUBMITTED = "submitted"
    OBSERVING = "observing"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class RequestState(StrEnum):
    RECEIVED = "received"
    VALIDATED = "validated"
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"
    EXECUTING = "executing"
    WAITING_MANUAL_ACTION = "waiting_manual_action"
    COMPLETED = "completed"
    FAILED = "failed"
    MANUAL_INTERVENTION = "manual_intervention"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


STATE_ENUMS: dict[str, type[StrEnum]] = {
    "effect": EffectState,
    "outcome": OutcomeState,
    "node": NodeState,
    "request": RequestState,
}
