"""The tour before the dice and the suite's own minimiser (issue 28, items 1-3).

A user's subscription service (tests/subscription_project) with a one-line bug, the wrong
actor allowed to resume, took 28 s to report with a 12-step run; a dropped move survived
``machines mutate`` because the random runs never fired it. Now the tour fires every
(state, trigger, actor, context class) once, a report is the shortest run the minimiser
finds, and the probes a run never fired are a coverage gap."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
from hypothesis import settings

import machines
from machines.errors import InvalidArgument
from machines.testing import (
    AdapterContractError,
    ConformanceAdapter,
    ConformanceSuite,
    Coverage,
    CoverageGap,
    Create,
    Fire,
    RuleBroken,
)
from machines.testing.conformance.oracle import ILLEGAL
from machines.testing.conformance.steps import Action, renumbered, touching
from machines.testing.conformance.tour import context_classes, shortest_paths, tour
from machines.testing.minimise import ddmin
from machines.testing.profiles import hunting

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "subscription_project"
SUBSCRIPTION = machines.load(PROJECT / "specs" / "subscription.yaml")


def _project_module(name: str) -> ModuleType:
    qualified = f"subscription_project_{name}"
    if qualified not in sys.modules:
        found = importlib.util.spec_from_file_location(qualified, PROJECT / f"{name}.py")
        assert found is not None and found.loader is not None
        module = importlib.util.module_from_spec(found)
        sys.modules[qualified] = module
        found.loader.exec_module(module)
    return sys.modules[qualified]


subscriptions = _project_module("subscriptions")


class Adapter(ConformanceAdapter[int]):
    def __init__(self, service: Any) -> None:
        self.service = service

    def create(self, context: Mapping[str, str]) -> int:
        return int(self.service.create(plan=context["plan"]))

    def fire(
        self,
        entity: int,
        trigger: str,
        actor: str,
        context: Mapping[str, str],
        detail: Mapping[str, Any] | None,
    ) -> None:
        self.service.fire(entity, trigger, actor)

    def state(self, entity: int) -> str:
        return str(self.service.rows[entity].state)

    def history(self, entity: int) -> list[dict[str, object]]:
        return list(self.service.rows[entity].events)


def with_moves(**changed: tuple[str, frozenset[str]] | None) -> type[Any]:
    """The user's service with some moves changed (``state__trigger``; None drops it)."""
    moves = dict(subscriptions.MOVES)
    for key, move in changed.items():
        state, trigger = key.split("__")
        if move is None:
            del moves[(state, trigger)]
        else:
            moves[(state, trigger)] = move
    return type("Changed", (subscriptions.Subscriptions,), {"moves": moves})


BILLING_RESUMES = with_moves(
    paused__resume=("active", frozenset({"customer", "support", "billing"}))
)
"""The one-line bug: billing may resume a pause."""


def suite_for(service: type[Any], **options: Any) -> type[ConformanceSuite]:
    class Suite(ConformanceSuite):
        spec = SUBSCRIPTION

        def make_adapter(self) -> ConformanceAdapter[int]:
            return Adapter(service())

    for name, value in options.items():
        setattr(Suite, name, value)
    return Suite


DICE = hunting(100, 50)
SHORTEST_BILLING_RESUMES = 4
"""Create, convert, pause, resume by billing: nothing shorter reaches 'paused'."""


def failure(suite: type[ConformanceSuite], run: settings = DICE) -> RuleBroken:
    with pytest.raises(RuleBroken) as caught:
        suite.run(run, require_coverage=False)
    return caught.value


def steps_of(report: RuleBroken) -> list[str]:
    text = str(report)
    listed = text[text.index("steps = [") :].splitlines()[1:-1]
    return [line.strip().rstrip(",") for line in listed]


# -- the tour's plan ----------------------------------------------------------------------


def test_context_classes_are_one_valuation_per_set_of_allowed_moves() -> None:
    assert context_classes(SUBSCRIPTION) == [{"plan": "monthly"}, {"plan": "annual"}]
    outcome = machines.load("outcome")
    assert context_classes(outcome) == [{}]


def test_shortest_paths_reach_every_state_the_context_allows() -> None:
    monthly = shortest_paths(SUBSCRIPTION, {"plan": "monthly"})
    assert monthly["paused"] == (("convert", "billing"), ("pause", "customer"))
    assert monthly["trialing"] == ()
    annual = shortest_paths(SUBSCRIPTION, {"plan": "annual"})
    assert "paused" not in annual and set(annual) == set(SUBSCRIPTION.states) - {"paused"}


