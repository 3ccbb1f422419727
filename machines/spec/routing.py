"""The compiled transition table: every move decision of every runtime goes through here.

``spec.step`` (``Router.step``) and the object runtime (a ``Stepper`` from ``Router.bind``)
decide through the same compiled table, so they cannot disagree: both answer from dicts
that the one reference decision (``Router._route``) filled in advance. The common case (a
known context, an edge that exists for this actor) is one dict lookup; everything else
falls to ``Router.decide``, and a refusal to ``refuse``, which builds the precise error:
unknown names, terminal states, wrong actors, failed guards, with the spec's ``forbidden``
reason.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from machines.errors import ContextError, InvalidStateTransition
from machines.spec.jsonvalue import describe
from machines.spec.vocabulary import describe_guard

if TYPE_CHECKING:
    from machines.spec.records import MachineSpec

Route = tuple[tuple[tuple[str, frozenset[str]], ...], str]
"""(guard as (variable, admitted values) pairs, destination)."""


class _Single(NamedTuple):
    """One edge guarded by one variable: its admitted values, each mapped to the dest."""

    var: str
    dests: dict[str, str]


NAME_SHOWN = 80
"""Longest name an error message repeats as it is; a longer one is cut (``describe``)."""


def suggest(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a close match exists, else ``''`` (also for anything
    that is not a short string: a caller's mistake of type gets no guess)."""
    if type(name) is not str or len(name) > NAME_SHOWN:
        return ""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def shown(value: object) -> str:
    """How an error message names a value a caller passed: a string as its text (escaped
    when unprintable, cut when long), anything else by a short safe description (never
    by its own ``str()``, which may raise or be huge)."""
    text = plain(value)
    if text is None:
        return describe(value, NAME_SHOWN)
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= NAME_SHOWN else f"{text[: NAME_SHOWN - 3]}..."


def plain(value: object) -> str | None:
    """``value`` as an exact ``str`` (a ``str`` subclass such as a ``StrEnum`` member is
    read as its text), or ``None`` when it is no string at all."""
    return str.__str__(value) if isinstance(value, str) else None


