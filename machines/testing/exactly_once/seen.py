"""What the exactly-once suite sees, as its oracle keeps it: each caller's call and what it
was told, each send the fake upstream received, and what the callers' answers say of each
key (``KeyRecord``). The oracle (``oracle`` beside this module) judges them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from machines.spec.jsonvalue import describe
from machines.testing.verdict import Move


class Phase(enum.Enum):
    """Where a key stands, as far as the callers were told."""

    NEW = "never called"
    FREE = "reclaimed, free for a fresh claim"
    RUNNING = "running its effect"
    HELD = "held by a holder that died or stalled"
    PARKED = "parked"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


SETTLED = (Phase.SUCCEEDED, Phase.FAILED)

Kind = Literal[
    "result",
    "failed",
    "indeterminate",
    "in progress",
    "unavailable",
    "crashed",
    "interrupted",
    "untyped",
]


@dataclass(frozen=True)
class Told:
    """One answer a caller got: ``value`` is the result, the (type, message) of a failure,
    or the type of what was raised (``unavailable``: a ``StoreError``, the executor's store
    failed)."""

    kind: Kind
    value: Any = None

    def describe(self) -> str:
        if self.kind == "result":
            return f"result {describe(self.value)}"
        if self.kind == "failed":
            return f"failed {describe(self.value)}"
        if self.kind == "unavailable":
            return f"the store failed ({describe(self.value)})"
        if self.kind in ("interrupted", "untyped"):
            return f"{self.kind} ({describe(self.value)})"
        return self.kind

    def shown(self) -> str:
        """The value for a message: the suite's own text as it is, anything else (an
        adapter's object) described safely."""
        return self.value if type(self.value) is str else describe(self.value)


@dataclass
class CallSeen:
    """One call of ``run``, as the suite made and saw it."""

    number: int
    key: str
    worker: str
    behaviour: str
    invocations: int = 0
    sent: bool = False
    raised_after_send: bool = False
    interrupted: bool = False
    effect_raised: bool = False
    fault_armed: bool = False
    """A write of this call was made to fail, or the process to die there."""

    @property
    def troubled(self) -> bool:
        """Something in this call went wrong that may leave its outcome unknown to its
        executor: a cause for telling its caller indeterminate."""
        return self.effect_raised or self.fault_armed or self.interrupted


@dataclass(frozen=True)
class Send:
    """One send the fake upstream received."""

    key: str
    claim: int
    call: int
    answer: Mapping[str, int]


@dataclass
class KeyRecord:
    """What the suite knows of one key, from what it saw alone."""

    phase: Phase = Phase.NEW
    claim: int = 1
    sends: int = 0
    answer: Any = None
    holder: int | None = None
    lease_until: float = 0.0
    parked_by: str = "indeterminate-stays"
    result: Any = None
    error: tuple[str, str] | None = None
    decided: bool = False
    moves: tuple[Move, ...] = ()
    freed: bool = False
    """Failed, with ``failure-replayed`` left out: the executor may have freed the key, and
    its history may start a new chain."""
    unsent_trouble: bool = False
    """A call of this claim ended in trouble before anything was sent (an interrupt, an
    error that proved nothing): the executor may have recorded a failure for it."""


class StopRun(BaseException):
    """Raised inside an effect once a rule is broken, so that the implementation stops (a
    retry loop that never ends cannot hold the suite)."""
