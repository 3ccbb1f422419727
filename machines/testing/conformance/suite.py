"""A stateful Hypothesis suite for any implementation of any definition, behind an adapter.

Give it a definition (a ``MachineSpec``: ``machines.load(path)``) and an adapter to your
implementation of it (your table, your service, your ORM model), and it checks that the
implementation allows exactly what the definition allows::

    class RefundConformance(ConformanceSuite):
        spec = machines.load(spec_dir_under_test(HERE / "specs") / "refund.yaml")

        def make_adapter(self) -> ConformanceAdapter:
            return RefundsAdapter(Refunds())

    def test_refunds_conform() -> None:
        RefundConformance.run()  # the tour, the active Hypothesis profile, then coverage

``run()`` first takes a tour (``machines.testing.conformance.tour``): every trigger by every
actor the suite knows, fired once from every state the definition reaches under each class of
contexts, each state reached by a shortest path. Then each random run creates up to
``MAX_ENTITIES`` entities, each under a valuation of the
definition's context, and fires triggers at them: moves the definition allows from where
each entity stands, moves it declares from there whatever their guards say, and anything
at all (unknown triggers and actors included). The definition decides what is legal
(``MachineSpec.step`` with the entity's state, context and actor); the adapter's reads
after each call show what the implementation did; the suite's own record of every move it
saw accepted is what the exposed history is judged against. The rules (``RULES``):

- ``entity-created-as-defined``: creating an entity succeeds, and it starts in the initial
  state (or where it was resumed) with an empty history;
- ``legal-move-accepted``: a move the definition allows is accepted, and leaves the entity
  where the definition says;
- ``illegal-move-refused``: every other move is refused (the call raises);
- ``refusal-changes-nothing``: after a refusal, the state and the history are as they were;
- ``terminal-stays-final``: nothing leaves a terminal state;
- ``history-is-a-legal-chain``: every entity's history is exactly the moves the suite saw
  it make, numbered 1, 2, 3, ..., a legal unbroken chain ending where it reads;
- ``entity-stays-readable``: a part of a read the adapter has read well once (a state, a
  history, an event) reads well ever after (a read that raises or returns garbage then is
  the implementation's bug; before, it is the adapter's shape: ``AdapterContractError``).

A failure is a ``RuleBroken`` whose message starts with the rule's name, then what the
suite saw last, then the shortest run the suite's minimiser found (``Create`` and ``Fire``
steps that ``replay`` replays as they stand; ``machines.testing.conformance.run``). Every
transition the suite saw taken, and every probe it fired, is recorded in the suite class's
``coverage``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from machines.errors import message_of
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.testing.conformance.oracle import (
    RULES,
    Event,
    Exposed,
    Oracle,
    Tracked,
    events_of,
    items_of,
)
from machines.testing.conformance.run import breaks, roll_dice, take_tour
from machines.testing.conformance.steps import Action, Create, Fire, checked_steps
from machines.testing.contract import Adapter, AdapterContractError, check_adapter, chosen_seconds
from machines.testing.coverage import Coverage
from machines.testing.minimise import MINIMISE_SECONDS
from machines.testing.profiles import SUPPRESSED
from machines.testing.verdict import RuleBroken

__all__ = [
    "MAX_ENTITIES",
    "RULES",
    "STRANGER",
    "UNKNOWN_TRIGGER",
    "ConformanceAdapter",
    "ConformanceSuite",
    "Create",
    "Event",
    "Fire",
    "ResumableAdapter",
]

MAX_ENTITIES = 3
"""Entities per run: more than one, so that a move on one that changes another is seen, and
few, so that Hypothesis shrinks a failure to a short run (creating a fresh entity whenever
others finish takes more transitions per run, but makes failures shrink poorly)."""
UNKNOWN_TRIGGER = "teleport"
"""The trigger the suite fires that the definition lacks (``unused``: ``teleport_2`` and so
on when it has one of that name): the implementation must refuse it."""
STRANGER = "stranger"
"""The actor the suite fires as that the definition lacks (``unused``, as for the trigger):
the implementation must refuse every move by it."""


def unused(name: str, taken: Iterable[str]) -> str:
    """``name``, or ``name_2``, ``name_3``, ...: the first that is none of ``taken``. A
    definition of the user's may have a trigger ``teleport`` or an actor ``stranger``, and
    the suite would then probe no unknown one (outsider batch 38, c S2: a service that
    accepted any unknown trigger and took any unknown actor for a known one passed)."""
    names, number, found = set(taken), 1, name
    while found in names:
        number += 1
        found = f"{name}_{number}"
    return found


DETAIL: Mapping[str, Any] = {"note": "fired by the conformance suite"}
"""The detail some moves are fired with (others with None)."""
EVIDENCE = "the conformance suite's stand-in for the evidence this move needs"
"""What ``detail["evidence"]`` holds when the suite fires a trigger a move of which asks
evidence (``evidence:``), from any state: an implementation that refuses such a move
without evidence is safe, and is given some (outsider batch 38, c S4: one was failed for
it), also where the move must be refused (batch 39, c B2: its actor and guard were never
tried with evidence in hand)."""


STATE, HISTORY, EVENT = "state", "history", "event"
_PARTS: Mapping[str, str] = {
    STATE: "a state",
    HISTORY: "a history",
    EVENT: "a history's events",
}
"""The parts of a read, and how a report names one the adapter read well before."""
_Read = TypeVar("_Read")

Entity = TypeVar("Entity")
"""Your handle for one entity: whatever ``create`` returns (an id, a row, an object)."""


class ConformanceAdapter(Adapter, Generic[Entity]):
    """What the suite needs from an implementation of a definition: every method is
    required (a class missing one fails when it is defined, naming it). Names are the
    definition's: states, triggers, actors and context variables as its YAML spells them.
    Subclass ``ConformanceAdapter[YourHandle]`` to type the entity handle."""

    @abc.abstractmethod
    def create(self, context: Mapping[str, str]) -> Entity:
        """Create one new entity under ``context`` (one value for each of the definition's
        context variables) and return your handle for it (an id, a row, an object): the
        suite passes it back to every other method. It must start in the definition's
        initial state with an empty history; raising is a refusal to create it, which
        breaks ``entity-created-as-defined``."""

    @abc.abstractmethod
    def fire(
        self,
        entity: Entity,
        trigger: str,
        actor: str,
        context: Mapping[str, str],
        detail: Mapping[str, Any] | None,
    ) -> None:
        """Ask your implementation to make the move ``trigger`` as ``actor``. Return (any
        value, which is ignored: the suite reads the state) if it made the move; raise any
        ``Exception`` if it refused it. ``context`` is the one the entity was created
        under, for an implementation that takes it per call; ``detail`` (a JSON object or
        None) is for one that records why a move was made; for a trigger a move of which
        asks evidence (``evidence:``) it holds ``"evidence"``, a text that stands in for it,
        whatever the state and actor, whether the move is allowed or not. The suite fires unknown
        triggers and actors too: refuse them."""

    @abc.abstractmethod
    def state(self, entity: Entity) -> str:
        """The entity's current state, as your implementation stores it (a ``str``)."""

    @abc.abstractmethod
    def history(self, entity: Entity) -> Sequence[object]:
        """The entity's recorded moves, oldest first: a sequence (list or tuple) of events,
        each an ``Event``, a mapping or an object with ``seq`` (an int: 1, 2, 3, ...),
        ``source``, ``trigger``, ``dest`` and ``actor`` (``str``); an optional ``context``
        (a mapping), when your events record one, must be the entity's. Anything else is
        refused with ``AdapterContractError`` naming the event and the field."""