class Router:
    """One machine's transitions compiled for fast, fail-closed decisions.

    ``_table`` maps (state, trigger, actor) to one of three shapes: a ``str`` (the
    destination of an edge without a guard), a ``_Single`` (one edge guarded by one
    variable: value -> destination, which also validates a context that names just that
    variable), or a ``list`` of guarded alternatives; ``_route`` reads it for any context.
    ``step`` and each bound ``Stepper`` answer from tables ``_route`` filled; a miss falls
    to ``decide``, and a refusal to ``refuse``, which finds the precise reason.
    """

    __slots__ = (
        "_allowed_values",
        "_bound",
        "_spec",
        "_table",
        "_triggers",
        "_valid_pairs",
        "step",
    )

    step: Step
    """``step(state, trigger, *, actor, **context) -> dest``: ``decide`` with the context as
    keywords. This is the hottest path of the package (``MachineSpec.step`` is this very
    function): a context of at most one variable, the common case, is answered by one dict
    lookup in a table ``_route`` filled for every edge and every admitted value; anything
    else, and every refusal, goes to ``decide``. A closure, the cheapest callable CPython
    has."""

    def __init__(self, spec: MachineSpec) -> None:
        self._spec = spec
        self._triggers = frozenset(t.trigger for t in spec.transitions)
        self._allowed_values = {name: frozenset(v.values) for name, v in spec.context.items()}
        self._valid_pairs = frozenset(
            (var, value) for var, values in self._allowed_values.items() for value in values
        )
        self._bound: dict[tuple[tuple[str, str], ...], Stepper] = {}
        grouped: dict[tuple[str, str, str], list[Route]] = {}
        for t in spec.transitions:
            for actor in t.actors:
                key = (t.source, t.trigger, actor)
                grouped.setdefault(key, []).append((tuple(t.when.items()), t.dest))
        self._table: dict[tuple[str, str, str], str | _Single | list[Route]] = {}
        for key, found in grouped.items():
            if len(found) == 1 and not found[0][0]:
                self._table[key] = found[0][1]
            elif len(found) == 1 and len(found[0][0]) == 1:
                ((var, admitted),), dest = found[0]
                self._table[key] = _Single(var, dict.fromkeys(admitted, dest))
            else:
                self._table[key] = found
        self.step = _compile_step(self)

    def decide(
        self, state: str, trigger: str, actor: str | None, context: Mapping[str, str]
    ) -> str:
        """The destination of this move, or raise ``InvalidStateTransition`` /
        ``ContextError``; nothing is changed anywhere either way. The reference decision,
        for any context: ``step`` answers the common cases from tables filled by ``_route``
        and asks this for the rest."""
        if actor is None:
            raise self.refuse(state, trigger, actor, context)
        s, t, a = plain(state), plain(trigger), plain(actor)
        try:  # the characters decide, never a subclass's __eq__ or __hash__
            values = {str.__str__(k): str.__str__(v) for k, v in context.items()}
            if s is None or t is None or a is None:
                raise TypeError("not a string")
            dest = self._route(s, t, a, values)
        except Exception:  # no such edge, or an unhashable or hostile argument
            raise self.refuse(state, trigger, actor, context) from None
        if dest is None:
            raise self.refuse(state, trigger, actor, context)
        return dest

    def _route(
        self, state: str, trigger: str, actor: str, context: Mapping[str, str]
    ) -> str | None:
        """The destination, ``None`` for a move refused on its context, or an exception
        (``KeyError`` for a missing edge; anything a hostile argument raises)."""
        route = self._table[(state, trigger, actor)]
        if isinstance(route, str):
            if not context:
                return route
            if len(context) == 1:
                ((pair),) = context.items()
                if pair in self._valid_pairs:
                    return route
            elif self._valid(context):
                return route
        elif isinstance(route, _Single):
            var, dests = route
            if len(context) == 1:
                dest = dests.get(context.get(var, ""))
                if dest is not None:
                    return dest
            if self._valid(context) and context.get(var, "") in dests:
                return dests[context[var]]
        elif self._valid(context):
            for guard, dest in route:
                if all(context.get(var) in admitted for var, admitted in guard):
                    return dest
        return None

    @property
    def triggers(self) -> frozenset[str]:
        return self._triggers

    def bind(self, context: Mapping[str, str]) -> Stepper:
        """A step function for one fixed context, validated once: ``(state, trigger,
        actor) -> dest``. Every decision is precomputed into one dict; equal contexts get
        the very same stepper (entities share it, so binding costs one lookup)."""
        try:  # by the characters: a subclass's __eq__ or __hash__ must not pick a stepper
            cache_key = tuple(sorted((str.__str__(k), str.__str__(v)) for k, v in context.items()))
            stepper = self._bound.get(cache_key)
        except Exception:  # not strings, or hostile: check_context names it
            stepper = None
        if stepper is None:
            self.check_context(context)
            frozen = MappingProxyType({str.__str__(k): str.__str__(v) for k, v in context.items()})
            cache_key = tuple(sorted(frozen.items()))
            table = {}
            for key in self._table:
                dest = self._route(*key, frozen)
                if dest is not None:
                    table[key] = dest
            stepper = self._bound[cache_key] = _make_stepper(self, table, frozen)
        return stepper

    def _valid(self, context: Mapping[str, str]) -> bool:
        allowed_values = self._allowed_values
        for var, value in context.items():
            allowed = allowed_values.get(var)
            if allowed is None or value not in allowed:
                return False
        return True

    def refuse(
        self, state: object, trigger: object, actor: object, context: Mapping[str, object]
    ) -> InvalidStateTransition | ContextError:
        """The precise error for a move ``route`` did not find (never returns a success).

        Arguments of any type are welcome here: this is where garbage ends up, so every
        name is checked to be a string before it is compared, hashed or shown."""
        problem = self._context_problem(context)
        if problem is not None:
            return problem
        s, t, a = plain(state), plain(trigger), plain(actor)
        if actor is None and s is not None and t is not None:
            return self._refusal(
                state,
                trigger,
                actor,
                "no actor was given: every move names who makes it (actor=...; actors: "
                f"{', '.join(self._spec.actors)})",
            )
        if s is None or t is None or a is None:
            given = (("state", state, s), ("trigger", trigger, t), ("actor", actor, a))
            role, wrong = next((role, raw) for role, raw, name in given if name is None)
            return self._refusal(
                state, trigger, actor, f"the {role} must be a string, not {type(wrong).__name__}"
            )
        return self._refuse_move(s, t, a, cast("Mapping[str, str]", context))

    def _refuse_move(
        self, state: str, trigger: str, actor: str, context: Mapping[str, str]
    ) -> InvalidStateTransition | ContextError:
        spec = self._spec
        if state not in spec.states or trigger not in self._triggers:
            return self._refusal(state, trigger, actor, self._why_no_edge(state, trigger))
        candidates = [t for t in spec.transitions if t.source == state and t.trigger == trigger]
        if not candidates:
            return self._refusal(state, trigger, actor, self._why_no_edge(state, trigger))
        if actor not in spec.actors:
            return self._refusal(
                state,
                trigger,
                actor,
                f"'{shown(actor)}' is not an actor of machine '{spec.name}'"
                f"{suggest(actor, spec.actors)}; actors: {', '.join(spec.actors)}",
            )
        by_actor = [t for t in candidates if actor in t.actors]
        if not by_actor:
            allowed = sorted({a for t in candidates for a in t.actors})
            return self._refusal(
                state,
                trigger,
                actor,
                f"actor '{actor}' may not fire '{trigger}' from '{state}'; "
                f"allowed: {', '.join(allowed)}",
            )
        for t in by_actor:
            missing = [var for var in t.when if var not in context]
            if missing:
                var = spec.context[missing[0]]
                return ContextError(
                    f"{spec.name}: trigger '{trigger}' from '{state}' is guarded by "
                    f"'{var.name}'; pass {var.name}=... (one of: {', '.join(var.values)})"
                )
        needs = "; or ".join(describe_guard(t.when) for t in by_actor)
        got = ", ".join(f"{k}={str.__str__(v)}" for k, v in sorted(context.items()))
        reason = f"guard not met: requires {needs}; got {got}"
        forbidden = spec.forbidden_reason(state, by_actor[0].dest)
        if forbidden is not None:
            reason = f"{forbidden} ({reason})"
        return self._refusal(state, trigger, actor, reason)

    def check_context(self, context: Mapping[str, object]) -> Mapping[str, str]:
        """``context`` itself when every variable and value is a known, admitted string."""
        problem = self._context_problem(context)
        if problem is not None:
            raise problem
        return cast("Mapping[str, str]", context)

    def _context_problem(self, context: Mapping[str, object]) -> ContextError | None:
        spec = self._spec
        for key, raw in context.items():
            var, value = plain(key), plain(raw)
            declared = spec.context.get(var) if var is not None else None
            if declared is None:
                known = ", ".join(spec.context) or "none"
                return ContextError(
                    f"{spec.name}: '{shown(key)}' is not a context variable"
                    f"{suggest(var, spec.context)}; known: {known}"
                )
            if value is None:
                return ContextError(
                    f"{spec.name}: {var} must be a string (one of: {', '.join(declared.values)}),"
                    f" not {type(raw).__name__}"
                )
            if value in declared.excluded:
                return ContextError(
                    f"{spec.name}: {var}={value} is refused: {declared.excluded[value]}"
                )
            if value not in declared.values:
                return ContextError(
                    f"{spec.name}: {var}={shown(value)!r} is not allowed"
                    f"{suggest(value, declared.values)}; values: {', '.join(declared.values)}"
                )
        return None

    def _why_no_edge(self, state: str, trigger: str) -> str:
        spec = self._spec
        if state not in spec.states:
            return (
                f"'{shown(state)}' is not a state of machine '{spec.name}'"
                f"{suggest(state, spec.states)}"
            )
        if trigger not in self._triggers:
            return (
                f"'{shown(trigger)}' is not a trigger of machine '{spec.name}'"
                f"{suggest(trigger, self._triggers)}"
            )
        entry = spec.forbidden_entry(
            (state, t.dest) for t in spec.transitions if t.trigger == trigger
        )
        if spec.states[state].terminal:
            if entry is None:
                return f"'{state}' is terminal"
            if "terminal" in entry.reason:
                return entry.reason
            return f"{entry.reason} ('{state}' is terminal)"
        if entry is not None:
            return entry.reason
        available = ", ".join(spec.triggers_from(state)) or "none"
        return f"'{trigger}' is not defined from '{state}'; triggers from '{state}': {available}"

    def _refusal(
        self, state: object, trigger: object, actor: object, reason: str
    ) -> InvalidStateTransition:
        return InvalidStateTransition(
            self._spec.name, shown(state), trigger=shown(trigger), actor=shown(actor), reason=reason
        )


