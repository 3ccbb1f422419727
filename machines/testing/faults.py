"""The faults the system suites inject and an adapter speaks of.

``Fault`` names how a store write goes wrong when a suite asks for it (``fail_next_write``):
the way a database fails (``"error"``) or the way a process dies (``"crash"``).
``SimulatedCrash`` is that death: no ``except Exception`` catches it, so nothing after it
runs, not even a park. ``NotSent`` is an effect's proof that nothing left the process.
"""

from __future__ import annotations

from typing import Literal

Fault = Literal["error", "crash"]


class NotSent(Exception):
    """Raised by an effect before anything left the process: proof it did not happen."""


class SimulatedCrash(BaseException):
    """The process dies here: nothing after this point runs (not even a park)."""
