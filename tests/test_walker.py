"""The generic spec walker on every bundled machine, and its edge coverage; a runtime that
breaks a rule, or runs on a broken copy of a definition, fails it (judged by the bundled
definitions and the walker's own observation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

import machines
from machines.mutation.catalog import CATALOG, write_mutant
from machines.runtime import EntityMachine
from machines.spec import MachineSpec
from machines.spec.loader import read_definition
from machines.testing import Coverage, spec_walker
from machines.testing.conformance.oracle import CHAIN, ILLEGAL, LEGAL, REFUSAL, RULES, TERMINAL
from machines.testing.conformance.walker import judge_of
from machines.testing.profiles import hunting, scaled
from machines.testing.verdict import RuleBroken
from tests.conftest import SpecCopy

MACHINES = ("effect", "outcome", "node", "request")
COVERAGE = Coverage()  # the walkers record into it; issue 5 turns it into a CI gate


@pytest.mark.parametrize("name", MACHINES)
def test_walker(name: str) -> None:
    walker = spec_walker(machines.load(name), COVERAGE)
    run_state_machine_as_test(walker, settings=scaled(60, 30))


def test_coverage_reports_the_edges_a_run_took() -> None:
    spec = machines.load("outcome")
    coverage = Coverage()
    coverage.record("outcome", "in_flight", "park", "indeterminate")
    coverage.record("outcome", "in_flight", "park", "indeterminate")
    assert coverage.taken("outcome")[("in_flight", "park", "indeterminate")] == 2
    assert ("in_flight", "park", "indeterminate") not in coverage.missing(spec)
    assert len(coverage.missing(spec)) == len(spec.transitions) - 1
    assert "outcome      1/6 edges" in coverage.table([spec])


HUNT = hunting(300, 30)
"""Hunting a known break: derandomized, no shrinking (the rule is what these tests check)."""

GRAPH_MUTANTS = {
    "outcome-auto-exit-indeterminate": ILLEGAL,
    "outcome-reclaim-by-worker": LEGAL,  # the actor replaced: the caller is refused first
    "outcome-terminal-exit": TERMINAL,
    "effect-no-provable-failure": LEGAL,
    "node-observer-cannot-lose-track": LEGAL,
    "effect-execute-unguarded": ILLEGAL,
    "effect-committed-exit": TERMINAL,
    "node-backward": TERMINAL,
    "request-cancel-unguarded": ILLEGAL,
}
"""The catalog's mutations that change what a move does (the others change tags or
derivation rules, which the system detectors judge), and the rule each breaks first."""


def walk(walker: type[Any], run: settings = HUNT) -> str:
    """The first line of the walker's failure ("" if it passed); it must be a
    ``RuleBroken`` whose message starts with one of the walker's rules."""
    try:
        run_state_machine_as_test(walker, settings=run)
    except RuleBroken as failure:  # the one verdict type of every suite, naming its rule
        first = str(failure).splitlines()[0]
        assert failure.rule in RULES and first.startswith(f"{failure.rule}: "), first
        return first
    return ""


