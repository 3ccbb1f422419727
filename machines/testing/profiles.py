"""Hypothesis profiles for the property suites: ``dev``, ``ci`` and ``thorough``.

They are ordinary Hypothesis settings profiles, registered when this module is imported,
so every standard way of choosing one works: ``load_profile()`` in a ``conftest.py``
(which reads ``HYPOTHESIS_PROFILE``), pytest's ``--hypothesis-profile NAME``, or
``settings.load_profile(NAME)``. A profile sizes both the number of runs
(``max_examples``) and the length of each run (``stateful_step_count``), so a suite's
``TestCase`` collected as is (``TestMyExecutor = MyExecutorSuite.TestCase``) runs the
profile's budget:

- ``dev`` (the default): random, ``QUICK_EXAMPLES`` runs of up to ``BASE_STEPS`` steps;
- ``ci``: the same size, derandomized, so a failure in CI replays exactly on any machine,
  and without Hypothesis's explain phase (which marks the values a failure does not depend
  on, and took twice as long as the shrinking it follows on a conformance report); replay a
  CI failure under ``dev`` to see those marks;
- ``thorough``: nightly-sized, ``THOROUGH_FACTOR`` times the full size's runs
  (``BASE_EXAMPLES``) and ``THOROUGH_STEP_FACTOR`` times its steps.

``dev`` and ``ci`` are half the full size: the least that still catches, derandomized,
every bug of this repository's zoo of implementations written from the outside and every
code mutant of its own systems, with margin; ``thorough`` is where the size is spent.

Under ``machines mutate`` (``$MACHINES_MUTANT`` set), ``load_profile`` loads the chosen
profile without shrinking: a mutant needs only to be caught.

All three report one bug per run (``report_multiple_bugs=False``): a suite checks one
promise from several places (a rule and an invariant), so one defect trips several
assertions, which Hypothesis would report as several bugs with a traceback each. With
one report, it shrinks the first failure it found to the steps that matter.

Every run that sizes itself goes through the active profile: ``scaled(examples, steps)``
is a run's full size times the profile's factors, read from its settings (not its name),
so a profile of your own scales it the same way; ``hunting(examples, steps)`` is the same
size for a run that hunts a known bug (derandomized, no shrinking). Nothing else names a
number of examples.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import InvalidArgument as HypothesisInvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from machines.errors import InvalidArgument, UnknownName
from machines.spec.files import MUTANT_VARIABLE

ENV = "HYPOTHESIS_PROFILE"
PROFILES = ("dev", "ci", "thorough")
DEFAULT = "dev"
BASE_EXAMPLES = 100
"""The full size of a run (Hypothesis's own ``max_examples``): the profile ``scaled``
counts as factor one."""
BASE_STEPS = 50
"""The full length of a run (Hypothesis's own ``stateful_step_count``), and that of ``dev``
and ``ci``."""
QUICK_EXAMPLES = 50
"""``max_examples`` of ``dev`` and ``ci``: half the full size (``scaled`` factor 0.5)."""
THOROUGH_FACTOR = 20
THOROUGH_STEP_FACTOR = 2
SUPPRESSED = (HealthCheck.too_slow, HealthCheck.filter_too_much)
"""For ``scaled`` runs: a suite run is slow by nature (stores, many steps), and its
preconditions filter. (A ``TestCase`` suppresses every health check on its own.)"""

_BASE = settings(
    settings.get_profile("default"),
    max_examples=BASE_EXAMPLES,
    stateful_step_count=BASE_STEPS,
    deadline=None,
    report_multiple_bugs=False,
)
_QUICK = settings(_BASE, max_examples=QUICK_EXAMPLES)
settings.register_profile("dev", _QUICK)
settings.register_profile(
    "ci",
    _QUICK,
    derandomize=True,
    database=None,
    print_blob=True,
    phases=tuple(phase for phase in Phase if phase is not Phase.explain),
)
settings.register_profile(
    "thorough",
    _BASE,
    max_examples=BASE_EXAMPLES * THOROUGH_FACTOR,
    stateful_step_count=BASE_STEPS * THOROUGH_STEP_FACTOR,
    print_blob=True,
)


def load_profile(name: str | None = None) -> str:
    """Load a profile and return its name: ``name`` if given, else ``$HYPOTHESIS_PROFILE``,
    else the profile already active (one that pytest's ``--hypothesis-profile`` or
    Hypothesis's own CI detection chose), else ``dev``. Any registered profile may be
    named, yours included; an unknown name is refused (``UnknownName``) rather than
    silently running a different budget."""
    if name is not None and not isinstance(name, str):
        raise InvalidArgument(f"a profile name is a str, not {type(name).__name__}")
    active = settings.get_current_profile_name()
    fallback = active if active != "default" else DEFAULT
    chosen = name if name is not None else (os.environ.get(ENV) or fallback)
    try:  # look it up first: Hypothesis records the name before it finds it missing
        settings.get_profile(chosen)
    except HypothesisInvalidArgument:
        shown = chosen if len(chosen) <= 60 else f"{chosen[:57]}..."
        raise UnknownName(
            f"{ENV}={shown!r} is not a registered Hypothesis profile; use one of "
            f"{', '.join(PROFILES)}, or register yours with settings.register_profile "
            "before loading it"
        ) from None
    if os.environ.get(MUTANT_VARIABLE):
        chosen = _under_mutation(chosen)
    settings.load_profile(chosen)
    return chosen


UNDER_MUTATION = "+mutant"
"""The suffix of a profile loaded while ``machines mutate`` runs the tests."""


def _under_mutation(name: str) -> str:
    """``name`` without shrinking and without the example database, registered as
    ``name + UNDER_MUTATION``: ``machines mutate`` sets ``$MACHINES_MUTANT`` and asks only
    whether the tests fail on a mutant, so the minutes a property suite spends shrinking
    the failure are wasted there, and an example saved for one mutant must not be replayed
    against the next."""
    if name.endswith(UNDER_MUTATION):
        return name
    mutant = f"{name}{UNDER_MUTATION}"
    settings.register_profile(
        mutant, settings.get_profile(name), phases=(Phase.explicit, Phase.generate), database=None
    )
    return mutant


def _active() -> settings:
    """The active profile itself (not a test's own ``@settings``)."""
    return settings.get_profile(settings.get_current_profile_name())


def factors() -> tuple[float, float]:
    """How many times the full size's runs and steps the active profile asks for."""
    profile = _active()
    return profile.max_examples / BASE_EXAMPLES, profile.stateful_step_count / BASE_STEPS


MAX_SCALED = 1_000_000
"""The most runs or steps ``scaled`` takes: more would never end (and a number too large
for a float cannot be scaled at all)."""


def scaled(examples: int, steps: int = 25) -> settings:
    """Settings for one run of ``examples`` runs of up to ``steps`` steps at full size,
    multiplied by the active profile's factors (``dev`` and ``ci``: half the runs;
    ``thorough``: twenty times the runs, twice the steps). Everything else comes from the
    profile. For a ``@given`` test, ``steps`` does not matter."""
    for what, value in (("examples", examples), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(
                f"scaled(): {what} is a positive int, not a {type(value).__name__}"
            )
        if value < 1:
            given = "zero" if value == 0 else "a negative number"
            raise InvalidArgument(f"scaled(): {what} is a positive int, not {given}")
        if value > MAX_SCALED:
            raise InvalidArgument(f"scaled(): {what} is at most {MAX_SCALED:,}, not more")
    run_factor, step_factor = factors()
    return settings(
        _active(),
        max_examples=max(1, round(examples * run_factor)),
        stateful_step_count=max(1, round(steps * step_factor)),
        deadline=None,
        suppress_health_check=SUPPRESSED,
    )


def hunting(examples: int, steps: int = 25) -> settings:
    """``scaled(examples, steps)`` for a run that hunts a known bug (a broken
    implementation, a mutant): derandomized, so a catch never depends on luck and is the
    same on every machine; the generate phase only, since such a test asks whether the bug
    is caught, not for its shortest report; no example database, so a catch never comes
    from an earlier run; every health check off, since a hunt filters and is slow by
    design."""
    return settings(
        scaled(examples, steps),
        derandomize=True,
        database=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


_RUN = cast(Callable[..., None], run_state_machine_as_test)


def run_suite(suite: type[RuleBasedStateMachine], run_settings: settings) -> None:
    """``run_state_machine_as_test`` with a type signature on every Hypothesis release
    (older ones ship it untyped, which strict mypy refuses to call)."""
    _RUN(suite, settings=run_settings)
