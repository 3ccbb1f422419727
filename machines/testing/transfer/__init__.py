"""``TransferSuite``: any transfer engine, judged by the ledger of a venue it cannot see into.

``suite`` holds the suite, ``adapter`` its adapter contract and reference engine, ``venue``
the venue, gate desk and limits service it plays, ``scenarios`` the plans and operations it
drives an engine with, ``watch`` what it knows of a node and an operation, ``history`` an
engine's history judged as it grows, and ``oracle`` the ledger that judges.
"""

from machines.testing.transfer.suite import (
    EngineHistory,
    GateDesk,
    ReferenceTransfer,
    TransferAdapter,
    TransferSuite,
    Venue,
)

__all__ = [
    "EngineHistory",
    "GateDesk",
    "ReferenceTransfer",
    "TransferAdapter",
    "TransferSuite",
    "Venue",
]
