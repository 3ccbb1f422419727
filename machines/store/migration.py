"""``machines migrate``: a database moved to new versions of its definitions, in one
transaction, losing nothing.

For each machine of the definitions given, the database's current version
(``machines.store.versions``) is compared with the definition:

- the same definition under the same schema: nothing to do;
- a machine the database does not have: its tables are made, as version 1;
- another semantic digest, or the same one under a schema this release generates
  differently: the next version is installed. Its entities and their context, data and
  whole history stay as they are; the generated objects that hold the definition (the
  legal-moves table, the triggers and their functions) are replaced by the new version's.

A migration is refused, and changes nothing, when live entities could not live under the
new version: entities in a state it removes that no ``--map MACHINE:OLD=NEW`` covers;
a map into a state it does not have, out of a state it keeps, or out of a terminal state
into a non-terminal one; a map the definitions' rules refuse to the automatic
``migration`` actor (out of a state kept for people or named triggers, into a state that
releases a reservation while money may be moving: ``machines.store.migration_maps``);
entities whose stored context the new version would refuse (a context variable added or
removed, a value removed). Each mapped entity gets one history event by the ``migration``
actor (``machines.spec.vocabulary``), naming both versions.

Everything runs in one transaction, the database locked against every other writer first
(SQLite: ``BEGIN EXCLUSIVE``; PostgreSQL: the schema's advisory lock and ``ACCESS
EXCLUSIVE`` on the machine's tables and the registry), so a worker waits, and then meets
the new schema whole; a crash at any statement leaves the old version intact, and a rerun
completes the migration. ``boundary`` (for the crash-point tests) is called before every
write and after the commit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from machines.errors import InvalidArgument
from machines.runtime.history import checked_clock
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.jsonvalue import describe
from machines.spec.migration_moves import engine_moved_machines
from machines.spec.version_changes import actor_breaks, kept_state_breaks, reused_name_breaks
from machines.spec.vocabulary import MIGRATION_ACTOR, MIGRATION_TRIGGER
from machines.store.arguments import check_key, specs_by_name, sqlite_path, text
from machines.store.ddl import REGISTRY
from machines.store.integrity import Difference, tampered
from machines.store.migration_maps import StateMap as StateMap  # part of this API
from machines.store.migration_maps import (
    applied_maps,
    checked_maps,
    context_refusals,
    derivation_refusals,
    entities,
    map_refusals,
    mappings,
)
from machines.store.migration_sqlite import SQLiteDatabase
from machines.store.names import name, quote
from machines.store.records import StoreError, shown_url
from machines.store.sql import read_versions, record_version
from machines.store.versions import DefinitionVersion, load_versions, node_machine_of, summary

Boundary = Callable[[str], None]


@dataclass(frozen=True)
class MachinePlan:
    """What a migration does to one machine."""

    machine: str
    action: str  # "none", "install", "migrate" or "reinstall"
    from_version: int | None
    to_version: int | None
    changes: tuple[str, ...] = ()
    mapped: tuple[tuple[str, str, int], ...] = ()  # (old state, new state, entities)
    refusals: tuple[str, ...] = ()


@dataclass(frozen=True)
class MigrationPlan:
    where: str
    machines: tuple[MachinePlan, ...]
    applied: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def refused(self) -> bool:
        return any(m.refusals for m in self.machines)

    @property
    def nothing_to_do(self) -> bool:
        return all(m.action == "none" for m in self.machines)

    def lines(self) -> list[str]:
        """The plan as a person reads it, one line per fact."""
        out = []
        for m in self.machines:
            versions = f"version {m.from_version} -> {m.to_version}"
            if m.action == "none" and m.from_version is None:
                pass  # a --map of a machine not given: its refusal says so
            elif m.action == "none":
                out.append(f"{m.machine}: version {m.from_version}, nothing to do")
            elif m.action == "install":
                out.append(f"{m.machine}: new here: tables made as version 1")
            elif m.action == "reinstall":
                out.append(f"{m.machine}: {versions}: the same definition, schema regenerated")
            else:
                out.append(f"{m.machine}: {versions}: {', '.join(m.changes) or 'changed'}")
            out += [f"{m.machine}:   map {o} -> {n}: {entities(k)}" for o, n, k in m.mapped]
            out += [f"{m.machine}: REFUSED: {why}" for why in m.refusals]
        return out + list(self.notes)


class Database(Protocol):
    """What a migration needs of one database: one connection, one transaction."""

    where: str
    param: str
    json_param: str

    def begin(self, tables: Sequence[str]) -> None: ...
    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...
    def has_table(self, table: str) -> bool: ...
    def triggers(self, tables: Sequence[str]) -> list[tuple[str, str]]: ...
    def schema(self, spec: MachineSpec, version: int) -> list[str]: ...
    def fingerprint(self, spec: MachineSpec, version: int) -> str: ...
    def registry_schema(self) -> list[str]: ...
    def served(
        self, specs: Mapping[str, MachineSpec]
    ) -> tuple[dict[str, DefinitionVersion | None], list[Difference]]: ...
    def differences(
        self, specs: Mapping[str, MachineSpec], versions: Mapping[str, int | None]
    ) -> list[Difference]: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...


def migrate(
    url: str,
    specs: Mapping[str, MachineSpec],
    maps: Iterable[StateMap] = (),
    *,
    dry_run: bool = False,
    boundary: Boundary | None = None,
    clock: Callable[[], float] = time.time,
) -> MigrationPlan:
    """Plan the migration of the store at ``url`` to ``specs`` and, unless it is refused
    or ``dry_run``, carry it out in one transaction. Returns the plan (``applied`` says
    whether it was carried out); a database that cannot be read is a ``StoreError``, and an
    argument of the wrong type or value an ``InvalidArgument``, before anything is read."""
    url = check_key(text(url, "a store URL"), "migrate", "URL")
    specs = specs_by_name(specs)
    maps = checked_maps(maps)
    if not isinstance(dry_run, bool):
        raise InvalidArgument(f"dry_run must be True or False, not {describe(dry_run)}")
    if boundary is not None and not callable(boundary):
        raise InvalidArgument(
            f"boundary must be a function or None, not a {type(boundary).__name__}"
        )
    read_clock = checked_clock(clock, "the migration", StoreError, "nothing was migrated")
    db = open_database(url)
    try:
        tables = [name(m, role) for m in specs for role in ("entities", "history", "moves")]
        db.begin([t for t in tables if db.has_table(t.strip('"'))])
        plan, work = _plan(db, specs, maps)
        if plan.refused or plan.nothing_to_do or dry_run:
            return plan
        tick = boundary or (lambda _: None)
        now = read_clock()
        for step in work:
            step.run(db, tick, now)
        db.commit()
        tick("after commit")
        return MigrationPlan(plan.where, plan.machines, applied=True, notes=plan.notes)
    finally:
        db.close()


# -- planning ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    spec: MachineSpec
    version: int
    old: MachineSpec | None
    mapped: tuple[tuple[str, str, int], ...]

    def run(self, db: Database, tick: Boundary, now: float) -> None:
        m = self.spec.name

        def write(sql: str, params: tuple[Any, ...] = ()) -> None:
            tick(f"{m}: {sql.split(chr(10))[0][:60]}")
            db.execute(sql, params)

        if self.version > 1:
            tables = [name(m, role) for role in ("moves", "entities", "history")]
            for table, trigger in db.triggers(tables):
                write(f"DROP TRIGGER IF EXISTS {quote(trigger)}" + db_on(db, table))
            write(f"DROP TABLE IF EXISTS {name(m, 'moves')}")
        for old_state, new_state, _ in self.mapped:
            self._map(write, db, old_state, new_state, now)
        for statement in db.schema(self.spec, self.version):
            write(statement)
        tick(f"{m}: record version {self.version}")
        record_version(
            _Conn(db),
            db.param,
            self.spec,
            self.version,
            db.fingerprint(self.spec, self.version),
            now,
        )

    def _map(
        self, write: Callable[..., None], db: Database, old: str, new: str, now: float
    ) -> None:
        """The entities in ``old`` move to ``new``: their history event first (the rows
        still name the old state), then the rows; the guards are gone until the new
        version's schema is installed, in this same transaction."""
        p = db.param
        m = self.spec.name
        detail = json.dumps(
            {
                "from_version": self.version - 1,
                "to_version": self.version,
                "reason": f"state '{old}' is not in version {self.version}; "
                f"mapped by machines migrate --map {m}:{old}={new}",
            }
        )
        write(
            f"INSERT INTO {name(m, 'history')} (entity, seq, source, dest, trigger, actor, "
            "detail, context, at, definition_version) "
            f"SELECT key, moves + 1, state, {p}, {p}, {p}, {db.json_param}, context, {p}, {p} "
            f"FROM {name(m, 'entities')} WHERE state = {p}",
            (new, MIGRATION_TRIGGER, MIGRATION_ACTOR, detail, now, self.version, old),
        )
        write(
            f"UPDATE {name(m, 'entities')} SET state = {p}, moves = moves + 1, "
            f"version = version + 1, updated_at = {p}, last_trigger = {p}, last_actor = {p}, "
            f"last_detail = {db.json_param}, last_context = context WHERE state = {p}",
            (new, now, MIGRATION_TRIGGER, MIGRATION_ACTOR, detail, old),
        )


