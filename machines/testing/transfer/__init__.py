"""``TransferSuite``: any transfer engine, judged by the ledger of a venue it cannot see into

``suite`` holds the suite, ``adapter`` its adapter contract and reference engine, ``venue``
the venue, gate desk and limits service it plays, ``scenarios`` the plans and operations it
drives an engine with, ``watch`` what it knows of a node and an operation, ``history`` an
engine's history judged as it grows, and ``oracle`` the ledger that judges.

The package offers every public name of ``suite``, as the one module
``machines.testing.transfer`` did before the suite was split.
"""

from machines.testing.transfer.suite import *  # noqa: F403 - the suite's public names, listed there
from machines.testing.transfer.suite import __all__ as _suite_names

__all__ = list(_suite_names)
