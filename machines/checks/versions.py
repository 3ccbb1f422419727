"""Which definition judges each recorded event: the version it was made under.

A store records every version of each machine's definition it has served
(``machines.store.versions``) and, with every history event, the version under which it
was made; a snapshot of it (``machines.checks.snapshots.snapshot``) carries both. Each
event is then judged by the definition of its own version, so that a move an older
version allowed stays legal after a migration removed it, and a move only a newer version
allows is a breach when it is recorded under an older one.

The judge's own definition stands for a machine's current (highest) version: it is the
definition the auditor gives, which the store's current version must match (a store
opened with another one raises ``DefinitionChanged``), and a system run on a broken
definition is still judged by the published one. Older versions are the store's own
texts, each checked to load to the digest recorded with it.

A history without versions (a JSON Lines log) is judged by the current definition alone.

A migration event (``machines migrate`` writes one for each entity it maps out of a state
the new version removes: actor ``migration``, trigger ``migrate``) is no move of any
definition; ``migration_problems`` says what makes one legal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.migration_moves import engine_moved_machines, lineage, migration_breaks
from machines.spec.vocabulary import MIGRATION_ACTOR, MIGRATION_TRIGGER

UNKNOWN = 0
"""The version of an event whose version a snapshot does not say (none is numbered 0)."""


def is_migration(event: TransitionEvent) -> bool:
    """Whether ``event`` says it is a migration's (``machines.store.migration``)."""
    return event.actor == MIGRATION_ACTOR and event.trigger == MIGRATION_TRIGGER


@dataclass(frozen=True)
class Judged:
    """One event, with the definition that judges it."""

    event: TransitionEvent
    version: int | None
    """The definition version it was made under; None when no versions are known (a log),
    and then the current definition judges it."""
    spec: MachineSpec | None
    """The definition of that version; None for a version the store does not record."""

    @property
    def migration(self) -> bool:
        """A migration event of a history with versions (judged by its own rule; in a log
        it names an actor and a trigger no definition has)."""
        return self.version is not None and is_migration(self.event)


