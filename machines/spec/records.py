"""The immutable IR of one machine definition, and the questions it answers.

Everything downstream (runtime, systems, analysis, rendering) reads these objects and never
the YAML. They are built once by ``machines.spec.loader`` after validation, so the methods here
trust their own data and only check what callers hand them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from machines.errors import UnknownName
from machines.spec.routing import Router, Stepper, plain, shown, suggest
from machines.spec.vocabulary import TAGS, USER_TAG_PREFIX, is_declared_tag

if TYPE_CHECKING:
    from machines.runtime import AsyncEntityMachine, EntityMachine

Guard = Mapping[str, frozenset[str]]
"""Context variable -> the values under which a transition may fire."""

EMPTY_GUARD: Guard = MappingProxyType({})


def _no_guard() -> Guard:
    return EMPTY_GUARD


def _no_names() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class State:
    name: str
    description: str
    terminal: bool
    db_value: str
    tags: tuple[str, ...]
    annotations: tuple[str, ...] = ()
    """Data fields that may still change while the entity is in this terminal state (a
    replay count), each a text, a number, true, false or null; every other field of a
    finished entity never changes."""

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
    unreachable_in_systems: str | None = None
    """A finding id saying why no reference system can take this edge; the coverage gate
    of the system suites does not ask for it."""

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
    """A declared structural invariant; its kind is one of ``machines.spec.structure.RULE_KINDS``.

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

    def holds(self, nodes: Sequence[tuple[str, bool, bool]]) -> bool:
        """Whether the clause holds of a plan's ``(state, side_effect, manual)`` nodes
        (``all`` holds of an empty plan). ``machines.derive`` decides the same from bit
        masks, for speed; this is the plain reading, for one plan."""
        matches = [self.nodes.matches(*node) for node in nodes]
        if self.quantifier == "any":
            return any(matches)
        if self.quantifier == "all":
            return all(matches)
        return not any(matches)


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

    def implied_context(self, nodes: Sequence[tuple[str, bool, bool]]) -> dict[str, str]:
        """The derived context a plan's ``(state, side_effect, manual)`` nodes imply: per
        variable, the value of the first case whose clauses all hold."""
        return {
            var: next(c.value for c in cases if all(cl.holds(nodes) for cl in c.when))
            for var, cases in self.context.items()
        }


KeyPath = tuple[str | int, ...]
"""Where a value sits in a definition document: ``("transitions", 3, "actor")``."""


def nearest_line(lines: Mapping[KeyPath, int], key_path: KeyPath) -> int | None:
    """The line of ``key_path`` in ``lines``, or of its nearest ancestor that has one."""
    for end in range(len(key_path), -1, -1):
        line = lines.get(tuple(key_path[:end]))
        if line is not None:
            return line
    return None


@dataclass(frozen=True)
class SourceLines:
    """Where the entries of a loaded definition are in its file (``MachineSpec.path``),
    for messages that name a line (``machines check``, ``SpecViolation``).

    Kept beside the records, not in them: a transition or rule is a value, and the same
    definition written out again (``machines export``) and loaded back sits on other lines
    yet is the same definition.
    """

    lines: Mapping[KeyPath, int]
    """The 1-based line of every key path of the document."""
    transition_entries: tuple[int, ...] = ()
    """The index under ``transitions:`` of each expanded transition (one entry with a list
    of sources is several transitions)."""

    def line_of(self, key_path: KeyPath) -> int | None:
        """The line of ``key_path``, or of its nearest ancestor that has one."""
        return nearest_line(self.lines, key_path)

    def transition(self, index: int) -> int | None:
        """The line of the entry that defines ``spec.transitions[index]``."""
        if not 0 <= index < len(self.transition_entries):
            return None
        return self.line_of(("transitions", self.transition_entries[index]))


EntityClass = Callable[..., Any]

_ENTITY_CLASSES: dict[str, EntityClass] = {}
"""The runtime's entity classes ("sync", "async"), handed over by ``machines.runtime``."""


