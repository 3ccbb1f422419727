"""The names of the database objects generated for a machine: one rule, used by the DDL
and by every statement, on both databases.

PostgreSQL cuts an identifier at 63 bytes, so two names that differ only past that point
silently become one object (one trigger replacing another, and a guard gone). Every object
of a machine is named ``<prefix>_<role>``: the prefix is the machine's name when that is
short enough for the longest role, and otherwise its first characters plus a hash of the
whole name. So every name is at most 63 bytes, is the same on every run, and differs
between machines; no role ends in ``_`` plus another role, so no machine's object can be
another's either. SQLite has no such limit, but gets the same names, so that the stores
and ``machines export`` agree. Names are always double-quoted, the one way to quote an
identifier here.
"""

from __future__ import annotations

import hashlib
from functools import cache

IDENTIFIER_BYTES = 63
"""PostgreSQL's NAMEDATALEN - 1: longer identifiers are cut."""

ROLES = (
    # tables and their index
    "moves",
    "entities",
    "history",
    "entities_by_scope",
    "entities_ordinal",  # PostgreSQL: one place in creation order per entity
    # SQLite triggers
    "moves_frozen_insert",
    "moves_frozen_update",
    "moves_frozen_delete",
    "entities_start",
    "entities_new_key",
    "entities_context",
    "entities_no_delete",
    "entities_next_place",
    "entities_fixed",
    "entities_version",
    "entities_still",
    "entities_legal_move",
    "entities_final_data",
    "entities_record",
    "history_no_update",
    "history_no_delete",
    "history_guard",
    # PostgreSQL functions and triggers
    "refuse",
    "moves_frozen",
    "moves_no_truncate",
    "entities_guard",
    "entities_no_truncate",
    "history_append_only",
    "history_no_truncate",
)
"""What a machine's generated objects are for; each object is ``<prefix>_<role>``."""

_HASH_CHARS = 10
PREFIX_CHARS = IDENTIFIER_BYTES - 1 - max(map(len, ROLES))
"""A machine's name shorter than this is its prefix; a longer one is cut and hashed to
exactly this length, so a cut name never equals another machine's whole name."""


def quote(identifier: str) -> str:
    """An identifier as SQL text (both dialects)."""
    return '"' + identifier.replace('"', '""') + '"'


@cache
def prefix(machine: str) -> str:
    """The first part of every object name of ``machine`` (at most ``PREFIX_CHARS``)."""
    if len(machine.encode()) < PREFIX_CHARS:
        return machine
    digest = hashlib.sha256(machine.encode()).hexdigest()[:_HASH_CHARS]
    return f"{machine[: PREFIX_CHARS - _HASH_CHARS - 1]}_{digest}"


@cache
def name(machine: str, role: str) -> str:
    """The quoted name of ``machine``'s object for ``role`` (one of ``ROLES``)."""
    if role not in ROLES:
        raise ValueError(f"no generated object has the role {role!r}")
    return quote(f"{prefix(machine)}_{role}")
