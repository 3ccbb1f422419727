"""What every stored-state invariant returns and reads: a ``Breach`` (the entity, the
invariant it breaks and the events involved), the shape of a predicate, and each entity's
events with the definition version that judges them (``machines.checks.versions``). The
predicates are in ``machines.checks.invariants`` and, for a transfer's money,
``machines.checks.money``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from machines.checks.snapshots import Entity, Snapshot
from machines.checks.versions import Judged, Versions, versions_by_machine
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec


@dataclass(frozen=True)
class Breach:
    invariant: str
    machine: str
    key: str
    message: str
    events: tuple[TransitionEvent, ...] = ()

    def describe(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """The breach's line, then one line per event involved: a report that escapes
        stored text escapes each apiece, so a line break inside a key stays escaped."""
        return [
            f"[{self.invariant}] {self.machine} '{self.key}': {self.message}",
            *(
                f"    #{e.seq} {e.source} --{e.trigger} ({e.actor})--> {e.dest}"
                for e in self.events
            ),
        ]


Specs = Mapping[str, MachineSpec]
Predicate = Callable[[Specs, Snapshot, Snapshot | None], list[Breach]]


def histories(specs: Specs, snap: Snapshot) -> Iterator[tuple[Versions, Entity, list[Judged]]]:
    """Each entity of a machine ``specs`` defines, with each event of its history and the
    definition that judges it (that of its version)."""
    by_machine = versions_by_machine(specs, snap.definitions)
    for entity in snap.entities.values():
        versions = by_machine.get(entity.machine)
        if versions is not None:
            recorded = snap.event_versions.get((entity.machine, entity.key))
            yield versions, entity, versions.judged(entity.history, recorded)


def events_judged(spec: MachineSpec, snap: Snapshot, entity: Entity) -> list[Judged]:
    """Each event of ``entity`` (of ``spec``'s machine) with the definition that judges it."""
    recorded = snap.event_versions.get((entity.machine, entity.key))
    return Versions(spec, snap.definitions).judged(entity.history, recorded)
