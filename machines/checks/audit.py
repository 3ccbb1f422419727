"""``machines audit``: judge a recorded history against the definitions and the invariants.

Teams run the spec against their production logs: the JSON Lines that
``History.write_jsonl`` writes (one transition event per line, any number of entities and
machines mixed), or a whole store (``--from-store URL``). Events are grouped by entity and
replayed from the initial state through ``spec.step`` with their recorded actor and
context; every illegal move, broken chain or breached invariant is reported with the
events involved, by the same ``machines.checks.invariants`` code the stateful suites use.

From a log alone the entities' data is unknown (which node has a side effect, how often
an effect ran upstream), so the invariants that read it can only be judged with
``--from-store``; the log still proves every move legal and every chain unbroken.

What is unreadable and what is a breach: a line that is not a well-formed event (not
UTF-8, not JSON, too long or too deep, a field missing or of the wrong type: ``seq`` a
positive integer, ``at`` a finite number, names non-empty strings, ``context`` an object
of strings, ``detail`` null or an object) is an input error, and the command exits 2
naming the line. A well-formed event that names a machine, state, trigger, actor or
context variable its definition does not define is a breach (``known-machine``,
``known-names``; exit 1): the log says something happened that the definition does not
allow. An audit never writes: a store is opened read-only, and a missing one is an error.

A store judged with ``--from-store`` records the definition version each event was made
under and every version's definition: each event is judged by its own version
(``machines.checks.versions``), and an event naming a version the store does not record is
a ``known-names`` breach. The auditor does not take the store's word for its current
definitions: the store's current version of each machine must have the semantic digest
of the definition given (``DefinitionChanged``, exit 2, otherwise), and every stored
version's text must load to the digest recorded with it (``StoreError``, exit 2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from dataclasses import field as default
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from machines.checks.breaches import Breach
from machines.checks.heads import INVARIANT as HISTORY_KEPT
from machines.checks.heads import Head, check, heads
from machines.checks.invariants import PREDICATES, check_invariants
from machines.checks.snapshots import Entity, Snapshot, snapshot
from machines.checks.versions import Versions
from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.jsonvalue import UnstorableValue, describe, dumps
from machines.store import open_store
from machines.store.integrity import guards_report
from machines.store.records import MAX_STORED_INT, shown_url
from machines.store.versions import DefinitionChanged

FIELDS = ("machine", "entity", "seq", "source", "dest", "trigger", "actor", "context", "at")
NAMES = ("machine", "entity", "source", "dest", "trigger", "actor")
"""The fields that are names: each a non-empty string."""
FROM_HISTORY = (
    "terminal-final",
    "append-only-history",
    "fail-closed-indeterminate",
    "tier-discipline",
    "no-auto-terminal-money-in-flight",
)
"""The invariants a history alone can judge (events, actors, details, context). The rest
read entity data a log does not carry (results, errors, upstream runs, which node has a
side effect): ``--from-store`` judges those too."""

MAX_LINE_BYTES = 1 << 20
"""The longest line read (1 MiB, its newline included). ``History.write_jsonl`` writes a
few hundred bytes per event; a longer line is not an event, and reading it whole could
exhaust memory (a "log" that is really ``/dev/zero``)."""


class AuditInputError(MachinesError, ValueError):
    """A line of the history that is not a transition event; names the line and the fix."""


def read_log(path: Path) -> list[TransitionEvent]:
    """The events of the JSON Lines file at ``path``, read a bounded line at a time."""
    with path.open("rb") as raw:
        return read_events(_bounded_lines(raw), str(path))


def read_events(lines: Iterable[str | bytes], name: str = "<history>") -> list[TransitionEvent]:
    """Parse JSON Lines of transition events (text, or UTF-8 bytes); blank lines are
    skipped, anything else that is not an event is refused with its line number."""
    events = []
    for number, line in enumerate(lines, start=1):
        where = f"{name}:{number}"
        if len(line) > MAX_LINE_BYTES:
            raise AuditInputError(
                f"{where}: longer than {MAX_LINE_BYTES:,} bytes; an event is a short line"
            )
        text = _text(line, where)
        if not text.strip():
            continue
        try:
            raw = json.loads(text, object_pairs_hook=_once_each)
        except _KeyTwice as twice:
            raise AuditInputError(
                f"{where}: gives the key {twice.args[0]!r} twice (a reader that keeps the "
                "first value and one that keeps the last would judge two events)"
            ) from None
        except json.JSONDecodeError as error:
            raise AuditInputError(f"{where}: not JSON ({error.msg})") from None
        except RecursionError:
            raise AuditInputError(f"{where}: nested too deeply to be an event") from None
        except ValueError:  # json's only other refusal: an integer of over 4300 digits
            raise AuditInputError(f"{where}: holds a number too long to read") from None
        events.append(_event(raw, where))
    return events


class _KeyTwice(ValueError):
    pass


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of an event line, refused when it gives a key twice (outsider batch 35,
    c 3: ``"actor": "bot", ..., "actor": "agent"`` was judged as the agent's move, and
    the audit said OK)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _KeyTwice(key)
        found[key] = value
    return found


def _bounded_lines(raw: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``raw``, none read past ``MAX_LINE_BYTES`` (a longer one is cut there,
    and refused by its length)."""
    while line := raw.readline(MAX_LINE_BYTES + 1):
        yield line


