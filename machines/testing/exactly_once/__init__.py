"""``ExactlyOnceSuite``: any exactly-once executor, judged by what its callers and the upstream saw.

``suite`` holds the suite, its adapter contract and the reference adapter, ``steps`` the
steps a run is made of, ``tour`` the walk before the random runs, and ``oracle`` the rules
that judge what was observed.
"""

from machines.testing.exactly_once.suite import (
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    ReferenceAdapter,
)

__all__ = ["ExactlyOnceAdapter", "ExactlyOnceSuite", "ReferenceAdapter"]
