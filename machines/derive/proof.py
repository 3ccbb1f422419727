"""Exhaustive check of the request derivation over every plan up to a size, and beyond.

Every multiset of node kinds (node state x has_side_effect x manual gate) with up to
``max_nodes`` nodes is enumerated and reduced to its signature (``machines.derive``); each
distinct signature is decided by every rule set and judged against the derivation
invariants, with the smallest plan that has it as the counterexample. Then the set of
signatures is tested for closure under adding one more node: when it is closed, no larger
plan can have a signature not already judged, so the verdict holds for every plan size.

The invariants read the node and request machines' tags (effect-started, done,
releases-reservation, consumes-reservation), never the rules, so they are an independent
statement of what the rules must keep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from machines.derive.rules import Alphabet, Decision, Deriver, NodeKind, Signature
from machines.errors import InvalidArgument
from machines.spec import MachineSpec, NodeSet
from machines.spec.registry import judged_by
from machines.spec.vocabulary import CONSUMES_RESERVATION as CONSUMES
from machines.spec.vocabulary import DONE, EFFECT_STARTED
from machines.spec.vocabulary import RELEASES_RESERVATION as RELEASES

DERIVATION_INVARIANTS: Mapping[str, str] = judged_by("derivation")
"""The derivation invariants (id -> statement), as the registry states them."""


@dataclass(frozen=True)
class Counterexample:
    invariant: str
    nodes: tuple[NodeKind, ...]
    decision: Decision
    plans: int  # how many enumerated plans violate it

    def describe(self) -> str:
        if self.invariant == "no-dead-rule":
            return f"rule '{self.decision.rule}' decides no plan"
        return f"{format_plan(self.nodes)} -> {self.decision.result or 'None'}" + (
            f" (rule {self.decision.rule})" if self.decision.rule else " (no rule matched)"
        )


@dataclass(frozen=True)
class RuleSetResult:
    name: str
    counterexamples: tuple[Counterexample, ...]
    plans_per_rule: Mapping[str, int]


@dataclass(frozen=True)
class DerivationReport:
    max_nodes: int
    kinds: int
    plans: int
    signatures: int
    closed: bool
    seconds: float
    results: tuple[RuleSetResult, ...]


def format_plan(nodes: tuple[NodeKind, ...]) -> str:
    if not nodes:
        return "[] (an empty plan)"
    parts = []
    for state, side_effect, manual in nodes:
        flags = [f for f, on in (("side effect", side_effect), ("manual_", manual)) if on]
        parts.append(state + (f" ({', '.join(flags)})" if flags else ""))
    return "[" + ", ".join(parts) + "]"


class _Invariants:
    """The derivation invariants as predicates over a signature and a decision."""

    def __init__(self, request: MachineSpec, node_spec: MachineSpec) -> None:
        started = node_spec.states_tagged(EFFECT_STARTED)
        self.money_moving = NodeSet(states=started, side_effect=True)
        self.terminal = NodeSet(
            states=frozenset(s for s, st in node_spec.states.items() if st.terminal)
        )
        self.done = NodeSet(states=node_spec.states_tagged(DONE))
        self.releases = request.states_tagged(RELEASES)
        self.consumes = request.states_tagged(CONSUMES)
        derived = set(request.derivation.context) if request.derivation else set()
        self.money_guarded = [
            t for t in request.transitions if t.dest in self.releases and derived & set(t.when)
        ]
        applied = request.derivation.applied_in if request.derivation else ()
        self.unguarded_releases = [
            t
            for t in request.transitions
            if t.dest in self.releases
            and t.source in applied
            and not derived & set(t.when)
            and any(request.actors[a].automatic for a in t.actors)
        ]
        """Automatic moves into a releasing state, out of a state the derivation applies
        in, that no derived context refuses: they release with money moving (outsider
        batch 34, c B1: a timer's move from executing into a releasing state of the
        owner's passed every gate)."""

    @property
    def predicates(self) -> tuple[NodeSet, ...]:
        return (self.money_moving, self.terminal, self.done)

    def broken(self, deriver: Deriver, sig: Signature) -> list[str]:
        some, every = sig
        bit = deriver.alphabet.bit
        result = deriver.decide(sig).result
        out = []
        if result in self.releases and some & bit[self.money_moving]:
            out.append("no-auto-terminal-money-in-flight")
        if any(
            move is not None and move.trigger is None
            for move in (deriver.derived_move(s, sig) for s in deriver.derivation.applied_in)
        ):
            out.append("derivation-consistency")
        if result is None and every & bit[self.terminal]:
            out.append("derivation-settles")
        if result in self.consumes and not every & bit[self.done]:
            out.append("completion-means-done")
        context = deriver.context(sig)
        moving = bool(some & bit[self.money_moving])
        guarded = self.money_guarded
        mismatched = guarded and moving == any(t.admits(context) for t in guarded)
        if mismatched or (moving and self.unguarded_releases):
            out.append("context-matches-money")
        return out


MAX_NODES = 6
"""The largest plan the derivation check enumerates. Plans grow as C(kinds + N, N): over
the bundled 48 node kinds, 2.9 million at 5 (about 2 s), 25.8 million at 6, 200 million
at 7. The bundled rule sets' signatures are closed under adding a node at 5, so a larger
N proves nothing more for them."""


def check_max_nodes(max_nodes: object) -> int:
    """``max_nodes`` when it is an int from 1 to ``MAX_NODES``; else ``InvalidArgument``."""
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int):
        raise InvalidArgument(f"max_nodes must be an integer, not a {type(max_nodes).__name__}")
    if not 1 <= max_nodes <= MAX_NODES:
        raise InvalidArgument(f"max_nodes must be from 1 to {MAX_NODES}, not {max_nodes}")
    return max_nodes