def _text(line: str | bytes, where: str) -> str:
    if isinstance(line, str):
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise AuditInputError(
            f"{where}: byte {error.start + 1} is not UTF-8 ({line[error.start]:#04x}); "
            "History.write_jsonl writes UTF-8 text"
        ) from None


def _event(raw: Any, where: str) -> TransitionEvent:
    """One event, checked field by field: anything else is an input error (exit 2), so
    that the invariants judge only well-formed events."""
    if not isinstance(raw, dict):
        raise AuditInputError(f"{where}: each line must be a JSON object (a transition event)")
    missing = [f for f in FIELDS if f not in raw]
    if missing:
        raise AuditInputError(
            f"{where}: missing {', '.join(missing)}; an event has {', '.join(FIELDS)} "
            "(and detail), as History.write_jsonl writes it"
        )
    unknown = sorted(set(raw) - {*FIELDS, "detail"})
    if unknown:
        raise AuditInputError(f"{where}: unknown field(s) {describe(', '.join(unknown))}")
    for field in NAMES:
        if not isinstance(raw[field], str) or not raw[field]:
            raise AuditInputError(
                f"{where}: {field} must be a non-empty string, not {_what(raw[field])}"
            )
    seq, at, context, detail = raw["seq"], raw["at"], raw["context"], raw.get("detail")
    if type(seq) is not int or not 1 <= seq <= MAX_STORED_INT:
        raise AuditInputError(
            f"{where}: seq must be an integer from 1 to 2**63-1 (the event's number in its "
            f"entity's history), not {_what(seq)}"
        )
    if type(at) not in (int, float) or not math.isfinite(_float(at)):
        raise AuditInputError(
            f"{where}: at must be a finite number (seconds since the epoch), not {_what(at)}"
        )
    if not isinstance(context, dict) or not all(isinstance(v, str) for v in context.values()):
        raise AuditInputError(
            f"{where}: context must be an object whose values are strings (the guard "
            f"context), not {_what(context)}"
        )
    if detail is not None and not isinstance(detail, dict):
        raise AuditInputError(f"{where}: detail must be null or an object, not {_what(detail)}")
    try:
        dumps(raw, what="the event")  # the one rule of stored values: depth, NUL, surrogates
    except UnstorableValue as refused:
        raise AuditInputError(f"{where}: {refused}") from None
    return TransitionEvent(
        machine=raw["machine"],
        entity=raw["entity"],
        seq=seq,
        source=raw["source"],
        dest=raw["dest"],
        trigger=raw["trigger"],
        actor=raw["actor"],
        detail=detail,
        context=context,
        at=float(at),
    )


def _float(number: int | float) -> float:
    try:
        return float(number)
    except OverflowError:  # an integer beyond every float
        return math.inf


def _what(value: object) -> str:
    """A value as a message shows it: its JSON type, and the value when short."""
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "null" if value is None else f"a {type(value).__name__}"
    )
    if isinstance(value, (bool, float, str)) or (isinstance(value, int) and abs(value) < 10**20):
        return f"{kind} {describe(value, 40)}"
    return kind