def test_the_tour_fires_every_probe_from_every_reachable_state_once() -> None:
    triggers = sorted(set(SUBSCRIPTION.triggers) | {"teleport"})
    actors = sorted(set(SUBSCRIPTION.actors) | {"stranger"})
    planned = tour(SUBSCRIPTION, triggers, actors)
    reached = {c: shortest_paths(SUBSCRIPTION, {"plan": c}) for c in ("monthly", "annual")}
    assert [len(states) for states in reached.values()] == [6, 5]
    assert planned.probes == 11 * len(triggers) * len(actors)
    fires = [s for s in planned.steps if isinstance(s, Fire)]
    paths = sum(len(path) for states in reached.values() for path in states.values())
    allowed = {
        (c, state): sum(
            len(t.actors)
            for t in SUBSCRIPTION.transitions
            if t.source == state and t.admits({"plan": c})
        )
        for c, states in reached.items()
        for state in states
    }
    # refused probes share the state's entity; each allowed one after the first gets its own
    extra = sum(n - 1 for n in allowed.values() if n > 1)
    created = [s for s in planned.steps if isinstance(s, Create)]
    assert len(created) == 11 + extra
    extra_paths = sum(
        (n - 1) * len(reached[c][state]) for (c, state), n in allowed.items() if n > 1
    )
    assert len(fires) == planned.probes + paths + extra_paths


# -- the one-line bug, reported at once and short -----------------------------------------


def test_the_one_line_bug_is_found_by_the_tour_with_the_shortest_run() -> None:
    report = failure(suite_for(BILLING_RESUMES))
    assert str(report).startswith(f"{ILLEGAL}: entity 1: resume by billing in 'paused'")
    assert "found by the tour" in str(report)
    assert len(steps_of(report)) == SHORTEST_BILLING_RESUMES, report


def test_the_dice_alone_find_it_and_the_minimiser_shortens_their_run() -> None:
    report = failure(suite_for(BILLING_RESUMES, tour_first=False))
    assert "found by the random runs" in str(report), report
    assert len(steps_of(report)) <= SHORTEST_BILLING_RESUMES + 2, report


def test_minimise_seconds_is_honoured() -> None:
    """0 seconds: the run as the dice found it, cut only to the broken entity's steps."""
    quick = failure(suite_for(BILLING_RESUMES, tour_first=False, minimise_seconds=0))
    minimised = failure(suite_for(BILLING_RESUMES, tour_first=False))
    assert len(steps_of(quick)) > len(steps_of(minimised)), (quick, minimised)


def test_a_report_replays_as_it_stands() -> None:
    suite = suite_for(BILLING_RESUMES)
    report = failure(suite)
    steps = [eval(line, {"Create": Create, "Fire": Fire}) for line in steps_of(report)]
    with pytest.raises(RuleBroken) as again:
        suite.replay(steps)
    assert again.value.rule == ILLEGAL
    suite_for(subscriptions.Subscriptions).replay(steps)  # the correct service passes


@pytest.mark.parametrize(
    ("steps", "says"),
    [
        ("not a list", "not a list of Create and Fire steps"),
        ([Fire(1, "convert", "billing")], "but 0 entities were created before it"),
        ([Create({"plan": "monthly"}), "Fire"], "step 2 is 'Fire', not a Create or a Fire"),
        ([Create({"plan": "monthly"}), Fire(True, "convert", "billing")], "fires at entity"),
        ([Create({"plan": "weekly"})], "gives plan='weekly', which 'subscription' does not"),
        ([Create({})], r"gives the variables \[\], and 'subscription' has \['plan'\]"),
        ([Create(5)], r"Create\(context=5\), has a context that is not a mapping"),  # type: ignore[arg-type]
        ([Create({"plan": "monthly"}, state="gone")], "starts in 'gone', not a state"),
        ([Create({"plan": "monthly"}), Fire(1, 7, "billing")], "needs a str trigger"),  # type: ignore[arg-type]
    ],
)
def test_replay_refuses_steps_that_are_not_a_run(steps: Any, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        suite_for(subscriptions.Subscriptions).replay(steps)


def test_replay_raises_what_the_implementation_raised() -> None:
    """Outsider, fifth batch: a replay of a service that crashes returned as if it
    passed; a user confirming a fix would be told it holds."""

    class Crashing(Adapter):
        def state(self, entity: int) -> str:
            raise RuntimeError("the service fell over")

    class Suite(ConformanceSuite):
        spec = SUBSCRIPTION

        def make_adapter(self) -> ConformanceAdapter[int]:
            return Crashing(subscriptions.Subscriptions())

    steps: list[Action] = [Create({"plan": "monthly"}), Fire(1, "convert", "billing")]
    with pytest.raises(AdapterContractError, match="raised RuntimeError: the service fell over"):
        Suite.replay(steps)


def test_a_run_that_does_not_fail_again_is_reported_as_found() -> None:
    """A service that keeps state between instances (a class-level counter here) fails once
    and never on a replay: the report says so instead of minimising nothing."""

    class FailsOnce(subscriptions.Subscriptions):
        calls: ClassVar[list[int]] = []

        def fire(self, number: int, trigger: str, actor: str) -> None:
            FailsOnce.calls.append(1)
            if len(FailsOnce.calls) == 3:
                self.rows[number].state = "expired"
                return
            super().fire(number, trigger, actor)

    report = failure(suite_for(FailsOnce))
    assert "do not break the rule again when replayed" in str(report), report


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("tour_first", "yes", "sets tour_first to 'yes', not True or False"),
        ("minimise_seconds", -1, "sets minimise_seconds to -1"),
        ("minimise_seconds", float("inf"), "sets minimise_seconds to"),
        ("minimise_seconds", True, "sets minimise_seconds to True"),
        ("minimise_seconds", "5", "sets minimise_seconds to '5'"),
    ],
)
def test_garbage_options_fail_where_the_suite_is_defined(name: str, value: Any, says: str) -> None:
    with pytest.raises(AdapterContractError, match=says):
        type("Bad", (suite_for(subscriptions.Subscriptions),), {name: value})


