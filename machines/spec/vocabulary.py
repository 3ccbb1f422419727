"""The words of the definition format that mean something to the package.

A state's tags switch logic on: the money-in-flight checks read ``effect-started``, the
transfer engine moves the reservation by the ``*-reservation`` tags, the diagrams draw a
``fail-closed`` state apart. A misspelled tag would load cleanly and silently switch that
logic off, so every tag is declared here once: the loader refuses any other (with a
did-you-mean), and the code that reads a tag imports its constant. A tag of your own, which
nothing in this package reads, starts with ``x-``.

The names a trigger or a context variable may not take are here too: they are the entity
machine's own attributes and the keywords of the calls that take a context, so a
definition that used one would load and then break the object built from it. So is the way
a guard is written, in each medium the package shows one (``describe_guard``).

Nothing here imports the rest of the package: the definition layer and every reader of a
tag depend on this module, never the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal


@dataclass(frozen=True)
class Tag:
    """One state tag: what it says about a state, and who acts on it."""

    name: str
    meaning: str
    read_by: str


EFFECT_STARTED = "effect-started"
DONE = "done"
FAIL_CLOSED = "fail-closed"
NEEDS_HUMAN = "needs-human"
COMPENSATION = "compensation"
APPROVAL = "approval"
HOLDS_RESERVATION = "holds-reservation"
CONSUMES_RESERVATION = "consumes-reservation"
RELEASES_RESERVATION = "releases-reservation"

TAGS: Mapping[str, Tag] = MappingProxyType(
    {
        tag.name: tag
        for tag in (
            Tag(
                EFFECT_STARTED,
                "the effect may have happened: money may be in flight or landed",
                "the money-in-flight invariants: the system invariants, the derivation "
                "check, the transfer explorer",
            ),
            Tag(
                DONE,
                "the node finished its part; its successors may start",
                "the transfer engine (wakes successors), the derivation check, the transfer "
                "explorer",
            ),
            Tag(
                FAIL_CLOSED,
                "nobody can tell what happened; only the triggers its rules name leave it",
                "machines check (an automatic actor leaves it only on stated evidence), "
                "the diagrams (drawn apart, its exits highlighted)",
            ),
            Tag(
                NEEDS_HUMAN,
                "a person must act before anything moves: only people leave it (on a "
                "terminal state: a person's repair outside the machine)",
                "machines check (no automatic actor leaves it), the desk and machines "
                "pending (listed as waiting), the transfer engine (the request_attention "
                "callback)",
            ),
            Tag(
                COMPENSATION,
                "part of undoing an effect that ran",
                "the tier-discipline invariant (only a Compensable effect may reach one)",
            ),
            Tag(
                APPROVAL,
                "decided by a person approving or refusing an Irreversible call",
                "the tier-discipline invariant (only an Irreversible effect may reach one)",
            ),
            Tag(
                HOLDS_RESERVATION,
                "the request's reservation stays held",
                "the transfer engine (reservation held)",
            ),
            Tag(
                CONSUMES_RESERVATION,
                "the request completed: its reservation is consumed",
                "the transfer engine (reservation consumed, the request_completed callback), "
                "the derivation check, the transfer explorer",
            ),
            Tag(
                RELEASES_RESERVATION,
                "the request ended without moving money: its reservation is released",
                "the transfer engine (reservation released, the request_failed callback), the "
                "money-in-flight invariants, the derivation check, the transfer explorer",
            ),
        )
    }
)
"""Every tag a definition may use, in the order the docs list them."""

USER_TAG_PREFIX = "x-"
"""A tag of your own starts with this; nothing in the package reads such a tag, and no
tag of the package will ever start with it."""


def is_declared_tag(tag: str) -> bool:
    """Whether a definition may use ``tag``: one of ``TAGS``, or ``x-`` and more."""
    return tag in TAGS or (tag.startswith(USER_TAG_PREFIX) and len(tag) > len(USER_TAG_PREFIX))


RESERVED_TRIGGERS = frozenset(
    {
        "can",
        "context",
        "entity_id",
        "history",
        "machine",
        "model",
        "spec",
        "state",
        "step",
        "trigger",
    }
)
"""Trigger names an entity machine already answers to (``m.can``, ``m.state``, ...): a
trigger is called as ``m.<trigger>(...)``, so it must not shadow one."""

RESERVED_TRIGGER_PREFIXES = ("to_", "may_", "is_")
"""Prefixes of the methods the ``transitions`` library adds to a model of its own."""

RESERVED_CONTEXT = frozenset(
    {
        "self",
        "spec",
        "model",
        "state",
        "state_attr",
        "entity_id",
        "clock",
        "hooks",
        "name",
        "trigger",
        "actor",
        "detail",
        "source",
        "dest",
    }
)
"""Keyword names of the calls that take a context as ``**context`` (``spec.machine()``,
``trigger()``, ``can()``, ``step()``, ``allows()``, ``next_states()``): a context
variable named like one would collide with it."""


MIGRATION_ACTOR = "migration"
MIGRATION_TRIGGER = "migrate"
"""The actor and trigger of the one history event ``machines migrate`` writes for an
entity it maps out of a state the new version of its definition removes. No definition
may declare the actor (``RESERVED_ACTORS``), so no move of a definition can pass for a
migration's."""

