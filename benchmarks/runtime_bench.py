"""The object runtime against ``transitions`` used by hand, and entity creation at scale.

- trigger: one entity walks a loop of moves; the baseline is a ``transitions.Machine`` built
  by hand for the same states and edges (one model, ``auto_transitions=False``), firing the
  same triggers through its model methods. Ours adds the actor check, guards, the history
  event and a lock: the goal is that those cost little next to ``transitions`` itself.
- creation: the cost per entity when creating 100,000 entities against creating 1,000
  (linear means a ratio near 1). Memory per entity is measured with ``tracemalloc`` and
  printed beside the table.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

from transitions import Machine

import machines
from benchmarks.harness import Ratio, measure_ratio

# effect, Compensable: pending -execute-> executing -fail-> pending, over and over
LOOP = [("execute", "proxy"), ("fail", "proxy")]
MOVES = 2_000


class _Model:
    pass


def _plain_machine(spec: machines.MachineSpec, model: object | None) -> Machine:
    """What a ``transitions`` user writes by hand for the same states and edges."""
    return Machine(
        model=model,
        states=list(spec.states),
        transitions=[
            {"trigger": t.trigger, "source": t.source, "dest": t.dest} for t in spec.transitions
        ],
        initial=spec.initial,
        auto_transitions=False,
    )


def _hand_built(spec: machines.MachineSpec) -> Any:
    model = _Model()
    _plain_machine(spec, model)
    return model


def trigger_ratio() -> Ratio:
    spec = machines.load("effect")
    walk = LOOP * (MOVES // len(LOOP))

    def ours() -> None:
        entity = spec.machine(tier="compensable")
        fire = entity.trigger
        for trigger, actor in walk:
            fire(trigger, actor=actor)

    def by_hand() -> None:
        model = _hand_built(spec)
        for trigger, _actor in walk:
            getattr(model, trigger)()

    return measure_ratio(
        "object runtime trigger",
        ("EntityMachine.trigger", ours),
        ("transitions.Machine by hand", by_hand),
        units=len(walk),
        unit="move",
        goal=1.2,
    )


def _create(spec: machines.MachineSpec, count: int) -> float:
    gc.collect()
    start = time.perf_counter()
    entities = [spec.machine(tier="compensable", entity_id=str(i)) for i in range(count)]
    elapsed = time.perf_counter() - start
    assert len(entities) == count
    return elapsed / count


def creation_ratio(small: int = 1_000, large: int = 100_000, rounds: int = 5) -> Ratio:
    spec = machines.load("effect")
    spec.machine(tier="compensable")  # build the shared template once
    ratios, smalls, larges = [], [], []
    for _ in range(rounds):
        s = min(_create(spec, small) for _ in range(5))
        big = _create(spec, large)
        ratios.append(big / s)
        smalls.append(s)
        larges.append(big)
    ratios.sort()
    return Ratio(
        name=f"entity creation, {large:,} vs {small:,} entities",
        candidate=f"per entity at {large:,}",
        baseline=f"per entity at {small:,}",
        ratio=ratios[len(ratios) // 2],
        goal=1.3,
        candidate_ns=sorted(larges)[rounds // 2] * 1e9,
        baseline_ns=sorted(smalls)[rounds // 2] * 1e9,
        unit="entity",
        rounds=rounds,
    )


def add_model_ratio(small: int = 1_000, large: int = 10_000) -> Ratio:
    """For contrast, not a goal: one shared ``transitions.Machine`` with ``add_model`` per
    entity, the way its docs suggest for many models (each call scans the model list)."""
    spec = machines.load("effect")

    def per_model(count: int) -> float:
        machine = Machine(
            model=None,
            states=list(spec.states),
            transitions=[
                {"trigger": t.trigger, "source": t.source, "dest": t.dest} for t in spec.transitions
            ],
            initial=spec.initial,
            auto_transitions=False,
        )
        models = [_Model() for _ in range(count)]
        gc.collect()
        start = time.perf_counter()
        for model in models:
            machine.add_model(model)
        return (time.perf_counter() - start) / count

    s, big = per_model(small), per_model(large)
    return Ratio(
        name=f"transitions add_model, {large:,} vs {small:,} models (contrast)",
        candidate=f"per model at {large:,}",
        baseline=f"per model at {small:,}",
        ratio=big / s,
        goal=None,
        candidate_ns=big * 1e9,
        baseline_ns=s * 1e9,
        unit="model",
        rounds=1,
    )


def memory_per_entity(count: int = 10_000) -> dict[str, float]:
    """Bytes per entity for ours and for one hand-built ``transitions.Machine`` each."""
    spec = machines.load("effect")
    spec.machine(tier="compensable")
    out = {}
    for name, make in (
        ("EntityMachine", lambda i: spec.machine(tier="compensable", entity_id=str(i))),
        ("transitions.Machine per entity", lambda i: _hand_built(spec)),
    ):
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = [make(i) for i in range(count if name == "EntityMachine" else count // 10)]
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        out[name] = (after - before) / len(kept)
    return out


def run() -> list[Ratio]:
    return [
        trigger_ratio(),
        creation_ratio(1_000, 10_000),
        creation_ratio(1_000, 100_000),
        add_model_ratio(),
    ]
