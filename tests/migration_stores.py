"""The migration tests' shared pieces: a store with live entities in every state of every
bundled machine (each reached by legal moves), definition changes made on copies of
``spec/`` (a widening one, a breaking one that removes states entities occupy), and
snapshots of a store, through the store and through the raw database, to compare before
and after. Used by tests/test_migration.py, tests/test_migration_crashes.py and
tests/test_migration_workers.py."""

from __future__ import annotations

import collections
import contextlib
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from machines.spec import MachineSpec
from machines.spec.loader import definition_paths, load
from machines.spec.records import derived_variables
from machines.store import BUNDLED, Store, open_store
from machines.store.records import DefinitionVersion
from machines.systems.transfer.plans import PLAN_DIGEST, plan_digest
from tests.conftest import Document, FakeClock, SpecCopy, postgres_schema, rename_everywhere
from tests.raw_sql import Raw

DATABASES = ("sqlite", "postgres")
Specs = Mapping[str, MachineSpec]
Path_ = list[tuple[str, str]]  # (trigger, actor) moves from the initial state


def load_dir(folder: Path) -> dict[str, MachineSpec]:
    """Every definition of ``folder``, by machine name, as ``machines migrate`` loads them."""
    return {spec.name: spec for spec in map(load, definition_paths(folder))}


def bundled_specs() -> dict[str, MachineSpec]:
    return {m: load(m) for m in BUNDLED}


# -- a store with an entity in every state ---------------------------------------------


def paths_to_states(spec: MachineSpec) -> dict[str, tuple[dict[str, str], Path_]]:
    """For each state, a context valuation and the shortest path of legal moves (by the
    first actor of each transition) from the initial state to it, breadth first over
    ``spec.transitions`` under each valuation."""
    out: dict[str, tuple[dict[str, str], Path_]] = {}
    for valuation in spec.valuations():
        seen: dict[str, Path_] = {spec.initial: []}
        queue = collections.deque([spec.initial])
        while queue:
            state = queue.popleft()
            for t in spec.transitions:
                if t.source == state and t.admits(valuation) and t.dest not in seen:
                    seen[t.dest] = [*seen[state], (t.trigger, t.actors[0])]
                    queue.append(t.dest)
        for state, path in seen.items():
            if state not in out or len(path) < len(out[state][1]):
                out[state] = (dict(valuation), path)
    return out


DATA: Mapping[tuple[str, str], Mapping[str, Any]] = {
    # what the invariants ask of these states' data (machines.checks.invariants)
    ("outcome", "succeeded"): {"result": {"charge": "ch_1"}},
    ("outcome", "failed"): {"error": "declined"},
}
COPIES = {("effect", "approved"): 3}
"""States held by more than one entity (the breaking change removes this one)."""
EXECUTING_PLAN = ("request", "executing")
"""The request kept executing has one blocked node in its scope, so its nodes imply
nothing yet (an empty plan would imply completed)."""


def populate(store: Store, specs: Specs) -> None:
    """One entity ``MACHINE-STATE`` in every state of every machine of ``specs``, reached
    by legal moves through ``tx.move`` (each move with a detail and, for the last, the
    data its state needs); nodes sit in a plan scope of their own."""
    for machine, spec in specs.items():
        derived = derived_variables(spec)
        found = paths_to_states(spec)
        missing = set(spec.states) - set(found)
        assert not missing, f"{machine}: no path to {sorted(missing)}"
        for state, (valuation, path) in found.items():
            fixed = {k: v for k, v in valuation.items() if k not in derived}
            given = {k: v for k, v in valuation.items() if k in derived} or None
            scope = "plan" if machine == "node" else f"session-{machine}"
            for copy in range(COPIES.get((machine, state), 1)):
                key = f"{machine}-{state}" + (f"-{copy + 1}" if copy else "")
                _reach(store, machine, key, state, fixed, given, scope, path)
                assert store_state(store, machine, key) == state
    if "node" in specs and "request" in specs:
        key = "-".join(EXECUTING_PLAN)
        store.insert("node", "node-of-executing", context={"kind": "action"}, scope=key)


def store_state(store: Store, machine: str, key: str) -> str | None:
    with store.transaction() as tx:
        row = tx.get(machine, key)
    return None if row is None else row.state


