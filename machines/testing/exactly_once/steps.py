"""The exactly-once suite's steps: what a caller, the clock, the process and a person do,
written so that a list of them is a run anyone can replay (``ExactlyOnceSuite.replay``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

KEYS = ("k1", "k2")
"""Two keys: enough for a caller of another key to arrive mid-run, few enough that most
runs revisit a key after it was parked, decided or reclaimed."""
LEASE = 30.0
"""The longest lease the suite allows, and the one it assumes unless a suite declares its
executor's own (``ExactlyOnceSuite.lease_seconds``): past it, on the adapter's clock, a
holder is gone."""
MACHINE = "outcome"
"""Histories are judged by its bundled definition, whatever the executor runs on."""


class Behaviour(enum.Enum):
    """What one call's effect does (the suite draws one per call)."""

    RETURN = "returns a value"
    NOT_SENT = "fails before sending"
    FLAKY = "fails before sending once, then returns a value"
    TIMEOUT = "times out after sending"
    CANCELLED = "is cancelled before sending"
    INTERRUPTED = "is interrupted after sending"
    CANCELLED_AFTER_SENDING = "is cancelled after sending"
    CRASH_AFTER_SENDING = "dies after sending"
    STORE_FAILS_AFTER = "runs, then the store write fails"
    DUPLICATE_DURING = "runs while a duplicate caller arrives"
    OTHER_KEY_DURING = "runs while a caller of another key arrives"
    TAKEN_OVER = "stalls past its lease and another worker takes the key"
    CLAIM_FAILS = "its claim's write fails"
    CLAIM_FAILS_DUPLICATE = "its claim's write fails; if it runs, a duplicate caller arrives"
    CLAIM_DIES = "the process dies at its claim's write"
    CLAIM_FAILS_THEN_DIES = "its claim's write fails; if it runs, the process dies after sending"

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


@dataclass(frozen=True)
class Call:
    """A caller runs ``key`` with an effect that behaves as ``behaviour``."""

    key: str
    behaviour: Behaviour


@dataclass(frozen=True)
class Wait:
    """Time passes on the executor's clock."""

    seconds: float


@dataclass(frozen=True)
class Restart:
    """The process dies between calls and starts again."""


@dataclass(frozen=True)
class Reclaim:
    """A caller declares ``key`` safe to repeat."""

    key: str


@dataclass(frozen=True)
class Decide:
    """A person answers "did it land?" for ``key``."""

    key: str
    landed: bool


Action = Call | Wait | Restart | Reclaim | Decide