def db_on(db: Database, table: str) -> str:
    """PostgreSQL names the table a trigger is on; SQLite does not."""
    return f" ON {quote(table)}" if db.param == "%s" else ""


class _Conn:
    """A ``Database`` as the connection ``record_version`` writes through."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def execute(self, sql: str, params: tuple[Any, ...], /) -> Any:
        return _Rows(self._db.execute(sql, params))


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


def _plan(
    db: Database, specs: Mapping[str, MachineSpec], maps: Sequence[StateMap]
) -> tuple[MigrationPlan, list[_Step]]:
    where = db.where
    if not db.has_table(REGISTRY):
        raise StoreError(
            f"{where}: no machines tables (a new or foreign database?); a migration moves a "
            "store open_store made, and creates none"
        )
    served, forged = db.served(specs)
    current_of = {m: v for m, v in served.items() if v is not None}
    changed = [  # only their stored definitions are needed: loading one parses its text
        m
        for m, v in current_of.items()
        if v.digest != semantic_digest(specs[m])
        or v.fingerprint != db.fingerprint(specs[m], v.version)
    ]
    old_specs = load_versions(where, {m: [v] for m, v in current_of.items()}, changed)
    _refuse_tampered(db, specs, current_of, old_specs, forged)
    every = {m: read_versions(_Conn(db), db.param, m) for m in current_of}
    lived = load_versions(where, every, changed)
    node_machines = engine_moved_machines(specs.values()) | {
        node  # a node machine stays one when its request is left out of the specs
        for (m,) in db.execute(f"SELECT DISTINCT machine FROM {REGISTRY}")
        for v in every.get(str(m)) or read_versions(_Conn(db), db.param, str(m))
        if (node := node_machine_of(v)) is not None
    }
    plans: list[MachinePlan] = []
    work: list[_Step] = []
    unknown: list[MachinePlan] = []
    by_machine: dict[str, list[StateMap]] = {}
    proved: set[str] = set()  # requests whose derivation this plan has judged
    for entry in maps:
        if entry.machine not in specs:  # refuses the whole migration
            why = (
                f"--map {entry.machine}:{entry.old}={entry.new}: no definition of machine "
                f"'{entry.machine}' is given; machines: {', '.join(specs)}"
            )
            unknown.append(MachinePlan(entry.machine, "none", None, None, refusals=(why,)))
        by_machine.setdefault(entry.machine, []).append(entry)
    for machine, spec in specs.items():
        current = current_of.get(machine)
        if current is None:
            refusals = tuple(
                f"--map {e.machine}:{e.old}={e.new}: the machine is new here"
                for e in by_machine.get(machine, ())
            )
            plans.append(MachinePlan(machine, "install", None, 1, refusals=refusals))
            work.append(_Step(spec, 1, None, ()))
            continue
        if machine not in changed:
            given = by_machine.get(machine, [])
            loaded = load_versions(where, every, [machine]) if given else {}
            lived_in = {s for (m, _), was in loaded.items() if m == machine for s in was.states}
            went = {e.old: _mapped_to(db, machine, e.old) for e in given}
            refusals = applied_maps(spec, current.version, given, lived_in, went)
            plans.append(
                MachinePlan(machine, "none", current.version, current.version, (), (), refusals)
            )
            continue
        old = old_specs[(machine, current.version)]
        same = current.digest == semantic_digest(spec)
        counts = dict(
            db.execute(f"SELECT state, count(*) FROM {name(machine, 'entities')} GROUP BY state")
        )
        mapped, problems = mappings(old, spec, counts, by_machine.get(machine, ()))
        problems += [
            f"{entities(count)} in state '{state}', and the new version changes what it "
            f"means: {why}; keep its meaning, or add a new state for the new one"
            for state, count in sorted(counts.items())
            if count
            for why in kept_state_breaks(old, spec, state)
        ]
        earlier = [
            lived[(machine, v.version)] for v in every[machine] if v.version < current.version
        ]
        problems += map_refusals(db, [*earlier, old], spec, mapped, machine in node_machines)
        stored = [
            (v.version, lived[(machine, v.version)])
            for v in every[machine]
            if v.version <= current.version
        ]
        problems += reused_name_breaks(stored, spec)
        problems += actor_breaks(stored, spec)
        problems += context_refusals(db, spec)
        for request in specs.values():  # a derivation reads both machines: judged on either
            derived = request.derivation
            if (
                derived
                and not same
                and request.name not in proved
                and machine in (request.name, derived.node_machine)
                and derived.node_machine in specs
            ):
                proved.add(request.name)
                problems += derivation_refusals(request, specs[derived.node_machine])
        changes = (
            ("the same definition, its schema regenerated",) if same else (summary(old, spec),)
        )
        to = current.version + 1
        plans.append(
            MachinePlan(
                machine,
                "reinstall" if same else "migrate",
                current.version,
                to,
                changes,
                tuple(mapped),
                tuple(problems),
            )
        )
        work.append(_Step(spec, to, old, tuple(mapped)))
    return MigrationPlan(where, tuple(plans + unknown)), work


def _mapped_to(db: Database, machine: str, state: str) -> set[str]:
    """The states an earlier migration mapped ``machine``'s entities in ``state`` to (its
    events by the ``migration`` actor)."""
    p = db.param
    return {
        str(dest)
        for (dest,) in db.execute(
            f"SELECT DISTINCT dest FROM {name(machine, 'history')} "
            f"WHERE source = {p} AND trigger = {p} AND actor = {p}",
            (state, MIGRATION_TRIGGER, MIGRATION_ACTOR),
        )
    }


def _refuse_tampered(
    db: Database,
    specs: Mapping[str, MachineSpec],
    current_of: Mapping[str, DefinitionVersion],
    old_specs: Mapping[tuple[str, int], MachineSpec],
    forged: Sequence[Difference],
) -> None:
    """A migration replaces the guards of the machines it migrates, so it would hide
    what was done to them: the guards of every machine must be the ones its current
    version installed (``machines.store.integrity``), or ``StoreTampered`` says to repair
    first. A schema of an earlier release (a reinstall) is not compared."""
    judged = {}
    for machine, version in current_of.items():
        stored = old_specs.get((machine, version.version), specs[machine])
        if version.fingerprint == db.fingerprint(stored, version.version):
            judged[machine] = stored
    differences = [
        *forged,
        *db.differences(judged, {m: current_of[m].version for m in judged}),
    ]
    if differences:
        raise tampered(db.where, differences)


# -- the databases ----------------------------------------------------------------------


_DOING = {"migrate": "the migration", "repair": "the repair"}


def open_database(url: str, command: str = "migrate") -> Database:
    """The database at ``url`` for ``machines COMMAND`` (its errors name what failed)."""
    doing = _DOING[command]
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        sqlite_path(url)  # a plain file path, as every store opens
        return SQLiteDatabase(url, doing)
    if url.startswith(("postgresql://", "postgres://")):
        from machines.store.migration_postgres import PostgresDatabase

        return PostgresDatabase(url, doing)
    raise InvalidArgument(
        f"machines {command} needs a sqlite:///path or postgresql://... URL, not {shown_url(url)!r}"
    )
