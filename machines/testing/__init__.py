"""Reusable property suites: point them at the bundled specs, or at your own system.

``spec_walker(spec)`` builds a Hypothesis ``RuleBasedStateMachine`` that drives one entity
of any machine with random legal and illegal triggers, actors and contexts, and checks
after every step that refusals change nothing, terminal states stay final, and the
history is one legal unbroken chain. ``Coverage`` records which transitions a run
exercised. ``ExactlyOnceSuite``, ``EffectLogSuite`` and ``TransferSuite`` judge any
exactly-once executor, effect log or transfer engine through an adapter, with faults.
"""

from machines.testing.coverage import Coverage
from machines.testing.effectlog import EffectLogAdapter, EffectLogSuite, ReferenceEffectLog
from machines.testing.exactly_once import ExactlyOnceAdapter, ExactlyOnceSuite, ReferenceAdapter
from machines.testing.transfer import ReferenceTransfer, TransferAdapter, TransferSuite
from machines.testing.walker import spec_walker

__all__ = [
    "Coverage",
    "EffectLogAdapter",
    "EffectLogSuite",
    "ExactlyOnceAdapter",
    "ExactlyOnceSuite",
    "ReferenceAdapter",
    "ReferenceEffectLog",
    "ReferenceTransfer",
    "TransferAdapter",
    "TransferSuite",
    "spec_walker",
]
