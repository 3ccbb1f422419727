"""Reusable property suites: point them at the bundled specs, or at your own system.

``spec_walker(spec)`` builds a Hypothesis ``RuleBasedStateMachine`` that drives one entity
of any machine with random legal and illegal triggers, actors and contexts, and checks
after every step that refusals change nothing, terminal states stay final, and the
history is one legal unbroken chain. ``Coverage`` records which transitions a run
exercised. ``ExactlyOnceSuite``, ``EffectLogSuite`` and ``TransferSuite`` judge any
exactly-once executor, effect log or transfer engine through an adapter (a contract whose
every method is required), with faults, and judge it by what they observe; a broken rule is
a ``RuleBroken`` whose message starts with the rule's name.
"""

from machines.testing.contract import AdapterContractError, check_adapter
from machines.testing.coverage import Coverage
from machines.testing.effectlog import EffectLogAdapter, EffectLogSuite, ReferenceEffectLog
from machines.testing.exactly_once import ExactlyOnceAdapter, ExactlyOnceSuite, ReferenceAdapter
from machines.testing.faults import Fault, NotSent, SimulatedCrash
from machines.testing.transfer import (
    EngineHistory,
    GateDesk,
    ReferenceTransfer,
    TransferAdapter,
    TransferSuite,
    Venue,
)
from machines.testing.verdict import Move, RuleBroken
from machines.testing.walker import spec_walker

__all__ = [
    "AdapterContractError",
    "Coverage",
    "EffectLogAdapter",
    "EffectLogSuite",
    "EngineHistory",
    "ExactlyOnceAdapter",
    "ExactlyOnceSuite",
    "Fault",
    "GateDesk",
    "Move",
    "NotSent",
    "ReferenceAdapter",
    "ReferenceEffectLog",
    "ReferenceTransfer",
    "RuleBroken",
    "SimulatedCrash",
    "TransferAdapter",
    "TransferSuite",
    "Venue",
    "check_adapter",
    "spec_walker",
]
