"""Derive a transfer request's state from its plan's node states.

The rules are data (``spec/request.yaml``, ``derivation.rule_sets``): ordered, first match
wins, each a conjunction of ``any`` / ``all`` / ``none`` clauses over node sets. Such rules
only ask which *kinds* of node are present, so a plan is reduced to two bit masks (the
predicates some node meets, the predicates every node meets) and the decision is a pure
function of that pair, memoised. The exhaustive checker (``machines.derive.proof``) runs
this very code over every plan, which is what makes its proof about the function users call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from machines.errors import InvalidNodeState, InvalidStateTransition, MachinesError
from machines.spec import Clause, Derivation, MachineSpec, NodeSet, RuleSet
from machines.spec.loader import load
from machines.spec.states import RequestState

NodeKind = tuple[str, bool, bool]
"""(node state, has_side_effect, is a manual gate): everything a rule can see of a node."""

Signature = tuple[int, int]
"""(predicates some node meets, predicates every node meets) as bit masks."""


@dataclass(frozen=True)
class Decision:
    """What a rule set decided for one plan: the result and the rule that gave it."""

    result: str | None
    rule: str | None  # None when no rule matched (the plan is still in progress)


@dataclass(frozen=True)
class DerivedMove:
    """How the derivation moves a request from one state, for one plan: ``trigger``, made
    as the derivation's actor under ``context`` (the guard context the nodes imply), leads
    to ``dest``, the state ``decision`` derived. Both are None when that state is no legal
    move from here: the request stays, the decision unapplied (``derivation-consistency``
    is the invariant that forbids it)."""

    decision: Decision
    context: Mapping[str, str]
    trigger: str | None
    dest: str | None


class Alphabet:
    """The node predicates a derivation mentions, as bit positions, plus every node kind.

    ``extra`` predicates (the checker's own invariants) get bits too, so that one signature
    answers both the rules' and the invariants' questions.
    """

    def __init__(self, node_spec: MachineSpec, predicates: Iterable[NodeSet]) -> None:
        self.node_spec = node_spec
        self.predicates: tuple[NodeSet, ...] = tuple(dict.fromkeys(predicates))
        self.bit: Mapping[NodeSet, int] = MappingProxyType(
            {p: 1 << i for i, p in enumerate(self.predicates)}
        )
        self.full = (1 << len(self.predicates)) - 1
        self.kinds: tuple[NodeKind, ...] = tuple(
            (state, side_effect, manual)
            for state in node_spec.states
            for side_effect in (False, True)
            for manual in (False, True)
        )
        self.mask: Mapping[NodeKind, int] = MappingProxyType(
            {
                kind: sum(self.bit[p] for p in self.predicates if p.matches(*kind))
                for kind in self.kinds
            }
        )

    def signature(self, kinds: Iterable[NodeKind]) -> Signature:
        some, every = 0, self.full
        for kind in kinds:
            m = self.mask[kind]
            some |= m
            every &= m
        return some, every

    def holds(self, clauses: Sequence[Clause], sig: Signature) -> bool:
        some, every = sig
        for clause in clauses:
            b = self.bit[clause.nodes]
            if clause.quantifier == "any" and not some & b:
                return False
            if clause.quantifier == "all" and not every & b:
                return False
            if clause.quantifier == "none" and some & b:
                return False
        return True


def derivation_predicates(derivation: Derivation) -> list[NodeSet]:
    clauses = [c for rs in derivation.rule_sets.values() for r in rs.rules for c in r.when]
    clauses += [c for cases in derivation.context.values() for case in cases for c in case.when]
    return [c.nodes for c in clauses]


@dataclass
class Deriver:
    """One rule set of one request definition, compiled for fast repeated use."""

    request: MachineSpec
    rule_set: RuleSet
    alphabet: Alphabet
    _memo: dict[Signature, Decision] = field(default_factory=dict, repr=False)
    _moves: dict[tuple[str, Signature], DerivedMove | None] = field(
        default_factory=dict, repr=False
    )

    @classmethod
    def build(
        cls,
        request: MachineSpec,
        node_spec: MachineSpec,
        rules: str | None = None,
        extra_predicates: Iterable[NodeSet] = (),
    ) -> Deriver:
        derivation = _derivation_of(request)
        name = derivation.default if rules is None else rules
        if name not in derivation.rule_sets:
            raise MachinesError(
                f"request: no derivation rule set '{name}'; known: "
                f"{', '.join(derivation.rule_sets)}"
            )
        alphabet = Alphabet(node_spec, [*derivation_predicates(derivation), *extra_predicates])
        return cls(request, derivation.rule_sets[name], alphabet)

    @property
    def derivation(self) -> Derivation:
        return _derivation_of(self.request)

    def decide(self, sig: Signature) -> Decision:
        decision = self._memo.get(sig)
        if decision is None:
            decision = Decision(None, None)
            for rule in self.rule_set.rules:
                if self.alphabet.holds(rule.when, sig):
                    decision = Decision(rule.result, rule.id)
                    break
            self._memo[sig] = decision
        return decision

    def derived_move(self, state: str, sig: Signature) -> DerivedMove | None:
        """What applying the derived state does to a request in ``state``: None when there
        is nothing to apply (the derivation is not applied in ``state``, no rule decided,
        or the request is already there), else the move, which the engine makes, the
        explorer explores and the derivation check judges. Memoised."""
        key = (state, sig)
        if key in self._moves:
            return self._moves[key]
        move = self._moves[key] = self._derived_move(state, sig)
        return move

    def _derived_move(self, state: str, sig: Signature) -> DerivedMove | None:
        derivation = self.derivation
        decision = self.decide(sig)
        if state not in derivation.applied_in or decision.result in (None, state):
            return None
        context = MappingProxyType(self.context(sig))
        for t in self.request.transitions:
            if t.source != state or t.dest != decision.result or derivation.actor not in t.actors:
                continue
            try:
                dest = self.request.step(state, t.trigger, actor=derivation.actor, **context)
            except InvalidStateTransition:
                continue
            return DerivedMove(decision, context, t.trigger, dest)
        return DerivedMove(decision, context, None, None)

    def context(self, sig: Signature) -> dict[str, str]:
        """The request's guard context implied by the plan (e.g. side_effects=started)."""
        out = {}
        for var, cases in self.derivation.context.items():
            out[var] = next(c.value for c in cases if self.alphabet.holds(c.when, sig))
        return out

    def kinds_of(self, nodes: Iterable[tuple[str, str | Enum, bool]]) -> list[NodeKind]:
        """Validate ``(name, state, has_side_effect)`` triples and reduce them to kinds."""
        prefix = self.derivation.manual_prefix
        states = self.alphabet.node_spec.states
        kinds = []
        for item in nodes:
            try:
                name, state, side_effect = item
            except (TypeError, ValueError):
                raise InvalidNodeState(
                    f"each node is (name, state, has_side_effect); got {item!r}"
                ) from None
            value = state.value if isinstance(state, Enum) else state
            if not isinstance(name, str) or not isinstance(side_effect, bool):
                raise InvalidNodeState(
                    f"node {item!r}: name must be a str and has_side_effect a bool"
                )
            if value not in states:
                raise InvalidNodeState(
                    f"node '{name}': {value!r} is not a node state; states: {', '.join(states)}"
                )
            kinds.append((value, side_effect, name.startswith(prefix)))
        return kinds

    def derive(self, nodes: Iterable[tuple[str, str | Enum, bool]]) -> str | None:
        return self.decide(self.alphabet.signature(self.kinds_of(nodes))).result


def _derivation_of(request: MachineSpec) -> Derivation:
    if request.derivation is None:
        raise MachinesError(f"machine '{request.name}' has no derivation section")
    return request.derivation


@functools.cache
def _bundled_deriver(rules: str | None) -> Deriver:
    request = load("request")
    return Deriver.build(request, load(_derivation_of(request).node_machine), rules)


def derive_request_state(
    nodes: Iterable[tuple[str, str | Enum, bool]], rules: str | None = None
) -> RequestState | None:
    """The request state the plan's nodes imply, or ``None`` ("no change yet").

    ``nodes`` are ``(name, state, has_side_effect)``; a name starting with ``manual_`` is a
    manual gate. ``rules`` names a rule set of the bundled ``spec/request.yaml``: ``None``
    is the default (``money-safe``), ``"qtg-v3"`` is the seed's algorithm as written.
    Apply the result only while the request is executing.
    """
    result = _bundled_deriver(rules).derive(nodes)
    return None if result is None else RequestState(result)
