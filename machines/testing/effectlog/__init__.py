"""``EffectLogSuite``: any effect log, judged by what its tools and callers saw.

``suite`` holds the suite, its adapter contract and the reference effect log, ``rules`` the
behaviours it plays, its rules and what a caller can be told, ``tour`` the walk before the
random runs, and ``oracle`` the judge of what was observed.

The package offers every public name of ``suite``, as the one module
``machines.testing.effectlog`` did before the suite was split.
"""

from machines.testing.effectlog.suite import (
    CALLS,
    POLICIES,
    RULES,
    Behaviour,
    Call,
    EffectLogAdapter,
    EffectLogSuite,
    Move,
    NotSent,
    ReferenceEffectLog,
    RuleBroken,
    Saga,
    SimulatedCrash,
)

__all__ = [
    "CALLS",
    "POLICIES",
    "RULES",
    "Behaviour",
    "Call",
    "EffectLogAdapter",
    "EffectLogSuite",
    "Move",
    "NotSent",
    "ReferenceEffectLog",
    "RuleBroken",
    "Saga",
    "SimulatedCrash",
]
