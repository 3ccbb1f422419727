"""The SQLite database of a migration (``machines.store.migration``): one connection in
autocommit mode, so the migration's own ``BEGIN EXCLUSIVE`` takes the database's write
lock before it reads anything; every other connection's write waits for the commit (or
the rollback a crash leaves), and then sees the new schema whole."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from machines.spec import MachineSpec
from machines.store.ddl import sqlite_registry, sqlite_schema, statements
from machines.store.integrity import Difference
from machines.store.integrity_sqlite import guard_differences, served_versions
from machines.store.records import DefinitionVersion, StoreError
from machines.store.sqlite import fingerprint


class SQLiteDatabase:
    param = "?"
    json_param = "?"

    def __init__(self, url: str, doing: str = "the migration") -> None:
        self.doing = doing
        self.where = url
        path = url[len("sqlite:///") :]
        if not os.path.exists(path):
            raise StoreError(f"{url}: no database file is there; {doing} creates none")
        try:
            self._conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
            self._conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise StoreError(f"{url}: cannot open it: {exc}") from exc

    def _guarded(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            rows: list[tuple[Any, ...]] = self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.where}: {self.doing} failed, nothing changed: {exc}") from exc
        return rows

    def begin(self, tables: Sequence[str]) -> None:
        self._guarded("BEGIN EXCLUSIVE")

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._guarded(sql, params)

    def has_table(self, table: str) -> bool:
        return bool(
            self._guarded("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        )

    def triggers(self, tables: Sequence[str]) -> list[tuple[str, str]]:
        names = [t.strip('"') for t in tables]
        marks = ", ".join("?" * len(names))
        return [
            (table, trigger)
            for table, trigger in self._guarded(
                "SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger' "
                f"AND lower(tbl_name) IN ({marks}) ORDER BY name",
                tuple(n.lower() for n in names),
            )
        ]

    def schema(self, spec: MachineSpec, version: int) -> list[str]:
        return list(statements(sqlite_schema(spec, version)))

    def registry_schema(self) -> list[str]:
        return list(statements(sqlite_registry()))

    def served(
        self, specs: Mapping[str, MachineSpec]
    ) -> tuple[dict[str, DefinitionVersion | None], list[Difference]]:
        try:
            return served_versions(self._conn, specs, fingerprint)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.where}: cannot read its guards: {exc}") from exc

    def differences(
        self, specs: Mapping[str, MachineSpec], versions: Mapping[str, int | None]
    ) -> list[Difference]:
        try:
            return guard_differences(self._conn, specs, versions)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.where}: cannot read its guards: {exc}") from exc

    def fingerprint(self, spec: MachineSpec, version: int) -> str:
        return fingerprint(spec, version)

    def commit(self) -> None:
        self._guarded("COMMIT")

    def close(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        self._conn.close()
