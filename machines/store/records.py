"""What every store shares: the row type, the errors, the protocol, the move rules.

A store keeps, per machine, one row per entity (keyed by its idempotency key / call
signature / id) and that entity's append-only history. Rows are only ever created in the
machine's initial state and only ever change state through ``Transaction.move``, which
decides the move with the spec (``spec.step``), checks that nobody wrote the row since it
was read (compare-and-set on ``version``: the fencing token), and writes the new state and
its history event in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from machines.errors import ContextError, MachinesError
from machines.history import TransitionEvent
from machines.jsonvalue import describe, dumps
from machines.spec import MachineSpec


class StoreError(MachinesError):
    """The store cannot do what was asked (bad URL, broken database, unknown machine)."""


class StaleWrite(StoreError):
    """The row changed since it was read: a concurrent writer, or a lease taken over.
    Nothing was written; re-read and decide again."""


class RecordExists(StoreError):
    """A row with this key exists but belongs to another scope or context."""


@dataclass(frozen=True)
class Row:
    """One entity as stored. ``version`` grows on every write and fences writers."""

    machine: str
    key: str
    state: str
    context: Mapping[str, str]
    data: Mapping[str, Any]
    scope: str | None
    ordinal: int  # creation order within the machine (LIFO compensation sorts on it)
    moves: int  # number of state changes = length of the history
    version: int
    created_at: float
    updated_at: float


class Transaction(Protocol):
    """One atomic unit of work. Leaving the ``with`` block by an exception rolls it back."""

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        """Create the row in the initial state, or return the existing one: ``(row,
        created)``. Never overwrites (``INSERT ... ON CONFLICT DO NOTHING``). ``context``
        gives a value for every fixed context variable and no derived one (those are
        given per move); every later move is judged against it (``ContextError``)."""

    def get(self, machine: str, key: str) -> Row | None:
        """The row of ``key``, or None."""

    def move(
        self,
        row: Row,
        trigger: str,
        *,
        actor: str,
        context: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Row:
        """Fire ``trigger`` on ``row`` (as read at ``row.version``): the new row.

        Raises ``InvalidStateTransition`` when the spec refuses, ``StaleWrite`` when the
        row changed since it was read. ``data`` replaces the row's data when given.
        ``context`` gives the derived context variables (a request's ``side_effects``);
        a fixed one may only repeat the stored value (``ContextError`` otherwise)."""

    def update(self, row: Row, data: Mapping[str, Any]) -> Row:
        """Replace the data of ``row`` (as read) without a state change; ``StaleWrite``
        when it changed since. In a terminal state only the fields the state declares as
        ``annotations`` may change (``StoreError`` otherwise)."""

    def history(self, machine: str, key: str) -> list[TransitionEvent]:
        """Every move of ``key``, oldest first (one event per move, numbered from 1)."""

    def scope(self, machine: str, scope: str) -> list[Row]:
        """Rows of one scope (a session, a request), oldest first."""

    def rows(self, machine: str) -> list[Row]:
        """Every row of a machine, oldest first (audits, invariant checks)."""

    def due(self, machine: str, state: str, *, field: str, before: float, limit: int) -> list[Row]:
        """Up to ``limit`` rows in ``state`` whose number ``data[field]`` is below
        ``before``, oldest first, for a worker that polls (a sweeper of expired leases).
        They are this transaction's to move: PostgreSQL locks them and skips rows another
        transaction holds (``FOR UPDATE SKIP LOCKED``), so sweepers never wait on each
        other; SQLite and memory hold the whole store for the transaction anyway."""


class Store(Protocol):
    """Where the rows live (``open_store(url)``): memory, SQLite or PostgreSQL, with the
    same promises. Safe to share between threads; each thread gets its own connection."""

    url: str

    def transaction(self) -> AbstractContextManager[Transaction]:
        """``with store.transaction() as tx:`` one atomic unit of work, committed when the
        block ends and rolled back if it raises. Transactions do not nest."""

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        """``Transaction.insert`` as a transaction of its own (a claim's hot path: a
        database may commit it as one statement)."""

    def move(
        self,
        row: Row,
        trigger: str,
        *,
        actor: str,
        context: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Row:
        """``Transaction.move`` as a transaction of its own (settling a claim)."""

    def specs(self) -> Mapping[str, MachineSpec]:
        """The definitions this store's tables were made for, by machine name."""

    def close(self) -> None:
        """Release the connections (a store may be reopened with ``open_store``)."""


class OneWriteTransactions:
    """``Store.insert`` and ``Store.move`` as a transaction around the one write, for a
    store with no cheaper way to commit a single write."""

    def transaction(self) -> AbstractContextManager[Transaction]:
        raise NotImplementedError

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        with self.transaction() as tx:
            return tx.insert(machine, key, context=context, data=data, scope=scope)

    def move(
        self,
        row: Row,
        trigger: str,
        *,
        actor: str,
        context: Mapping[str, str] | None = None,
        detail: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Row:
        with self.transaction() as tx:
            return tx.move(row, trigger, actor=actor, context=context, detail=detail, data=data)


def derived_variables(spec: MachineSpec) -> frozenset[str]:
    """The context variables the spec's derivation computes per move (a request's
    ``side_effects``, from its nodes); every other variable is fixed when the entity is
    created."""
    return frozenset(spec.derivation.context) if spec.derivation is not None else frozenset()


def creation_context(spec: MachineSpec, context: Mapping[str, str] | None) -> Mapping[str, str]:
    """``context`` when it fits an entity being created: a value the spec admits for every
    fixed variable and nothing else (a derived variable is given per move, never stored);
    ``ContextError`` otherwise. The guards of every later move are judged against it."""
    given = {} if context is None else _strings(spec, context)
    spec.stepper(**given)  # unknown variables and refused values
    derived = derived_variables(spec)
    stored = sorted(derived.intersection(given))
    if stored:
        raise ContextError(
            f"{spec.name}: {', '.join(stored)} is derived for each move, not stored when an "
            "entity is created; leave it out"
        )
    missing = [v for v in spec.context if v not in derived and v not in given]
    if missing:
        raise ContextError(
            f"{spec.name}: an entity is created with a value for each fixed context variable; "
            f"missing: {', '.join(missing)}"
        )
    return given


def decide_move(
    specs: Mapping[str, MachineSpec],
    row: Row,
    trigger: str,
    actor: str,
    context: Mapping[str, str] | None,
) -> tuple[str, Mapping[str, str]]:
    """The destination and full context of a move, decided by the spec against the
    entity's stored context; raises ``InvalidStateTransition`` / ``ContextError`` exactly
    as ``spec.step`` does. ``context`` may give the derived variables (computed per move);
    a fixed variable it gives must equal the stored value (a ``ContextError`` names it), so
    that no caller can judge a move under a context the entity was not created with."""
    spec = spec_for(specs, row.machine)
    if context is None:
        return spec.step(row.state, trigger, actor=actor, **row.context), row.context
    derived = derived_variables(spec)
    for var, value in _strings(spec, context).items():
        if var not in derived and var in spec.context and row.context.get(var) != value:
            raise ContextError(
                f"{spec.name} '{row.key}': context variable '{var}' is fixed when the entity "
                f"is created ({var}={row.context.get(var)!r}); a move cannot give it another "
                f"value ({describe(value)})"
            )
    full = MappingProxyType({**row.context, **context})
    return spec.step(row.state, trigger, actor=actor, **full), full


def _strings(spec: MachineSpec, context: object) -> Mapping[str, str]:
    """``context`` if it maps names to strings; ``ContextError`` otherwise."""
    if not isinstance(context, Mapping):
        raise ContextError(
            f"{spec.name}: a context is a mapping of variable names to values, "
            f"not a {type(context).__name__}"
        )
    for var, value in context.items():
        if not isinstance(var, str) or not isinstance(value, str):
            raise ContextError(
                f"{spec.name}: a context maps variable names to string values; "
                f"got {describe(var)}: {describe(value)}"
            )
    return context


def check_update(spec: MachineSpec, row: Row, data: Mapping[str, Any]) -> None:
    """Refuse (``StoreError``) new data for an entity in a terminal state that changes
    anything but the fields its state declares as annotations (a replay count): what a
    finished entity recorded, a cached result above all, never changes."""
    state = spec.states.get(row.state)
    if state is None or not state.terminal:
        return
    kept = state.annotations

    def recorded(value: Mapping[str, Any]) -> str:
        return dumps({k: v for k, v in value.items() if k not in kept}, what="the data")

    if recorded(data) != recorded(row.data):
        changed = sorted(
            k
            for k in {*data, *row.data} - set(kept)
            if k not in data or k not in row.data or dumps(data[k]) != dumps(row.data[k])
        )
        allowed = ", ".join(kept) or "none"
        raise StoreError(
            f"{row.machine} '{row.key}' is {row.state}, a terminal state: its data never "
            f"changes except its annotations ({allowed}); refused a change of "
            f"{', '.join(changed)}"
        )


def same_entity(row: Row, scope: str | None, context: Mapping[str, str] | None) -> Row:
    """``row`` when an insert that found it asked for the same scope and context; a key
    belongs to one entity, so anything else is ``RecordExists``."""
    if row.scope != scope or dict(row.context) != dict(context or {}):
        raise RecordExists(
            f"{row.machine} '{row.key}' exists with scope {row.scope!r} and context "
            f"{dict(row.context)}; it was asked for with scope {scope!r} and context "
            f"{dict(context or {})}"
        )
    return row


def spec_for(specs: Mapping[str, MachineSpec], machine: str) -> MachineSpec:
    try:
        return specs[machine]
    except KeyError:
        raise StoreError(
            f"this store has no machine '{machine}'; it has: {', '.join(sorted(specs))}"
        ) from None


def encode(value: Mapping[str, Any] | None) -> str:
    """JSON for a data, context or detail column; refuses what JSON cannot hold."""
    try:
        return json.dumps(dict(value or {}), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store {value!r} as JSON: {exc}") from exc


def decode(text: str | None) -> Mapping[str, Any]:
    return MappingProxyType(json.loads(text)) if text else MappingProxyType({})


def frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


def rows_in_order(rows: Iterator[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r.ordinal)
