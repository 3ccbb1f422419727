"""What every store shares: the row type, the errors, the protocol, the rules of a write.

A store keeps, per machine, one row per entity (keyed by its idempotency key / call
signature / id) and that entity's append-only history. Rows are only ever created in the
machine's initial state and only ever change state through ``Transaction.move``, which
decides the move with the spec (``spec.step``), checks that nobody wrote the row since it
was read (compare-and-set on ``version``: the fencing token), and writes the new state and
its history event in one transaction.

Every public method of every store checks its arguments first, with the functions of
``machines.store.arguments`` (the same ones on every store), and only then reads or
writes: what one store refuses, every store refuses, with the same error, and nothing has
changed when it does.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, Self

from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.jsonvalue import UnstorableValue, describe, dumps, dumps_object

MAX_KEY_BYTES = 1000
"""The longest key or scope, in bytes of UTF-8 (1,000 ASCII characters, 250 of four bytes
each). PostgreSQL cannot index a text over about 2,700 bytes, so a limit in characters
would let one store accept what another refuses."""

MAX_STORED_INT = 2**63 - 1
"""The largest whole number a store holds (SQLite's INTEGER, PostgreSQL's bigint): a
row's version, a history event's ``seq``, a sequence's limit."""
MAX_DUE = 10_000
"""The most rows one ``Transaction.due`` call returns: a polling worker takes batches."""


class StoreError(MachinesError):
    """The store cannot do what was asked: the database refused, failed or cannot be
    opened, or the row changed since it was read (``StaleWrite``). An argument the store
    refuses before it reads or writes is ``machines.errors.InvalidArgument`` instead."""


class UnstorableData(StoreError, UnstorableValue):
    """A data, context or detail value the store cannot keep exactly: not a mapping, or
    not plain JSON that reads back equal (``machines.spec.jsonvalue``: a tuple, a non-str key,
    a set, NaN, an integer too long to print, a lone surrogate, NUL, deep nesting, an
    object JSON cannot hold). Both a ``StoreError`` (nothing was written) and an
    ``UnstorableValue``; the message names the machine, the key and the column."""


class StaleWrite(StoreError):
    """The row changed since it was read: a concurrent writer, or a lease taken over.
    Nothing was written; re-read and decide again."""


class RecordExists(StoreError):
    """A row with this key exists but belongs to another scope or context."""


