"""A definition in canonical form, split in two, and a digest of each part.

The **semantic** form is everything that changes what a machine does or allows: its
states (terminal flags, tags, annotations, database values), the initial state, the
actors and whether each is automatic, the context variables with their values (and the
values refused by name), every transition with its actors and guard, the forbidden moves
(each move, however the entries group them), the declared rules and the derivation with
its rule sets. The **presentation** form is everything a person reads and nothing acts
on: titles, the origin, descriptions, the forbidden entries with their reasons, evidence
and amendments, and the findings.

Both are plain JSON data in one order whatever order the file was written in (states,
actors, transitions and guard values sorted), so two files that say the same thing give
the same digest, and a digest changes exactly when its part does. A store compares
semantic digests to decide whether a definition needs a migration (a wording change
needs none); ``machines diff`` compares the parts themselves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from machines.spec.records import (
    Clause,
    Derivation,
    Forbidden,
    Guard,
    MachineSpec,
    Rule,
    Transition,
)

DIGEST_CHARS = 16
"""Hex characters of a digest shown and stored: 64 bits, plenty to tell versions apart."""

Form = dict[str, Any]


def semantic_form(spec: MachineSpec) -> Form:
    """What ``spec`` does and allows, as canonical JSON data. The baseline rules a machine
    opts out of appear only when there are any, so a definition written before
    ``opt_out`` existed keeps its digest."""
    form: Form = {
        "machine": spec.name,
        "initial": spec.initial,
        "states": {
            name: {
                "terminal": s.terminal,
                "tags": sorted(s.tags),
                "annotations": sorted(s.annotations),
                "db_value": s.db_value,
            }
            for name, s in sorted(spec.states.items())
        },
        "actors": {name: {"automatic": a.automatic} for name, a in sorted(spec.actors.items())},
        "context": {
            name: {"values": sorted(v.values), "excluded": sorted(v.excluded)}
            for name, v in sorted(spec.context.items())
        },
        "transitions": sorted((transition_form(t) for t in spec.transitions), key=_canonical_text),
        "forbidden": [list(move) for move in forbidden_moves(spec)],
        "rules": sorted((_rule(r) for r in spec.invariants), key=lambda r: str(r["id"])),
        "derivation": None if spec.derivation is None else _derivation(spec.derivation),
    }
    if spec.opt_out:
        form["opt_out"] = sorted(spec.opt_out)
    return form


def presentation_form(spec: MachineSpec) -> Form:
    """What a person reads in ``spec`` and nothing acts on, as canonical JSON data."""
    derivation = spec.derivation
    form: Form = {
        "title": spec.title,
        "origin": spec.origin,
        "description": spec.description,
        "states": {name: s.description for name, s in sorted(spec.states.items())},
        "actors": {name: a.description for name, a in sorted(spec.actors.items())},
        "context": {
            name: {"description": v.description, "excluded": dict(sorted(v.excluded.items()))}
            for name, v in sorted(spec.context.items())
        },
        "transitions": sorted(
            (transition_presentation(t) for t in spec.transitions), key=_canonical_text
        ),
        "forbidden": sorted(
            ({**_forbidden(f), "reason": f.reason} for f in spec.forbidden), key=_canonical_text
        ),
        "rules": {r.id: r.description for r in sorted(spec.invariants, key=lambda r: r.id)},
        "findings": [
            {"id": f.id, "seed": f.seed, "text": f.text, "resolution": f.resolution}
            for f in sorted(spec.findings, key=lambda f: f.id)
        ],
        "derivation": None
        if derivation is None
        else {
            "rule_sets": {
                name: {
                    "description": rs.description,
                    "rules": {r.id: r.description for r in rs.rules},
                    "known_violations": dict(sorted(rs.known_violations.items())),
                }
                for name, rs in sorted(derivation.rule_sets.items())
            }
        },
    }
    if spec.opt_out:
        form["opt_out"] = dict(sorted(spec.opt_out.items()))
    return form


def semantic_digest(spec: MachineSpec) -> str:
    """The digest of ``semantic_form``: equal for two definitions that do the same thing."""
    return digest(semantic_form(spec))


def presentation_digest(spec: MachineSpec) -> str:
    """The digest of ``presentation_form``: what changes when only wording does."""
    return digest(presentation_form(spec))


def digest(form: Form) -> str:
    return hashlib.sha256(_canonical_text(form).encode()).hexdigest()[:DIGEST_CHARS]


def transition_key(t: Transition) -> tuple[str, str, str]:
    """What names an edge across two versions of a definition: (source, trigger, dest).
    Two edges may share one when their actors or guards are disjoint; a comparison of
    two versions takes such edges together (what they admit between them)."""
    return (t.source, t.trigger, t.dest)


def transition_form(t: Transition) -> Form:
    return {
        "source": t.source,
        "trigger": t.trigger,
        "dest": t.dest,
        "actors": sorted(t.actors),
        "when": guard_form(t.when),
    }


def transition_presentation(t: Transition) -> Form:
    """What a person reads on one edge: its description, evidence and the findings it
    points at (``move`` names the edge, ``transition_key``)."""
    return {
        "move": transition_key(t),
        "description": t.description,
        "evidence": t.evidence,
        "amendment": t.amendment,
        "unreachable_in_systems": t.unreachable_in_systems,
    }


def guard_form(guard: Guard) -> dict[str, list[str]]:
    """A guard as data: each guarded variable's admitted values, sorted (a variable left
    out admits every value)."""
    return {var: sorted(values) for var, values in sorted(guard.items())}


def forbidden_moves(
    spec: MachineSpec, states: Iterable[str] | None = None
) -> list[tuple[str, str]]:
    """Every move (source, dest) between ``states`` (default: all of them) that a forbidden
    entry of ``spec`` names, sorted: what the entries say, however they group the moves
    (``*`` is every state of ``spec``)."""
    names = sorted(spec.states if states is None else states)
    return [
        (source, dest)
        for source in names
        for dest in names
        if any(f.matches(source, dest) for f in spec.forbidden)
    ]


def _forbidden(f: Forbidden) -> Form:
    def side(states: frozenset[str] | None) -> str | list[str]:
        return "*" if states is None else sorted(states)

    return {"from": side(f.sources), "to": side(f.dests)}


def _rule(r: Rule) -> Form:
    return {
        "id": r.id,
        "kind": r.kind,
        "states": sorted(r.states),
        "actors": sorted(r.actors),
        "triggers": sorted(r.triggers),
        "sources": sorted(r.sources),
        "dests": sorted(r.dests),
        "via": sorted(r.via),
        "holds": sorted(r.holds),
        "when": guard_form(r.when),
    }


def _clauses(clauses: Iterable[Clause]) -> list[Form]:
    """Clauses in their order: a rule's clauses are read in order, and so are its rules."""
    return [
        {
            "quantifier": c.quantifier,
            "states": None if c.nodes.states is None else sorted(c.nodes.states),
            "side_effect": c.nodes.side_effect,
            "manual": c.nodes.manual,
        }
        for c in clauses
    ]


def _derivation(d: Derivation) -> Form:
    return {
        "node_machine": d.node_machine,
        "applied_in": sorted(d.applied_in),
        "actor": d.actor,
        "manual_prefix": d.manual_prefix,
        "default": d.default,
        "context": {
            var: [{"value": c.value, "when": _clauses(c.when)} for c in cases]
            for var, cases in sorted(d.context.items())
        },
        "rule_sets": {
            name: {
                "rules": [
                    {"id": r.id, "when": _clauses(r.when), "result": r.result} for r in rs.rules
                ],
                "known_violations": sorted(rs.known_violations),
            }
            for name, rs in sorted(d.rule_sets.items())
        },
    }


def _canonical_text(value: Mapping[str, Any] | Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
