"""What the invariants judge: a ``Snapshot`` of every entity with its whole history, read
from a store in one transaction (``snapshot``) or built by a test or the explorer.

An audit reads a store as it is, which may hold what the store never writes (a text that
is not JSON, a key that is not text): such an entity is named in ``Snapshot.unreadable``
and the rest are read and judged, rather than the first one stopping the audit."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.store.records import DefinitionVersion, Row, Store, Transaction, shown_url
from machines.store.versions import load_versions


@dataclass(frozen=True)
class Entity:
    machine: str
    key: str
    state: str
    context: Mapping[str, str]
    data: Mapping[str, Any]
    scope: str | None
    history: tuple[TransitionEvent, ...]
    version: int | None = None
    """The row's version (every write raises it by one); None outside a store."""
    row: Row | None = None
    """The row as the store returned it (its move count, creation order and times); None
    outside a store."""


@dataclass(frozen=True)
class Snapshot:
    """Everything stored, plus ``runs``: (machine, key) -> times the effect ran upstream.

    From a store also ``event_versions``: (machine, key) -> the definition version each
    event of its history was made under, and ``definitions``: (machine, version) -> the
    definition of every version the store records. Without them (a log, a test's own
    snapshot) every event is judged by the current definition."""

    entities: Mapping[tuple[str, str], Entity]
    runs: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    event_versions: Mapping[tuple[str, str], tuple[int, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    definitions: Mapping[tuple[str, int], MachineSpec] = field(
        default_factory=lambda: MappingProxyType({})
    )
    unreadable: Mapping[tuple[str, str], str] = field(default_factory=lambda: MappingProxyType({}))
    """(machine, key) -> why its row or history cannot be read (``snapshot(lenient=True)``:
    an audit); such an entity is not in ``entities``."""

    def of(self, machine: str) -> Iterator[Entity]:
        return (e for (m, _), e in self.entities.items() if m == machine)


def snapshot(
    store: Store,
    runs: Mapping[tuple[str, str], int] | None = None,
    *,
    from_texts: bool = False,
    forged: Collection[tuple[str, int]] = (),
    lenient: bool = False,
) -> Snapshot:
    """Every row and history of ``store``, with the version of every event and the
    definition of every version, read in one transaction. ``from_texts`` (an audit): every
    version loaded from its stored text, checked against its recorded digest, the current
    ones too; otherwise, while each machine has one version, the store's own definition.
    ``forged``: registry rows (machine, version) no migration added, which the store's
    check of its guards found; they are left out. ``lenient`` (an audit): an entity whose
    row or history cannot be read is named in ``Snapshot.unreadable`` instead of raising
    ``StoreError``."""
    entities = {}
    unreadable: dict[tuple[str, str], str] = {}
    versions: dict[tuple[str, str], tuple[int, ...]] = {}
    stored: dict[str, list[DefinitionVersion]] = {}
    with store.transaction() as tx:
        for machine in store.specs():
            stored[machine] = [
                v for v in tx.definition_versions(machine) if (machine, v.version) not in forged
            ]
            for key, row, problem in _rows(tx, machine, lenient):
                try:
                    history = tuple(tx.history(machine, key)) if row is not None else ()
                except MachinesError as error:
                    if not lenient:
                        raise
                    problem = str(error)
                if row is None or problem is not None:
                    unreadable[(machine, key)] = problem or "its row cannot be read"
                    continue
                entities[(machine, key)] = Entity(
                    machine,
                    key,
                    row.state,
                    row.context,
                    row.data,
                    row.scope,
                    history,
                    row.version,
                    row,
                )
                versions[(machine, key)] = tuple(tx.event_versions(machine, key))
    return Snapshot(
        MappingProxyType(entities),
        MappingProxyType(dict(runs or {})),
        MappingProxyType(versions),
        MappingProxyType(
            load_versions(shown_url(store.url), stored)
            if from_texts or any(len(found) > 1 for found in stored.values())
            else {(m, v.version): store.specs()[m] for m, found in stored.items() for v in found}
        ),
        MappingProxyType(unreadable),
    )


def _rows(
    tx: Transaction, machine: str, lenient: bool
) -> Iterator[tuple[str, Row | None, str | None]]:
    """Each row of ``machine`` as (key, row, None); ``lenient``, when they cannot all be
    read at once, each one by itself (a store that lists its raw keys: ``keys``), with
    (key, None, why) for one that cannot be read."""
    try:
        rows = tx.rows(machine)
    except MachinesError:
        listed = getattr(tx, "keys", None)
        if not lenient or not callable(listed):
            raise
    else:
        yield from ((row.key, row, None) for row in rows)
        return
    for key in listed(machine):
        if not isinstance(key, str):
            yield (
                describe(key),
                None,
                f"its key {describe(key)} is not text: written outside the store",
            )
            continue
        try:
            yield key, tx.get(machine, key), None
        except MachinesError as error:
            yield key, None, str(error)
