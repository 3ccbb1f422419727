"""The derivation section of a definition (a request's state derived from its nodes'),
built and checked by the loader's ``Builder``: its rule sets, its derived context cases and
their clauses, each node state named checked against the node machine."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from machines.errors import SpecError
from machines.spec.records import (
    Clause,
    ContextCase,
    Derivation,
    DerivationRule,
    KeyPath,
    MachineSpec,
    NodeSet,
    Quantifier,
    RuleSet,
)
from machines.spec.routing import suggest
from machines.spec.yamlsource import quote

if TYPE_CHECKING:
    from machines.spec.builder import Builder


def build_derivation(b: Builder) -> Derivation | None:
    """The derivation of a request machine from its nodes' states, its references checked."""
    raw = b.doc.get("derivation")
    if raw is None:
        return None
    at: KeyPath = ("derivation",)
    try:
        nodes = b.read_nodes(raw["nodes"])
    except SpecError as exc:
        b.problem((*at, "nodes"), f"cannot read the node machine: {exc}")
        return None
    for i, s in enumerate(raw["applied_in"]):
        b.state_ref((*at, "applied_in", i), s)
    b.actor_ref((*at, "actor"), raw["actor"])
    rule_sets = {}
    for name, rs in raw["rule_sets"].items():
        rules = []
        for j, r in enumerate(rs["rules"]):
            rat: KeyPath = (*at, "rule_sets", name, "rules", j)
            if r["result"] is not None:
                b.state_ref((*rat, "result"), r["result"])
            rules.append(
                DerivationRule(
                    r["id"],
                    _clauses(b, (*rat, "when"), r["when"], nodes),
                    r["result"],
                    r["description"],
                )
            )
        if len({r.id for r in rules}) != len(rules):
            b.problem((*at, "rule_sets", name), "rule ids must be unique within a set")
        for inv, finding in rs.get("known_violations", {}).items():
            b.finding_ref((*at, "rule_sets", name, "known_violations", inv), finding)
        rule_sets[name] = RuleSet(
            name,
            rs["description"],
            tuple(rules),
            MappingProxyType(dict(rs.get("known_violations", {}))),
        )
    if raw["default"] not in rule_sets:
        b.problem(
            (*at, "default"),
            f"{quote(raw['default'])} is not a rule set{suggest(raw['default'], rule_sets)}",
        )
    return Derivation(
        node_machine=raw["nodes"],
        applied_in=tuple(raw["applied_in"]),
        actor=raw["actor"],
        manual_prefix=raw["manual_prefix"],
        default=raw["default"],
        context=_context(b, (*at, "context"), raw.get("context", {}), nodes),
        rule_sets=MappingProxyType(rule_sets),
    )


def _context(
    b: Builder, at: KeyPath, raw: Mapping[str, list[dict[str, Any]]], nodes: MachineSpec
) -> Mapping[str, tuple[ContextCase, ...]]:
    out = {}
    for var, cases in raw.items():
        spec = b.context.get(var)
        if spec is None:
            b.problem((*at, var), f"{quote(var)} is not a context variable of {quote(b.name)}")
            continue
        built = []
        for i, case in enumerate(cases):
            if case["value"] not in spec["values"]:
                b.problem(
                    (*at, var, i, "value"),
                    f"{quote(case['value'])} is not a value of "
                    f"{quote(var)}; values: {', '.join(spec['values'])}",
                )
            is_last = i == len(cases) - 1
            if is_last == ("when" in case):
                b.problem(
                    (*at, var, i),
                    "every case but the last needs 'when'; the last "
                    "case has none (it is the fallback)",
                )
            built.append(
                ContextCase(
                    case["value"],
                    _clauses(b, (*at, var, i, "when"), case.get("when", []), nodes),
                )
            )
        out[var] = tuple(built)
    missing = set(b.context) - set(raw)
    if missing:
        b.problem(
            at,
            f"the derivation must say how nodes set every context variable; "
            f"missing: {', '.join(sorted(missing))}",
        )
    return MappingProxyType(out)


def _clauses(
    b: Builder, at: KeyPath, raw: list[dict[str, Any]], nodes: MachineSpec
) -> tuple[Clause, ...]:
    out = []
    for i, clause in enumerate(raw):
        ((quantifier, nodeset),) = clause.items()
        quantifier = cast(Quantifier, quantifier)
        states = nodeset.get("state")
        for j, s in enumerate(states or []):
            b.state_ref((*at, i, quantifier, "state", j), s, nodes.states, nodes.name)
        out.append(
            Clause(
                quantifier,
                NodeSet(
                    frozenset(states) if states is not None else None,
                    nodeset.get("side_effect"),
                    nodeset.get("manual"),
                ),
            )
        )
    return tuple(out)
