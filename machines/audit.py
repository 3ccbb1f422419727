"""``machines audit``: judge a recorded history against the definitions and the invariants.

Teams run the spec against their production logs: the JSON Lines that
``History.write_jsonl`` writes (one transition event per line, any number of entities and
machines mixed), or a whole store (``--from-store URL``). Events are grouped by entity and
replayed from the initial state through ``spec.step`` with their recorded actor and
context; every illegal move, broken chain or breached invariant is reported with the
events involved, by the same ``machines.invariants`` code the stateful suites use.

From a log alone the entities' data is unknown (which node has a side effect, how often
an effect ran upstream), so the invariants that read it can only be judged with
``--from-store``; the log still proves every move legal and every chain unbroken.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from machines.errors import MachinesError
from machines.history import TransitionEvent
from machines.invariants import INVARIANTS, Breach, Entity, Snapshot, check_invariants, snapshot
from machines.spec import MachineSpec
from machines.store import open_store

FIELDS = ("machine", "entity", "seq", "source", "dest", "trigger", "actor", "context", "at")
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


class AuditInputError(MachinesError, ValueError):
    """A line of the history that is not a transition event; names the line and the fix."""


def read_events(lines: Iterable[str], name: str = "<history>") -> list[TransitionEvent]:
    """Parse JSON Lines of transition events; blank lines are skipped, anything else that
    is not an event is refused with its line number."""
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise AuditInputError(f"{name}:{number}: not JSON ({error.msg})") from None
        events.append(_event(raw, f"{name}:{number}"))
    return events


def _event(raw: Any, where: str) -> TransitionEvent:
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
        raise AuditInputError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if not isinstance(raw["seq"], int) or not isinstance(raw["context"], dict):
        raise AuditInputError(f"{where}: seq must be an integer and context an object")
    return TransitionEvent(
        machine=str(raw["machine"]),
        entity=str(raw["entity"]),
        seq=raw["seq"],
        source=str(raw["source"]),
        dest=str(raw["dest"]),
        trigger=str(raw["trigger"]),
        actor=str(raw["actor"]),
        detail=raw.get("detail"),
        context={str(k): str(v) for k, v in raw["context"].items()},
        at=float(raw["at"]),
    )


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
    snap = Snapshot(MappingProxyType(entities))
    for name in FROM_HISTORY:
        out += INVARIANTS[name](specs, snap, None)
    return out


def audit_store(url: str, specs: Mapping[str, MachineSpec]) -> list[Breach]:
    """Every breach of every invariant in the store at ``url`` (rows, data and history)."""
    store = open_store(url, specs)
    try:
        return check_invariants(specs, snapshot(store))
    finally:
        store.close()