NODE_NAME = "name"
NODE_SIDE_EFFECT = "has_side_effect"
"""The fields of a plan node's stored data that a derivation reads: its name (a manual
gate's starts with the derivation's ``manual_prefix``) and whether it has a side effect.
The transfer engine writes them; a migration and the audit read them back."""

RESERVED_ACTORS = frozenset({MIGRATION_ACTOR})
"""Actor names a definition may not declare."""

FINDINGS_PAGE_NAME = "findings"
RULES_PAGE_NAME = "rules"
STORE_PREFIX = "machines_"
"""The prefix of a store's own tables and functions (its registry of definitions, its record
of repairs): a machine's tables and guards are named after it, so no machine's name may
start with it (outsider batch 35, a G: a machine named ``machines_repairs`` made every
PostgreSQL open fail, its guard's name taken by the record of repairs' own)."""

CONTEXT_COLUMN = "ctx_"
"""The prefix of a context variable's column in a store's table of legal moves."""

MAX_CONTEXT_NAME = 63 - len(CONTEXT_COLUMN)
"""The longest context variable name: its column's name must fit PostgreSQL's 63 bytes, or
PostgreSQL cuts it (outsider batch 39, c B4: a 70-character variable checked clean and
every PostgreSQL store of it was refused as tampered; two sharing 60 characters made one
column twice)."""

RESERVED_MACHINE_PREFIXES = (STORE_PREFIX, "sqlite_", "pg_")
"""The prefixes no machine's name may start with: the store's own (``STORE_PREFIX``), and
the databases' (SQLite refuses a table whose name starts with ``sqlite_``; PostgreSQL
keeps ``pg_`` for its own objects), so that every definition ``machines check`` passes can
be stored (outsider batch 36, a: a machine named ``sqlite_x`` checked clean and every open
failed)."""


def reserved_prefix(machine: str) -> str | None:
    """The reserved prefix the tables of ``machine`` would start with (they are named
    ``<machine>_entities`` and so on, so a machine named ``sqlite`` is refused as surely
    as ``sqlite_x``: outsider batch 37), or None."""
    return next((p for p in RESERVED_MACHINE_PREFIXES if f"{machine}_".startswith(p)), None)


RESERVED_MACHINES = frozenset({FINDINGS_PAGE_NAME, RULES_PAGE_NAME})
"""Machine names a definition may not take: the pages about a set of definitions sit beside
the machines' own (``<machine>.md``), and these two are the findings and rules pages."""


@dataclass(frozen=True)
class BaselineRule:
    """A rule every machine keeps unless its definition opts out of it (``opt_out:``, with
    a reason): the loader adds it, under ``id``, when the definition declares no rule of
    its kind."""

    kind: Literal["terminal_final", "all_reachable", "can_terminate"]
    id: str
    description: str


BASELINE_RULES: Mapping[str, BaselineRule] = MappingProxyType(
    {
        rule.kind: rule
        for rule in (
            BaselineRule(
                "terminal_final",
                "terminal-final",
                "Nothing leaves a terminal state: an entity that has ended stays ended.",
            ),
            BaselineRule(
                "all_reachable",
                "all-reachable",
                "Every state is reached by some path from the initial state.",
            ),
            BaselineRule(
                "can_terminate",
                "can-terminate",
                "From every state some path reaches a terminal state: no entity is stuck.",
            ),
        )
    }
)


GuardForm = Literal["text", "markdown", "label"]


def describe_guard(when: Mapping[str, Set[str]], form: GuardForm = "text") -> str:
    """A guard (context variable -> admitted values) as the package writes it, values
    sorted, one form per medium so that a message, a page and a diagram say the same:

    - ``text``, in errors and findings: ``tier in [compensable] and mode in [live, paper]``;
    - ``markdown``, on the site: ```tier` in compensable, `mode` in live, paper``;
    - ``label``, on a diagram's edge: ``tier=compensable, mode=live|paper``."""
    if form == "text":
        return " and ".join(f"{var} in [{', '.join(sorted(v))}]" for var, v in when.items())
    if form == "markdown":
        return ", ".join(f"`{var}` in {', '.join(sorted(v))}" for var, v in when.items())
    return ", ".join(f"{var}={'|'.join(sorted(v))}" for var, v in when.items())