def _reach(
    store: Store,
    machine: str,
    key: str,
    state: str,
    fixed: Mapping[str, str],
    given: Mapping[str, str] | None,
    scope: str,
    path: Path_,
) -> None:
    """``key`` created and moved along ``path`` in one transaction; the last move sets
    the data its state needs (a terminal state's data never changes afterwards)."""
    with store.transaction() as tx:
        row, created = tx.insert(machine, key, context=fixed, data={"n": 0}, scope=scope)
        assert created
        for i, (trigger, actor) in enumerate(path, 1):
            data = {"n": i}
            if i == len(path):
                data.update(DATA.get((machine, state), {}))
            detail = {"step": i, "evidence": f"step {i} of the fixture"}
            if (machine, trigger) == ("request", "start"):  # as the engine's start records
                detail[PLAN_DIGEST] = plan_digest(data.get("plan"))
            row = tx.move(row, trigger, actor=actor, context=given, detail=detail, data=data)


# -- definition changes ----------------------------------------------------------------


def _names(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return list(value)
    return None


def remove_state(doc: Document, state: str) -> None:
    """``state`` gone from a definition, with every transition into or out of it, and
    every forbidden entry and rule that names it (lists lose it; an entry left with an
    empty list, or naming it alone, goes)."""
    del doc["states"][state]

    def kept(entry: dict[str, Any], fields: tuple[str, ...]) -> bool:
        for f in fields:
            names = _names(entry.get(f))
            if names is None:
                continue
            left = [n for n in names if n != state]
            if not left:
                return False
            if isinstance(entry[f], list):
                entry[f] = left
        return True

    doc["transitions"] = [
        t for t in doc["transitions"] if t["dest"] != state and kept(t, ("source",))
    ]
    doc["forbidden"] = [f for f in doc.get("forbidden", []) if kept(f, ("source", "dest"))]
    doc["invariants"] = [
        r
        for r in doc.get("invariants", [])
        if kept(r, ("state", "states", "sources", "dests", "via"))
    ]


def add_actor(doc: Document, trigger: str, source: str, actor: str) -> None:
    """``actor`` may also fire ``trigger`` from ``source`` (a widening change)."""
    for t in doc["transitions"]:
        if t["trigger"] == trigger and source in (_names(t["source"]) or []):
            actors = _names(t["actor"]) or []
            t["actor"] = [*actors, actor]
            return
    raise AssertionError(f"no transition {trigger} from {source}")


def widening(root: Path) -> SpecCopy:
    """Something illegal becomes legal on three machines: an actor added (outcome's
    reclaim by an operator, effect's fail by the engine) and a transition added (an
    operator may cancel an approved request)."""
    copy = SpecCopy(root)
    copy.edit("outcome", lambda d: add_actor(d, "reclaim", "indeterminate", "operator"))
    copy.edit("effect", lambda d: add_actor(d, "fail", "executing", "engine"))

    def cancel_approved(doc: Document) -> None:
        doc["transitions"].append(
            {
                "trigger": "cancel",
                "source": "approved",
                "dest": "cancelled",
                "actor": "operator",
                "when": {"side_effects": ["none"]},
                "description": "An operator cancels an approved transfer before it starts.",
            }
        )

    copy.edit("request", cancel_approved)
    return copy


REMOVED = {"approved": "pending", "replayed": "duplicate"}
"""The breaking change: the effect's state ``approved`` (where an Irreversible call waits)
is removed and ``replayed`` (terminal) is renamed ``duplicate`` (a finished entity is
mapped only into a terminal state that records the same: ``machines.spec.migration_moves``);
the maps that carry their entities over."""
MAPS = [f"effect:{old}={new}" for old, new in REMOVED.items()]


def breaking(root: Path) -> SpecCopy:
    def remove(doc: Document) -> None:
        remove_state(doc, "approved")
        renamed = rename_everywhere(doc, "replayed", "duplicate")
        doc.clear()
        doc.update(renamed)

    return SpecCopy(root).edit("effect", remove)


def wording(root: Path) -> SpecCopy:
    """Only descriptions change: no migration is needed."""

    def reword(doc: Document) -> None:
        doc["description"] = "Reworded. " + doc["description"]
        for state in doc["states"].values():
            state["description"] = "Reworded: " + state["description"]

    return SpecCopy(root).edit("effect", reword)


CHANGES = {"widening": widening, "breaking": breaking, "wording": wording}


def changed_spec_dirs(root: Path) -> dict[str, Path]:
    """A spec directory for each change of ``CHANGES`` (made once per session: a
    definition loaded from the same file again is not parsed again)."""
    return {kind: make(root / kind).path for kind, make in CHANGES.items()}


# -- stores and snapshots ----------------------------------------------------------------

START = 1_000.0


@contextlib.contextmanager
def populated(kind: str, folder: Path, specs: Specs | None = None) -> Iterator[str]:
    """The URL of a fresh store of ``kind`` populated with ``populate`` (a fixed clock,
    so two populated stores hold the same rows, times included)."""
    specs = specs or bundled_specs()
    if kind == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{folder}/store.db"
        _fill(url, specs)
        yield url
        return
    with postgres_schema() as url:
        _fill(url, specs)
        yield url


def _fill(url: str, specs: Specs) -> None:
    clock = FakeClock(START)
    store = open_store(url, specs, clock=clock)
    try:
        populate(store, specs)
    finally:
        store.close()


def copy_sqlite(url: str, to: Path) -> str:
    """A copy of a closed SQLite store's file (no write-ahead log left beside it)."""
    path = Path(url[len("sqlite:///") :])
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    shutil.copyfile(path, to)
    return f"sqlite:///{to}"


def target(url: str) -> tuple[str, str]:
    """(kind, what ``Raw`` connects to) for a store URL."""
    if url.startswith("sqlite:///"):
        return "sqlite", url[len("sqlite:///") :]
    return "postgres", url


def raw_snapshot(url: str) -> dict[str, list[str]]:
    """Every row of every table and every schema object (SQLite: ``sqlite_master``;
    PostgreSQL: triggers and the source of each function), read through a connection of
    its own: what "nothing changed" compares."""
    raw = Raw(*target(url))
    try:
        out = raw.snapshot()
        # A version's install time is the wall clock of the open that made the store, so
        # two fresh PostgreSQL schemas differ there and nowhere else: compared without it.
        out["machines_definitions"] = sorted(
            repr(r)
            for r in raw.query(
                "SELECT machine, version, digest, fingerprint, definition FROM machines_definitions"
            )
        )
        if raw.kind == "postgres":
            schema = raw.query("SELECT current_schema()")[0][0]
            out["pg_proc"] = sorted(
                repr(r).replace(schema, "SCHEMA")
                for r in raw.query(
                    "SELECT proname, prosrc FROM pg_proc "
                    "WHERE pronamespace = current_schema()::regnamespace"
                )
            )
        return out
    finally:
        raw.close()


def store_snapshot(url: str, specs: Specs) -> dict[str, Any]:
    """Every row, history and event version of the machines of ``specs``, read through a
    store opened with them (read-only), with the registry's versions."""
    store = open_store(url, specs, read_only=True)
    try:
        out: dict[str, Any] = {}
        with store.transaction() as tx:
            for machine in specs:
                for row in tx.rows(machine):
                    out[f"{machine}/{row.key}"] = (
                        row,
                        tx.history(machine, row.key),
                        tx.event_versions(machine, row.key),
                    )
                out[f"{machine} versions"] = [
                    version_fields(v) for v in tx.definition_versions(machine)
                ]
        return out
    finally:
        store.close()


def version_fields(v: DefinitionVersion) -> tuple[str, int, str, str]:
    return (v.machine, v.version, v.digest, v.fingerprint)


def registry(url: str, specs: Specs) -> dict[str, list[int]]:
    """Each machine's version numbers, from the raw registry table."""
    raw = Raw(*target(url))
    try:
        rows = raw.query("SELECT machine, version FROM machines_definitions ORDER BY 1, 2")
    finally:
        raw.close()
    out: dict[str, list[int]] = {m: [] for m in specs}
    for machine, version in rows:
        out.setdefault(machine, []).append(version)
    return out


def opens(url: str, specs: Specs) -> Exception | None:
    """None when a store opens (read-only) with ``specs``, else the error."""
    try:
        open_store(url, specs, read_only=True).close()
    except Exception as error:
        return error
    return None
