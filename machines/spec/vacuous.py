"""Rules that can never fail: a declared invariant whose parameters leave nothing to keep.

A rule the definition declares is a promise its reader relies on, and ``machines
mutate`` counts on it to kill the mutants that break what it says. A rule that holds for
every set of transitions the definition could have (it keeps only terminal states, which
nothing leaves; it lets every actor or trigger through; its guard admits every context)
keeps nothing: a mutant it should catch survives, and the reader is told of a safety that
is not there (outsider batch 41, c 9: ``only_actors_exit`` on a terminal state, ``only_from``
naming every state, ``only_reachable_when`` admitting every value, all accepted; batch 44,
b 25 and 26: ``only_via`` through the very states it keeps, ``can_terminate`` holding
every state). Each is reported like a broken rule, with its entry's line, saying what to
name instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from machines.spec.records import Guard, MachineSpec, Rule

EXITS = ("only_actors_exit", "only_triggers_exit")
"""Kinds that keep the ways out of their states."""
GUARDED = ("only_reachable_when", "automatic_enters_only_when")
"""Kinds that keep their states to the contexts their ``when`` admits."""


def vacuous(spec: MachineSpec, rule: Rule) -> str | None:
    """Why ``rule`` of ``spec`` can never fail, or None when some definition breaks it."""
    return next(_reasons(spec, rule), None)


def _reasons(spec: MachineSpec, rule: Rule) -> Iterator[str]:
    terminal_final = any(r.kind == "terminal_final" for r in spec.invariants)
    if (
        rule.kind in EXITS
        and terminal_final
        and rule.states
        and all(spec.states[s].terminal for s in rule.states if s in spec.states)
    ):
        yield "every state it names is terminal, and nothing leaves a terminal state"
    if rule.kind in ("only_actors_exit", "only_actors_enter") and set(spec.actors) <= set(
        rule.actors
    ):
        yield "it names every actor of the definition"
    if rule.kind == "only_triggers_exit" and set(spec.triggers) <= set(rule.triggers):
        yield "it names every trigger of the definition"
    if rule.kind == "only_from":
        sources = {
            s for s, state in spec.states.items() if not terminal_final or not state.terminal
        }
        if sources <= set(rule.sources):
            yield "it names every state a move can come from"
    if rule.kind in GUARDED and _admits_all(spec, rule.when):
        yield "its when admits every context"
    if (
        rule.kind == "only_via"
        and rule.states
        and set(rule.states) <= set(rule.via)
        and spec.initial not in rule.states
    ):
        yield "every state it names is one of its via states, which every path to it ends in"
    if rule.kind == "can_terminate" and {
        s for s, state in spec.states.items() if not state.terminal
    } <= set(rule.holds):
        yield "its holds name every state that is not terminal, so no entity is ever stuck"


def _admits_all(spec: MachineSpec, when: Guard) -> bool:
    return all(
        set(spec.context[var].values) <= set(allowed)
        for var, allowed in when.items()
        if var in spec.context
    )