class ResumableAdapter(ConformanceAdapter[Entity], abstract=True):
    """An adapter that can also start an entity mid-life (as a store hands back a row in
    any state): the suite then starts entities in every state, not only the initial one,
    and so reaches every state's moves sooner."""

    @abc.abstractmethod
    def resume(self, state: str, context: Mapping[str, str]) -> Entity:
        """Create one entity already in ``state`` under ``context``, with an empty
        history, and return your handle for it."""


class ConformanceSuite(RuleBasedStateMachine):
    """Subclass it: set ``spec`` to your definition and return your adapter from
    ``make_adapter``; then call ``run()`` in a test (or collect ``TestCase``).

    ``also_try``: another definition (the one your implementation runs on, when it runs on
    its own copy) whose triggers, actors and moves the suite also tries; it never judges by
    it. ``coverage``: where the moves the suite saw are counted, one ``Coverage`` per suite
    class unless the class sets one (share one between classes to count them together).
    ``tour_first``: take the tour before the random runs (default True). ``minimise_seconds``:
    how long ``run()`` spends minimising a report (0: the run as found, cut to the broken
    entity's steps when those alone break the rule). ``failed``: the steps of the last run
    that broke a rule, and what it broke (what the minimiser starts from).
    """

    spec: ClassVar[MachineSpec]
    also_try: ClassVar[MachineSpec | None] = None
    coverage: ClassVar[Coverage]
    tour_first: ClassVar[bool] = True
    minimise_seconds: ClassVar[float] = MINIMISE_SECONDS
    failed: ClassVar[tuple[tuple[Action, ...], RuleBroken] | None] = None
    _actions: ClassVar[dict[object, st.SearchStrategy[Action]]] = {}

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "coverage" not in vars(cls):
            cls.coverage = Coverage()
        cls._actions = {}
        if abstract:
            return  # a partial base the user declares abstract
        spec, also = getattr(cls, "spec", None), cls.also_try
        if not isinstance(spec, MachineSpec):
            raise AdapterContractError(
                f"suite class {cls.__qualname__} sets spec to {describe(spec)}, not a "
                "MachineSpec: set spec = machines.load(...), the definition the suite "
                "judges by (or declare the class abstract=True)"
            )
        if also is not None and not isinstance(also, MachineSpec):
            raise AdapterContractError(
                f"suite class {cls.__qualname__} sets also_try to {describe(also)}, not a "
                "MachineSpec or None"
            )
        if not isinstance(cls.tour_first, bool):
            raise AdapterContractError(
                f"suite class {cls.__qualname__} sets tour_first to "
                f"{describe(cls.tour_first)}, not True or False"
            )
        cls.minimise_seconds = chosen_seconds(
            cls, "minimise_seconds", cls.minimise_seconds, zero=True
        )
        if cls.make_adapter is ConformanceSuite.make_adapter:
            raise AdapterContractError(
                f"suite class {cls.__qualname__} does not implement make_adapter: return "
                "your ConformanceAdapter, a fresh implementation for each run"
            )

    def make_adapter(self) -> ConformanceAdapter[Any]:
        """A fresh adapter (over a fresh implementation) for one run: required."""
        raise NotImplementedError  # unreachable: __init_subclass__ requires an override

    @classmethod
    def run(cls, settings: Settings | None = None, *, require_coverage: bool = True) -> None:
        """Take the tour (with ``tour_first``), then the random runs under the active
        Hypothesis profile (or ``settings``), without Hypothesis' shrinking: a broken rule
        is reported as the shortest run the suite's own minimiser finds within
        ``minimise_seconds`` (``machines.testing.conformance.run``). Then, with
        ``require_coverage``, raise ``CoverageGap`` if some transition of ``spec`` was
        never taken (across every run of this class so far), or, after a tour, some probe
        was never fired."""
        if cls.tour_first:
            take_tour(cls)
        roll_dice(
            cls, settings if settings is not None else Settings(suppress_health_check=SUPPRESSED)
        )
        if require_coverage:
            cls.coverage.require(cls.spec)
            cls.coverage.require_probes(cls.spec, cls.also_try)

    @classmethod
    def replay(cls, steps: Sequence[Action]) -> None:
        """Run ``steps`` (``Create`` and ``Fire``, as a report lists them) on a fresh
        implementation, judging every entity after every step: raises the ``RuleBroken``
        they break, or whatever else the implementation raised, or returns. A step the
        definition cannot have made is ``InvalidArgument``."""
        found = breaks(cls, checked_steps(steps, cls.spec), strict=True)
        if found is not None:
            raise found

    def __init__(self) -> None:
        super().__init__()
        adapter = self.make_adapter()
        check_adapter(adapter, ConformanceAdapter)
        self.adapter = adapter
        self.trace: list[Action] = []
        self._shaped: set[str] = set()  # the parts of a read the adapter has read well
        self.oracle = Oracle(self.spec, self.coverage)
        probes = [self.spec] + ([self.also_try] if self.also_try is not None else [])
        self._contexts = [dict(v) for v in self.spec.valuations()]
        self._starts: list[str | None] = [None]  # None: the initial state
        if isinstance(adapter, ResumableAdapter):
            self._starts += [s for s in self.spec.states if s != self.spec.initial]
        known = {t for s in probes for t in s.triggers}
        people = {a for s in probes for a in s.actors}
        self.triggers = sorted(known | {unused(UNKNOWN_TRIGGER, known)})
        self.actors = sorted(people | {unused(STRANGER, people)})
        self._proved = {t.trigger for s in probes for t in s.transitions if t.evidence}
        """Triggers a move of which asks evidence: fired with it from every state, by every
        actor, so that a service that checks the evidence first is tried on its source,
        actor and guard checks too (outsider batches 39, c B2, and 40, c B1)."""
        self._declared: dict[str, list[str]] = {}
        for t in (t for s in probes for t in s.transitions):
            triggers = self._declared.setdefault(t.source, [])
            triggers.extend([t.trigger] if t.trigger not in triggers else [])

    # -- what a step can do ---------------------------------------------------------------

    def actions(self) -> st.SearchStrategy[Action]:
        """What the next step may do: create one more entity (up to ``MAX_ENTITIES``), or
        fire at one that is not finished (a move the definition allows, three times in five; a
        trigger either definition declares from its state, by any actor: a wrong actor,
        a guard its context fails), or fire anything at any entity. One strategy per
        arrangement of the entities' states, built once per suite class: building and
        validating one costs more than the step it draws, and one flat strategy per step
        is what Hypothesis shrinks best."""
        entities = self.oracle.entities
        key = tuple((e.state, tuple(e.context.items())) for e in entities)
        cache = type(self)._actions
        if key not in cache:
            cache[key] = self._build_actions(entities)
        return cache[key]

    def _build_actions(self, entities: list[Tracked]) -> st.SearchStrategy[Action]:
        live = [e for e in entities if not self.spec.is_terminal(e.state)]
        create = st.builds(
            Create, context=st.sampled_from(self._contexts), state=st.sampled_from(self._starts)
        )
        choices: list[st.SearchStrategy[Action]] = []
        legal = [
            Fire(e.number, t.trigger, a, detail)
            for e in live
            for t in self.spec.transitions
            if t.source == e.state and t.admits(e.context)
            for a in t.actors
            for detail in (None, DETAIL)
        ]
        near = [
            Fire(e.number, trigger, actor, detail)
            for e in live
            for trigger in self._declared.get(e.state, [])
            for actor in self.actors
            for detail in (None, DETAIL)
        ]
        choices += [st.sampled_from(legal)] * 3 if legal else []
        choices += [st.sampled_from(near)] if near else []
        if entities:
            choices.append(
                st.builds(
                    Fire,
                    entity=st.integers(1, len(entities)),
                    trigger=st.sampled_from(self.triggers),
                    actor=st.sampled_from(self.actors),
                    detail=st.sampled_from([None, DETAIL]),
                )
            )
        if len(entities) < MAX_ENTITIES:
            choices.append(create)
        return st.one_of(choices)

    @rule(action=st.runner().flatmap(lambda suite: suite.actions()))
    def step(self, action: Action) -> None:
        """Every step is one rule whose argument says what happens, so that Hypothesis can
        delete any step that does not matter from a counterexample."""
        self.trace.append(action)
        try:
            if isinstance(action, Create):
                self._create(action)
            else:
                self._fire(action)
        except RuleBroken as broken:
            type(self).failed = (tuple(self.trace), broken)
            raise

    @invariant()
    def histories_are_legal_chains(self) -> None:
        """After every step, every entity (not only the one just moved) reads as the moves
        the suite saw it make, with the history those moves are."""
        for tracked in self.oracle.entities:
            self.check_entity(tracked.number)

    def check_entity(self, number: int) -> None:
        """Entity ``number`` reads as the moves the suite saw it make."""
        tracked = self.oracle.entities[number - 1]
        try:
            self.oracle.history(tracked, *self._read(tracked))
        except RuleBroken as broken:
            type(self).failed = (tuple(self.trace), broken)
            raise

    # -- the adapter's calls --------------------------------------------------------------

    def _create(self, action: Create) -> None:
        start = self.spec.initial if action.state is None else action.state
        context = dict(action.context)
        adapter = self.adapter
        if action.state is not None and not isinstance(adapter, ResumableAdapter):
            raise AdapterContractError(
                f"{type(adapter).__qualname__} cannot resume an entity in '{start}': it is "
                "not a ResumableAdapter"
            )
        try:
            if isinstance(adapter, ResumableAdapter) and action.state is not None:
                self.coverage.record_resumed(self.spec.name)
                handle = adapter.resume(start, dict(context))
            else:
                handle = adapter.create(dict(context))
        except Exception as error:  # user code: any exception is a refusal
            self.oracle.refused_creation(context, start, error)
            return
        tracked = self.oracle.created(handle, context, start)
        self.oracle.created_as_defined(tracked, *self._read(tracked))

    def _fire(self, action: Fire) -> None:
        tracked = self.oracle.entities[action.entity - 1]
        trigger, actor = action.trigger, action.actor
        expected = self.oracle.expect(tracked, trigger, actor)
        detail = None if action.detail is None else dict(action.detail)
        if trigger in self._proved:
            detail = {**(detail or {}), "evidence": EVIDENCE}
        try:
            self.adapter.fire(tracked.handle, trigger, actor, dict(tracked.context), detail)
        except Exception as error:  # user code: any exception is a refusal
            self.oracle.refused(tracked, trigger, actor, expected, error)
            self.oracle.unchanged(tracked, *self._read(tracked))
            return
        self.oracle.returned(tracked, trigger, actor)
        now, _ = self._read(tracked)
        self.oracle.accepted(tracked, trigger, actor, expected, now)

    def _read(self, tracked: Tracked) -> tuple[str, Exposed]:
        """The entity's state and history as the adapter reads them, each checked for
        shape. A part of a read (a state, a history, an event) that fails before the
        adapter ever read that part well is the adapter's shape (``AdapterContractError``);
        after, a step broke the implementation (``entity-stays-readable``, reported with
        the steps)."""
        name = type(self.adapter).__qualname__
        state = self._proven(STATE, tracked, lambda: self._state_of(tracked, name))
        where = f"{name}.history({tracked})"
        items = self._proven(HISTORY, tracked, lambda: self._history_of(tracked, where))
        # an empty history proves no event's shape
        exposed = self._proven(EVENT, tracked, lambda: events_of(items, where), bool(items))
        return state, exposed

    def _proven(
        self, part: str, tracked: Tracked, read: Callable[[], _Read], proves: bool = True
    ) -> _Read:
        try:
            value = read()
        except AdapterContractError as error:
            if part in self._shaped:
                raise self.oracle.unreadable(tracked, error, _PARTS[part]) from error
            raise
        if proves:
            self._shaped.add(part)
        return value

    def _state_of(self, tracked: Tracked, name: str) -> str:
        try:
            state = self.adapter.state(tracked.handle)
        except Exception as error:  # user code
            raise AdapterContractError(
                f"{name}.state({tracked}) raised {type(error).__name__}: "
                f"{message_of(error, 200)}; it must return the entity's state"
            ) from error
        if not isinstance(state, str):
            raise AdapterContractError(
                f"{name}.state({tracked}) returned {type(state).__name__} {describe(state)}, "
                "not a str: return the "
                "state's name as the definition spells it"
            )
        return str.__str__(state)  # a StrEnum (machines export --format python) is its text

    def _history_of(self, tracked: Tracked, where: str) -> list[object]:
        try:
            history = self.adapter.history(tracked.handle)
        except Exception as error:  # user code
            raise AdapterContractError(
                f"{where} raised {type(error).__name__}: {message_of(error, 200)}; it must "
                "return the entity's recorded moves"
            ) from error
        return items_of(history, where)
