"""``ConformanceSuite``: any implementation of any definition, judged by that definition.

``suite`` holds the suite and its adapter contract, ``steps`` the steps a run is made of,
``tour`` the walk before the dice, ``run`` how a run goes (tour, dice, shortest report),
``oracle`` what the suite saw judged by its rules, and ``walker`` the suite run against this
package's own runtime.

The package offers every public name of ``suite``, as the one module
``machines.testing.conformance`` did before the suite was split.
"""

from machines.testing.conformance.suite import *  # noqa: F403 - the suite's public names, listed there
from machines.testing.conformance.suite import __all__ as _suite_names
from machines.testing.conformance.walker import RuntimeAdapter, spec_walker

__all__ = [*_suite_names, "RuntimeAdapter", "spec_walker"]