class Step(Protocol):
    """``Router.step``'s signature."""

    def __call__(
        self, state: str, trigger: str, *, actor: str | None = None, **context: str
    ) -> str: ...


def _compile_step(router: Router) -> Step:
    """``router.step``: the answers for no context and for each admitted (variable, value)
    pair, precomputed by the reference (``_route``), looked up in one dict each."""
    bare: dict[tuple[str, str, str | None], str] = {}
    single: dict[tuple[str, str, str | None, tuple[str, str]], str] = {}
    for key in router._table:
        dest = router._route(*key, {})
        if dest is not None:
            bare[key] = dest
        for pair in router._valid_pairs:
            dest = router._route(*key, dict((pair,)))
            if dest is not None:
                single[(*key, pair)] = dest
    decide = router.decide

    def step(state: str, trigger: str, *, actor: str | None = None, **context: str) -> str:
        """The destination of this move, or raise ``InvalidStateTransition`` /
        ``ContextError`` (``Router.decide`` says which)."""
        exact = type(state) is str and type(trigger) is str and type(actor) is str
        if len(context) == 1:
            pair = context.popitem()  # this call's own dict: cheaper than unpacking items()
            if exact and type(pair[1]) is str:  # a subclass's __hash__ must not pick a move
                try:
                    return single[(state, trigger, actor, pair)]
                except Exception:  # not precomputed: the reference says why
                    pass
            context = dict((pair,))
        elif not context and exact:
            try:
                return bare[(state, trigger, actor)]
            except Exception:
                pass
        return decide(state, trigger, actor, context)

    return step


class Stepper(Protocol):
    """``spec.step`` with its context bound: call it as ``stepper(state, trigger, actor)``.

    For hot loops and runtimes that hold one entity's context: one dict lookup per move,
    and the same decisions (and, on refusal, the same errors) as ``spec.step``. It is a
    plain closure (the cheapest callable CPython has) carrying its ``context``.
    """

    context: Mapping[str, str]

    def __call__(self, state: str, trigger: str, actor: str) -> str: ...


def _make_stepper(
    router: Router, table: dict[tuple[str, str, str], str], context: Mapping[str, str]
) -> Stepper:
    refuse = router.refuse

    def stepper(state: str, trigger: str, actor: str) -> str:
        try:
            if type(state) is str and type(trigger) is str and type(actor) is str:
                return table[(state, trigger, actor)]
            return table[(str.__str__(state), str.__str__(trigger), str.__str__(actor))]
        except Exception:  # no such move, or not strings, or a hostile argument
            raise refuse(state, trigger, actor, context) from None

    setattr(stepper, "context", context)  # noqa: B010 - a function attribute, by design
    return cast(Stepper, stepper)
