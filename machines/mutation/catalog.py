"""Mutation check: break the specs on purpose and see every break caught.

Each ``Mutation`` edits one bundled definition the way a careless change would (an
automatic exit from a fail-closed state, a terminal state with an exit, a dropped guard,
a dropped derivation rule, a lost tag, ...). ``kill`` writes the mutated copy of
``spec/`` to a folder and runs the detectors in order, cheapest first:

1. ``machines check``: the schema, the structural rules and the derivation proof;
2. ``machines explore``: every reachable state of the system that runs on the mutated
   machine (transfer, exactly-once) in its default scopes;
3. the stateful suite of that system, with the mutated specs as the system's specs.

Detectors 2 and 3 judge the invariants by the bundled specs: a mutant never judges itself.

A mutation no detector catches *survives*: the checks have a blind spot, and
``machines mutate`` (and CI) fail.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from machines.checks.report import check
from machines.errors import MachinesError, SpecError
from machines.explore import build_model, explore, scopes_of
from machines.mutation.edits import (
    Document,
    Edit,
    add_transition,
    drop_derivation_rule,
    drop_derived_state,
    drop_evidence,
    drop_guard,
    drop_tag,
    drop_transition,
    set_default_rule_set,
    set_transition,
    transition,
)
from machines.spec import MachineSpec
from machines.spec.loader import bundled_spec_dir, definition_paths, read_definition
from machines.spec.vocabulary import EFFECT_STARTED
from machines.systems.reliance import standing_for_a_buggy_implementation

if TYPE_CHECKING:  # Hypothesis is needed only to run the suites (machines[testing])
    from hypothesis.stateful import RuleBasedStateMachine


@dataclass(frozen=True)
class Mutation:
    """One deliberate break of ``machine``'s definition."""

    id: str
    machine: str
    description: str
    change: Edit
    """An operator of the one catalog (``edits``) applied where the careless change lands."""
    breaks: tuple[str, ...]
    """The invariants or structural rules (by id) the mutation is meant to break."""


@dataclass(frozen=True)
class Kill:
    """What became of one mutation: which detector caught it (None: it survived), the
    evidence, and the seconds from the start of detection to the catch."""

    mutation: Mutation
    caught_by: str | None
    evidence: str
    seconds: float


# -- where a careless change lands -----------------------------------------------------------


def _at(source: str, trigger: str, edit: Callable[[int], Edit]) -> Edit:
    """``edit`` applied to the transition ``trigger`` fires from ``source``."""

    def apply(doc: Document) -> None:
        edit(transition(doc, source, trigger))(doc)

    return Edit(edit(0).operator, apply)


def _actor(source: str, trigger: str, actor: str) -> Edit:
    return _at(source, trigger, lambda i: set_transition("change-actor", i, "actor", actor))


def _trigger(source: str, trigger: str, dest: str, actor: str) -> Edit:
    added = {
        "trigger": trigger,
        "source": source,
        "dest": dest,
        "actor": actor,
        "evidence": "mutated in on purpose",
        "description": "A mutation.",
    }
    return add_transition(added, operator="add-trigger")


