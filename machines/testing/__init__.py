"""Reusable property suites: point them at the bundled specs, or at your own system.

``ConformanceSuite`` judges any implementation of any definition (yours: a ``MachineSpec``
from ``machines.load``) through a ``ConformanceAdapter``: it creates entities under the
definition's contexts, fires legal and illegal moves at them, and checks that the
implementation allows exactly what the definition allows, that refusals change nothing,
terminal states stay final, and every history is one legal unbroken chain of the moves it
saw. Load the definition through ``spec_dir_under_test`` so that ``machines mutate`` can
judge your tests. ``spec_walker(spec)`` is that suite run against this package's own
runtime. ``Coverage`` records which transitions a run exercised (``CoverageGap`` when one
never was). ``ExactlyOnceSuite``, ``EffectLogSuite`` and ``TransferSuite`` judge any
exactly-once executor, effect log or transfer engine through an adapter (a contract whose
every method is required), with faults, and judge it by what they observe; a broken rule is
a ``RuleBroken`` whose message starts with the rule's name.
"""

from machines.spec.files import spec_dir_under_test
from machines.store.records import StoreError
from machines.testing.conformance.suite import (
    ConformanceAdapter,
    ConformanceSuite,
    Create,
    Event,
    Fire,
    ResumableAdapter,
)
from machines.testing.conformance.walker import RuntimeAdapter, spec_walker
from machines.testing.contract import AdapterContractError, check_adapter
from machines.testing.coverage import Coverage, CoverageGap
from machines.testing.effectlog.suite import EffectLogAdapter, EffectLogSuite, ReferenceEffectLog
from machines.testing.exactly_once.suite import (
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    ReferenceAdapter,
)
from machines.testing.faults import Fault, NotSent, SimulatedCrash
from machines.testing.transfer.suite import (
    EngineHistory,
    GateDesk,
    ReferenceTransfer,
    TransferAdapter,
    TransferSuite,
    Venue,
)
from machines.testing.verdict import Move, RuleBroken

__all__ = [
    "AdapterContractError",
    "ConformanceAdapter",
    "ConformanceSuite",
    "Coverage",
    "CoverageGap",
    "Create",
    "EffectLogAdapter",
    "EffectLogSuite",
    "EngineHistory",
    "Event",
    "ExactlyOnceAdapter",
    "ExactlyOnceSuite",
    "Fault",
    "Fire",
    "GateDesk",
    "Move",
    "NotSent",
    "ReferenceAdapter",
    "ReferenceEffectLog",
    "ReferenceTransfer",
    "ResumableAdapter",
    "RuleBroken",
    "RuntimeAdapter",
    "SimulatedCrash",
    "StoreError",
    "TransferAdapter",
    "TransferSuite",
    "Venue",
    "check_adapter",
    "spec_dir_under_test",
    "spec_walker",
]
