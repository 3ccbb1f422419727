"""Who puts an entity in a state: by its definition's moves and rules, under a context.

A state that only people's moves enter (an approval, a decision) says a person put each of
its entities there; a migration, an automatic actor, must not make it say so falsely. The
judgement reads each move's guard against the entity's context (a way in for small refunds
is no way in for a large one), or every valuation of the context when none is given.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from machines.spec.records import MachineSpec, Rule

Valuations = frozenset[tuple[tuple[str, str], ...]]
"""Valuations of a machine's context, each as sorted (variable, value) pairs."""


def people_only(spec: MachineSpec, state: str) -> Valuations:
    """Every valuation of ``spec``'s context under which only people's moves enter
    ``state`` (``people_enter``)."""
    return frozenset(v for v in _valuations(spec) if people_enter(spec, state, dict(v)))


def people_enter_more(
    old: MachineSpec,
    source: str,
    new: MachineSpec,
    dest: str,
    context: Mapping[str, str] | None,
) -> bool:
    """Whether only people enter ``dest`` of ``new`` where something automatic may have
    put an entity in ``source`` of ``old`` (an automatic move, or its creation in the
    initial state): under ``context``, or under some context when it is not known. A
    context under which nothing enters ``source`` puts no entity there (outsider batch
    46, b 32: a state only a person entered, and only for large loans, was said to be
    entered automatically, because nothing entered it for small ones)."""
    if dest == new.initial:
        return False  # every entity is created there: no person's move alone enters it
    contexts = [context] if context is not None else [dict(v) for v in _valuations(old)]
    return any(
        people_enter(new, dest, c) and _automatic_may_enter(old, source, c) for c in contexts
    )


def _automatic_may_enter(spec: MachineSpec, state: str, context: Mapping[str, str]) -> bool:
    """Whether something automatic may have put an entity of ``context`` in ``state``."""
    if kept_for_people(spec, state):
        return False
    return state == spec.initial or any(
        spec.actors[a].automatic for t in ways_in(spec, state, context) for a in t.actors
    )


def people_only_always(spec: MachineSpec, state: str) -> bool:
    """Whether only people's moves enter ``state`` under every context (a rule that says
    so later states what was already true)."""
    return people_only(spec, state) == _valuations(spec)


def _valuations(spec: MachineSpec) -> Valuations:
    """Every valuation of ``spec``'s context (one, empty, for a machine with none)."""
    names = sorted(spec.context)
    every = itertools.product(*(spec.context[n].values for n in names))
    return frozenset(tuple(zip(names, values, strict=True)) for values in every)


def kept_for_people(spec: MachineSpec, state: str) -> bool:
    """Whether a rule says only people enter ``state`` (``only_actors_enter`` naming no
    automatic actor). A kept state may lose an automatic way in (a move removed) without
    changing what its entities' record says; a rule that declares it a person's may not."""
    return any(
        all(a in spec.actors and not spec.actors[a].automatic for a in rule.actors)
        for rule in _rules(spec, "only_actors_enter", state)
    )


def people_enter(spec: MachineSpec, state: str, context: Mapping[str, str] | None = None) -> bool:
    """Whether only people's moves enter ``state``: a rule keeps it for people
    (``only_actors_enter`` naming none that is automatic), or every move into it is a
    person's; with ``context``, only the moves whose guard admits it count (an automatic
    way in for Compensable calls is no way in for an Irreversible one)."""
    if kept_for_people(spec, state):
        return True
    moves = ways_in(spec, state, context)
    return bool(moves) and all(not spec.actors[a].automatic for t in moves for a in t.actors)


def ways_in(spec: MachineSpec, state: str, context: Mapping[str, str] | None) -> list[Any]:
    """The transitions into ``state`` from another state whose guard admits ``context``."""
    return [
        t
        for t in spec.transitions
        if t.dest == state and t.source != state and admits(t.when, context)
    ]


def admits(when: Mapping[str, Collection[str]], context: Mapping[str, str] | None) -> bool:
    """Whether a guard admits ``context`` (a variable it does not give is not judged)."""
    return context is None or all(
        context[var] in allowed for var, allowed in when.items() if var in context
    )


def _rules(spec: MachineSpec, kind: str, state: str) -> Iterator[Rule]:
    return (r for r in spec.invariants if r.kind == kind and state in r.states)