CATALOG: tuple[Mutation, ...] = (
    Mutation(
        "outcome-auto-exit-indeterminate",
        "outcome",
        "a worker may leave indeterminate on its own (indeterminate -> failed)",
        _trigger("indeterminate", "give_up", "failed", "worker"),
        ("fail-closed-indeterminate",),
    ),
    Mutation(
        "outcome-reclaim-by-worker",
        "outcome",
        "a reclaim made by an automatic actor (the worker retries a parked key)",
        _actor("indeterminate", "reclaim", "worker"),
        ("fail-closed-indeterminate",),
    ),
    Mutation(
        "outcome-terminal-exit",
        "outcome",
        "a terminal state with an exit (succeeded -> in_flight)",
        _trigger("succeeded", "rerun", "in_flight", "caller"),
        ("terminal-final",),
    ),
    Mutation(
        "outcome-skip-in-flight",
        "outcome",
        "a skipped state: indeterminate decided landed straight from a worker's park",
        _actor("indeterminate", "decide_landed", "worker"),
        ("fail-closed-indeterminate",),
    ),
    Mutation(
        "outcome-no-decide-not-landed",
        "outcome",
        "a dropped edge: an operator can no longer decide that a parked effect did not land",
        _at("indeterminate", "decide_not_landed", drop_transition),
        ("indeterminate-exits",),
    ),
    Mutation(
        "effect-execute-unguarded",
        "effect",
        "the tier guard removed from execute: an irreversible call skips approval",
        _at("pending", "execute", drop_guard),
        ("tier-discipline",),
    ),
    Mutation(
        "effect-approve-unguarded",
        "effect",
        "the tier guard removed from approve",
        _at("pending", "approve", drop_guard),
        ("tier-discipline",),
    ),
    Mutation(
        "effect-skip-executing",
        "effect",
        "a skipped state: pending -> committed without executing",
        _trigger("pending", "commit", "committed", "proxy"),
        ("no-skipping-commit",),
    ),
    Mutation(
        "effect-committed-exit",
        "effect",
        "a terminal state with an exit: committed effects compensated",
        _trigger("committed", "compensate", "compensating", "saga"),
        ("terminal-final",),
    ),
    Mutation(
        "effect-no-provable-failure",
        "effect",
        "a dropped edge: a call that provably did not happen cannot go back to pending",
        _at("executing", "fail", drop_transition),
        ("exactly-once",),
    ),
    Mutation(
        "node-unknown-auto-terminal",
        "node",
        "unknown auto-terminalized: the executor fails an unknown node",
        _trigger("unknown", "give_up", "failed", "executor"),
        ("no-auto-terminal-money-in-flight",),
    ),
    Mutation(
        "node-reconcile-by-executor",
        "node",
        "reconciliation by an automatic actor instead of the reconciler",
        _actor("unknown", "reconcile_failed", "executor"),
        ("no-auto-terminal-money-in-flight",),
    ),
    Mutation(
        "node-completed-without-evidence",
        "node",
        "an automatic completion that records no evidence",
        _at("submitting", "complete", drop_evidence),
        ("no-auto-terminal-money-in-flight",),
    ),
    Mutation(
        "node-backward",
        "node",
        "a backward move: completed -> submitting",
        _trigger("completed", "resend", "submitting", "executor"),
        ("terminal-final", "exactly-once"),
    ),
    Mutation(
        "node-submitting-not-started",
        "node",
        "submitting loses its effect-started tag (money in flight not counted)",
        drop_tag("submitting", EFFECT_STARTED),
        ("context-matches-money",),
    ),
    Mutation(
        "node-observer-cannot-lose-track",
        "node",
        "a dropped edge: an observation that cannot tell has nowhere to go",
        _at("observing", "lose_track", drop_transition),
        ("no-auto-terminal-money-in-flight",),
    ),
    Mutation(
        "request-fail-unguarded",
        "request",
        "the side_effects guard removed from executing -> failed",
        _at("executing", "fail", drop_guard),
        ("no-auto-terminal-money-in-flight",),
    ),
    Mutation(
        "request-cancel-unguarded",
        "request",
        "the side_effects guard removed from cancel",
        _at("executing", "cancel", drop_guard),
        ("cancel-only-before-money-moves",),
    ),
    Mutation(
        "request-auto-confirm",
        "request",
        "manual_intervention settled by the system instead of an operator",
        _actor("manual_intervention", "confirm_failed", "system"),
        ("manual-intervention-needs-a-person",),
    ),
    Mutation(
        "derivation-no-manual-intervention-rule",
        "request",
        "a dropped manual_intervention rule: failure after money moved",
        drop_derivation_rule("money-safe", "stopped-after-money-moved"),
        ("derivation-consistency",),
    ),
    Mutation(
        "derivation-no-in-flight-rule",
        "request",
        "a dropped rule: failure while money is in flight",
        drop_derivation_rule("money-safe", "stopped-with-money-in-flight"),
        ("no-auto-terminal-money-in-flight",),
    ),
    Mutation(
        "derivation-submitting-not-money",
        "request",
        "the derived side_effects context forgets submitting nodes",
        drop_derived_state("side_effects", "submitting"),
        ("context-matches-money",),
    ),
    Mutation(
        "derivation-seed-rules-default",
        "request",
        "the seed's own rules (qtg-v3) made the default",
        set_default_rule_set("qtg-v3"),
        ("no-auto-terminal-money-in-flight", "derivation-consistency"),
    ),
)


# -- detection ------------------------------------------------------------------------------


def _suite_for(machine: str) -> Callable[[Mapping[str, MachineSpec]], type[RuleBasedStateMachine]]:
    """The stateful suite whose system runs on ``machine``, bound to given specs."""
    from machines.testing.effectlog.suite import EffectLogSuite, ReferenceEffectLog
    from machines.testing.exactly_once.suite import ExactlyOnceSuite, ReferenceAdapter
    from machines.testing.transfer.suite import ReferenceTransfer, TransferSuite, Venue

    def exactly_once(specs: Mapping[str, MachineSpec]) -> type[RuleBasedStateMachine]:
        class Mutant(ExactlyOnceSuite):
            def make_adapter(self) -> ReferenceAdapter:
                return ReferenceAdapter(specs=specs)

        return Mutant

    def effect_log(specs: Mapping[str, MachineSpec]) -> type[RuleBasedStateMachine]:
        class Mutant(EffectLogSuite):
            def make_adapter(self) -> ReferenceEffectLog:
                return ReferenceEffectLog(specs=specs)

        return Mutant

    def transfer(specs: Mapping[str, MachineSpec]) -> type[RuleBasedStateMachine]:
        class Mutant(TransferSuite):
            def make_adapter(self, venue: Venue) -> ReferenceTransfer:
                return ReferenceTransfer(venue, specs=specs)

        return Mutant

    by_machine = {
        "outcome": exactly_once,
        "effect": effect_log,
        "node": transfer,
        "request": transfer,
    }
    return by_machine[machine]


