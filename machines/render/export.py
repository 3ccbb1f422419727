"""One machine in forms other tools load: JSON (any language), SQL (the store schema),
Mermaid and Graphviz DOT (the diagrams)."""

from __future__ import annotations

import json
from typing import Any

from machines.render.dot import to_dot
from machines.render.mermaid import to_mermaid
from machines.spec import Clause, MachineSpec

FORMATS = ("json", "sql", "postgresql", "mermaid", "dot")


def as_json(spec: MachineSpec) -> dict[str, Any]:
    """Everything the definition says, with transitions expanded to one source each."""
    out: dict[str, Any] = {
        "spec_version": 1,
        "machine": spec.name,
        "title": spec.title,
        "origin": spec.origin,
        "description": spec.description,
        "initial": spec.initial,
        "context": {
            name: {
                "values": list(v.values),
                "excluded": dict(v.excluded),
                "description": v.description,
            }
            for name, v in spec.context.items()
        },
        "actors": {
            name: {"automatic": a.automatic, "description": a.description}
            for name, a in spec.actors.items()
        },
        "states": {
            name: {
                "terminal": s.terminal,
                "db_value": s.db_value,
                "enum": s.enum_name,
                "tags": list(s.tags),
                "annotations": list(s.annotations),
                "description": s.description,
            }
            for name, s in spec.states.items()
        },
        "transitions": [
            {
                "trigger": t.trigger,
                "source": t.source,
                "dest": t.dest,
                "actors": list(t.actors),
                "when": {var: sorted(values) for var, values in t.when.items()},
                "evidence": t.evidence,
                "amendment": t.amendment,
                "unreachable_in_systems": t.unreachable_in_systems,
                "description": t.description,
            }
            for t in spec.transitions
        ],
        "forbidden": [
            {
                "source": "*" if f.sources is None else sorted(f.sources),
                "dest": "*" if f.dests is None else sorted(f.dests),
                "reason": f.reason,
            }
            for f in spec.forbidden
        ],
        "invariants": [
            {
                "id": r.id,
                "rule": r.kind,
                "description": r.description,
                **{
                    k: list(v)
                    for k, v in (
                        ("states", r.states),
                        ("actors", r.actors),
                        ("triggers", r.triggers),
                        ("sources", r.sources),
                        ("dests", r.dests),
                        ("via", r.via),
                        ("holds", r.holds),
                    )
                    if v
                },
                **({"when": {k: sorted(v) for k, v in r.when.items()}} if r.when else {}),
            }
            for r in spec.invariants
        ],
        "findings": [
            {"id": f.id, "seed": f.seed, "text": f.text, "resolution": f.resolution}
            for f in spec.findings
        ],
    }
    if spec.derivation is not None:
        d = spec.derivation
        out["derivation"] = {
            "nodes": d.node_machine,
            "applied_in": list(d.applied_in),
            "actor": d.actor,
            "manual_prefix": d.manual_prefix,
            "default": d.default,
            "context": {
                var: [{"value": c.value, "when": _clauses(c.when)} for c in cases]
                for var, cases in d.context.items()
            },
            "rule_sets": {
                name: {
                    "description": rs.description,
                    "known_violations": dict(rs.known_violations),
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
            },
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


def export(spec: MachineSpec, fmt: str) -> str:
    """``spec`` in format ``fmt`` (one of ``FORMATS``). The schema writers are imported by
    the format that needs them: ``machines --help`` reads ``FORMATS`` and should not load
    the stores."""
    if fmt == "json":
        return json.dumps(as_json(spec), indent=2) + "\n"
    if fmt == "sql":
        from machines.store.ddl import sqlite_schema

        return sqlite_schema(spec)
    if fmt == "postgresql":
        from machines.store.ddl_postgres import postgres_schema

        return postgres_schema(spec)
    if fmt == "mermaid":
        return to_mermaid(spec)
    if fmt == "dot":
        return to_dot(spec)
    raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
