"""``EffectLogSuite``: any effect log, judged by what its tools and callers saw.

``suite`` holds the suite, its adapter contract and the reference effect log, ``rules`` the
behaviours it plays, its rules and what a caller can be told, ``tour`` the walk before the
random runs, and ``oracle`` the judge of what was observed.

The package offers every public name of ``suite``, as the one module
``machines.testing.effectlog`` did before the suite was split.
"""

from machines.testing.effectlog.suite import *  # noqa: F403 - the suite's public names, listed there
from machines.testing.effectlog.suite import __all__ as _suite_names

__all__ = list(_suite_names)
