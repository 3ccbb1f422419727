"""What the SQLite and PostgreSQL transactions share: the same statements on the same
generated tables (named by ``machines.store.names``), told apart only by their dialect
(placeholders, JSON columns, the creation-order column, how a refusal arrives). A move is
one statement on both: the entity UPDATE fenced by the version it read, naming the move in
its ``last_*`` columns; the database checks it and writes its history event itself
(``machines.store.ddl``), so a lost race matches no row and never aborts the transaction."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, Protocol

from machines.runtime.history import Clock, TransitionEvent
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.document import as_json
from machines.spec.jsonvalue import describe
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
from machines.store.ddl import REGISTRY
from machines.store.names import name
from machines.store.records import (
    Row,
    StaleWrite,
    StoreError,
    check_annotations,
    encode,
    ended,
    same_entity,
)
from machines.store.stored_json import decode, typed
from machines.store.versions import VERSION_COLUMNS, DefinitionVersion, fits


def read_versions(conn: Connection, param: str, machine: str) -> list[DefinitionVersion]:
    """Every version of ``machine``'s definition the database records, oldest first."""
    rows: list[tuple[Any, ...]] = conn.execute(
        f"SELECT {VERSION_COLUMNS} FROM {REGISTRY} WHERE machine = {param} ORDER BY version",
        (machine,),
    ).fetchall()
    return [DefinitionVersion(*row) for row in rows]


def record_version(
    conn: Connection, param: str, spec: MachineSpec, version: int, fingerprint: str, now: float
) -> DefinitionVersion:
    """Add ``spec`` to the registry as ``version`` of its machine (the database refuses any
    number but the next)."""
    row = DefinitionVersion(
        spec.name, version, semantic_digest(spec), fingerprint, as_json(spec), now
    )
    conn.execute(
        f"INSERT INTO {REGISTRY} ({VERSION_COLUMNS}) VALUES ({', '.join([param] * 6)})",
        (row.machine, row.version, row.digest, row.fingerprint, row.definition, now),
    )
    return row


def current_versions(
    conn: Connection,
    param: str,
    where: str,
    specs: Mapping[str, MachineSpec],
    fingerprint: Callable[[MachineSpec, int], str],
    served: Mapping[str, DefinitionVersion | None] | None = None,
) -> dict[str, int | None]:
    """Each machine's current version in the database (None: it has no tables here yet),
    checked to be the definition given under the schema this release generates
    (``versions.fits``: ``DefinitionChanged`` or ``SchemaOutdated`` otherwise).
    ``served``: the version each machine's installed schema serves, as the store's check
    of its guards found it (``machines.store.integrity``); else the registry's highest."""
    out: dict[str, int | None] = {}
    for machine, spec in specs.items():
        if served is not None:
            current = served.get(machine)
        else:
            versions = read_versions(conn, param, machine)
            current = versions[-1] if versions else None
        fits(
            where,
            spec,
            current,
            fingerprint,
            specs,
            served_before=functools.partial(read_versions, conn, param, machine),
        )
        out[machine] = None if current is None else current.version
    return out


class Dialect:
    """How one database spells the shared statements."""

    param: str  # a placeholder: "?" or "%s"
    json_param: str  # a placeholder for a JSON text parameter
    ordinal: str  # the column that gives creation order

    lock_skipping: str  # what makes a SELECT lock its rows, skipping those held elsewhere
    reads_before_insert: bool  # its schema refuses any INSERT of an existing key
    refusals: tuple[type[Exception], ...]  # how the database says its schema refused a write

    def json(self, value: Any) -> Mapping[str, Any]:
        """A JSON column's value as a read-only mapping."""
        raise NotImplementedError

    def reason(self, refusal: Exception) -> object:
        """What a refusal says (the trigger's message, or the violated constraint)."""
        return refusal

    def number_in_data_below(self) -> str:
        """A condition: the number ``data[field]`` is below a bound (the field, then the
        bound, are parameters); a row whose field is no number is not below it."""
        raise NotImplementedError


class Connection(Protocol):
    """What both drivers' connections offer (sqlite3, psycopg)."""

    def execute(self, sql: str, params: tuple[Any, ...], /) -> Any: ...