def unknown_names(spec: MachineSpec, entity: Entity, snap: Snapshot | None = None) -> list[str]:
    """What ``entity`` names that its definition does not define: its state (by ``spec``,
    the current definition), and each event's states, trigger, actor and context
    variables, by the definition of the event's version when ``snap`` records versions
    (a version the store does not record is named too; a migration event's own names are
    the reserved ones, and its source is its rule's to judge). Such an entity breaks its
    definition; the invariants, which look these names up, cannot judge it."""
    versions = Versions(spec, snap.definitions if snap is not None else {})
    recorded = None if snap is None else snap.event_versions.get((entity.machine, entity.key))
    found = [] if entity.state in spec.states else [f"its state '{entity.state}'"]
    for j in versions.judged(entity.history, recorded):
        ev, of = j.event, j.spec
        if of is None:
            found.append(
                f"event #{ev.seq} names definition version {j.version}, which the store "
                f"does not record (it has {versions.numbers})"
            )
            continue
        states = (ev.dest,) if j.migration else (ev.source, ev.dest)
        names = [f"state '{s}'" for s in states if s not in of.states]
        if not j.migration:  # a migration's trigger and actor are the reserved ones
            names += [f"trigger '{ev.trigger}'"] if ev.trigger not in of.triggers else []
            names += [f"actor '{ev.actor}'"] if ev.actor not in of.actors else []
        names += [f"context variable '{v}'" for v in ev.context if v not in of.context]
        at = "" if j.version is None else f" (version {j.version})"
        found += [f"event #{ev.seq}{at} names {name}" for name in names]
    return found


def _judgeable(specs: Mapping[str, MachineSpec], snap: Snapshot) -> tuple[Snapshot, list[Breach]]:
    """``snap`` without the entities that name what their definition does not know, and a
    ``known-names`` breach for each of those."""
    kept, out = {}, []
    for key, entity in snap.entities.items():
        unknown = unknown_names(specs[entity.machine], entity, snap)
        if unknown:
            out.append(
                Breach(
                    "known-names",
                    entity.machine,
                    entity.key,
                    f"names what its definition does not define: {'; '.join(unknown[:5])}",
                    entity.history[:3],
                )
            )
        else:
            kept[key] = entity
    return replace(snap, entities=MappingProxyType(kept)), out


def audit_events(
    events: Iterable[TransitionEvent], specs: Mapping[str, MachineSpec]
) -> list[Breach]:
    """Every breach in a recorded history: unknown machines, illegal or out-of-order
    events, and the invariants a history alone can show broken."""
    histories: dict[tuple[str, str], list[TransitionEvent]] = {}
    for event in events:
        histories.setdefault((event.machine, event.entity), []).append(event)
    out = [
        Breach(
            "known-machine",
            machine,
            key,
            f"no definition named '{machine}'; known: {', '.join(sorted(specs))}",
            tuple(history[:1]),
        )
        for (machine, key), history in histories.items()
        if machine not in specs
    ]
    entities = {}
    for key, history in histories.items():
        if key[0] in specs:
            ordered = tuple(sorted(history, key=lambda e: e.seq))  # lines may interleave
            state = ordered[-1].dest
            entities[key] = Entity(key[0], key[1], state, ordered[0].context, {}, None, ordered)
    snap, unknown = _judgeable(specs, Snapshot(MappingProxyType(entities)))
    out += unknown
    for name in FROM_HISTORY:
        out += PREDICATES[name](specs, snap, None)
    return out


@dataclass(frozen=True)
class PersonMove:
    """One move a person made: on which entity, which move, as which actor, and who
    (the ``by`` of its detail, when it names one)."""

    machine: str
    key: str
    seq: int
    trigger: str
    actor: str
    by: str | None
    at: float

    def describe(self) -> str:
        who = f"by {self.by} " if self.by else ""
        return f"{self.machine} {self.key!r}: {self.trigger} {who}as {self.actor}"


def people_moves(specs: Mapping[str, MachineSpec], snap: Snapshot) -> tuple[PersonMove, ...]:
    """Every move in ``snap`` by an actor its machine's definition says is a person."""
    out = []
    for (machine, key), entity in snap.entities.items():
        spec = specs.get(machine)
        if spec is None:
            continue
        for event in entity.history:
            actor = spec.actors.get(event.actor)
            if actor is None or actor.automatic:
                continue
            by = (event.detail or {}).get("by")
            out.append(
                PersonMove(
                    machine,
                    key,
                    event.seq,
                    event.trigger,
                    event.actor,
                    by if isinstance(by, str) else None,
                    event.at,
                )
            )
    out.sort(key=lambda m: (m.at, m.machine, m.key, m.seq))
    return tuple(out)


@dataclass(frozen=True)
class StoreAudit:
    """What ``judge_store`` found: the breaches, by which definition versions, and the
    repairs of the store's guards it records."""

    breaches: list[Breach]
    versions: Mapping[str, tuple[int, ...]]
    """Machine -> every definition version the store records (oldest first): the versions
    its events were judged by."""
    repairs: tuple[str, ...] = ()
    """Each recorded ``machines repair``: when, by whom, what it found."""
    heads: Mapping[tuple[str, str], Head] = default(default_factory=dict)
    """Every entity's head (``machines.checks.heads``), to keep for a later check (asked
    for with ``keep_heads``; else empty)."""
    people: tuple[PersonMove, ...] = ()
    """Every move a person made (an actor its definition says is not automatic), oldest
    first: what the desk and every other person's call decided, named."""

    def judged_by(self) -> str:
        """The versions as a person reads them: ``outcome v1-v2, effect v1``."""
        return ", ".join(f"{m} {_span(v)}" for m, v in self.versions.items() if v) or "no version"


