"""A Hypothesis state machine generated from any ``MachineSpec``, judged by what it observes.

One entity per run, created by the runtime under test (``spec.machine``) in a state and
under a context valuation drawn at the start (the initial state first when shrinking).
Each step fires a trigger (mostly a known one, sometimes an unknown one) as an actor
(sometimes a stranger), with the bound context or an override.

The oracle is not the spec the runtime runs on, which may be a broken copy: it is the
*judging* definition, the bundled one of the same name when there is one (the published
promise, ``machines.load(name)``), and the walker's own record of every answer the
runtime gave. After every step it checks, naming the rule a failure breaks:

- ``runtime-agrees-with-the-definition``: the runtime moved where the judging definition
  moves, or refused with the same type of error;
- ``refusal-changes-nothing``: after a refusal, the state and the history are as they were;
- ``terminal-stays-final``: nothing ever leaves a terminal state;
- ``history-is-a-legal-chain``: the history the runtime exposes is exactly the moves the
  walker saw, numbered 1, 2, 3, ..., an unbroken chain from the start state in which each
  event is a move the judging definition allows (with the context it records).

Failures print as a replayable list of steps, as Hypothesis does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from machines.errors import MachinesError, message_of
from machines.spec import MachineSpec
from machines.spec.loader import load
from machines.spec.registry import judged_by
from machines.store import BUNDLED
from machines.testing.coverage import Coverage
from machines.testing.verdict import Move, RuleBroken, chain_break

UNKNOWN_TRIGGER = "teleport"
STRANGER = "stranger"

AGREES = "runtime-agrees-with-the-definition"
REFUSAL = "refusal-changes-nothing"
TERMINAL = "terminal-stays-final"
CHAIN = "history-is-a-legal-chain"

RULES: Mapping[str, str] = judged_by("walker")
"""What each of the walker's rules promises; a failure's message starts with its name."""

Seen = tuple[Move, Mapping[str, str]]
"""A move the walker saw, with the context it was made under."""


def judge_of(spec: MachineSpec) -> MachineSpec:
    """The definition a walk of ``spec`` is judged by: the bundled one of its name (a
    runtime on a copy of a bundled definition must keep the published promise), else
    ``spec`` itself."""
    return load(spec.name) if spec.name in BUNDLED else spec


def _answer(call: Any) -> tuple[str, str]:
    """What a step answered: ("moved", dest) or ("refused", the error's type). The
    message is not compared: a copy may word a reason differently and keep the promise."""
    try:
        return "moved", call()
    except MachinesError as exc:
        return "refused", type(exc).__name__


def _show(seen: Sequence[Seen]) -> str:
    return "[" + "; ".join(f"{move} with {dict(context)}" for move, context in seen) + "]"


def spec_walker(
    spec: MachineSpec,
    coverage: Coverage | None = None,
    *,
    judge: MachineSpec | None = None,
) -> type[RuleBasedStateMachine]:
    """A ``RuleBasedStateMachine`` class that walks the runtime ``spec.machine`` and judges
    it by ``judge`` (default: ``judge_of(spec)``; pass ``judge=spec`` to judge a definition
    of your own that reuses a bundled machine's name). Run it with
    ``run_state_machine_as_test`` or assign ``.TestCase`` to a module-level name."""
    judging = judge_of(spec) if judge is None else judge
    triggers = sorted(judging.triggers | spec.triggers)
    actors = sorted({*judging.actors, *spec.actors})
    contexts = [dict(valuation) for valuation in judging.valuations()]
    states = list(judging.states)
    declared: dict[str, list[tuple[str, str]]] = {}
    for t in (*judging.transitions, *spec.transitions):
        moves = declared.setdefault(t.source, [])
        moves.extend((t.trigger, a) for a in t.actors if (t.trigger, a) not in moves)

    class SpecWalker(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.context: dict[str, str] = {}
            self.entity: Any = None
            self.start = judging.initial
            self.state = judging.initial
            self.seen: list[Seen] = []

        @initialize(context=st.sampled_from(contexts), start=st.sampled_from(states))
        def begin(self, context: dict[str, str], start: str) -> None:
            """An entity as a store hands it back: in any state (an ORM row mid-life)."""
            self.context, self.start, self.state = context, start, start
            try:
                self.entity = spec.machine(state=start, **context)
            except MachinesError as exc:
                raise RuleBroken(
                    AGREES,
                    f"the runtime refuses an entity of '{judging.name}' in "
                    f"'{start}' with {context}: {type(exc).__name__}: {message_of(exc)}",
                ) from None

        @rule(data=st.data())
        def fire_a_legal_move(self, data: st.DataObject) -> None:
            """Walk the judging graph: one of the moves it allows from here, if any."""
            legal = [
                (t.trigger, a)
                for t in judging.transitions
                if t.source == self.state and t.admits(self.context)
                for a in t.actors
            ]
            if legal:
                trigger, actor = data.draw(st.sampled_from(legal), label="legal move")
                self.fire(trigger, actor, None)

        @rule(data=st.data())
        def fire_a_declared_move(self, data: st.DataObject) -> None:
            """A move either definition declares from here, whatever its guard says: where
            a runtime on a broken copy (an added edge, a dropped guard) parts ways."""
            moves = declared.get(self.state)
            if moves:
                trigger, actor = data.draw(st.sampled_from(moves), label="declared move")
                self.fire(trigger, actor, None)

        @rule(
            trigger=st.one_of(st.sampled_from(triggers), st.just(UNKNOWN_TRIGGER)),
            actor=st.one_of(st.sampled_from(actors), st.just(STRANGER)),
            override=st.one_of(st.none(), st.sampled_from(contexts)),
        )
        def fire(self, trigger: str, actor: str, override: dict[str, str] | None) -> None:
            """Anything at all: legal, refused, unknown names, another context."""
            context = override if override is not None else self.context
            before, history = self.state, tuple(self.entity.history)
            expected = _answer(lambda: judging.step(before, trigger, actor=actor, **context))
            extra = override if override is not None else {}
            got = _answer(lambda: self.entity.trigger(trigger, actor=actor, **extra))
            where = f"'{before}' --{trigger}--> as {actor} with {context}"
            if got[0] == "moved" and judging.is_terminal(before):
                raise RuleBroken(TERMINAL, f"{where} left terminal '{before}' for {got[1]}")
            if got != expected:
                raise RuleBroken(AGREES, f"{where}: runtime {got}, definition {expected}")
            if got[0] != "moved":
                if (self.entity.state, tuple(self.entity.history)) != (before, history):
                    raise RuleBroken(REFUSAL, f"{where} was refused, yet changed")
                return
            self.seen.append((Move(before, trigger, got[1], actor), dict(context)))
            self.state = got[1]
            if coverage is not None:
                coverage.record(judging.name, before, trigger, got[1])

        @invariant()
        def history_is_a_legal_chain(self) -> None:
            if self.entity is None:
                return
            events = list(self.entity.history)
            recorded = [
                (Move(e.source, e.trigger, e.dest, e.actor), dict(e.context)) for e in events
            ]
            if recorded != self.seen:
                raise RuleBroken(
                    CHAIN, f"history {_show(recorded)} != moves seen {_show(self.seen)}"
                )
            seqs = [e.seq for e in events]
            if seqs != list(range(1, len(events) + 1)):
                raise RuleBroken(CHAIN, f"the history is numbered {seqs}")
            moves = [move for move, _ in recorded]
            found = chain_break(
                moves, judging, [c for _, c in recorded], start=self.start, terminal=True
            )
            if found is not None:
                _, move, at, how, legal, refusal = found
                if how == "disconnected":
                    raise RuleBroken(CHAIN, f"{move} does not start at '{at}'")
                if how == "terminal":
                    raise RuleBroken(TERMINAL, f"{move} left '{at}'")
                allowed = (
                    ("moved", legal) if refusal is None else ("refused", type(refusal).__name__)
                )
                raise RuleBroken(CHAIN, f"{move} is not legal: {allowed}")
            state = moves[-1].dest if moves else self.start
            if not self.entity.state == state == self.state:
                raise RuleBroken(
                    CHAIN, f"the entity is in '{self.entity.state}', its history ends in '{state}'"
                )

    SpecWalker.__name__ = SpecWalker.__qualname__ = f"{spec.name.title()}Walker"
    return SpecWalker
