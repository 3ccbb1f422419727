"""The spec walker: the conformance suite run against this package's own runtime.

``spec_walker(spec)`` is ``ConformanceSuite`` (``machines.testing.conformance.suite``) with an
adapter over ``spec.machine``: the same rules, the same judges, one generic walker. The
runtime runs on ``spec``, which may be a broken copy; the suite judges by the *judging*
definition, the bundled one of the same name when there is one (the published promise,
``machines.load(name)``), else ``spec`` itself. The runtime can start an entity in any state
(an ORM row mid-life), so the walker's adapter is resumable and every run starts its
entities anywhere; the triggers, actors and moves ``spec`` declares are tried too
(``also_try``), so that an edge a broken copy adds is found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from machines.runtime import EntityMachine
from machines.spec import MachineSpec
from machines.spec.loader import load
from machines.store import BUNDLED
from machines.testing.conformance.suite import (
    ConformanceAdapter,
    ConformanceSuite,
    ResumableAdapter,
)
from machines.testing.contract import expect
from machines.testing.coverage import Coverage


def judge_of(spec: MachineSpec) -> MachineSpec:
    """The definition a walk of ``spec`` is judged by: the bundled one of its name (a
    runtime on a copy of a bundled definition must keep the published promise), else
    ``spec`` itself."""
    return load(spec.name) if spec.name in BUNDLED else spec


class RuntimeAdapter(ResumableAdapter[EntityMachine]):
    """The conformance suite's adapter over this package's runtime on ``spec``."""

    def __init__(self, spec: MachineSpec) -> None:
        expect(spec, MachineSpec, "RuntimeAdapter: spec")
        self.spec = spec

    def create(self, context: Mapping[str, str]) -> EntityMachine:
        return self.spec.machine(**context)

    def resume(self, state: str, context: Mapping[str, str]) -> EntityMachine:
        return self.spec.machine(state=state, **context)

    def fire(
        self,
        entity: EntityMachine,
        trigger: str,
        actor: str,
        context: Mapping[str, str],
        detail: Mapping[str, Any] | None,
    ) -> None:
        entity.trigger(trigger, actor=actor, detail=detail, **context)

    def state(self, entity: EntityMachine) -> str:
        return entity.state

    def history(self, entity: EntityMachine) -> list[Any]:
        return list(entity.history)


def spec_walker(
    spec: MachineSpec,
    coverage: Coverage | None = None,
    *,
    judge: MachineSpec | None = None,
) -> type[ConformanceSuite]:
    """A ``ConformanceSuite`` class that walks the runtime ``spec.machine`` and judges it
    by ``judge`` (default: ``judge_of(spec)``; pass ``judge=spec`` to judge a definition of
    your own that reuses a bundled machine's name), counting the moves it saw in
    ``coverage`` (default: a ``Coverage`` of its own). Call its ``run()``, pass it to
    ``run_state_machine_as_test``, or assign ``.TestCase`` to a module-level name."""
    expect(spec, MachineSpec, "spec_walker: spec")
    if coverage is not None:
        expect(coverage, Coverage, "spec_walker: coverage")
    if judge is not None:
        expect(judge, MachineSpec, "spec_walker: judge")
    judging = judge_of(spec) if judge is None else judge
    runtime, counted = spec, Coverage() if coverage is None else coverage

    class SpecWalker(ConformanceSuite):
        spec = judging
        also_try = runtime
        coverage = counted

        def make_adapter(self) -> ConformanceAdapter[Any]:
            return RuntimeAdapter(runtime)

    SpecWalker.__name__ = SpecWalker.__qualname__ = f"{spec.name.title()}Walker"
    return SpecWalker