def provide_entity_classes(sync: EntityClass, asynchronous: EntityClass) -> None:
    """Called once, by ``machines.runtime`` as it is imported (``import machines`` always
    imports it), so that ``MachineSpec.machine`` can build an entity while the definition
    layer imports nothing above it."""
    _ENTITY_CLASSES.update(sync=sync, asynchronous=asynchronous)


@dataclass(frozen=True, eq=False)
class MachineSpec:
    """One validated machine definition. Build it with ``machines.load``.

    Compared and hashed by identity: a spec is a loaded definition, not a value (its parts
    hold mappings, which cannot be hashed, and caches are keyed by it). Whether two specs
    say the same thing is ``same_definition``: every field but where it was read from.
    """

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
    opt_out: Mapping[str, str] = field(default_factory=_no_names)
    """Baseline rules (``BASELINE_RULES``) the machine does not keep, each with its reason."""
    path: Path | None = field(default=None, compare=False)
    source: SourceLines | None = field(default=None, compare=False, repr=False)
    """Where each entry is in ``path``, for messages; not part of the definition."""
    _router: Router = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        router = Router(self)
        object.__setattr__(self, "_router", router)
        # The hottest path: calling spec.step calls the router's compiled step directly
        # (one Python call instead of two). The method below documents it.
        object.__setattr__(self, "step", router.step)

    def same_definition(self, other: MachineSpec) -> bool:
        """Whether ``other`` says exactly what this spec says (``definition_differences``
        is empty): what a definition exported and loaded back must satisfy."""
        return not definition_differences(self, other)

    # -- questions about the graph -------------------------------------------------------

    @property
    def triggers(self) -> frozenset[str]:
        """Every trigger name of the machine."""
        return self._router.triggers

    @property
    def unreachable_in_systems(self) -> frozenset[tuple[str, str, str]]:
        """(source, trigger, dest) of the edges no reference system takes, by finding."""
        return frozenset(
            (t.source, t.trigger, t.dest) for t in self.transitions if t.unreachable_in_systems
        )

    def states_tagged(self, tag: str) -> frozenset[str]:
        """The states that carry ``tag``. Every reader of a tag asks here, and a tag it names
        must be declared (``machines.spec.vocabulary.TAGS``, or a user's ``x-`` tag): a
        misspelled tag in code fails loudly instead of finding no state."""
        if not isinstance(tag, str) or not is_declared_tag(tag):
            raise UnknownName(
                f"'{shown(tag)}' is not a declared tag{suggest(tag, TAGS)}; "
                f"tags: {', '.join(TAGS)} (or one of your own, starting with "
                f"'{USER_TAG_PREFIX}')"
            )
        return frozenset(name for name, state in self.states.items() if tag in state.tags)

    def valuations(self) -> tuple[Mapping[str, str], ...]:
        """Every context valuation: one value for each context variable, in every
        combination (one empty valuation for a machine without context)."""
        names = list(self.context)
        return tuple(
            MappingProxyType(dict(zip(names, combo, strict=True)))
            for combo in itertools.product(*(self.context[n].values for n in names))
        )

    def is_terminal(self, state: str) -> bool:
        return self._state(state).terminal

    def allows(self, source: str, dest: str, **context: str) -> bool:
        """Whether some transition moves ``source`` to ``dest``.

        Without context: under ANY context. With context: under THIS context (variables
        left out still count as any value).
        """
        source, dest = self._state(source).name, self._state(dest).name
        ctx = self._router.check_context(context)
        return any(
            t.source == source and t.dest == dest and t.admits(ctx) for t in self.transitions
        )

    def next_states(self, source: str, **context: str) -> tuple[str, ...]:
        """Destinations reachable in one move from ``source``, in definition order."""
        source = self._state(source).name
        ctx = self._router.check_context(context)
        out: dict[str, None] = {}
        for t in self.transitions:
            if t.source == source and t.admits(ctx):
                out[t.dest] = None
        return tuple(out)

    def triggers_from(self, source: str) -> tuple[str, ...]:
        source = self._state(source).name
        return tuple(dict.fromkeys(t.trigger for t in self.transitions if t.source == source))

    def forbidden_reason(self, source: str, dest: str) -> str | None:
        """The reason of the most specific ``forbidden`` entry for ``source -> dest``."""
        entry = self.forbidden_entry([(self._state(source).name, self._state(dest).name)])
        return entry.reason if entry is not None else None

    def forbidden_entry(self, moves: Iterable[tuple[str, str]]) -> Forbidden | None:
        """The most specific ``forbidden`` entry matching any of ``moves``."""
        best: Forbidden | None = None
        for source, dest in moves:
            for entry in self.forbidden:
                if entry.matches(source, dest) and (
                    best is None or entry.specificity > best.specificity
                ):
                    best = entry
        return best

    def step(self, state: str, trigger: str, *, actor: str | None = None, **context: str) -> str:
        """Validate one move and return the destination, without building an object.

        Raises ``InvalidStateTransition`` (nothing changes anywhere) for an unknown state,
        trigger or actor (or one that is not a string, or none given), a trigger not defined from
        ``state``, an actor not allowed to fire it, or a guard the context fails;
        ``ContextError`` for a context variable that is unknown, missing where a guard needs
        it, or holds a refused value or one that is not a string. The object runtime takes
        its decisions from the same compiled table.
        """
        return self._router.step(state, trigger, actor=actor, **context)

    def machine(self, model: object | None = None, **options: Any) -> EntityMachine:
        """An object for one entity, on the ``transitions`` library (``machines.runtime``).

        ``model``: your own object (ORM row, dataclass) whose ``state_attr`` (default
        ``"state"``) holds the state; without one the entity keeps its own. Options:
        ``state`` (start here instead of the initial state), ``state_attr``, ``entity_id``,
        ``clock``, ``hooks`` (``machines.runtime.Hooks``); any other keyword is bound context
        (``tier="compensable"``). Every option is checked before the model is touched: a
        bad one is a ``MachinesError`` (``UnknownName`` for a state, ``ContextError`` for
        context) and leaves the model as it was.
        """
        return _ENTITY_CLASSES["sync"](self, model, **options)  # type: ignore[no-any-return]

    def async_machine(self, model: object | None = None, **options: Any) -> AsyncEntityMachine:
        """As ``machine``, for asyncio: ``await m.trigger(...)``; callbacks may be async."""
        return _ENTITY_CLASSES["asynchronous"](self, model, **options)  # type: ignore[no-any-return]

    def stepper(self, **context: str) -> Stepper:
        """``step`` with this context bound and validated once: ``stepper(state, trigger,
        actor) -> dest``. The fastest way to decide many moves under one context (a
        store's rows of one tier, a runtime's entity); same decisions, same errors."""
        return self._router.bind(context)

    # -- helpers ------------------------------------------------------------------------

    def _state(self, name: object) -> State:
        """The state called ``name``, or ``UnknownName`` (for anything that is not a state
        name, whatever its type: checked before it is hashed or shown)."""
        text = plain(name)
        state = self.states.get(text) if text is not None else None
        if state is not None:
            return state
        what = f"'{shown(name)}' is" if text is not None else f"a {type(name).__name__} is"
        raise UnknownName(
            f"{what} not a state of machine '{self.name}'{suggest(text, self.states)}; "
            f"states: {', '.join(self.states)}"
        )


def derived_variables(spec: MachineSpec) -> frozenset[str]:
    """The context variables the spec's derivation computes per move (a request's
    ``side_effects``, from its nodes); every other variable is fixed when the entity is
    created, and no move may give it another value (the runtime and every store keep one
    context per entity)."""
    return frozenset(spec.derivation.context) if spec.derivation is not None else frozenset()


def definition_differences(a: MachineSpec, b: MachineSpec) -> tuple[str, ...]:
    """The fields in which ``a`` and ``b`` say different things, in field order: every
    field that compares (all but ``path``, ``source`` and the compiled table), and the
    order of the named sections too (the order of states is the order of the enums and
    the diagrams)."""
    out = []
    for f in fields(MachineSpec):
        if not f.compare:
            continue
        left, right = getattr(a, f.name), getattr(b, f.name)
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            left, right = tuple(left.items()), tuple(right.items())
        if left != right:
            out.append(f.name)
    return tuple(out)