def test_walker_catches_a_runtime_that_disagrees_with_the_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the object runtime (a reclaim answers ``succeeded``, an automatic exit from
    ``indeterminate``): the walker must fail, naming the rule. (The break is on a move the
    walker takes often, so that no draw order can miss it.)"""
    spec = machines.load("outcome")
    original = machines.EntityMachine.trigger

    def lenient(self, name, *, actor, detail=None, **context):  # type: ignore[no-untyped-def]
        if name == "reclaim" and self.state == "indeterminate":
            return "succeeded"  # an automatic exit from indeterminate, without recording it
        return original(self, name, actor=actor, detail=detail, **context)

    monkeypatch.setattr(machines.EntityMachine, "trigger", lenient)
    assert walk(spec_walker(spec)).startswith(LEGAL)


@pytest.mark.parametrize("mutant", sorted(GRAPH_MUTANTS))
def test_a_runtime_on_a_broken_copy_of_a_definition_fails_the_walker(
    mutant: str, tmp_path: Path
) -> None:
    """issue 14 item 1 (walker): the runtime runs on a mutated copy of a bundled definition;
    the walker judges by the bundled one and names the broken rule (the walker on
    ``main`` judged by the copy itself, and passed them all)."""
    (mutation,) = [m for m in CATALOG if m.id == mutant]
    broken = read_definition(write_mutant(mutation, tmp_path) / f"{mutation.machine}.yaml")
    assert judge_of(broken) is machines.load(mutation.machine)
    assert walk(spec_walker(broken)).startswith(GRAPH_MUTANTS[mutant])


@pytest.mark.parametrize("name", MACHINES)
def test_a_runtime_on_a_faithful_copy_passes(name: str, spec_copy: SpecCopy) -> None:
    """issue 14 item 1 (walker): judging by the bundled definition raises no false alarm
    for a runtime on an unchanged copy (its refusals say the same things)."""
    copy = read_definition(spec_copy.file(name))
    assert copy is not machines.load(name)
    assert walk(spec_walker(copy), hunting(40, 30)) == ""


def test_a_definition_of_your_own_is_judged_by_itself(spec_copy: SpecCopy) -> None:
    """issue 14 item 1 (walker): a machine that is not bundled has no published promise
    but its own; ``judge=`` overrides the default."""
    doc = spec_copy.read("outcome")
    doc["machine"] = "my_outcome"
    path = spec_copy.path / "my_outcome.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    own = read_definition(path)
    assert judge_of(own) is own
    assert walk(spec_walker(own), hunting(20, 30)) == ""


def break_runtime(monkeypatch: pytest.MonkeyPatch, wrong: Any) -> None:
    """Replace ``EntityMachine.trigger`` by ``wrong(original, entity, name, actor, ctx)``."""
    original = EntityMachine.trigger

    def trigger(self, name, *, actor, detail=None, **context):  # type: ignore[no-untyped-def]
        return wrong(original, self, name, actor, context)

    monkeypatch.setattr(EntityMachine, "trigger", trigger)


def test_a_refusal_that_changes_the_state_breaks_its_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 14 item 1 (walker): a runtime that refuses, but has moved anyway."""

    def moves_then_refuses(original, entity, name, actor, ctx):  # type: ignore[no-untyped-def]
        try:
            return original(entity, name, actor=actor, **ctx)
        except machines.InvalidStateTransition:
            if entity.state == "indeterminate":
                entity._state = "failed"  # gives up on the key, then says "refused"
            raise

    break_runtime(monkeypatch, moves_then_refuses)
    assert walk(spec_walker(machines.load("outcome"))).startswith(REFUSAL)


def test_a_history_that_misreports_a_move_breaks_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 14 item 1 (walker): the answer is right, the audit trail is not (a move
    recorded under another actor): the walker's own record of the moves disagrees."""

    def wrong_actor(original, entity, name, actor, ctx):  # type: ignore[no-untyped-def]
        dest = original(entity, name, actor=actor, **ctx)
        if name == "park":
            records = entity._recorder()._records
            records[-1] = (*records[-1][:3], "someone", *records[-1][4:])
        return dest

    break_runtime(monkeypatch, wrong_actor)
    assert walk(spec_walker(machines.load("outcome"))).startswith(CHAIN)


def test_a_runtime_that_leaves_a_terminal_state_breaks_its_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 14 item 1 (walker): the spec refuses, the runtime leaves ``succeeded``."""
    spec: MachineSpec = machines.load("outcome")

    def reopens(original, entity, name, actor, ctx):  # type: ignore[no-untyped-def]
        if entity.state == "succeeded" and name == "reclaim":
            entity._state = "in_flight"
            return "in_flight"
        return original(entity, name, actor=actor, **ctx)

    break_runtime(monkeypatch, reopens)
    assert walk(spec_walker(spec)).startswith(TERMINAL)
