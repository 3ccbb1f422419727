"""The generic spec walker on every bundled machine, and its edge coverage."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import machines
from machines.testing import Coverage, spec_walker

MACHINES = ("effect", "outcome", "node", "request")
COVERAGE = Coverage()  # the walkers record into it; issue 5 turns it into a CI gate


@pytest.mark.parametrize("name", MACHINES)
def test_walker(name: str) -> None:
    walker = spec_walker(machines.load(name), COVERAGE)
    run_state_machine_as_test(
        walker, settings=settings(max_examples=60, stateful_step_count=30, deadline=None)
    )


def test_coverage_reports_the_edges_a_run_took() -> None:
    spec = machines.load("outcome")
    coverage = Coverage()
    coverage.record("outcome", "in_flight", "park", "indeterminate")
    coverage.record("outcome", "in_flight", "park", "indeterminate")
    assert coverage.taken("outcome")[("in_flight", "park", "indeterminate")] == 2
    assert ("in_flight", "park", "indeterminate") not in coverage.missing(spec)
    assert len(coverage.missing(spec)) == len(spec.transitions) - 1
    assert "outcome      1/6 edges" in coverage.table([spec])


def test_walker_catches_a_runtime_that_disagrees_with_the_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the object runtime (accept a move the spec refuses): the walker must fail."""
    spec = machines.load("outcome")
    original = machines.EntityMachine.trigger

    def lenient(self, name, *, actor, detail=None, **context):  # type: ignore[no-untyped-def]
        if name == "succeed" and self.state == "indeterminate":
            return "succeeded"  # an automatic exit from indeterminate, without recording it
        return original(self, name, actor=actor, detail=detail, **context)

    monkeypatch.setattr(machines.EntityMachine, "trigger", lenient)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            spec_walker(spec),
            settings=settings(
                max_examples=300, stateful_step_count=30, deadline=None, phases=[Phase.generate]
            ),
        )