@dataclass(frozen=True)
class DefinitionVersion:
    """One version of one machine's definition, as a database records it."""

    machine: str
    version: int
    digest: str
    """The semantic digest of the definition (``machines.spec.canonical.semantic_digest``)."""
    fingerprint: str
    """The digest of the schema generated for it (both the definition and the version
    number are in that schema)."""
    definition: str
    """The definition's loadable text (``machines.spec.document.as_json``)."""
    installed_at: float


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
    """One atomic unit of work. Leaving the ``with`` block by an exception rolls it back.

    Every method checks all its arguments before it reads or writes, identically on every
    store, and raises only these (nothing is changed when one is raised, even if the
    caller catches it and commits the transaction):

    - ``InvalidArgument`` (from ``machines.errors``; not a ``StoreError``): an unknown
      machine or state; a ``key`` or ``scope`` that is not a non-empty ``str`` of at most
      ``MAX_KEY_BYTES`` bytes of UTF-8 without NUL (a ``str`` subclass such as a
      ``StrEnum`` counts as its text); a trigger, actor or field that is not a ``str``; a
      ``before`` that is not a number, a
      ``limit`` that is not an int from 1 to ``MAX_DUE``; a ``row`` that is not a ``Row``
      as this store returned it.
    - ``UnstorableData`` (a ``StoreError`` and an ``UnstorableValue``): ``data`` or
      ``detail`` is not a mapping of plain JSON that reads back equal. This is the one
      type a caller catches to learn that a value, such as an effect's result, cannot be
      stored.
    - ``ContextError``: a context that is not a mapping of str to str, or that the machine
      refuses. ``InvalidStateTransition``: the spec refuses the move.
    - ``StaleWrite``, ``RecordExists`` and other ``StoreError``s, as each method says.

    What a store accepts comes back equal, of the same JSON types, from every store.
    """

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
        created)``. Never overwrites (``INSERT ... ON CONFLICT DO NOTHING``); a row found
        with another scope or context is ``RecordExists``. ``scope`` is None or follows
        the key rule. ``context`` gives a value for every fixed context variable and no
        derived one (those are given per move); every later move is judged against it
        (``ContextError``)."""

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
        """Replace the data of ``row`` (as read) with ``data`` (a mapping) without a state
        change; ``StaleWrite`` when it changed since. In a terminal state only the fields
        the state declares as ``annotations`` may change (``StoreError`` otherwise)."""

    def history(self, machine: str, key: str) -> list[TransitionEvent]:
        """Every move of ``key``, oldest first (one event per move, numbered from 1)."""

    def definition_versions(self, machine: str) -> list[DefinitionVersion]:
        """Every version of ``machine``'s definition the store has served, oldest first;
        the last is the one it enforces now (``machines.store.versions``)."""

    def event_versions(self, machine: str, key: str) -> list[int]:
        """The definition version each event of ``history(machine, key)`` was made
        under, one number per event in ``seq`` order."""

    def scope(self, machine: str, scope: str) -> list[Row]:
        """Rows of one scope (a session, a request), oldest first. ``scope`` follows the
        key rule: None is refused, never taken to mean the unscoped rows."""

    def rows(self, machine: str) -> list[Row]:
        """Every row of a machine, oldest first (audits, invariant checks)."""

    def in_states(
        self, machine: str, states: Collection[str], *, limit: int, offset: int = 0
    ) -> list[Row]:
        """Up to ``limit`` rows in any of ``states`` (a list of names; none for an empty
        one), skipping the first ``offset``: those that have waited longest first (by the
        time of their last write, then creation order), for a person's list of what waits
        on them (``machines desk``). ``limit`` is 1 to ``MAX_PAGE``. A row that cannot be
        read (written outside the store: the audit names it, and no person's move could be
        made on it) is left out, in its place, so that it does not empty the list of
        everything else that waits."""

    def counts(self, machine: str) -> dict[str, int]:
        """How many rows of ``machine`` are in each state that holds any."""

    def due(self, machine: str, state: str, *, field: str, before: float, limit: int) -> list[Row]:
        """Up to ``limit`` rows in ``state`` whose number ``data[field]`` is below
        ``before`` (a number, not NaN), oldest first, for a worker that polls (a sweeper of
        expired leases). They are this transaction's to move: PostgreSQL locks them and
        skips rows another transaction holds (``FOR UPDATE SKIP LOCKED``), so sweepers
        never wait on each other; SQLite and memory hold the whole store for the
        transaction anyway. A row that cannot be read (written outside the store: the
        audit names it) is left out, so that it does not stop the sweep of the others."""


class Store(Protocol):
    """Where the rows live (``open_store(url)``): memory, SQLite or PostgreSQL, with the
    same promises. Safe to share between threads; each thread gets its own connection.
    ``insert`` and ``move`` check their arguments and raise as ``Transaction``'s do."""

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


class OpenedStore(Store, Protocol):
    """What ``open_store`` returns: a ``Store`` that a ``with`` block closes at its end.
    A store of your own that the systems take need only be a ``Store``."""

    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...


def closed_store(where: str) -> StoreError:
    """What a closed store says to its next use: reopening it quietly would hide a bug (a
    store closed while a thread still works with it), and keep a connection nobody closes."""
    return StoreError(f"{where}: this store was closed; open it again with open_store(url)")


