"""``memory://``: the same contract as the SQL stores, in one process, for tests and tools.

Transactions are serialised by one lock and keep an undo log, so an exception inside the
``with`` block rolls everything back. Values go through the same checks and JSON encoding
as the SQL stores, so what one accepts the other accepts too; like a database, the store
keeps each value's JSON text and every read decodes it afresh, so changing a value read
from the store (a list inside ``row.data``) changes nothing stored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from machines.runtime.history import Clock, TransitionEvent
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.document import as_json
from machines.store.arguments import (
    check_due,
    check_insert,
    check_key,
    check_move,
    check_page,
    check_update,
    decide_move,
    spec_for,
)
from machines.store.records import (
    ClosedOnExit,
    OneWriteTransactions,
    Row,
    StaleWrite,
    StoreError,
    as_read,
    check_annotations,
    closed_store,
    encode,
    ended,
    same_entity,
)
from machines.store.stored_json import decode
from machines.store.versions import DefinitionVersion

_Stored = tuple[Row, str]  # a row and the JSON text of its data, which every read decodes
_Event = tuple[TransitionEvent, str | None]  # the event and the JSON text of its detail


class MemoryStore(OneWriteTransactions, ClosedOnExit):
    def __init__(self, specs: Mapping[str, MachineSpec], clock: Clock = time.time) -> None:
        self.url = "memory://"
        self._specs = dict(specs)
        self._clock = clock
        self._lock = threading.RLock()
        self._open = False  # held by this store's one transaction at a time
        self._rows: dict[tuple[str, str], _Stored] = {}
        self._history: dict[tuple[str, str], list[_Event]] = {}
        self._ordinal = 0
        self._versions: dict[str, DefinitionVersion] = {}
        self._closed = False

    def specs(self) -> Mapping[str, MachineSpec]:
        return self._specs

    @contextmanager
    def transaction(self) -> Iterator[_MemoryTransaction]:
        with self._lock:
            if self._closed:
                raise closed_store("memory://")
            if self._open:
                raise StoreError(
                    "memory://: a transaction is already open in this thread; "
                    "transactions do not nest"
                )
            self._open = True
            tx = _MemoryTransaction(self)
            try:
                yield tx
            except BaseException:
                tx.rollback()
                raise
            finally:
                tx.end()
                self._open = False

    def close(self) -> None:
        """Nothing to release, but a closed store refuses its next use, as the others do
        (a test on memory:// must fail where the same code would on a database)."""
        self._closed = True


def _read(stored: _Stored) -> Row:
    row, data_json = stored
    return replace(row, data=decode(data_json))


class _MemoryTransaction:
    def __init__(self, store: MemoryStore) -> None:
        self._owner: MemoryStore | None = store
        self._undo: list[tuple[str, Any]] = []

    @property
    def _store(self) -> MemoryStore:
        """The store, while the transaction lasts; after its ``with`` block, a
        ``StoreError`` for every call."""
        if self._owner is None:
            raise ended("memory://")
        return self._owner

    def end(self) -> None:
        self._owner = None

    def rollback(self) -> None:
        store = self._store
        for kind, payload in reversed(self._undo):
            if kind == "row":
                key, previous = payload
                if previous is None:
                    del store._rows[key]
                else:
                    store._rows[key] = previous
            elif kind == "event":
                store._history[payload].pop()
            elif kind == "ordinal":
                store._ordinal = payload

    def _put(self, row: Row, data_json: str) -> Row:
        key = (row.machine, row.key)
        self._undo.append(("row", (key, self._store._rows.get(key))))
        self._store._rows[key] = (row, data_json)
        return row

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        store = self._store
        spec, key, context, scope = check_insert(store._specs, machine, key, context, scope)
        context_json = encode(context, spec.name, key, "context")
        data_json = encode(data, spec.name, key, "data")
        existing = store._rows.get((spec.name, key))
        if existing is not None:
            return same_entity(_read(existing), scope, context), False
        now = store._clock()
        self._undo.append(("ordinal", store._ordinal))
        store._ordinal += 1
        row = Row(
            spec.name,
            key,
            spec.initial,
            decode(context_json),
            decode(data_json),
            scope,
            store._ordinal,
            0,
            1,
            now,
            now,
        )
        return self._put(row, data_json), True

    def get(self, machine: str, key: str) -> Row | None:
        spec = spec_for(self._store._specs, machine)
        stored = self._store._rows.get((spec.name, check_key(key, spec.name)))
        return None if stored is None else _read(stored)

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
        store = self._store
        trigger, actor, context = check_move(
            store._specs, row, trigger, actor, context, detail, data
        )
        dest, full = decide_move(store._specs, row, trigger, actor, context)
        m, key = row.machine, row.key
        detail_json = None if detail is None else encode(detail, m, key, "detail")
        context_json = encode(full, m, key, "context")
        data_json = encode(row.data if data is None else data, m, key, "data")
        current = self._current(row)
        now = store._clock()
        event = TransitionEvent(
            m,
            key,
            row.moves + 1,
            row.state,
            dest,
            trigger,
            actor,
            None,
            decode(context_json),
            now,
        )
        store._history.setdefault((m, key), []).append((event, detail_json))
        self._undo.append(("event", (m, key)))
        changed = replace(
            current,
            state=dest,
            data=decode(data_json),
            moves=current.moves + 1,
            version=current.version + 1,
            updated_at=now,
        )
        return self._put(changed, data_json)

    def update(self, row: Row, data: Mapping[str, Any]) -> Row:
        spec = check_update(self._store._specs, row, data)
        data_json = encode(data, row.machine, row.key, "data")
        current = self._current(row)
        check_annotations(spec, current, data)
        now = self._store._clock()
        changed = replace(
            current, data=decode(data_json), version=current.version + 1, updated_at=now
        )
        return self._put(changed, data_json)

    def _current(self, row: Row) -> Row:
        """The stored row that ``row`` says it is: the same version, state, move count and
        context (a row from another read, or made up, is ``StaleWrite``)."""
        stored = self._store._rows.get((row.machine, row.key))
        current = None if stored is None else stored[0]
        if current is None or not as_read(current, row) or current.context != row.context:
            raise StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        return current

    def history(self, machine: str, key: str) -> list[TransitionEvent]:
        spec = spec_for(self._store._specs, machine)
        events = self._store._history.get((spec.name, check_key(key, spec.name)), ())
        return [
            event if detail is None else event._replace(detail=decode(detail))
            for event, detail in events
        ]

    def definition_versions(self, machine: str) -> list[DefinitionVersion]:
        """A memory store starts empty, so it serves one version of each definition."""
        spec = spec_for(self._store._specs, machine)
        versions = self._store._versions
        if spec.name not in versions:  # made on first ask: only then is the clock read
            versions[spec.name] = DefinitionVersion(
                spec.name, 1, semantic_digest(spec), "", as_json(spec), self._store._clock()
            )
        return [versions[spec.name]]

    def event_versions(self, machine: str, key: str) -> list[int]:
        return [1] * len(self.history(machine, key))

    def scope(self, machine: str, scope: str) -> list[Row]:
        spec = spec_for(self._store._specs, machine)
        scope = check_key(scope, spec.name, "scope")
        held = [
            stored
            for (m, _), stored in self._store._rows.items()
            if m == spec.name and stored[0].scope == scope
        ]  # decoded only once picked: a scope is a few rows of many
        return sorted(map(_read, held), key=lambda r: r.ordinal)

    def in_states(
        self, machine: str, states: Collection[str], *, limit: int, offset: int = 0
    ) -> list[Row]:
        spec = spec_for(self._store._specs, machine)
        wanted, limit, offset = check_page(spec, states, limit, offset)
        found = [r for r in self.rows(machine) if r.state in wanted]
        found.sort(key=lambda r: (r.updated_at, r.ordinal))
        return found[offset : offset + limit]

    def counts(self, machine: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows(machine):
            out[row.state] = out.get(row.state, 0) + 1
        return out

    def due(self, machine: str, state: str, *, field: str, before: float, limit: int) -> list[Row]:
        spec = spec_for(self._store._specs, machine)
        state, field, before, limit = check_due(spec, state, field, before, limit)

        def is_due(row: Row) -> bool:
            value = row.data.get(field)
            return (
                isinstance(value, int | float) and not isinstance(value, bool) and (value < before)
            )

        due = [r for r in self.rows(machine) if r.state == state and is_due(r)]
        return due[:limit]

    def rows(self, machine: str) -> list[Row]:
        spec = spec_for(self._store._specs, machine)
        return sorted(
            (_read(stored) for (m, _), stored in self._store._rows.items() if m == spec.name),
            key=lambda r: r.ordinal,
        )
