"""A migration's maps (``--map MACHINE:OLD=NEW``, ``StateMap``): which entities each one
moves, and the maps refused. A map must name a state the new version removes and one it
has, and never reopen a finished entity (``mappings``).

A map is judged as a move (``machines.spec.migration_moves``), on the stored
entities: a map is refused, before anything is written, when the rules of the stored
version (or of the new one, for the state entered) would refuse the automatic
``migration`` actor the move, naming the rule, the entities and the way out. The
earlier versions under which the entities may have lived in the state they leave judge
the map too (``machines.spec.migration_moves.lineage``).

The rules that depend on an entity's context are judged per entity, under its stored
context and, for a machine with a derivation (a transfer request), the derived variables
its nodes imply now (``Derivation.implied_context``): a request mapped into a state that
releases its reservation while one of its nodes with a side effect has started is
refused."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from machines.derive.proof import DERIVATION_INVARIANTS, check_derivation
from machines.errors import InvalidArgument, counted
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.migration_moves import lineage, migration_breaks, way_out
from machines.spec.records import derived_variables
from machines.spec.routing import suggest
from machines.spec.vocabulary import (
    MIGRATION_ACTOR,
    MIGRATION_TRIGGER,
    NODE_NAME,
    NODE_SIDE_EFFECT,
)
from machines.store.arguments import check_key, text
from machines.store.names import name
from machines.store.records import StoreError
from machines.store.stored_json import Unreadable, read_json

SHOWN_KEYS = 3


class Rows(Protocol):
    param: str

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...
    def has_table(self, table: str) -> bool: ...


def map_refusals(
    db: Rows,
    versions: Sequence[MachineSpec],
    new: MachineSpec,
    mapped: Sequence[tuple[str, str, int]],
    engine_moved: bool = False,
) -> list[str]:
    """The refusals of the maps in ``mapped`` ((old state, new state, entities)) that the
    definitions' rules forbid: those of ``versions`` (every stored version, oldest first,
    the last the one the entities live under) and of ``new``; ``engine_moved``: the
    machine's entities are a derivation's nodes (``migration_breaks``)."""
    old = versions[-1]
    out = []
    renames = _recorded_maps(db, new.name, len(versions))
    for source, dest, count in mapped:
        flag = f"--map {new.name}:{source}={dest}"
        earlier = lineage(versions, source, renames)
        static = migration_breaks(
            old, new, source, dest, earlier=earlier, engine_moved=engine_moved
        )
        if static:
            out.append(
                f"{flag}: {entities(count)} would leave '{source}' by the automatic "
                f"migration actor: {'; and '.join(static)}; {way_out(old, source)}"
            )
            continue
        breaking: dict[str, list[str]] = {}
        for key, contexts in _contexts_under(db, [*(s for s, _ in earlier), old], source).items():
            found = {
                why: None
                for context in contexts
                for why in migration_breaks(old, new, source, dest, context, earlier)
            }
            for why in found:
                breaking.setdefault(why, []).append(key)
        for why, keys in breaking.items():
            shown = ", ".join(f"'{k}'" for k in keys[:SHOWN_KEYS])
            more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            out.append(
                f"{flag}: {entities(len(keys))} ({shown}{more}) cannot be moved into '{dest}' "
                f"by the automatic migration actor: {why}; {way_out(old, source)}"
            )
    return out


def _recorded_maps(db: Rows, machine: str, versions: int) -> list[set[tuple[str, str]]]:
    """For each stored version (1 to ``versions``, at index version - 1), the (old, new)
    maps the migration that installed it recorded in ``machine``'s histories."""
    out: list[set[tuple[str, str]]] = [set() for _ in range(versions)]
    history = name(machine, "history")
    if not db.has_table(history.strip('"')):
        return out
    p = db.param
    for version, source, dest in db.execute(
        f"SELECT DISTINCT definition_version, source, dest FROM {history} "
        f"WHERE trigger = {p} AND actor = {p}",
        (MIGRATION_TRIGGER, MIGRATION_ACTOR),
    ):
        if type(version) is int and 1 <= version <= versions:
            out[version - 1].add((str(source), str(dest)))
    return out


def _contexts_under(
    db: Rows, versions: Sequence[MachineSpec], state: str
) -> dict[str, list[dict[str, str]]]:
    """Each entity in ``state``: its context as each of ``versions`` derives it from its
    nodes (the distinct ones). A version that weakened the derivation (``side_effects``
    started only once a node completed) cannot make a map look safe that an earlier one,
    under which the entity lived, would have judged by money in flight."""
    out: dict[str, list[dict[str, str]]] = {}
    for spec in [v for i, v in enumerate(versions) if state in v.states and v not in versions[:i]]:
        for key, context in _contexts(db, spec, state):
            seen = out.setdefault(key, [])
            if context not in seen:
                seen.append(context)
    return out