def write_mutant(mutation: Mutation, folder: Path) -> Path:
    """A copy of the bundled ``spec/`` in ``folder`` with ``mutation`` applied."""
    target = folder / "spec"
    shutil.copytree(bundled_spec_dir(), target)
    path = target / f"{mutation.machine}.yaml"
    doc: Document = yaml.safe_load(path.read_text())
    mutation.change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    return target


def kill(mutation: Mutation, *, examples: int = 300) -> Kill:
    """Run the detectors on ``mutation`` until one catches it."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutation.id}-") as tmp:
        spec_dir = write_mutant(mutation, Path(tmp))
        report = check(spec_dir)
        if report.exit_code != 0:
            first = (report.violations or [])[:1]
            evidence = first[0].describe() if first else "; ".join(report.unreadable)
            return Kill(mutation, "machines check", evidence, time.perf_counter() - started)
        try:
            specs = {spec.name: spec for spec in map(read_definition, definition_paths(spec_dir))}
        except SpecError as error:  # check would have said so; kept to fail closed
            return Kill(mutation, "machines check", str(error), time.perf_counter() - started)
        found = explore_mutant(mutation, spec_dir)
        if found is not None:
            return Kill(mutation, "machines explore", found, time.perf_counter() - started)
        from hypothesis import HealthCheck, Phase, settings

        from machines.testing.profiles import run_suite

        suite = _suite_for(mutation.machine)(specs)
        hunt = settings(
            max_examples=examples,
            stateful_step_count=60,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        try:
            with standing_for_a_buggy_implementation():
                run_suite(suite, hunt)
        except Exception as caught:  # any failure of the suite is a catch
            evidence = str(caught).strip().splitlines()[0] if str(caught).strip() else repr(caught)
            name = suite.__mro__[1].__name__
            return Kill(mutation, name, evidence, time.perf_counter() - started)
    return Kill(mutation, None, "no detector caught it", time.perf_counter() - started)


EXPLORED = {"request": "transfer", "node": "transfer", "outcome": "exactly-once"}
"""The explorer's system for each machine it runs on (the effect log has no model)."""


def explore_mutant(mutation: Mutation, spec_dir: Path) -> str | None:
    """The first invariant the explorer sees broken on the mutated specs in ``spec_dir``
    (default scopes), or None: also None for a machine no explorer models."""
    system = EXPLORED.get(mutation.machine)
    if system is None:
        return None
    for scope in scopes_of(system)[1]:
        try:
            model = build_model(system, scope, spec_dir=spec_dir, judged_by_bundled=True)
        except MachinesError as error:
            return f"{scope}: the model cannot be built: {error}"
        for violation in explore(model).violations:
            said = f"{violation.invariant} after {violation.moves} moves"
            return f"{scope}: {said}: {violation.message}"
    return None


def run_catalog(
    ids: Iterable[str] | None = None,
    *,
    examples: int = 300,
    progress: Callable[[Kill], None] | None = None,
) -> list[Kill]:
    """``kill`` every mutation of the catalog (or those named by ``ids``)."""
    chosen = _select(ids)
    kills = []
    for mutation in chosen:
        result = kill(mutation, examples=examples)
        kills.append(result)
        if progress is not None:
            progress(result)
    return kills


def _select(ids: Iterable[str] | None) -> Sequence[Mutation]:
    if ids is None:
        return CATALOG
    known = {m.id: m for m in CATALOG}
    wanted = list(ids)
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise KeyError(f"unknown mutation(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[i] for i in wanted]


def summary(kills: Sequence[Kill]) -> str:
    """Kill rate and median seconds to detection, overall and per detector."""
    caught = [k for k in kills if k.caught_by is not None]
    rate = 100 * len(caught) / max(1, len(kills))
    lines = [f"killed {len(caught)}/{len(kills)} mutations ({rate:.0f}%)"]
    if caught:
        lines.append(
            f"median seconds to detection: {statistics.median(k.seconds for k in caught):.2f}"
        )
    by: dict[str, list[float]] = {}
    for k in caught:
        by.setdefault(k.caught_by or "", []).append(k.seconds)
    for detector, seconds in sorted(by.items()):
        lines.append(
            f"  {detector}: {len(seconds)} caught, median {statistics.median(seconds):.2f} s"
        )
    survivors = [k.mutation.id for k in kills if k.caught_by is None]
    if survivors:
        lines.append("SURVIVED: " + ", ".join(survivors))
    return "\n".join(lines)
