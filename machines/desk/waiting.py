"""What waits on a person, derived from the definitions, and the moves a person may make.

An entity waits on a person when its state is not terminal and either the definition tags
it ``needs-human``, or a person may move it and no program can move its work on (an
automatic move out of it only ends it: a timeout, a replay), judged by the moves the
definition admits under the entity's context: an ``indeterminate`` outcome, an
Irreversible call awaiting approval (a Compensable one in the same state is the proxy's to
run), a transfer awaiting an operator's approval or in ``manual_intervention``, a node
awaiting its signer. Nothing here is listed by hand, so a user's own machine gets its
waiting states from its own definition.

A person may make a move when the definition lets one of the actors their roles name make
it from the entity's state, under the entity's context.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from machines.errors import MachinesError
from machines.spec import MachineSpec
from machines.spec.records import derived_variables
from machines.spec.vocabulary import NEEDS_HUMAN
from machines.store.records import Row, Store, Transaction
from machines.systems.transfer.plans import transfer_version
from machines.systems.transfer.session import NODE, REQUEST

PAGE = 50
"""Entities on one page of the list."""
MAX_LISTED = 1000
"""The most entries one page lists: ``/api/pending``'s and ``machines pending``'s limit."""


def waits(spec: MachineSpec, state: str, context: Mapping[str, str]) -> bool:
    """Whether an entity of ``spec`` in ``state`` under its stored ``context`` waits on a
    person: the state is not terminal, and it is tagged ``needs-human``, or a person may
    move it and every automatic move out of it ends the entity (a timeout, a replay) rather
    than moving its work on. Only the moves the definition admits under ``context`` count
    (a variable the context lacks, one derived per move, admits any of its values)."""
    if spec.states[state].terminal:
        return False
    if state in spec.states_tagged(NEEDS_HUMAN):
        return True
    person = False
    for t in spec.transitions:
        if t.source != state or not _admitted(t.when, context):
            continue
        for actor in t.actors:
            if not spec.actors[actor].automatic:
                person = True
            elif not spec.states[t.dest].terminal:
                return False
    return person


def _admitted(when: Mapping[str, Collection[str]], context: Mapping[str, str]) -> bool:
    return all(var not in context or context[var] in values for var, values in when.items())


def waiting_states(spec: MachineSpec) -> tuple[str, ...]:
    """The states of ``spec`` in which an entity waits on a person under some context."""
    fixed = [v for v in spec.valuations()]
    return tuple(s for s in spec.states if any(waits(spec, s, _fixed(spec, v)) for v in fixed))


def _fixed(spec: MachineSpec, valuation: Mapping[str, str]) -> Mapping[str, str]:
    derived = derived_variables(spec)
    return {k: v for k, v in valuation.items() if k not in derived}


@dataclass(frozen=True)
class Waiting:
    """One entity that waits on a person, for how long (since its last write), and the
    version a decision on it names (``page_version``)."""

    machine: str
    row: Row
    seconds: float
    version: int


def pending_entry(w: Waiting) -> dict[str, object]:
    """One waiting entity as the desk's API and ``machines pending --format json`` give
    it (here, so that ``machines pending`` runs without the desk's web server installed)."""
    return {
        "machine": w.machine,
        "key": w.row.key,
        "state": w.row.state,
        "version": w.version,
        "waited_seconds": round(w.seconds, 3),
        "context": dict(w.row.context),
    }


@dataclass(frozen=True)
class Count:
    machine: str
    state: str
    entities: int


CHUNK = 500
"""Rows read at a time while a page is filled (rows in a waiting state whose context
makes them not wait are read and left out)."""


def counts(store: Store, machines: Iterable[str] | None = None) -> list[Count]:
    """How many entities wait in each waiting state, by machine and state."""
    specs = store.specs()
    out = []
    with store.transaction() as tx:
        for machine in sorted(machines if machines is not None else specs):
            spec = specs[machine]
            states = waiting_states(spec)
            if not states:
                continue
            found = tx.counts(machine)
            for state in states:
                if not found.get(state):
                    continue
                if _always_waits(spec, state):
                    out.append(Count(machine, state, found[state]))
                else:
                    total = sum(1 for _ in _rows_waiting(tx, spec, (state,)))
                    if total:
                        out.append(Count(machine, state, total))
    return out


def _always_waits(spec: MachineSpec, state: str) -> bool:
    return all(waits(spec, state, _fixed(spec, v)) for v in spec.valuations())


def _rows_waiting(tx: Transaction, spec: MachineSpec, states: Collection[str]) -> Iterator[Row]:
    """The rows in ``states`` that wait on a person under their own context, the longest
    waiting first, read ``CHUNK`` at a time."""
    always = all(_always_waits(spec, s) for s in states)
    offset = 0
    while True:
        rows = tx.in_states(spec.name, list(states), limit=CHUNK, offset=offset)
        for row in rows:
            if always or waits(spec, row.state, row.context):
                yield row
        if len(rows) < CHUNK:
            return
        offset += CHUNK


def waiting(
    store: Store,
    *,
    machine: str | None = None,
    state: str | None = None,
    limit: int = PAGE,
    offset: int = 0,
    now: float | None = None,
) -> list[Waiting]:
    """A page of what waits, the longest waiting first, across every machine (or one, and
    one of its waiting states). The rows are read in one transaction and held by none."""
    specs = store.specs()
    chosen = _chosen(specs, machine, state)
    found: list[tuple[str, Row]] = []
    with store.transaction() as tx:
        for name, states in chosen.items():
            if states:
                rows = itertools.islice(_rows_waiting(tx, specs[name], states), offset + limit)
                found += [(name, row) for row in rows]
        found.sort(key=lambda pair: (_written_at(pair[1]), pair[0], pair[1].ordinal))
        shown = [(name, row, page_version(specs, tx, row)) for name, row in found[offset:][:limit]]
    clock = time.time() if now is None else now
    return [
        Waiting(name, row, min(max(0.0, clock - _written_at(row)), clock), version)
        for name, row, version in shown
    ]


def page_version(specs: Mapping[str, MachineSpec], tx: Transaction, row: Row) -> int:
    """The version a person's decision on ``row`` names, read in ``tx``: a transfer's
    request with its nodes (``transfer_version``: the engine refuses a decision when a node
    moved since the page was shown), any other entity by its own row."""
    if row.machine == REQUEST and NODE in specs:
        return transfer_version(row, tx.scope(NODE, row.key))
    return row.version or 0


def _written_at(row: Row) -> float:
    """When ``row`` was last written, as a finite number of seconds; a time no clock gives
    (a raw write of ``-Infinity``, a text) reads as 0, the longest wait, never a crash."""
    at = row.updated_at
    if isinstance(at, bool) or not isinstance(at, int | float):
        return 0.0
    try:
        return float(at) if math.isfinite(at) else 0.0
    except OverflowError:  # an integer too large for a float
        return 0.0


def _chosen(
    specs: Mapping[str, MachineSpec], machine: str | None, state: str | None
) -> dict[str, Collection[str]]:
    if machine is None:
        if state is not None:
            raise DeskError("a state is chosen within a machine: choose the machine too")
        return {name: waiting_states(spec) for name, spec in sorted(specs.items())}
    if machine not in specs:
        raise DeskError(f"no machine {machine!r} in this store; its machines: {', '.join(specs)}")
    states = waiting_states(specs[machine])
    if state is None:
        return {machine: states}
    if state not in states:
        raise DeskError(
            f"{state!r} is not a state of {machine!r} that waits on a person; those are: "
            f"{', '.join(states) or 'none'}"
        )
    return {machine: (state,)}


class DeskError(MachinesError):
    """A request the desk cannot answer as asked: an unknown machine or state, a move the
    person may not make, a page made stale by a newer move. The API answers one with
    ``status`` (400: the request itself is wrong; each kind below says its own)."""

    status = 400


class DeskNotFound(DeskError):
    """No such machine or entity in the store."""

    status = 404


class DeskForbidden(DeskError):
    """A move the definition does not let the person's roles make on the entity now."""

    status = 403


class DeskTooLarge(DeskError):
    """A body larger than the desk reads."""

    status = 413


class DeskChanged(DeskError):
    """The entity moved since the version the request names: read it again."""

    status = 409


class DeskNotNow(DeskError):
    """A move the person's role makes, but not from the entity's state as it is now."""

    status = 409


@dataclass(frozen=True)
class Move:
    """A move a person may make on an entity: the trigger, the actor they make it as, where
    it leads, and (a transfer waiting on a manual action) the gate whose action they did."""

    trigger: str
    actor: str
    dest: str
    description: str
    gate: str = ""


def moves_for(
    spec: MachineSpec,
    row: Row,
    roles: Collection[str],
    context: Mapping[str, str] | None = None,
) -> list[Move]:
    """The moves the definition lets a person with ``roles`` make on ``row`` now: by a
    non-automatic actor among their roles, admitted under ``context`` (the entity's own
    by default; a system that derives a variable, as the transfer engine does
    ``side_effects``, gives the whole). A move whose guard needs a variable the context
    lacks is not offered: nobody can say whether the definition admits it."""
    context = row.context if context is None else context
    out = []
    for t in spec.transitions:
        if t.source != row.state:
            continue
        for actor in t.actors:
            if actor not in roles or spec.actors[actor].automatic:
                continue
            try:
                dest = spec.step(row.state, t.trigger, actor=actor, **context)
            except MachinesError:
                continue  # the guard refuses it under this entity's context
            if dest == t.dest:
                out.append(Move(t.trigger, actor, dest, t.description))
    return out
