"""``spec.step`` (and its bound form) against a bare ``dict[(state, trigger)] -> dest``.

The workload is every transition of the four bundled machines, each move with a full
context valuation its guard admits, called the way application code calls it: one loop
per machine, context as a literal keyword (``tier=...``). The baseline is what code without
this package does: one dict per machine, ``table[(state, trigger)]``, no actor, no guard,
no error handling.
"""

from __future__ import annotations

from collections import defaultdict
from types import MappingProxyType

from benchmarks.harness import Ratio, measure_ratio
from benchmarks.workloads import Move, every_transition
from machines.runtime.history import History

REPEAT = 80  # the move list repeated, so one timed call does ~5k moves


def run() -> list[Ratio]:
    by_machine: dict[str, list[Move]] = defaultdict(list)
    for move in every_transition() * REPEAT:
        by_machine[move.machine.name].append(move)
    n = sum(len(moves) for moves in by_machine.values())

    def keys(name: str) -> list[tuple[str, ...]]:
        return [(m.state, m.trigger, m.actor, *m.context.values()) for m in by_machine[name]]

    eff, out, nod, req = keys("effect"), keys("outcome"), keys("node"), keys("request")
    specs = {name: moves[0].machine for name, moves in by_machine.items()}
    e_step, o_step = specs["effect"].step, specs["outcome"].step
    n_step, r_step = specs["node"].step, specs["request"].step
    tables = {
        name: {(m.state, m.trigger): m.dest for m in moves} for name, moves in by_machine.items()
    }
    e_tab, o_tab, n_tab, r_tab = (tables[k] for k in ("effect", "outcome", "node", "request"))
    steppers = {}
    for name, moves in by_machine.items():
        for m in moves:
            key = (name, *m.context.values())
            if key not in steppers:
                steppers[key] = m.machine.stepper(**m.context)
    bound = [
        (steppers[(name, *m.context.values())], m.state, m.trigger, m.actor)
        for name, moves in by_machine.items()
        for m in moves
    ]
    with_dicts = [
        (m.machine.step, m.state, m.trigger, m.actor, m.context)
        for moves in by_machine.values()
        for m in moves
    ]

    def baseline() -> None:
        for s, t, _a, _v in eff:
            e_tab[(s, t)]
        for s, t, _a in out:
            o_tab[(s, t)]
        for s, t, _a, _v in nod:
            n_tab[(s, t)]
        for s, t, _a, _v in req:
            r_tab[(s, t)]

    def step_keywords() -> None:
        for s, t, a, v in eff:
            e_step(s, t, actor=a, tier=v)
        for s, t, a in out:
            o_step(s, t, actor=a)
        for s, t, a, v in nod:
            n_step(s, t, actor=a, kind=v)
        for s, t, a, v in req:
            r_step(s, t, actor=a, side_effects=v)

    def step_context_dicts() -> None:
        for step, s, t, a, context in with_dicts:
            step(s, t, actor=a, **context)

    def stepper() -> None:
        for step, s, t, a in bound:
            step(s, t, a)

    proxies = {
        (var, value): MappingProxyType({var: value})
        for var in ("tier", "kind", "side_effects")
        for value in ("compensable", "irreversible", "action", "observe", "none", "started")
    }

    def step_keywords_and_record() -> None:
        # the caller keeps each entity's context as an immutable mapping, as a store would
        record = History("m", "e").record
        for s, t, a, v in eff:
            record(s, e_step(s, t, actor=a, tier=v), t, a, proxies[("tier", v)])
        for s, t, a in out:
            record(s, o_step(s, t, actor=a), t, a)
        for s, t, a, v in nod:
            record(s, n_step(s, t, actor=a, kind=v), t, a, proxies[("kind", v)])
        for s, t, a, v in req:
            record(s, r_step(s, t, actor=a, side_effects=v), t, a, proxies[("side_effects", v)])

    def stepper_and_record() -> None:
        record = History("m", "e").record
        for step, s, t, a in bound:
            record(s, step(s, t, a), t, a, step.context)

    base = ("dict lookup", baseline)
    return [
        measure_ratio(
            "step, context as keywords",
            ("spec.step", step_keywords),
            base,
            units=n,
            unit="move",
            goal=4.0,
        ),
        measure_ratio(
            "step, context from a dict (**ctx)",
            ("spec.step", step_context_dicts),
            base,
            units=n,
            unit="move",
            goal=4.0,
        ),
        measure_ratio(
            "step, context bound once",
            ("spec.stepper(...)", stepper),
            base,
            units=n,
            unit="move",
            goal=4.0,
        ),
        measure_ratio(
            "step + history record",
            ("spec.step + History.record", step_keywords_and_record),
            base,
            units=n,
            unit="move",
            goal=6.0,
        ),
        measure_ratio(
            "bound step + history record",
            ("spec.stepper + History.record", stepper_and_record),
            base,
            units=n,
            unit="move",
            goal=6.0,
        ),
    ]
