"""A definition as the document the loader reads: what ``machines export`` writes and what
a store keeps of each version it has served. Loading the document (``machines.load``, or
``machines.spec.loader.read_definition_text``) gives back a spec with the same definition
(``MachineSpec.same_definition``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from machines.spec.builder import default_title
from machines.spec.loader import schema
from machines.spec.records import (
    Clause,
    ContextVariable,
    Derivation,
    Forbidden,
    Guard,
    MachineSpec,
    Rule,
    State,
    Transition,
)
from machines.spec.vocabulary import BASELINE_RULES


def as_document(spec: MachineSpec) -> dict[str, Any]:
    """``spec`` as a definition document: what the loader reads, in the order a person
    writes it, defaults left out. Loading it gives back the same definition: transitions
    in order (consecutive ones that differ only in their source written as one entry with
    a list of sources), guard values in the order their variable declares them."""
    doc: dict[str, Any] = {
        "spec_version": schema()["properties"]["spec_version"]["const"],
        "machine": spec.name,
    }
    if spec.title != default_title(spec.name):
        doc["title"] = spec.title
    if spec.origin:
        doc["origin"] = spec.origin
    doc["description"] = spec.description
    doc["initial"] = spec.initial
    if spec.context:
        doc["context"] = {name: _variable(v) for name, v in spec.context.items()}
    doc["actors"] = {
        name: {"automatic": a.automatic, "description": a.description}
        for name, a in spec.actors.items()
    }
    doc["states"] = {name: _state(s) for name, s in spec.states.items()}
    doc["transitions"] = [_transition(spec, group) for group in _grouped(spec.transitions)]
    if spec.forbidden:
        doc["forbidden"] = [_forbidden(spec, f) for f in spec.forbidden]
    rules = [_rule(spec, r) for r in spec.invariants if not _implied(r)]
    if rules:
        doc["invariants"] = rules
    if spec.opt_out:
        doc["opt_out"] = dict(spec.opt_out)
    if spec.findings:
        doc["findings"] = [
            {"id": f.id, "seed": f.seed, "text": f.text, "resolution": f.resolution}
            for f in spec.findings
        ]
    if spec.derivation is not None:
        doc["derivation"] = _derivation(spec.derivation)
    return doc


def _variable(v: ContextVariable) -> dict[str, Any]:
    out: dict[str, Any] = {"values": list(v.values)}
    if v.excluded:
        out["excluded"] = dict(v.excluded)
    out["description"] = v.description
    return out


def _state(s: State) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.terminal:
        out["terminal"] = True
    if s.db_value != s.name:
        out["db_value"] = s.db_value
    if s.tags:
        out["tags"] = list(s.tags)
    if s.annotations:
        out["annotations"] = list(s.annotations)
    if s.description:
        out["description"] = s.description
    return out


def _implied(r: Rule) -> bool:
    """Whether ``r`` is the baseline rule the loader adds when none of its kind is written."""
    baseline = BASELINE_RULES.get(r.kind)
    return baseline is not None and r == Rule(baseline.id, baseline.kind, baseline.description)


def _grouped(transitions: Iterable[Transition]) -> list[list[Transition]]:
    """Runs of transitions that differ only in their source (one YAML entry, expanded)."""
    groups: list[list[Transition]] = []
    for t in transitions:
        last = groups[-1] if groups else None
        if (
            last is not None
            and replace(t, source=last[0].source) == last[0]
            and all(t.source != other.source for other in last)
        ):
            last.append(t)
        else:
            groups.append([t])
    return groups


def _transition(spec: MachineSpec, group: list[Transition]) -> dict[str, Any]:
    t = group[0]
    sources = [g.source for g in group]
    out: dict[str, Any] = {
        "trigger": t.trigger,
        "source": sources[0] if len(sources) == 1 else sources,
        "dest": t.dest,
        "actor": t.actors[0] if len(t.actors) == 1 else list(t.actors),
    }
    if t.when:
        out["when"] = _guard(spec, t.when)
    for key, value in (
        ("evidence", t.evidence),
        ("amendment", t.amendment),
        ("unreachable_in_systems", t.unreachable_in_systems),
    ):
        if value is not None:
            out[key] = value
    out["description"] = t.description
    return out


def _guard(spec: MachineSpec, guard: Guard) -> dict[str, list[str]]:
    return {
        var: [v for v in spec.context[var].values if v in allowed] for var, allowed in guard.items()
    }


def _in_order(spec: MachineSpec, states: frozenset[str]) -> list[str]:
    return [s for s in spec.states if s in states]


def _forbidden(spec: MachineSpec, f: Forbidden) -> dict[str, Any]:
    def side(states: frozenset[str] | None) -> str | list[str]:
        if states is None:
            return "*"
        names = _in_order(spec, states)
        return names[0] if len(names) == 1 else names

    return {"source": side(f.sources), "dest": side(f.dests), "reason": f.reason}


def _rule(spec: MachineSpec, r: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {"id": r.id, "rule": r.kind}
    if r.states:
        out["states"] = list(r.states)
    for key, values in (
        ("actors", r.actors),
        ("triggers", r.triggers),
        ("sources", r.sources),
        ("dests", r.dests),
        ("via", r.via),
        ("holds", r.holds),
    ):
        if values:
            out[key] = list(values)
    if r.when:
        out["when"] = _guard(spec, r.when)
    out["description"] = r.description
    return out


def _derivation(d: Derivation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nodes": d.node_machine,
        "applied_in": list(d.applied_in),
        "actor": d.actor,
        "manual_prefix": d.manual_prefix,
        "default": d.default,
    }
    if d.context:
        out["context"] = {
            var: [
                {"value": c.value, **({"when": _clauses(c.when)} if c.when else {})} for c in cases
            ]
            for var, cases in d.context.items()
        }
    out["rule_sets"] = {
        name: {
            "description": rs.description,
            **({"known_violations": dict(rs.known_violations)} if rs.known_violations else {}),
            "rules": [
                {
                    "id": r.id,
                    "when": _clauses(r.when),
                    "result": r.result,
                    "description": r.description,
                }
                for r in rs.rules
            ],
        }
        for name, rs in d.rule_sets.items()
    }
    return out


def _clauses(clauses: tuple[Clause, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for clause in clauses:
        nodes: dict[str, Any] = {}
        if clause.nodes.states is not None:
            nodes["state"] = sorted(clause.nodes.states)
        if clause.nodes.side_effect is not None:
            nodes["side_effect"] = clause.nodes.side_effect
        if clause.nodes.manual is not None:
            nodes["manual"] = clause.nodes.manual
        out.append({clause.quantifier: nodes})
    return out


_NOT_YAML_TEXT = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]"
)
"""The characters a YAML reader refuses in a file (outside YAML 1.1's printable set), and
those it reads as a line break inside a string (NEL, the line and paragraph separators):
JSON writes them as they are unless it escapes all but ASCII, and escaping all would spell
an emoji as two escaped surrogates, which a YAML reader reads as two broken characters."""


def as_json(spec: MachineSpec) -> str:
    """``spec`` as a JSON definition (``as_document``): JSON is YAML, so the loader reads
    it as it reads a YAML file; a character YAML refuses is written as its escape."""
    text = json.dumps(as_document(spec), indent=2, ensure_ascii=False)
    return _NOT_YAML_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"