class SQLTransaction:
    """A transaction on the generated schema, on one connection; a subclass names its
    dialect."""

    dialect: Dialect

    def __init__(self, conn: Connection, specs: Mapping[str, MachineSpec], clock: Clock) -> None:
        self._conn = conn
        self._specs = specs
        self._clock = clock

    def end(self, where: str) -> None:
        """The ``with`` block is over: every later call through this transaction is a
        ``StoreError`` (on PostgreSQL it would otherwise run as a statement of its own,
        outside any transaction)."""
        self._conn = _Ended(where)

    def _fetchone(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        found: tuple[Any, ...] | None = self._conn.execute(sql, params).fetchone()
        return found

    def _fetchall(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = self._conn.execute(sql, params).fetchall()
        return found

    def _write(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """One write; the row it returns, if any. A refusal by the schema is a
        ``StoreError`` (on PostgreSQL the transaction is then aborted, and the caller's
        with-block rolls it back)."""
        try:
            return self._fetchone(sql, params)
        except self.dialect.refusals as exc:
            raise refused(self.dialect.reason(exc)) from exc

    # -- the shared statements -----------------------------------------------------------

    def _columns(self) -> str:
        return (
            f"key, state, context, data, scope, {self.dialect.ordinal}, moves, version, "
            "created_at, updated_at"
        )

    def _row(self, machine: str, values: tuple[Any, ...]) -> Row:
        key, state, context, data, scope, ordinal, moves, version, created, updated = values
        try:
            context, data = self.dialect.json(context), self.dialect.json(data)
            typed(key=key, state=state, scope=scope, ordinal=ordinal, moves=moves)
            typed(version=version, created_at=created, updated_at=updated)
        except StoreError as unreadable:
            raise StoreError(f"{machine} {describe(key)}: {unreadable}") from unreadable
        return Row(
            machine,
            key,
            state,
            context,
            data,
            scope,
            ordinal,
            moves,
            version,
            created,
            updated,
        )

    def insert(
        self,
        machine: str,
        key: str,
        *,
        context: Mapping[str, str] | None = None,
        data: Mapping[str, Any] | None = None,
        scope: str | None = None,
    ) -> tuple[Row, bool]:
        spec, key, context, scope = check_insert(self._specs, machine, key, context, scope)
        m = spec.name
        context_json, data_json = encode(context, m, key, "context"), encode(data, m, key, "data")
        if self.dialect.reads_before_insert:  # no other writer: the transaction holds them off
            existing = self.get(m, key)
            if existing is not None:
                return same_entity(existing, scope, context), False
        now = self._clock()
        p, j = self.dialect.param, self.dialect.json_param
        created = self._write(
            f"INSERT INTO {name(m, 'entities')} (key, state, context, data, scope, moves, "
            f"version, created_at, updated_at) VALUES ({p}, {p}, {j}, {j}, {p}, 0, 1, {p}, {p}) "
            f"ON CONFLICT (key) DO NOTHING RETURNING {self.dialect.ordinal}",
            (key, spec.initial, context_json, data_json, scope, now, now),
        )
        if created is not None:  # only the creation order is the database's to say
            return Row(
                m,
                key,
                spec.initial,
                decode(context_json),
                decode(data_json),
                scope,
                created[0],
                0,
                1,
                now,
                now,
            ), True
        existing = self.get(m, key)
        assert existing is not None, "a conflicting key must exist"
        return same_entity(existing, scope, context), False

    def get(self, machine: str, key: str) -> Row | None:
        m = spec_for(self._specs, machine).name
        found = self._fetchone(
            f"SELECT {self._columns()} FROM {name(m, 'entities')} WHERE key = {self.dialect.param}",
            (check_key(key, m),),
        )
        return None if found is None else self._row(m, found)

    def update(self, row: Row, data: Mapping[str, Any]) -> Row:
        spec = check_update(self._specs, row, data)
        m = spec.name
        p, j = self.dialect.param, self.dialect.json_param
        data_json, now = encode(data, m, row.key, "data"), self._clock()
        check_annotations(spec, row, data)
        updated = self._write(
            f"UPDATE {name(m, 'entities')} SET data = {j}, version = version + 1, "
            f"updated_at = {p} WHERE key = {p} AND version = {p} AND state = {p} "
            f"AND moves = {p} RETURNING version",
            (data_json, now, row.key, row.version, row.state, row.moves),
        )
        if updated is None:
            raise StaleWrite(f"{m} '{row.key}' changed since it was read")
        return replace(row, data=decode(data_json), version=row.version + 1, updated_at=now)

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
        """One statement: the UPDATE fenced by the version read, naming the move; the
        database judges it and writes its history event. A writer that lost the race
        matches no row (``StaleWrite``); on PostgreSQL it first waits for the winner's row
        lock, and its transaction is not aborted."""
        trigger, actor, context = check_move(
            self._specs, row, trigger, actor, context, detail, data
        )
        dest, full = decide_move(self._specs, row, trigger, actor, context)
        m, key = row.machine, row.key
        p, j = self.dialect.param, self.dialect.json_param
        now = self._clock()
        data_json = encode(row.data if data is None else data, m, key, "data")
        detail_json = None if detail is None else encode(detail, m, key, "detail")
        matched = self._write(
            f"UPDATE {name(m, 'entities')} SET state = {p}, moves = moves + 1, "
            f"version = version + 1, data = {j}, updated_at = {p}, last_trigger = {p}, "
            f"last_actor = {p}, last_detail = {j}, last_context = {j} "
            f"WHERE key = {p} AND version = {p} AND state = {p} AND moves = {p} "
            "RETURNING version",
            (
                dest,
                data_json,
                now,
                trigger,
                actor,
                detail_json,
                encode(full, m, key, "context"),
                key,
                row.version,
                row.state,
                row.moves,
            ),
        )
        if matched is None:
            raise StaleWrite(f"{row.machine} '{row.key}' changed since it was read")
        return moved(row, dest, data_json, now)

    def history(self, machine: str, key: str) -> list[TransitionEvent]:
        m = spec_for(self._specs, machine).name
        key = check_key(key, m)
        json = self.dialect.json
        out = []
        for seq, source, dest, trigger, actor, detail, context, at in self._fetchall(
            f"SELECT seq, source, dest, trigger, actor, detail, context, at "
            f"FROM {name(m, 'history')} WHERE entity = {self.dialect.param} "
            "ORDER BY seq",
            (key,),
        ):
            try:
                read_detail, read_context = None if detail is None else json(detail), json(context)
            except StoreError as unreadable:  # named, as a row's is
                raise StoreError(f"{m} {describe(key)}, event #{seq}: {unreadable}") from None
            out.append(
                TransitionEvent(
                    m, key, seq, source, dest, trigger, actor, read_detail, read_context, at
                )
            )
        return out

    def definition_versions(self, machine: str) -> list[DefinitionVersion]:
        """Every version of ``machine``'s definition this database has served, oldest
        first; the last is the one its tables enforce now."""
        m = spec_for(self._specs, machine).name
        return read_versions(self._conn, self.dialect.param, m)

    def event_versions(self, machine: str, key: str) -> list[int]:
        """The definition version each event of ``key``'s history was made under, in
        ``seq`` order (what ``history`` returns, one number per event)."""
        m = spec_for(self._specs, machine).name
        return [
            version
            for (version,) in self._fetchall(
                f"SELECT definition_version FROM {name(m, 'history')} "
                f"WHERE entity = {self.dialect.param} ORDER BY seq",
                (check_key(key, m),),
            )
        ]

    def scope(self, machine: str, scope: str) -> list[Row]:
        m = spec_for(self._specs, machine).name
        return self._select(
            m, f"WHERE scope = {self.dialect.param}", (check_key(scope, m, "scope"),)
        )

    def rows(self, machine: str) -> list[Row]:
        return self._select(spec_for(self._specs, machine).name, "", ())

    def keys(self, machine: str) -> list[object]:
        """Every entity's key of ``machine`` as stored, in creation order, read without its
        row: an audit reads the rows one by one when they cannot all be read, to name the
        ones that cannot (a key that is not text among them)."""
        m = spec_for(self._specs, machine).name
        return [
            key
            for (key,) in self._fetchall(
                f"SELECT key FROM {name(m, 'entities')} ORDER BY {self.dialect.ordinal}", ()
            )
        ]

    def keys_without_row(self, machine: str) -> list[object]:
        """The entities of ``machine`` with a history and no row: a row removed outside
        the guards (SQLite's REPLACE deletes one without firing a trigger). The audit names
        each; nothing else reads them."""
        m = spec_for(self._specs, machine).name
        return [
            key
            for (key,) in self._fetchall(
                f"SELECT DISTINCT h.entity FROM {name(m, 'history')} h WHERE NOT EXISTS "
                f"(SELECT 1 FROM {name(m, 'entities')} e WHERE e.key = h.entity) ORDER BY 1",
                (),
            )
        ]

    def in_states(
        self, machine: str, states: Collection[str], *, limit: int, offset: int = 0
    ) -> list[Row]:
        spec = spec_for(self._specs, machine)
        wanted, limit, offset = check_page(spec, states, limit, offset)
        if not wanted:
            return []
        p = self.dialect.param
        return self._readable(
            spec.name,
            self._fetchall(
                f"SELECT {self._columns()} FROM {name(spec.name, 'entities')} "
                f"WHERE state IN ({', '.join([p] * len(wanted))}) "
                f"ORDER BY updated_at, {self.dialect.ordinal} LIMIT {limit} OFFSET {offset}",
                wanted,
            ),
        )

    def counts(self, machine: str) -> dict[str, int]:
        m = spec_for(self._specs, machine).name
        return {
            str(state): int(count)
            for state, count in self._fetchall(
                f"SELECT state, count(*) FROM {name(m, 'entities')} GROUP BY state", ()
            )
        }

    def due(self, machine: str, state: str, *, field: str, before: float, limit: int) -> list[Row]:
        spec = spec_for(self._specs, machine)
        state, field, before, limit = check_due(spec, state, field, before, limit)
        p = self.dialect.param
        out: list[Row] = []
        seen = 0
        while True:  # past the rows that cannot be read, so that they take no place
            wanted = limit - len(out)
            found = self._fetchall(
                f"SELECT {self._columns()} FROM {name(spec.name, 'entities')} "
                f"WHERE state = {p} AND {self.dialect.number_in_data_below()} "
                f"ORDER BY {self.dialect.ordinal} LIMIT {wanted} OFFSET {seen} "
                f"{self.dialect.lock_skipping}",
                (state, field, before),
            )
            seen += len(found)
            out += self._readable(spec.name, found)
            if len(out) >= limit or len(found) < wanted:
                return out

    def _readable(self, m: str, found: list[tuple[Any, ...]]) -> list[Row]:
        """The rows of ``found`` that can be read; the others were written outside the
        store (the audit names them) and are left out."""
        out = []
        for values in found:
            try:
                out.append(self._row(m, values))
            except StoreError:
                continue
        return out

    def _select(self, m: str, where: str, params: tuple[Any, ...], tail: str = "") -> list[Row]:
        """Rows of machine ``m`` (a name checked with ``spec_for``), oldest first."""
        return [
            self._row(m, values)
            for values in self._fetchall(
                f"SELECT {self._columns()} FROM {name(m, 'entities')} {where} "
                f"ORDER BY {self.dialect.ordinal} {tail}",
                params,
            )
        ]


class _Ended:
    """The connection of a transaction that has ended: it refuses every statement."""

    def __init__(self, where: str) -> None:
        self._where = where

    def execute(self, sql: str, params: tuple[Any, ...], /) -> Any:
        raise ended(self._where)


def moved(row: Row, dest: str, data_json: str, now: float) -> Row:
    """``row`` after a move that matched its version: nothing else can have changed, so
    the new row is known without reading it back."""
    return replace(
        row,
        state=dest,
        data=decode(data_json),
        moves=row.moves + 1,
        version=row.version + 1,
        updated_at=now,
    )


def refused(error: object) -> StoreError:
    """A write the database itself said no to (a generated trigger, a constraint)."""
    return StoreError(f"the database refused the write: {error}")
