"""The exactly-once suite against the reference executor (memory and SQLite), its edge
coverage, and proof that it catches a broken executor."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import machines
from machines.systems import ExactlyOnce
from machines.testing import Coverage
from machines.testing.exactly_once import ExactlyOnceAdapter, ExactlyOnceSuite, ReferenceAdapter

COVERAGE = Coverage()
SUITE = settings(
    max_examples=80,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class OnMemory(ExactlyOnceSuite):
    def make_adapter(self) -> ExactlyOnceAdapter:
        return ReferenceAdapter("memory://", coverage=COVERAGE)


def test_reference_executor_on_memory() -> None:
    run_state_machine_as_test(OnMemory, settings=SUITE)


def test_reference_executor_on_sqlite(tmp_path_factory: pytest.TempPathFactory) -> None:
    class OnSQLite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            path = tmp_path_factory.mktemp("eo") / "suite.db"
            return ReferenceAdapter(f"sqlite:///{path}", coverage=COVERAGE)

    run_state_machine_as_test(OnSQLite, settings=settings(SUITE, max_examples=25))


def test_every_outcome_edge_is_exercised() -> None:
    spec = machines.load("outcome")
    assert COVERAGE.missing(spec) == [], COVERAGE.table([spec])


def test_the_suite_catches_an_executor_that_retries_parked_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A classic bug: treat indeterminate as 'try again'. The suite must fail."""
    original = ExactlyOnce._claim

    def optimistic(self, key):  # type: ignore[no-untyped-def]
        row = self.outcome(key)
        if row is not None and row.state == "indeterminate":
            self.reclaim(key, by="bug", reason="retrying on a guess")
        return original(self, key)

    monkeypatch.setattr(ExactlyOnce, "_claim", optimistic)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            OnMemory, settings=settings(SUITE, max_examples=300, phases=[Phase.generate])
        )
