"""The immutable IR of one machine definition, and the questions it answers.

Everything downstream (runtime, systems, analysis, rendering) reads these objects and never
the YAML. They are built once by ``machines.loader`` after validation, so the methods here
trust their own data and only check what callers hand them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from machines.errors import ContextError, InvalidStateTransition, MachinesError

Guard = Mapping[str, frozenset[str]]
"""Context variable -> the values under which a transition may fire."""

EMPTY_GUARD: Guard = MappingProxyType({})


def _no_guard() -> Guard:
    return EMPTY_GUARD


def _no_names() -> Mapping[str, str]:
    return MappingProxyType({})


class UnknownName(MachinesError, ValueError):
    """A state, actor or trigger name that the machine does not define."""


def suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a close match exists, else ``''``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


@dataclass(frozen=True)
class State:
    name: str
    description: str
    terminal: bool
    db_value: str
    tags: tuple[str, ...]

    @property
    def enum_name(self) -> str:
        return self.name.upper()


@dataclass(frozen=True)
class Actor:
    name: str
    automatic: bool
    description: str


@dataclass(frozen=True)
class ContextVariable:
    name: str
    values: tuple[str, ...]
    description: str
    excluded: Mapping[str, str] = field(default_factory=_no_names)


@dataclass(frozen=True)
class Transition:
    """One edge: a single source and a single destination (YAML lists are expanded)."""

    trigger: str
    source: str
    dest: str
    actors: tuple[str, ...]
    description: str
    when: Guard = field(default_factory=_no_guard)
    evidence: str | None = None
    amendment: str | None = None

    def admits(self, context: Mapping[str, str]) -> bool:
        """True when no guarded variable given in ``context`` has a value outside the guard.

        A variable the context leaves out counts as "any value", which is what
        ``MachineSpec.allows`` without context means.
        """
        return all(context[var] in allowed for var, allowed in self.when.items() if var in context)


@dataclass(frozen=True)
class Forbidden:
    """A documented illegal move. ``None`` stands for "*" (any state)."""

    sources: frozenset[str] | None
    dests: frozenset[str] | None
    reason: str

    def matches(self, source: str, dest: str) -> bool:
        return (self.sources is None or source in self.sources) and (
            self.dests is None or dest in self.dests
        )

    @property
    def specificity(self) -> int:
        """Explicit names beat wildcards when several entries explain one refusal."""
        return (self.sources is not None) + 2 * (self.dests is not None)


RuleKind = Literal[
    "terminal_final",
    "all_reachable",
    "can_terminate",
    "only_actors_exit",
    "only_actors_enter",
    "only_triggers_exit",
    "only_from",
    "only_via",
    "only_reachable_when",
    "automatic_enters_only_when",
    "automatic_needs_evidence",
]


@dataclass(frozen=True)
class Rule:
    """A declared structural invariant; its kind is one of ``machines.analysis.RULE_KINDS``.

    Parameters a kind does not use stay empty.
    """

    id: str
    kind: RuleKind
    description: str
    states: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()
    triggers: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    dests: tuple[str, ...] = ()
    via: tuple[str, ...] = ()
    holds: tuple[str, ...] = ()
    when: Guard = field(default_factory=_no_guard)


@dataclass(frozen=True)
class Finding:
    """Where a seed is ambiguous or wrong, and what this definition chose."""

    machine: str
    id: str
    seed: str
    text: str
    resolution: str


Quantifier = Literal["any", "all", "none"]


@dataclass(frozen=True)
class NodeSet:
    """Plan nodes matching every given field; ``None`` means "any"."""

    states: frozenset[str] | None = None
    side_effect: bool | None = None
    manual: bool | None = None

    def matches(self, state: str, side_effect: bool, manual: bool) -> bool:
        return (
            (self.states is None or state in self.states)
            and (self.side_effect is None or side_effect == self.side_effect)
            and (self.manual is None or manual == self.manual)
        )


@dataclass(frozen=True)
class Clause:
    quantifier: Quantifier
    nodes: NodeSet


@dataclass(frozen=True)
class DerivationRule:
    id: str
    when: tuple[Clause, ...]
    result: str | None
    description: str


@dataclass(frozen=True)
class RuleSet:
    name: str
    description: str
    rules: tuple[DerivationRule, ...]
    known_violations: Mapping[str, str] = field(default_factory=_no_names)


@dataclass(frozen=True)
class ContextCase:
    """``value`` applies when every clause holds; the last case has no clauses."""

    value: str
    when: tuple[Clause, ...] = ()


@dataclass(frozen=True)
class Derivation:
    """How a request's state follows from its plan's node states (rules are data)."""

    node_machine: str
    applied_in: tuple[str, ...]
    actor: str
    manual_prefix: str
    default: str
    context: Mapping[str, tuple[ContextCase, ...]]
    rule_sets: Mapping[str, RuleSet]


@dataclass(frozen=True)
class _Candidate:
    actors: frozenset[str]
    when: Guard
    transition: Transition


@dataclass(frozen=True)
class MachineSpec:
    """One validated machine definition. Build it with ``machines.load``."""

    name: str
    title: str
    origin: str
    description: str
    initial: str
    context: Mapping[str, ContextVariable]
    actors: Mapping[str, Actor]
    states: Mapping[str, State]
    transitions: tuple[Transition, ...]
    forbidden: tuple[Forbidden, ...]
    invariants: tuple[Rule, ...]
    findings: tuple[Finding, ...]
    derivation: Derivation | None = None
    path: Path | None = None
    _by_source_trigger: Mapping[tuple[str, str], tuple[_Candidate, ...]] = field(
        init=False, repr=False, compare=False
    )
    _triggers: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table: dict[tuple[str, str], list[_Candidate]] = {}
        for t in self.transitions:
            table.setdefault((t.source, t.trigger), []).append(
                _Candidate(frozenset(t.actors), t.when, t)
            )
        object.__setattr__(
            self, "_by_source_trigger", MappingProxyType({k: tuple(v) for k, v in table.items()})
        )
        object.__setattr__(self, "_triggers", frozenset(t.trigger for t in self.transitions))

    # -- questions about the graph -------------------------------------------------------

    def is_terminal(self, state: str) -> bool:
        return self._state(state).terminal

    def allows(self, source: str, dest: str, **context: str) -> bool:
        """Whether some transition moves ``source`` to ``dest``.

        Without context: under ANY context. With context: under THIS context (variables
        left out still count as any value).
        """
        self._state(source)
        self._state(dest)
        ctx = self._check_context(context)
        return any(
            t.source == source and t.dest == dest and t.admits(ctx) for t in self.transitions
        )

    def next_states(self, source: str, **context: str) -> tuple[str, ...]:
        """Destinations reachable in one move from ``source``, in definition order."""
        self._state(source)
        ctx = self._check_context(context)
        out: dict[str, None] = {}
        for t in self.transitions:
            if t.source == source and t.admits(ctx):
                out[t.dest] = None
        return tuple(out)

    def triggers_from(self, source: str) -> tuple[str, ...]:
        self._state(source)
        return tuple(dict.fromkeys(t.trigger for t in self.transitions if t.source == source))

    def forbidden_reason(self, source: str, dest: str) -> str | None:
        """The reason of the most specific ``forbidden`` entry for ``source -> dest``."""
        entry = self._forbidden_entry([(source, dest)])
        return entry.reason if entry is not None else None

    def _forbidden_entry(self, moves: Iterable[tuple[str, str]]) -> Forbidden | None:
        best: Forbidden | None = None
        for source, dest in moves:
            for entry in self.forbidden:
                if entry.matches(source, dest) and (
                    best is None or entry.specificity > best.specificity
                ):
                    best = entry
        return best

    def step(self, state: str, trigger: str, *, actor: str, **context: str) -> str:
        """Validate one move and return the destination, without building an object.

        Raises ``InvalidStateTransition`` (nothing changes anywhere) for an unknown state,
        trigger or actor, a trigger not defined from ``state``, an actor not allowed to fire
        it, or a guard the context fails; ``ContextError`` for a context variable that is
        unknown, missing where a guard needs it, or holds a refused value.
        """
        ctx = self._check_context(context)
        candidates = self._by_source_trigger.get((state, trigger))
        if candidates is None:
            raise self._refusal(state, trigger, actor, self._why_no_edge(state, trigger))
        if actor not in self.actors:
            raise self._refusal(
                state,
                trigger,
                actor,
                f"'{actor}' is not an actor of machine '{self.name}'"
                f"{suggest(actor, self.actors)}; actors: {', '.join(self.actors)}",
            )
        by_actor = [c for c in candidates if actor in c.actors]
        if not by_actor:
            allowed = sorted({a for c in candidates for a in c.actors})
            raise self._refusal(
                state,
                trigger,
                actor,
                f"actor '{actor}' may not fire '{trigger}' from '{state}'; "
                f"allowed: {', '.join(allowed)}",
            )
        for candidate in by_actor:
            missing = [var for var in candidate.when if var not in ctx]
            if missing:
                var = self.context[missing[0]]
                raise ContextError(
                    f"{self.name}: trigger '{trigger}' from '{state}' is guarded by "
                    f"'{var.name}'; pass {var.name}=... (one of: {', '.join(var.values)})"
                )
            if candidate.transition.admits(ctx):
                return candidate.transition.dest
        needs = "; or ".join(_describe_guard(c.when) for c in by_actor)
        got = ", ".join(f"{k}={v}" for k, v in sorted(ctx.items()))
        reason = f"guard not met: requires {needs}; got {got}"
        forbidden = self.forbidden_reason(state, by_actor[0].transition.dest)
        if forbidden is not None:
            reason = f"{forbidden} ({reason})"
        raise self._refusal(state, trigger, actor, reason)

    # -- helpers ------------------------------------------------------------------------

    def _state(self, name: str) -> State:
        try:
            return self.states[name]
        except KeyError:
            raise UnknownName(
                f"'{name}' is not a state of machine '{self.name}'{suggest(name, self.states)}; "
                f"states: {', '.join(self.states)}"
            ) from None

    def _check_context(self, context: Mapping[str, str]) -> Mapping[str, str]:
        for var, value in context.items():
            spec = self.context.get(var)
            if spec is None:
                known = ", ".join(self.context) or "none"
                raise ContextError(
                    f"{self.name}: '{var}' is not a context variable{suggest(var, self.context)}; "
                    f"known: {known}"
                )
            if value in spec.excluded:
                raise ContextError(f"{self.name}: {var}={value} is refused: {spec.excluded[value]}")
            if value not in spec.values:
                raise ContextError(
                    f"{self.name}: {var}={value!r} is not allowed"
                    f"{suggest(str(value), spec.values)}; values: {', '.join(spec.values)}"
                )
        return context

    def _why_no_edge(self, state: str, trigger: str) -> str:
        if state not in self.states:
            return f"'{state}' is not a state of machine '{self.name}'{suggest(state, self.states)}"
        if trigger not in self._triggers:
            return (
                f"'{trigger}' is not a trigger of machine '{self.name}'"
                f"{suggest(trigger, self._triggers)}"
            )
        entry = self._forbidden_entry(
            (state, t.dest) for t in self.transitions if t.trigger == trigger
        )
        if self.states[state].terminal:
            if entry is None:
                return f"'{state}' is terminal"
            return (
                entry.reason
                if "terminal" in entry.reason
                else f"{entry.reason} ('{state}' is terminal)"
            )
        if entry is not None:
            return entry.reason
        available = ", ".join(self.triggers_from(state)) or "none"
        return f"'{trigger}' is not defined from '{state}'; triggers from '{state}': {available}"

    def _refusal(self, state: str, trigger: str, actor: str, reason: str) -> InvalidStateTransition:
        return InvalidStateTransition(self.name, state, trigger=trigger, actor=actor, reason=reason)


def _describe_guard(guard: Guard) -> str:
    return " and ".join(f"{var} in [{', '.join(sorted(vals))}]" for var, vals in guard.items())
