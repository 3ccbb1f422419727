"""Stores: where entities and their histories live. ``open_store(url)`` picks one.

- ``memory://``: in-process, for tests and tools;
- ``sqlite:///path/to/file.db``: the embedded default (WAL, durable commits);
- ``postgresql://...``: a shared server (see ``machines.store.postgres``).

Every store keeps the same promises (``machines.store.records``): rows start in the
initial state, change only through legal moves recorded in the same transaction, and
concurrent writers are fenced by the row version.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from machines.history import Clock
from machines.loader import load
from machines.spec import MachineSpec
from machines.store.memory import MemoryStore
from machines.store.records import RecordExists, Row, StaleWrite, Store, StoreError, Transaction
from machines.store.sqlite import SQLiteStore

BUNDLED = ("effect", "outcome", "node", "request")

__all__ = [
    "MemoryStore",
    "RecordExists",
    "Row",
    "SQLiteStore",
    "StaleWrite",
    "Store",
    "StoreError",
    "Transaction",
    "open_store",
]


def open_store(
    url: str,
    specs: Iterable[MachineSpec] | Mapping[str, MachineSpec] | None = None,
    *,
    clock: Clock | None = None,
    read_only: bool = False,
) -> Store:
    """Open the store at ``url`` for ``specs`` (default: the four bundled machines).

    ``read_only`` opens an existing store to read it (an audit) and changes nothing at
    all: no file or table is created (a missing database or table is a ``StoreError``),
    and every write is refused with a ``StoreError``. ``memory://`` starts empty, so there
    is nothing to open read-only there."""
    if specs is None:
        by_name = {name: load(name) for name in BUNDLED}
    elif isinstance(specs, Mapping):
        by_name = dict(specs)
    else:
        by_name = {spec.name: spec for spec in specs}
    now = clock or time.time
    if url == "memory://":
        if read_only:
            raise StoreError("memory:// starts empty: there is nothing to open read-only")
        return MemoryStore(by_name, now)
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path:
            raise StoreError("sqlite:/// needs a file path, e.g. sqlite:///effects.db")
        return SQLiteStore(path, by_name, now, read_only=read_only)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from machines.store.postgres import PostgresStore  # needs machines[postgres]
        except ModuleNotFoundError as missing:  # psycopg is not installed
            raise StoreError(str(missing)) from missing

        return PostgresStore(url, by_name, now, read_only=read_only)
    raise StoreError(
        f"unsupported store URL {url!r}; use memory://, sqlite:///path/to/file.db or "
        "postgresql://user@host/db"
    )