class Versions:
    """The definitions that judge the events of one machine: ``current`` (the judge's)
    for its highest version and for every event when no version is known, the stored
    ones (``definitions``, by (machine, version)) for the older versions."""

    def __init__(
        self,
        current: MachineSpec,
        definitions: Mapping[tuple[str, int], MachineSpec],
        engine_moved: bool = False,
    ) -> None:
        self.current = current
        self.engine_moved = engine_moved
        """Whether the machine's entities are a derivation's nodes, which only their
        engine moves out of a state that is not final (``migration_breaks``)."""
        known = {v: spec for (m, v), spec in definitions.items() if m == current.name}
        if known:
            known[max(known)] = current
        self.known: Mapping[int, MachineSpec] = known

    def of(self, version: int) -> MachineSpec | None:
        """The definition of ``version``, or None when the store does not record it."""
        return self.known.get(version) if type(version) is int else None

    @property
    def numbers(self) -> str:
        """The versions known, as a message shows them: ``v1-v3``, ``v1``, or none."""
        if not self.known:
            return "its definition"
        low, high = min(self.known), max(self.known)
        return f"v{low}" if low == high else f"v{low}-v{high}"

    def judged(
        self, history: Sequence[TransitionEvent], versions: Sequence[int] | None
    ) -> list[Judged]:
        """Each event of ``history`` with the definition of its version (``versions``, one
        per event: what the store recorded); all by the current one when the snapshot
        knows no versions of this machine or of this entity."""
        if not self.known or versions is None:
            return [Judged(event, None, self.current) for event in history]
        padded = [*versions, *[UNKNOWN] * (len(history) - len(versions))]
        return [Judged(event, v, self.of(v)) for event, v in zip(history, padded, strict=False)]

    def starts(self, first: Judged | None) -> list[str]:
        """The states an entity may start in: the initial state of a version up to that of
        its first event (it was created under one of them), or of any version when it has
        no event; the current initial state alone without versions."""
        if not self.known or (first is not None and first.version is None):
            return [self.current.initial]
        upto = first.version if first is not None and first.spec is not None else None
        if upto is None:  # no event, or a first of an unknown version (reported as such)
            upto = max(self.known)
        return list(dict.fromkeys(s.initial for v, s in sorted(self.known.items()) if v <= upto))

    def left_terminal(self, judged: Judged) -> bool:
        """Whether the event leaves a terminal state: out of one of its own version's, or,
        for a migration, out of one of the version before into a state its own version
        does not make terminal (a finished entity stays finished; a state removed may map
        to another terminal one)."""
        ev, spec = judged.event, judged.spec
        if spec is None:
            return False  # an unknown version: append-only-history reports it
        if not judged.migration:
            return spec.states[ev.source].terminal
        assert judged.version is not None
        before = self.of(judged.version - 1)
        source = None if before is None else before.states.get(ev.source)
        dest = spec.states.get(ev.dest)
        return source is not None and source.terminal and not (dest is not None and dest.terminal)

    def migration_problems(
        self,
        judged: Judged,
        previous: int | None,
        renames: Mapping[int, Collection[tuple[str, str]]] = MappingProxyType({}),
    ) -> list[str]:
        """What is wrong with a migration event made under version b, ``previous`` being
        the version of the event before it (None: it is the first): b must be above
        ``previous``; its detail names from_version b-1, to_version b and a reason; it
        leaves a state of version b-1 that version b does not have, for one version b
        has; and the rules of both versions, and of the earlier ones under which the entity
        may have lived in the state it leaves, allow it to the automatic migration actor
        (``machines.spec.migration_moves``), back through ``renames`` (version ->
        the (old, new) maps the entity's earlier migration events made). (Its place in the
        chain and, in
        terminal-final, where it may lead from a terminal state are judged with every
        other event.)"""
        ev, b = judged.event, judged.version
        assert b is not None and judged.spec is not None
        out = []
        if previous is not None and b <= previous:
            out.append(
                f"a migration to version {b} after an event of version {previous}: a "
                "migration installs a later version"
            )
        detail: Mapping[str, Any] = ev.detail or {}
        named = (_number(detail.get("from_version")), _number(detail.get("to_version")))
        if named != (b - 1, b):
            out.append(
                f"its detail must name from_version {b - 1} and to_version {b} (the event is "
                f"of version {b}), not {named[0]} and {named[1]}"
            )
        if not isinstance(detail.get("reason"), str) or not detail["reason"].strip():
            out.append("its detail records no reason")
        before = self.of(b - 1)
        if before is None:
            out.append(f"version {b - 1}, which it migrates from, is not recorded")
        elif ev.source not in before.states:
            out.append(f"'{ev.source}' is not a state of version {b - 1}")
        elif ev.source in judged.spec.states:
            out.append(
                f"version {b} keeps state '{ev.source}': a migration maps only the entities "
                "of a state the new version removes"
            )
        if ev.dest not in judged.spec.states:
            out.append(f"'{ev.dest}' is not a state of version {b}")
        if before is not None and ev.source in before.states:
            lived = self.upto(b - 1)
            first = b - len(lived)
            earlier = lineage(
                lived, ev.source, [renames.get(first + i, ()) for i in range(len(lived))]
            )
            out += migration_breaks(
                before, judged.spec, ev.source, ev.dest, earlier=earlier,
                engine_moved=self.engine_moved,
            )  # fmt: skip
        return out

    def upto(self, version: int) -> list[MachineSpec]:
        """The known versions up to ``version``, oldest first, back to the first one the
        store does not record."""
        out: list[MachineSpec] = []
        while (spec := self.of(version)) is not None:
            out.insert(0, spec)
            version -= 1
        return out


def _number(value: object) -> int | None:
    return value if type(value) is int else None


def versions_by_machine(
    specs: Mapping[str, MachineSpec], definitions: Mapping[tuple[str, int], MachineSpec]
) -> dict[str, Versions]:
    """``Versions`` of every machine of ``specs``."""
    moved = engine_moved_machines([*specs.values(), *definitions.values()])
    return {m: Versions(spec, definitions, m in moved) for m, spec in specs.items()}
