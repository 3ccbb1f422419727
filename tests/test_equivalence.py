"""``spec.step``, ``spec.stepper`` and the object runtime take the same decisions.

Hypothesis draws (machine, state, trigger, actor, context) tuples, legal and illegal alike
(unknown names, excluded and unknown context values included); all three paths must
agree on the destination, or raise the same error type with the same message, and the
object must be left unchanged when it refuses. ``spec.step`` answers the common cases from
precomputed tables: those answers, and the errors of everything else, must be the
reference decision's (``Router.decide``) on every name, every pair and on garbage.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import machines
from machines.errors import MachinesError
from machines.spec import MachineSpec
from machines.testing.profiles import scaled
from tests.garbage import garbage

SPECS = {name: machines.load(name) for name in ("effect", "outcome", "node", "request")}


def outcome(call: Any) -> tuple[str, str]:
    try:
        return ("dest", call())
    except MachinesError as exc:
        return (type(exc).__name__, str(exc))


@st.composite
def moves(draw: st.DrawFn) -> tuple[MachineSpec, str, str, str, dict[str, str]]:
    spec = SPECS[draw(st.sampled_from(sorted(SPECS)))]
    state = draw(st.sampled_from(list(spec.states)))
    triggers = sorted({t.trigger for t in spec.transitions})
    trigger = draw(st.one_of(st.sampled_from(triggers), st.just("teleport")))
    actor = draw(st.one_of(st.sampled_from(list(spec.actors)), st.just("intruder")))
    context: dict[str, str] = {}
    for var, declared in spec.context.items():
        values = [*declared.values, *declared.excluded, "bogus"]
        context[var] = draw(st.sampled_from(values))
    if draw(st.integers(0, 9)) == 0:
        context["mystery"] = "x"
    if spec.context and draw(st.integers(0, 4)) == 0:
        context.pop(next(iter(spec.context)), None)  # a guard variable left out
    return spec, state, trigger, actor, context


@settings(scaled(1500))
@given(move=moves())
def test_step_stepper_and_object_agree(
    move: tuple[MachineSpec, str, str, str, dict[str, str]],
) -> None:
    spec, state, trigger, actor, context = move
    by_step = outcome(lambda: spec.step(state, trigger, actor=actor, **context))

    try:
        stepper = spec.stepper(**context)
    except MachinesError as exc:  # a bad context is refused when binding, with the same text
        assert by_step == (type(exc).__name__, str(exc))
        return
    assert outcome(lambda: stepper(state, trigger, actor)) == by_step

    entity = spec.machine(state=state, **context)
    by_object = outcome(lambda: entity.trigger(trigger, actor=actor))
    assert by_object == by_step
    if by_step[0] == "dest":
        assert entity.state == by_step[1]
        assert [(e.source, e.dest, e.trigger, e.actor) for e in entity.history] == [
            (state, by_step[1], trigger, actor)
        ]
    else:
        assert entity.state == state and len(entity.history) == 0


# -- spec.step's precomputed tables against the reference decision -------------------------


def _agree(spec: MachineSpec, state: Any, trigger: Any, actor: Any, context: Any) -> None:
    by_step = outcome(lambda: spec.step(state, trigger, actor=actor, **context))
    assert by_step == outcome(lambda: spec._router.decide(state, trigger, actor, dict(context)))


def test_step_tables_agree_with_the_reference_on_every_name_and_pair() -> None:
    """``spec.step`` answers no context and one-variable contexts from tables; every such
    call, legal or not, gets the reference's destination or its very error."""
    for spec in SPECS.values():
        states = [*spec.states, "nowhere"]
        triggers = [*sorted(spec.triggers), "teleport"]
        actors = [*spec.actors, "intruder"]
        pairs: list[dict[str, str]] = [{}, {"mystery": "x"}]
        for var, declared in spec.context.items():
            pairs += [{var: v} for v in (*declared.values, *declared.excluded, "bogus")]
        for state in states:
            for trigger in triggers:
                for actor in actors:
                    for context in pairs:
                        _agree(spec, state, trigger, actor, context)


def _garbage_moves(spec: MachineSpec) -> st.SearchStrategy[tuple[Any, ...]]:
    real = sorted({*spec.states, *spec.triggers, *spec.actors})
    values = sorted(v for var in spec.context.values() for v in (*var.values, *var.excluded))
    name = st.sampled_from(real) | garbage(extra=tuple(real))
    context = st.dictionaries(
        st.sampled_from([*spec.context, "mystery"]),
        st.sampled_from(values or ["x"]) | garbage(extra=tuple(values)),
        max_size=2,
    )
    return st.tuples(st.just(spec), name, name, name, context)


GARBAGE_MOVES = st.one_of(*(_garbage_moves(SPECS[name]) for name in sorted(SPECS)))


@settings(scaled(1500))
@given(move=GARBAGE_MOVES)
def test_step_tables_agree_with_the_reference_on_garbage(move: tuple[Any, ...]) -> None:
    _agree(*move)