# -- dropped moves are found every time, and unfired probes are a gap ----------------------


def test_a_dropped_move_is_found_by_the_tour_not_by_luck() -> None:
    """The service drops ``charge_ok`` by billing from past_due (the move the random runs
    had never fired in 5,030 fires): the tour fires it from past_due."""
    drops = with_moves(past_due__charge_ok=None)
    report = failure(suite_for(drops), settings(DICE, max_examples=1, stateful_step_count=1))
    assert "charge_ok by billing in 'past_due' was refused" in str(report), report
    assert "found by the tour" in str(report)


def test_probes_never_fired_are_a_coverage_gap() -> None:
    suite = suite_for(subscriptions.Subscriptions, tour_first=False)
    suite.run(settings(DICE, max_examples=3, stateful_step_count=3), require_coverage=False)
    with pytest.raises(CoverageGap, match=r"probe\(s\) of 'subscription' were never fired"):
        suite.coverage.require_probes(SUBSCRIPTION)
    toured = suite_for(subscriptions.Subscriptions, coverage=Coverage())
    toured.run(settings(DICE, max_examples=1, stateful_step_count=1))
    table = toured.coverage.table([SUBSCRIPTION])
    assert table.startswith("subscription    11/11 edges"), table
    assert "probes: 216 (state, trigger, actor) fired: 17 moved, 199 refused" in table, table


def test_a_probe_gap_names_the_move_and_the_state_without_a_refusal() -> None:
    coverage = Coverage()
    coverage.record_probe("subscription", "paused", "resume", "customer", moved=True)
    with pytest.raises(CoverageGap) as gap:
        coverage.require_probes(SUBSCRIPTION)
    assert "never fired: resume by support in 'paused'" in str(gap.value)
    assert "never refused anything in 'paused'" in str(gap.value)


# -- the minimiser ------------------------------------------------------------------------


def test_ddmin_finds_a_one_minimal_run_and_asks_each_candidate_once() -> None:
    asked: list[tuple[int, ...]] = []

    def fails(candidate: list[int]) -> bool:
        asked.append(tuple(candidate))
        return {3, 11, 17} <= set(candidate)

    assert ddmin(list(range(20)), fails) == [3, 11, 17]
    assert len(asked) == len(set(asked))


def test_ddmin_stops_when_its_time_is_spent() -> None:
    ticks = iter(range(1000))
    found = ddmin(list(range(64)), lambda c: 5 in c, 3, timer=lambda: float(next(ticks)))
    assert 5 in found and len(found) > 1


def test_renumbering_keeps_each_fire_on_its_own_entity() -> None:
    steps: list[Action] = [
        Create({"plan": "monthly"}),
        Create({"plan": "annual"}),
        Fire(2, "convert", "billing"),
        Fire(1, "lapse", "billing"),
    ]
    assert renumbered(steps, [1, 2, 3]) == [
        Create({"plan": "annual"}),
        Fire(1, "convert", "billing"),
    ]
    assert touching(steps, 2) == [1, 2]


# -- machines mutate on the subscription project ------------------------------------------


def test_mutate_kills_the_dropped_resume_that_survived_before(tmp_path: Path) -> None:
    """``drop-transition:resume`` survived the project's conformance test when the suite
    only rolled dice; with the tour it is killed (and without it, it survives)."""
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}

    def mutate() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable, "-m", "machines", "mutate", "--spec-dir", "specs",
                "--only", "*:drop-transition:resume", "--",
                sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0",
                "test_subscriptions.py",
            ],
            cwd=project, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    toured = mutate()
    assert toured.returncode == 0 and "killed 1/1" in toured.stdout, toured.stdout + toured.stderr
    test = project / "test_subscriptions.py"
    text = test.read_text(encoding="utf-8")
    test.write_text(
        text.replace(
            "    def make_adapter", "    tour_first = False\n\n    def make_adapter"
        ).replace(".run()", ".run(require_coverage=False)"),
        encoding="utf-8",
    )
    dice = mutate()
    assert dice.returncode == 1 and "SURVIVED" in dice.stdout, dice.stdout + dice.stderr