def _contexts(db: Rows, spec: MachineSpec, state: str) -> list[tuple[str, dict[str, str]]]:
    """Each entity in ``state``: its key and its context, with the derived variables its
    nodes imply now."""
    p = db.param
    rows = db.execute(
        f"SELECT key, CAST(context AS TEXT), CAST(data AS TEXT) "
        f"FROM {name(spec.name, 'entities')} WHERE state = {p} ORDER BY key",
        (state,),
    )
    derivation = spec.derivation
    nodes_table = None if derivation is None else name(derivation.node_machine, "entities")
    out = []
    for key, stored, own in rows:
        context: dict[str, str] = dict(_read(stored, spec.name, key))
        if derivation is not None and nodes_table and db.has_table(nodes_table.strip('"')):
            planned = _planned_side_effects(_read(own, spec.name, key))
            nodes = [
                _node(
                    state_,
                    node_key,
                    _read(data, derivation.node_machine, node_key),
                    derivation.manual_prefix,
                    planned,
                )
                for state_, node_key, data in db.execute(
                    f"SELECT state, key, CAST(data AS TEXT) FROM {nodes_table} WHERE scope = {p}",
                    (key,),
                )
            ]
            context.update(derivation.implied_context(nodes))
        out.append((key, context))
    return out


def _planned_side_effects(request_data: object) -> dict[str, object] | None:
    """The request's stored plan: each node's name and its ``has_side_effect``; None when
    the request keeps no plan (another system's), and ``{}`` when what it keeps is not a
    plan (rewritten outside the engine: then every node counts as moving money)."""
    if not isinstance(request_data, dict) or "plan" not in request_data:
        return None
    plan = request_data["plan"]
    return {
        entry[NODE_NAME]: entry.get(NODE_SIDE_EFFECT)
        for entry in (plan if isinstance(plan, list) else ())
        if isinstance(entry, dict) and isinstance(entry.get(NODE_NAME), str)
    }


def _node(
    state: str,
    key: str,
    data: Mapping[str, Any],
    prefix: str,
    planned: Mapping[str, object] | None,
) -> tuple[str, bool, bool]:
    """A node as the derivation reads it: its state, whether it may move money, and
    whether it is a manual gate. It may move money when its data or its request's plan
    says so, or when the two disagree on which node it is (its key names it), as the
    engine counts it: one rewritten row cannot make a map look safe. A request with no
    stored plan (another system's) is read by its nodes' data alone; one whose plan was
    erased counts every node as moving money."""
    named = key.partition("/")[2]
    label = data.get(NODE_NAME)
    side = data.get(NODE_SIDE_EFFECT) is True
    if planned is not None:
        side = side or planned.get(named, True) is not False or label != named
    return state, side, isinstance(label, str) and label.startswith(prefix)


def _read(text: str, machine: str, key: str) -> Any:
    """A stored JSON text a migration judges by, or ``StoreError`` naming the entity: a
    text the store would not read (``read_json``: not JSON, nested too deep, a key given
    twice) is not judged, and nothing is migrated."""
    found = read_json(text)
    if isinstance(found, Unreadable):
        raise StoreError(
            f"{machine} {describe(key)}: its stored JSON {found.reason}; it was written "
            "outside machines, and a migration judges nothing it cannot read: nothing "
            "changed (machines audit --from-store names it)"
        )
    return found


def context_refusals(db: Rows, spec: MachineSpec) -> list[str]:
    """Entities whose stored context the new version refuses: they could never move."""
    derived = derived_variables(spec)
    fixed = {v: c for v, c in spec.context.items() if v not in derived}
    out = []
    rows = db.execute(
        f"SELECT CAST(context AS TEXT), count(*) FROM {name(spec.name, 'entities')} GROUP BY 1"
    )
    for stored, count in rows:
        context = _read(stored, spec.name, f"{entities(count)} with this context")
        wrong = sorted(set(context) ^ set(fixed)) or sorted(
            v for v, value in context.items() if value not in fixed[v].values
        )
        if wrong:
            out.append(
                f"{entities(count)} with a context the new version refuses "
                f"({json.dumps(context)}: {', '.join(wrong)}); a context variable or value they "
                "hold is removed, or one they lack is added"
            )
    return out


DERIVATION_NODES = 4
"""The plans a migration's derivation check enumerates, up to this many nodes (0.2 s over
the bundled kinds; ``machines check`` proves the full size)."""


def derivation_refusals(request: MachineSpec, node: MachineSpec) -> list[str]:
    """What the new version's default rule set breaks of the derivation invariants, over
    every plan of up to ``DERIVATION_NODES`` nodes: a version that derives a request's
    state from its nodes unsafely (``side_effects`` left ``none`` for a node state tagged
    ``effect-started``, say) would make every later map and move look safe by it."""
    derivation = request.derivation
    if derivation is None:
        return []
    report = check_derivation(request, node, DERIVATION_NODES)
    return [
        f"the new version's derivation (rule set '{outcome.name}') breaks {c.invariant}: "
        f"{DERIVATION_INVARIANTS[c.invariant]}; counterexample: {c.describe()}; run machines "
        "check on the definitions"
        for outcome in report.results
        if outcome.name == derivation.default
        for c in outcome.counterexamples
        if c.invariant in DERIVATION_INVARIANTS
    ]


