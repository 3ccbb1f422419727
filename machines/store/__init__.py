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

from machines.errors import InvalidArgument
from machines.runtime.history import Clock, checked_clock
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.loader import load
from machines.store.arguments import check_key, specs_by_name, sqlite_path, text
from machines.store.memory import MemoryStore
from machines.store.records import (
    OpenedStore,
    RecordExists,
    Row,
    StaleWrite,
    Store,
    StoreError,
    Transaction,
    UnstorableData,
    hide_passwords,
)
from machines.store.sqlite import SQLiteStore

BUNDLED = ("effect", "outcome", "node", "request")

__all__ = [
    "InvalidArgument",
    "MemoryStore",
    "OpenedStore",
    "RecordExists",
    "Row",
    "SQLiteStore",
    "StaleWrite",
    "Store",
    "StoreError",
    "Transaction",
    "UnstorableData",
    "open_store",
]


def open_store(
    url: str,
    specs: Iterable[MachineSpec] | Mapping[str, MachineSpec] | None = None,
    *,
    clock: Clock | None = None,
    read_only: bool = False,
    create: bool = True,
) -> OpenedStore:
    """Open the store at ``url`` for ``specs`` (default: the four bundled machines).

    ``specs`` is an iterable of loaded specs, or a mapping of each spec's own name to it;
    ``clock`` a function that returns the time as a finite number (default
    ``time.time``). Anything else, an unknown URL scheme, or a URL that is not text (NUL,
    a lone surrogate) is ``InvalidArgument``; a database that cannot be opened is a
    ``StoreError``.

    ``read_only`` opens an existing store to read it (an audit) and changes nothing at
    all: no file or table is created (a missing database or table is a ``StoreError``),
    and every write is refused with a ``StoreError``. ``memory://`` starts empty, so there
    is nothing to open read-only there.

    ``create=False`` opens an existing store for writing and makes nothing: a missing
    SQLite file, a database or file without the store's registry, or a store without the
    tables of one of ``specs``' machines is a ``StoreError`` (``memory://`` is never there
    before). A desk opens its store so, so that a mistyped URL, or definitions that are not
    the store's, are an error instead of a store changed to serve nothing waiting."""
    url = text(url, "a store URL")
    check_key(url, "open_store", "URL")
    if not isinstance(read_only, bool):
        raise InvalidArgument(f"read_only must be True or False, not {describe(read_only)}")
    if not isinstance(create, bool):
        raise InvalidArgument(f"create must be True or False, not {describe(create)}")
    by_name = {n: load(n) for n in BUNDLED} if specs is None else specs_by_name(specs)
    now = (
        time.time
        if clock is None
        else checked_clock(clock, "the store", StoreError, "nothing was written")
    )
    if url == "memory://":
        if read_only or not create:
            how = "to read" if read_only else "without making it (create=False)"
            raise StoreError(f"memory:// starts empty: there is no store to open {how}")
        return MemoryStore(by_name, now)
    if url.startswith("sqlite:///"):
        path = sqlite_path(url)
        return SQLiteStore(path, by_name, now, read_only=read_only, create=create)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from machines.store.postgres import PostgresStore  # needs machines[postgres]
        except ModuleNotFoundError as missing:  # psycopg is not installed
            raise StoreError(str(missing)) from missing

        return PostgresStore(url, by_name, now, read_only=read_only, create=create)
    raise InvalidArgument(
        f"unsupported store URL {hide_passwords(describe(url))}; use memory://, "
        "sqlite:///path/to/file.db or "
        "postgresql://user@host/db"
    )
