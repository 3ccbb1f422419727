"""A Hypothesis state machine generated from any ``MachineSpec``.

One entity per run, in a state and under a context valuation drawn at the start (the
initial state first when shrinking). Each step fires a
trigger (mostly the spec's own, sometimes an unknown one) as an actor (sometimes a
stranger), with the bound context or an override; the oracle is ``spec.step`` (the
compiled table), and the entity (``spec.machine``, on ``transitions``) must agree: move
to the same state, or refuse with the same error and change nothing. Failures print as
a replayable list of steps, as Hypothesis does.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from machines.errors import MachinesError
from machines.spec import MachineSpec
from machines.testing.coverage import Coverage

UNKNOWN_TRIGGER = "teleport"
STRANGER = "stranger"


def valuations(spec: MachineSpec) -> list[dict[str, str]]:
    names = list(spec.context)
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(spec.context[n].values for n in names))
    ]


def spec_walker(
    spec: MachineSpec,
    coverage: Coverage | None = None,
) -> type[RuleBasedStateMachine]:
    """A ``RuleBasedStateMachine`` class for ``spec``; run it with ``run_state_machine_as_test``
    or assign ``.TestCase`` to a module-level name for pytest."""
    triggers = sorted(spec.triggers)
    actors = list(spec.actors)
    contexts = valuations(spec)
    states = list(spec.states)

    class SpecWalker(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.context: dict[str, str] = {}
            self.entity: Any = None
            self.moves: list[tuple[str, str, str, str]] = []
            self.start = spec.initial

        @initialize(context=st.sampled_from(contexts), start=st.sampled_from(states))
        def begin(self, context: dict[str, str], start: str) -> None:
            """An entity as a store hands it back: in any state (an ORM row mid-life)."""
            self.context = context
            self.start = start
            self.entity = spec.machine(state=start, **context)

        @rule(data=st.data())
        def fire_a_legal_move(self, data: st.DataObject) -> None:
            """Walk the graph: one of the moves the spec allows from here, if any."""
            legal = [
                (t.trigger, a)
                for t in spec.transitions
                if t.source == self.entity.state and t.admits(self.context)
                for a in t.actors
            ]
            if legal:
                trigger, actor = data.draw(st.sampled_from(legal), label="legal move")
                self.fire(trigger, actor, None)

        @rule(
            trigger=st.one_of(st.sampled_from(triggers), st.just(UNKNOWN_TRIGGER)),
            actor=st.one_of(st.sampled_from(actors), st.just(STRANGER)),
            override=st.one_of(st.none(), st.sampled_from(contexts)),
        )
        def fire(self, trigger: str, actor: str, override: dict[str, str] | None) -> None:
            """Anything at all: legal, refused, unknown names, another context."""
            context = override if override is not None else self.context
            before, events = self.entity.state, len(self.entity.history)
            try:
                expected: tuple[str, str] = (
                    "moved",
                    spec.step(before, trigger, actor=actor, **context),
                )
            except MachinesError as exc:
                expected = (type(exc).__name__, str(exc))
            try:
                extra = override if override is not None else {}
                got: tuple[str, str] = ("moved", self.entity.trigger(trigger, actor=actor, **extra))
            except MachinesError as exc:
                got = (type(exc).__name__, str(exc))
            assert got == expected, f"object runtime {got} != spec.step {expected}"
            if got[0] == "moved":
                self.moves.append((before, trigger, actor, got[1]))
                if coverage is not None:
                    coverage.record(spec.name, before, trigger, got[1])
            else:
                assert self.entity.state == before and len(self.entity.history) == events

        @invariant()
        def history_is_the_moves(self) -> None:
            if self.entity is None:
                return
            recorded = [(e.source, e.trigger, e.actor, e.dest) for e in self.entity.history]
            assert recorded == self.moves
            assert [e.seq for e in self.entity.history] == list(range(1, len(self.moves) + 1))
            state = self.start
            for source, _, _, dest in self.moves:
                assert source == state and not spec.states[source].terminal
                state = dest
            assert state == self.entity.state

    SpecWalker.__name__ = SpecWalker.__qualname__ = f"{spec.name.title()}Walker"
    return SpecWalker
