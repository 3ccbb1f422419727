"""How ``ConformanceSuite.run`` runs: the tour, then the dice, then the shortest report.

1. The tour (``tour`` beside this module) fires every probe once, deterministically; a broken
   rule there is reported without a random step.
2. The dice: Hypothesis' random runs under the active profile, without its own shrinking
   (on a stateful suite it can take minutes).
3. A failure from either is minimised by the suite's own ``ddmin``
   (``machines.testing.minimise``) within ``minimise_seconds``, by replaying shortened runs
   on fresh implementations; the report is the shortest run found that breaks the same
   rule, as steps ``Suite.replay(steps)`` replays as they stand.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hypothesis import Phase
from hypothesis import settings as Settings

from machines.testing.conformance.steps import Action, Create, renumbered, touching
from machines.testing.conformance.tour import tour
from machines.testing.minimise import ddmin
from machines.testing.profiles import run_suite
from machines.testing.verdict import RuleBroken

if TYPE_CHECKING:
    from machines.testing.conformance.suite import ConformanceSuite

SHRINKING = (Phase.shrink, Phase.explain)
"""Hypothesis' phases the suite replaces by its own minimiser."""


def tour_of(suite: type[ConformanceSuite]) -> tuple[Action, ...]:
    """The suite's tour: its definition's reachable states under every context class,
    probed with every trigger and actor the suite fires."""
    probe = suite()
    try:
        triggers, actors = probe.triggers, probe.actors
    finally:
        probe.teardown()
    return tour(suite.spec, triggers, actors).steps


def take_tour(suite: type[ConformanceSuite]) -> None:
    """Fire the tour at one implementation; a broken rule is reported minimised. Each step
    is judged on the entity it touched, and every entity at the end (a tour makes many
    entities, and judging all of them after every step would cost the square)."""
    steps = tour_of(suite)
    run = suite()
    broken: RuleBroken | None = None
    try:
        run.histories_are_legal_chains()
        for step in steps:
            run.step(step)
            run.check_entity(len(run.oracle.entities) if isinstance(step, Create) else step.entity)
        run.histories_are_legal_chains()
    except RuleBroken as error:
        broken = error
    finally:
        run.teardown()
    if broken is not None:
        raise minimised(suite, run.trace, broken, f"the tour ({len(steps)} steps planned)")


def roll_dice(suite: type[ConformanceSuite], settings: Settings) -> None:
    """Hypothesis' random runs under ``settings`` without its shrinking; a broken rule is
    reported minimised from the run that broke it."""
    phases = tuple(p for p in settings.phases if p not in SHRINKING)
    suite.failed = None
    try:
        run_suite(suite, Settings(settings, phases=phases))
    except RuleBroken as error:
        failed = suite.failed
        if failed is None or failed[1].rule != error.rule:
            raise
        raise minimised(suite, failed[0], error, "the random runs") from None


def breaks(
    suite: type[ConformanceSuite], steps: Sequence[Action], *, strict: bool = False
) -> RuleBroken | None:
    """Replay ``steps`` on a fresh implementation, judging every entity after every step
    as the random runs do: the rule they break, or None. Any other failure is raised with
    ``strict`` (a user's replay: a crash is not a pass), else taken for None (the
    minimiser's candidates: another failure is not the one being minimised)."""
    run = suite()
    try:
        run.histories_are_legal_chains()
        for step in steps:
            run.step(step)
            run.histories_are_legal_chains()
    except RuleBroken as error:
        return error
    except Exception:
        if strict:
            raise
        return None
    finally:
        run.teardown()
    return None


def minimised(
    suite: type[ConformanceSuite], steps: Sequence[Action], broken: RuleBroken, found_by: str
) -> RuleBroken:
    """The report of ``broken``: the shortest run found that breaks the same rule, what
    it broke on its replay, and the steps to replay it."""
    started = time.monotonic()
    everything = list(range(len(steps)))
    last = steps[-1] if steps else None
    start = everything
    if last is not None:
        created = sum(isinstance(step, Create) for step in steps)
        entity = created if isinstance(last, Create) else last.entity
        alone = touching(steps, entity)
        if len(alone) < len(steps) and _same(suite, renumbered(steps, alone), broken.rule):
            start = alone
    if start is everything and not _same(suite, steps, broken.rule):
        return RuleBroken(
            broken.rule,
            f"{broken}\n  found by {found_by}; its {len(steps)} steps do not break the rule "
            "again when replayed on a fresh implementation, so they are not minimised (does "
            "the implementation keep state between instances, or depend on time?)",
        )
    kept = ddmin(
        start,
        lambda keep: _same(suite, renumbered(steps, keep), broken.rule),
        suite.minimise_seconds,
    )
    shortest = renumbered(steps, kept)
    again = breaks(suite, shortest) or broken
    listed = "".join(f"\n      {step!r}," for step in shortest)
    return RuleBroken(
        broken.rule,
        f"{again}\n  found by {found_by}; the shortest run found has {len(shortest)} "
        f"step(s) (of {len(steps)} recorded; minimised in {time.monotonic() - started:.1f} s). "
        f"Replay it with {suite.__qualname__}.replay(steps), where\n  steps = [{listed}\n  ]",
    )


def _same(suite: type[ConformanceSuite], steps: Sequence[Action], rule: str) -> bool:
    found = breaks(suite, steps)
    return found is not None and found.rule == rule