ORDER = """\
spec_version: 1
machine: order
description: An order, shipped or held by region.
initial: paid
context:
  region: {values: [eu, us, apac], description: Where it ships.}
actors:
  shop: {automatic: true, description: The shop.}
states:
  paid: {}
  shipped: {terminal: true}
  held: {terminal: true}
transitions:
  - {trigger: ship, source: paid, dest: shipped, actor: shop, when: {region: [us, apac]},
     description: Ship.}
  - {trigger: hold, source: paid, dest: held, actor: shop, when: {region: [eu]},
     description: Hold.}
"""


def test_the_tour_holds_every_value_of_every_variable(tmp_path: Path) -> None:
    """Outsider batch 41 (c 20): the tour took one context per class of contexts the
    guards treat alike, so a service that let ``hold`` through for ``apac`` (alike to
    ``us`` for every guard) was left to the random runs, which missed it on 5 of 20 seeds.
    The tour takes a context for every value its classes left out; here it finds the bug
    with no random run at all."""
    (tmp_path / "order.yaml").write_text(ORDER, encoding="utf-8")
    order = machines.load(tmp_path / "order.yaml")
    assert context_classes(order) == [{"region": "eu"}, {"region": "us"}, {"region": "apac"}]

    class Orders:
        def __init__(self) -> None:
            self.rows: dict[int, dict[str, Any]] = {}

        def create(self, region: str) -> int:
            self.rows[len(self.rows) + 1] = {"region": region, "state": "paid", "events": []}
            return len(self.rows)

        def fire(self, n: int, trigger: str, actor: str) -> None:
            row = self.rows[n]
            wanted = {"ship": ("shipped", {"us", "apac"}), "hold": ("held", {"eu", "apac"})}
            if actor != "shop" or trigger not in wanted or row["state"] != "paid":
                raise ValueError("refused")
            dest, regions = wanted[trigger]  # the bug: apac may be held
            if row["region"] not in regions:
                raise ValueError("refused")
            seq = len(row["events"]) + 1
            row["events"].append(
                {"seq": seq, "source": "paid", "trigger": trigger, "dest": dest, "actor": actor}
            )
            row["state"] = dest

    class OrdersAdapter(ConformanceAdapter[int]):
        def __init__(self) -> None:
            self.orders = Orders()

        def create(self, context: Mapping[str, str]) -> int:
            return self.orders.create(context["region"])

        def fire(
            self,
            entity: int,
            trigger: str,
            actor: str,
            context: Mapping[str, str],
            detail: Mapping[str, Any],
        ) -> None:
            self.orders.fire(entity, trigger, actor)

        def state(self, entity: int) -> str:
            return str(self.orders.rows[entity]["state"])

        def history(self, entity: int) -> list[dict[str, object]]:
            return list(self.orders.rows[entity]["events"])

    class OrdersConformance(ConformanceSuite):
        spec = order

        def make_adapter(self) -> ConformanceAdapter[int]:
            return OrdersAdapter()

    report = failure(OrdersConformance, hunting(1, 1))
    assert str(report).startswith(f"{ILLEGAL}: entity "), str(report)
    assert "hold by shop in 'paid'" in str(report) and "found by the tour" in str(report)


def test_the_tour_holds_every_value_in_every_class(tmp_path: Path) -> None:
    """Outsider batch 42 (c 3b): a service that let ``send`` through for ``us`` with
    ``size: large`` passed the tour, which took ``us`` only with ``small``: every value is
    now toured in every class it occurs in."""
    text = (
        ORDER.replace(
            "  region: {values: [eu, us, apac], description: Where it ships.}\n",
            "  region: {values: [eu, us, apac], description: Where it ships.}\n"
            "  size: {values: [small, large], description: How big.}\n",
        )
        .replace("when: {region: [us, apac]}", "when: {size: [small]}")
        .replace("when: {region: [eu]}", "when: {size: [large]}")
    )
    (tmp_path / "order.yaml").write_text(text, encoding="utf-8")
    order = machines.load(tmp_path / "order.yaml")
    toured = {(c["size"], c["region"]) for c in context_classes(order)}
    assert toured == {(s, r) for s in ("small", "large") for r in ("eu", "us", "apac")}
    assert len(context_classes(order)) == 6