class ClosedOnExit:
    """``with open_store(url) as store:``: the store, closed when the block ends (an error
    in the block goes on after the close)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def ended(where: str) -> StoreError:
    """What a transaction used after its ``with`` block says: its work was committed or
    rolled back, so a later read or write through it would belong to no transaction."""
    return StoreError(
        f"{where}: this transaction has ended (its with block is over); "
        "open a new one with store.transaction()"
    )


def shown_url(url: str) -> str:
    """``url`` as it may appear in a message or a log: a password, in the authority or in
    the query (``password=``), is replaced by ``***``. A URL that does not parse (an
    unclosed ``[`` host) is shown with everything between ``//`` and ``@`` past the user
    name hidden."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


_PASSWORDS = re.compile(r"(?i)(//[^:/@\s]*:)[^@\s]*(@)|((?:^|[?&\s])password=)[^&\s]*")


_SECRETS = re.compile(r"(?i)//[^:/@\s]*:([^@\s]*)@|(?:^|[?&])password=([^&\s]*)")


def hide_passwords(text: str, url: str = "") -> str:
    """``text`` (a message, an echoed command line, a driver's error that quotes a URL)
    with every password of a URL in it replaced by ``***``: ``//user:***@`` and
    ``password=***``, whether the URL parses or not; and, given the ``url`` the text is
    about, its password wherever the text quotes it alone (libpq quotes a token it cannot
    decode: ``invalid percent-encoded token: "S3CRET%PW"``)."""
    secrets = [m.group(1) or m.group(2) or "" for m in _SECRETS.finditer(url)]
    for form in {f for secret in secrets for f in (secret, urllib.parse.unquote(secret))}:
        if len(form) >= 3:  # a shorter one would mask half the message
            text = text.replace(form, "***")
    return _PASSWORDS.sub(
        lambda m: f"{m.group(1)}***{m.group(2)}" if m.group(1) else f"{m.group(3)}***", text
    )


def as_read(current: Row | None, row: Row) -> bool:
    """Whether the stored ``current`` is still ``row`` as it was read: the fence of every
    write. The version alone would do for rows the store returned; state and move count
    too refuse a row made up from another."""
    return (
        current is not None
        and current.version == row.version
        and current.state == row.state
        and current.moves == row.moves
    )


def check_annotations(spec: MachineSpec, row: Row, data: Mapping[str, Any]) -> None:
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
    for field in kept:
        value = data.get(field)
        if isinstance(value, Mapping | list | tuple):  # one that could hold a key twice
            raise StoreError(
                f"{row.machine} '{row.key}' is {row.state}, a terminal state: its annotation "
                f"'{field}' may hold a text, a number, true, false or null, not "
                f"{describe(value)}"
            )


def same_entity(row: Row, scope: str | None, context: Mapping[str, str] | None) -> Row:
    """``row`` when an insert that found it asked for the same scope and context; a key
    belongs to one entity, so anything else is ``RecordExists``."""
    if row.scope != scope or dict(row.context) != dict(context or {}):
        raise RecordExists(
            f"{row.machine} {describe(row.key)} exists with scope {describe(row.scope)} and "
            f"context {dict(row.context)}; it was asked for with scope {describe(scope)} and "
            f"context {dict(context or {})}"
        )
    return row


# -- values ---------------------------------------------------------------------------


def encode(
    value: Mapping[str, Any] | None, machine: str = "?", key: str = "?", column: str = "value"
) -> str:
    """The exact JSON text of a data, context or detail column (None: an empty object),
    by the one rule of ``machines.spec.jsonvalue``; ``UnstorableData`` names the machine, the
    key and the column."""
    if value is None or (type(value) is MappingProxyType and not value):
        return "{}"
    try:
        return dumps_object(value, what=column)
    except UnstorableValue as refused:
        problem = str(refused)
    except Exception as exc:  # a Mapping whose own methods raise
        problem = f"{column} cannot be stored: reading it raised {type(exc).__name__}"
    raise UnstorableData(f"{machine} {describe(key)}: {problem}")