def check_derivation(
    request: MachineSpec,
    node_spec: MachineSpec,
    max_nodes: int = 5,
    progress: Callable[[int], None] | None = None,
) -> DerivationReport:
    """Judge every rule set of ``request`` over every plan of up to ``max_nodes`` nodes
    (1 to ``MAX_NODES``)."""
    check_max_nodes(max_nodes)
    assert request.derivation is not None, "check_derivation needs a request with a derivation"
    started = time.perf_counter()
    invariants = _Invariants(request, node_spec)
    derivers = [
        Deriver.build(request, node_spec, name, invariants.predicates)
        for name in request.derivation.rule_sets
    ]
    alphabet = derivers[0].alphabet
    witness, count, plans = _enumerate(alphabet, max_nodes, progress)
    closed = _closed(alphabet, witness.keys())
    index = {kind: i for i, kind in enumerate(alphabet.kinds)}

    def rank(nodes: tuple[NodeKind, ...]) -> tuple[int, tuple[int, ...]]:
        return len(nodes), tuple(index[k] for k in nodes)

    results = []
    for deriver in derivers:
        smallest: dict[str, tuple[NodeKind, ...]] = {}
        violating: dict[str, int] = {}
        per_rule: dict[str, int] = {r.id: 0 for r in deriver.rule_set.rules}
        for sig, nodes in witness.items():
            decision = deriver.decide(sig)
            if decision.rule is not None:
                per_rule[decision.rule] += count[sig]
            for name in invariants.broken(deriver, sig):
                violating[name] = violating.get(name, 0) + count[sig]
                if name not in smallest or rank(nodes) < rank(smallest[name]):
                    smallest[name] = nodes
        found = [
            Counterexample(name, nodes, deriver.decide(alphabet.signature(nodes)), violating[name])
            for name, nodes in smallest.items()
        ]
        found += [
            Counterexample("no-dead-rule", (), Decision(None, rule), 0)
            for rule, n in per_rule.items()
            if n == 0
        ]
        results.append(
            RuleSetResult(deriver.rule_set.name, tuple(found), MappingProxyType(per_rule))
        )
    return DerivationReport(
        max_nodes,
        len(alphabet.kinds),
        plans,
        len(witness),
        closed,
        time.perf_counter() - started,
        tuple(results),
    )


Enumeration = tuple[Mapping[Signature, tuple[NodeKind, ...]], Mapping[Signature, int], int]
"""Each signature's smallest plan, how many plans have it, and how many plans there are."""


def _enumerate(
    alphabet: Alphabet, max_nodes: int, progress: Callable[[int], None] | None
) -> Enumeration:
    """``_plans`` of the alphabet's kinds and masks: a pure function of them, so a process
    that checks definitions with the same node kinds and predicates again (``machines
    mutate``'s catalog, a test run) enumerates them once. ``progress`` is told of a fresh
    enumeration only."""
    masks = tuple(alphabet.mask[k] for k in alphabet.kinds)
    key = (alphabet.kinds, masks, alphabet.full, max_nodes)
    known = _ENUMERATED.get(key)
    if known is None:
        known = _plans(alphabet.kinds, masks, alphabet.full, max_nodes, progress)
        _ENUMERATED[key] = known
        while len(_ENUMERATED) > _ENUMERATIONS_KEPT:
            del _ENUMERATED[next(iter(_ENUMERATED))]
    return known


_ENUMERATIONS_KEPT = 4
"""How many enumerations a process keeps (each a few thousand signatures)."""
_ENUMERATED: dict[tuple[object, ...], Enumeration] = {}


def _plans(
    kinds: tuple[NodeKind, ...],
    masks: tuple[int, ...],
    full: int,
    max_nodes: int,
    progress: Callable[[int], None] | None,
) -> Enumeration:
    """Every multiset of kinds of size 0..max_nodes (kinds in non-decreasing index order),
    depth first, carrying the two masks so each plan costs two bit operations.

    The witness of a signature is its smallest plan: fewest nodes, then the lowest kind
    indices (node states in definition order), so counterexamples are canonical.
    """
    best: dict[Signature, tuple[int, ...]] = {}
    count: dict[Signature, int] = {}
    plans = 0
    stack: list[tuple[int, int, int, tuple[int, ...]]] = [(0, 0, full, ())]
    while stack:
        start, some, every, chosen = stack.pop()
        sig = (some, every)
        plans += 1
        seen = best.get(sig)
        if seen is None:
            count[sig] = 1
            best[sig] = chosen
        else:
            count[sig] += 1
            if (len(chosen), chosen) < (len(seen), seen):
                best[sig] = chosen
        if progress is not None and plans % 250_000 == 0:
            progress(plans)
        if len(chosen) < max_nodes:
            for i in range(len(masks) - 1, start - 1, -1):
                m = masks[i]
                stack.append((i, some | m, every & m, (*chosen, i)))
    witness = {sig: tuple(kinds[i] for i in chosen) for sig, chosen in best.items()}
    return MappingProxyType(witness), MappingProxyType(count), plans


def _closed(alphabet: Alphabet, signatures: object) -> bool:
    known = set(signatures)  # type: ignore[call-overload]
    masks = set(alphabet.mask.values())
    return all((some | m, every & m) in known for some, every in known for m in masks)
