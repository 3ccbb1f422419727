"""``EffectLogSuite``: any effect log, judged by what its tools and callers saw.

``suite`` holds the suite, its adapter contract and the reference effect log, ``rules`` its
rules and what a caller can be told, and ``oracle`` the judge of what was observed.
"""

from machines.testing.effectlog.suite import EffectLogAdapter, EffectLogSuite, ReferenceEffectLog

__all__ = ["EffectLogAdapter", "EffectLogSuite", "ReferenceEffectLog"]
