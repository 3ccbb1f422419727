"""Hypothesis profiles for the property suites, chosen by ``HYPOTHESIS_PROFILE``.

- ``dev`` (the default): random, sized for a quick local run.
- ``ci``: derandomized, so a failure in CI replays exactly on any machine; same size.
- ``thorough``: nightly-sized; ``scaled`` multiplies every suite's example budget by
  ``THOROUGH_FACTOR`` and lengthens its runs. Run it with
  ``HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_suites.py tests/test_explore.py``.

Suites size their runs with ``scaled(examples, steps)`` rather than a fixed
``max_examples``, so one environment variable resizes them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

ENV = "HYPOTHESIS_PROFILE"
PROFILES = ("dev", "ci", "thorough")
THOROUGH_FACTOR = 20

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("thorough", deadline=None, print_blob=True)


def load_profile(name: str | None = None) -> str:
    """Load ``name`` (default: ``$HYPOTHESIS_PROFILE``, else ``dev``); refuse unknown names
    rather than silently running a different budget."""
    chosen = name or os.environ.get(ENV) or "dev"
    if chosen not in PROFILES:
        raise ValueError(f"{ENV}={chosen!r} is not a profile; use one of {', '.join(PROFILES)}")
    settings.load_profile(chosen)
    return chosen


def scaled(examples: int, steps: int = 25) -> settings:
    """Settings for one stateful suite run: ``examples`` runs of up to ``steps`` steps in
    ``dev`` and ``ci``, ``THOROUGH_FACTOR`` times the runs and twice the steps in
    ``thorough``."""
    thorough = settings.get_current_profile_name() == "thorough"
    return settings(
        max_examples=examples * (THOROUGH_FACTOR if thorough else 1),
        stateful_step_count=steps * (2 if thorough else 1),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


_RUN = cast(Callable[..., None], run_state_machine_as_test)


def run_suite(suite: type[RuleBasedStateMachine], run_settings: settings) -> None:
    """``run_state_machine_as_test`` with a type signature on every Hypothesis release
    (older ones ship it untyped, which strict mypy refuses to call)."""
    _RUN(suite, settings=run_settings)