@dataclass(frozen=True)
class StateMap:
    """``--map MACHINE:OLD=NEW``: entities of ``machine`` in ``old`` (a state the new
    version removes) move to ``new``."""

    machine: str
    old: str
    new: str

    @classmethod
    def parse(cls, text: str) -> StateMap:
        if not isinstance(text, str):
            raise InvalidArgument(f"--map must be text, not a {type(text).__name__}")
        machine, colon, states = text.partition(":")
        old, equals, new = states.partition("=")
        if not (colon and equals and machine and old and new):
            raise InvalidArgument(
                f"--map {text!r}: write MACHINE:OLD_STATE=NEW_STATE, e.g. effect:held=pending"
            )
        return cls(machine, old, new)


def checked_maps(maps: object) -> tuple[StateMap, ...]:
    if isinstance(maps, str | bytes | Mapping) or not isinstance(maps, Iterable):
        raise InvalidArgument(f"maps must be an iterable of StateMap, not a {type(maps).__name__}")
    try:
        entries = tuple(maps)
    except Exception as exc:
        raise InvalidArgument(f"reading maps raised {type(exc).__name__}") from None
    for entry in entries:
        if not isinstance(entry, StateMap):
            raise InvalidArgument(
                f"maps must hold StateMap values (StateMap.parse('MACHINE:OLD=NEW')), "
                f"not a {type(entry).__name__}"
            )
        for part in (entry.machine, entry.old, entry.new):
            check_key(text(part, "a --map's machine or state"), "migrate", "--map name")
    return entries


def applied_maps(
    spec: MachineSpec,
    version: int,
    maps: Sequence[StateMap],
    lived_in: Collection[str],
    went: Mapping[str, Collection[str]],
) -> tuple[str, ...]:
    """The refusals of maps given for a machine already at the definition given. A map
    out of a state an earlier stored version had (``lived_in``) and this one does not,
    into one it has, is the rerun of the migration that applied it: nothing to do, unless
    that migration mapped the state's entities elsewhere (``went``: old state -> the
    states its migration events entered). Any other map could never apply."""
    out = []
    for e in maps:
        flag = f"--map {e.machine}:{e.old}={e.new}"
        if e.old not in lived_in:
            out.append(
                f"{flag}: '{e.old}' was never a state of machine '{e.machine}' in this store "
                f"(versions 1 to {version}); there is nothing to map"
            )
        elif went.get(e.old) and e.new not in went[e.old]:
            out.append(
                f"{flag}: the entities in '{e.old}' were mapped to "
                f"{', '.join(repr(s) for s in sorted(went[e.old]))} when the store moved to a "
                "later version; this map was not applied, and nothing is to do"
            )
        elif e.old in spec.states:
            out.append(
                f"{flag}: version {version} is the definition given and keeps state "
                f"'{e.old}'; nothing is removed"
            )
        elif e.new not in spec.states:
            out.append(
                f"{flag}: version {version} is the definition given and has no state "
                f"'{e.new}'; states: {', '.join(spec.states)}"
            )
    return tuple(out)


def mappings(
    old: MachineSpec,
    new: MachineSpec,
    counts: Mapping[str, int],
    maps: Sequence[StateMap],
) -> tuple[list[tuple[str, str, int]], list[str]]:
    m = new.name
    refusals: list[str] = []
    mapped: list[tuple[str, str, int]] = []
    given: dict[str, StateMap] = {}
    refused: set[str] = set()  # a refused map's entities are judged no further
    for entry in maps:
        flag = f"--map {m}:{entry.old}={entry.new}"
        before = len(refusals)
        if entry.old in given:
            refusals.append(f"{flag}: state '{entry.old}' is mapped twice")
        elif entry.old not in old.states:
            refusals.append(f"{flag}: '{entry.old}' is not a state of the stored version")
        elif entry.old in new.states:
            refusals.append(
                f"{flag}: the new version keeps state '{entry.old}'; only a removed state is mapped"
            )
        elif entry.new not in new.states:
            refusals.append(
                f"{flag}: the new version has no state '{entry.new}'"
                f"{suggest(entry.new, new.states)}; states: {', '.join(new.states)}"
            )
        elif old.states[entry.old].terminal and not new.states[entry.new].terminal:
            refusals.append(
                f"{flag}: '{entry.old}' is terminal and '{entry.new}' is not; a "
                "finished entity stays finished"
            )
        if len(refusals) > before:
            refused.add(entry.old)
        else:
            given[entry.old] = entry
    for state, count in sorted(counts.items()):
        if state in new.states or state in refused or not count:
            continue
        found = given.get(state)
        if found is None:
            refusals.append(
                f"{entities(count)} in state '{state}', which the new version removes; "
                f"map them: --map {m}:{state}=STATE"
            )
        else:
            mapped.append((state, found.new, count))
    return mapped, refusals


def entities(count: int) -> str:
    return counted(count, "entity", "entities")
