"""The PostgreSQL database of a migration (``machines.store.migration``): one connection,
one transaction that first takes the advisory lock every store takes to make its schema,
then ``ACCESS EXCLUSIVE`` on the tables of every machine it migrates and on the registry.
A worker's statement on those tables waits for the commit (or rollback), and then runs
under the new schema whole; a store opening meanwhile waits on the advisory lock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from machines.spec import MachineSpec
from machines.store.ddl import REGISTRY
from machines.store.ddl_postgres import postgres_registry, postgres_schema
from machines.store.integrity import Difference, tampered
from machines.store.integrity_postgres import guard_differences, served_versions
from machines.store.postgres import (
    LOCK_SCHEMA,
    LOCK_TIMEOUT,
    SCHEMA_LOCK,
    fingerprint,
    pin_session,
)
from machines.store.records import DefinitionVersion, StoreError, hide_passwords, shown_url
from machines.store.schema_postgres import foreign_code, one_store_on_path, pin_search_path


class PostgresDatabase:
    param = "%s"
    json_param = "%s::json"

    def __init__(self, url: str, doing: str = "the migration") -> None:
        self.doing = doing
        self.where = shown_url(url)
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL at {self.where}: {hide_passwords(str(exc), url)}"
            ) from exc
        try:
            pin_session(self._conn)
            schema = one_store_on_path(self._conn, self.where)
            if schema is not None:
                pin_search_path(self._conn, schema)
                foreign = foreign_code(self._conn)
                if foreign:
                    raise tampered(self.where, foreign)
        except psycopg.Error as exc:
            self._conn.close()
            raise StoreError(
                f"{self.where}: {self.doing} cannot read the store's schema, nothing changed: "
                f"{hide_passwords(str(exc), url)}"
            ) from exc
        except BaseException:
            self._conn.close()
            raise

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            cursor = self._conn.execute(sql.encode() if not params else sql, params or None)
            return list(cursor.fetchall()) if cursor.description else []
        except psycopg.errors.LockNotAvailable as exc:
            raise StoreError(
                f"{self.where}: {self.doing} waited {LOCK_TIMEOUT} s for a lock another "
                "session holds, nothing changed: find it in pg_locks, then try again"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: {self.doing} failed, nothing changed: {exc}") from exc

    def begin(self, tables: Sequence[str]) -> None:
        self.execute("BEGIN")
        self.execute(LOCK_SCHEMA, (SCHEMA_LOCK,))
        if self.has_table(REGISTRY):
            locked = ", ".join([*tables, REGISTRY])
            self.execute(f"LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE")

    def has_table(self, table: str) -> bool:
        found = self.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{table}"',))
        return bool(found and found[0][0])

    def triggers(self, tables: Sequence[str]) -> list[tuple[str, str]]:
        out = []
        for table in tables:
            if not self.has_table(table.strip('"')):
                continue
            out += [
                (str(relname), str(tgname))
                for relname, tgname in self.execute(
                    "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c "
                    "ON c.oid = t.tgrelid WHERE t.tgrelid = to_regclass(%s) "
                    "AND NOT t.tgisinternal ORDER BY t.tgname",
                    (table,),
                )
            ]
        return out

    def schema(self, spec: MachineSpec, version: int) -> list[str]:
        return [postgres_schema(spec, version)]

    def registry_schema(self) -> list[str]:
        return [postgres_registry()]

    def served(
        self, specs: Mapping[str, MachineSpec]
    ) -> tuple[dict[str, DefinitionVersion | None], list[Difference]]:
        try:
            return served_versions(self._conn, specs, fingerprint)
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: cannot read its guards: {exc}") from exc

    def differences(
        self, specs: Mapping[str, MachineSpec], versions: Mapping[str, int | None]
    ) -> list[Difference]:
        try:
            return guard_differences(self._conn, specs, versions)
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: cannot read its guards: {exc}") from exc

    def fingerprint(self, spec: MachineSpec, version: int) -> str:
        return fingerprint(spec, version)

    def commit(self) -> None:
        self.execute("COMMIT")

    def close(self) -> None:
        try:
            if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._conn.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the connection is closed next: the server rolls back what is open
        self._conn.close()
