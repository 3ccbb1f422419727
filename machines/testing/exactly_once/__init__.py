"""``ExactlyOnceSuite``: any exactly-once executor, judged by what its callers and the upstream saw.

``suite`` holds the suite, its adapter contract and the reference adapter, ``steps`` the
steps a run is made of, ``tour`` the walk before the random runs, and ``oracle`` the rules
that judge what was observed.

The package offers every public name of ``suite``, as the one module
``machines.testing.exactly_once`` did before the suite was split.
"""

from machines.testing.exactly_once.suite import *  # noqa: F403 - the suite's public names, listed there
from machines.testing.exactly_once.suite import __all__ as _suite_names

__all__ = list(_suite_names)