def _span(versions: tuple[int, ...]) -> str:
    low, high = versions[0], versions[-1]
    return f"v{low}" if low == high else f"v{low}-v{high}"


def audit_store(url: str, specs: Mapping[str, MachineSpec]) -> list[Breach]:
    """Every breach of every invariant in the store at ``url`` (rows, data and history),
    each event judged by the definition of its version (``judge_store``)."""
    return judge_store(url, specs).breaches


def judge_store(
    url: str,
    specs: Mapping[str, MachineSpec],
    kept: Mapping[tuple[str, str], Head] | None = None,
    *,
    keep_heads: bool = False,
) -> StoreAudit:
    """Every breach in the store at ``url``, and the versions its events were judged by;
    given heads ``kept`` earlier, also every ``history-kept`` breach against them; with
    ``keep_heads``, every entity's head now (``StoreAudit.heads``), to keep.

    The store is opened read-only with ``specs``: one whose current version of a machine
    has another semantic digest raises ``DefinitionChanged``; every stored version is
    loaded from its text, which must have its recorded digest (``StoreError``)."""
    where = shown_url(url)
    try:
        store = open_store(url, specs, read_only=True)
    except DefinitionChanged as changed:
        raise DefinitionChanged(
            f"{changed}; an audit judges a store by the definitions it serves now: give "
            "those with --spec-dir"
        ) from changed
    try:
        report = guards_report(store)
        tampering, repairs = report.tampering + report.forged_repairs, report.repairs
        forged = [d.forged_version for d in tampering if d.forged_version is not None]
        snap = snapshot(store, from_texts=True, forged=forged, lenient=True)
        gone = _rows_gone(store, specs)
        with store.transaction() as tx:
            registry = [v for machine in specs for v in tx.definition_versions(machine)]
    finally:
        store.close()
    guards = [Breach("guards-intact", d.machine or "store", d.where, d.what) for d in tampering]
    guards += gone + [
        Breach(
            "append-only-history",
            machine,
            key,
            f"cannot be read ({why}); the rest of the store is judged without it",
        )
        for (machine, key), why in snap.unreadable.items()
    ]
    versions: dict[str, list[int]] = {m: [] for m in specs}
    for machine, version in sorted(snap.definitions):
        versions.setdefault(machine, []).append(version)
    for machine, numbers in versions.items():
        current = snap.definitions[(machine, numbers[-1])] if numbers else None
        if current is not None and semantic_digest(current) != semantic_digest(specs[machine]):
            raise DefinitionChanged(
                f"{where}: machine '{machine}' is now at definition version {numbers[-1]}, "
                "whose digest is not that of the definition given (it was migrated while "
                "the audit opened it); audit it again with the definitions it now serves"
            )
    against = [] if kept is None else check(set(specs), snap, kept, repairs, registry)
    return StoreAudit(
        guards + against + judge_snapshot(specs, snap),
        {m: tuple(v) for m, v in versions.items()},
        repairs,
        heads(specs, snap, repairs, registry) if keep_heads else {},
        people_moves(specs, snap),
    )


def _rows_gone(store: Any, specs: Mapping[str, MachineSpec]) -> list[Breach]:
    """A ``history-kept`` breach for each entity with a history and no row (a store that
    can tell: ``keys_without_row``)."""
    out = []
    with store.transaction() as tx:
        gone = getattr(tx, "keys_without_row", None)
        if not callable(gone):
            return []
        for machine in specs:
            for key in gone(machine):
                out.append(
                    Breach(
                        HISTORY_KEPT,
                        machine,
                        key if isinstance(key, str) else describe(key),
                        "its history is there and its row is not: the row was removed outside "
                        "the guards (every entity keeps its row; SQLite's REPLACE deletes one "
                        "without firing a trigger)",
                    )
                )
    return out


def judge_snapshot(specs: Mapping[str, MachineSpec], snap: Snapshot) -> list[Breach]:
    """Every breach in ``snap``: ``known-names`` for each entity that names what its
    definition (of each event's version) lacks, and every invariant over the others."""
    judged, unknown = _judgeable(specs, snap)
    return unknown + check_invariants(specs, judged)
