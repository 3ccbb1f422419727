"""``memory://``: the same contract as the SQL stores, in one process, for tests and tools.

Transactions are serialised by one lock and keep an undo log, so an exception inside the
``with`` block rolls everything back. Values go through the same JSON encoding as the SQL
stores, so what one accepts the other accepts too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from machines.history import Clock, TransitionEvent
from machines.spec import MachineSpec
from machines.store.records import (
    OneWriteTransactions,
    Row,
    StaleWrite,
    StoreError,
    check_update,
    creation_context,
    decide_move,
    decode,
    encode,
    same_entity,
    spec_for,
)


class MemoryStore(OneWriteTransactions):
    def __init__(self, specs: Mapping[str, MachineSpec], clock: Clock = time.time) -> None:
        self.url = "memory://"
        self._specs = dict(specs)
        self._clock = clock
        self._lock = threading.RLock()
        self._open = False  # held by this store's one transaction at a time
        self._rows: dict[tuple[str, str], Row] = {}
        self._history: dict[tuple[str, str], list[TransitionEvent]] = {}
        self._ordinal = 0

    def specs(self) -> Mapping[str, MachineSpec]:
        return self._specs

    @contextmanager
    def transaction(self) -> Iterator[_MemoryTransaction]:
        with self._lock:
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
                self._open = False

    def close(self) -> None:
        """Nothing to release; the data lives as long as the object."""


class _MemoryTransaction:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._undo: list[tuple[str, Any]] = []

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

    def _put(self, row: Row) -> Row:
        key = (row.machine, row.key)
        self._undo.append(("row", (key, self._store._rows.get(key))))
        self._store._rows[key] = row
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
        spec = spec_for(self._store._specs, machine)
        creation_context(spec, context)
        existing = self._store._rows.get((machine, key))
        if existing is not None:
            return same_entity(existing, scope, context), False
        self._undo.append(("ordinal", self._store._ordinal))
        self._store._ordinal += 1
        now = self._store._clock()
        row = Row(
            machine,
            key,
            spec.initial,
            decode(encode(context)),
            decode(encode(data)),
            scope,
            self._store._ordinal,
            0,
            1,
            now,
            now,
        )
        return self._put(row), True

    def get(self, machine: str, key: str) -> Row | None:
        spec_for(self._store._specs, machine)
        return self._store._rows.get((machine, key))

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
        dest, full = decide_move(self._store._specs, row, trigger, actor, context)
        current = self.get(row.machine, row.key)
        if current is None or current.version != row.version:
            raise StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        now = self._store._clock()
        event = TransitionEvent(
            row.machine,
            row.key,
            row.moves + 1,
            row.state,
            dest,
            trigger,
            actor,
            None if detail is None else decode(encode(detail)),
            decode(encode(full)),
            now,
        )
        history_key = (row.machine, row.key)
        self._store._history.setdefault(history_key, []).append(event)
        self._undo.append(("event", history_key))
        new_data = row.data if data is None else decode(encode(data))
        return self._put(
            replace(
                current,
                state=dest,
                moves=current.moves + 1,
                version=current.version + 1,
                data=new_data,
                updated_at=now,
            )
        )

    def update(self, row: Row, data: Mapping[str, Any]) -> Row:
        current = self.get(row.machine, row.key)
        if current is None or current.version != row.version:
            raise StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        new_data = decode(encode(data))
        check_update(self._store._specs[row.machine], current, data)
        return self._put(
            replace(
                current,
                data=new_data,
                version=current.version + 1,
                updated_at=self._store._clock(),
            )
        )

    def history(self, machine: str, key: str) -> list[TransitionEvent]:
        spec_for(self._store._specs, machine)
        return list(self._store._history.get((machine, key), ()))

    def scope(self, machine: str, scope: str) -> list[Row]:
        return [r for r in self.rows(machine) if r.scope == scope]

    def due(self, machine: str, state: str, *, field: str, before: float, limit: int) -> list[Row]:
        def is_due(row: Row) -> bool:
            value = row.data.get(field)
            return (
                isinstance(value, int | float) and not isinstance(value, bool) and (value < before)
            )

        due = [r for r in self.rows(machine) if r.state == state and is_due(r)]
        return due[:limit]

    def rows(self, machine: str) -> list[Row]:
        spec_for(self._store._specs, machine)
        return sorted(
            (r for (m, _), r in self._store._rows.items() if m == machine),
            key=lambda r: r.ordinal,
        )
