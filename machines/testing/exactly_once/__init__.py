"""``ExactlyOnceSuite``: any exactly-once executor, judged by what its callers and the upstream saw.

``suite`` holds the suite, its adapter contract and the reference adapter, ``steps`` the
steps a run is made of, ``tour`` the walk before the random runs, and ``oracle`` the rules
that judge what was observed.

The package offers every public name of ``suite``, as the one module
``machines.testing.exactly_once`` did before the suite was split.
"""

from machines.testing.exactly_once.suite import (
    KEYS,
    LEASE,
    POLICIES,
    RULES,
    Behaviour,
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    Fault,
    Move,
    NotSent,
    ReferenceAdapter,
    RuleBroken,
    SimulatedCrash,
)

__all__ = [
    "KEYS",
    "LEASE",
    "POLICIES",
    "RULES",
    "Behaviour",
    "ExactlyOnceAdapter",
    "ExactlyOnceSuite",
    "Fault",
    "Move",
    "NotSent",
    "ReferenceAdapter",
    "RuleBroken",
    "SimulatedCrash",
]
