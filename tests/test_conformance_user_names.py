"""The conformance suite on a user's definition whose names, shape or rules the suite's own
choices had not allowed for (outsider batch 38, c):

- S2: a definition with a trigger ``teleport`` and an actor ``stranger`` (the suite's own
  unknown ones) was never probed with an unknown trigger or actor: a service that accepted
  any unknown trigger and took any unknown actor for a known one passed;
- S5: a definition that opts out of ``all_reachable`` has an edge out of a state no run
  reaches, and a correct service failed with a ``CoverageGap`` it could never close;
- S4: a service that refuses a move its definition asks evidence of when fired without
  any was failed as breaking a guarantee."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import machines
from machines.spec import MachineSpec
from machines.testing import ConformanceAdapter, ConformanceSuite, RuleBroken
from machines.testing.conformance.suite import EVIDENCE, unused
from machines.testing.profiles import hunting


class Refused(Exception):
    """The service refuses a move; nothing changed."""


class TableService:
    """A user's service written from its definition's table of moves (no guards), with the
    two bugs ``lenient`` switches on: an unknown trigger is accepted and does nothing, an
    unknown actor is taken for the first known one."""

    def __init__(self, spec: MachineSpec, *, lenient: bool = False, proof: bool = False) -> None:
        self.spec, self.lenient, self.proof = spec, lenient, proof
        self.rows: list[dict[str, Any]] = []

    def create(self, context: Mapping[str, str]) -> int:
        self.rows.append({"state": self.spec.initial, "events": [], "context": dict(context)})
        return len(self.rows) - 1

    def fire(self, n: int, trigger: str, actor: str, detail: Mapping[str, Any] | None) -> None:
        row = self.rows[n]
        if self.lenient and trigger not in self.spec.triggers:
            return
        if self.lenient and actor not in self.spec.actors:
            actor = sorted(self.spec.actors)[0]
        for t in self.spec.transitions:
            if t.source == row["state"] and t.trigger == trigger and actor in t.actors:
                if self.proof and t.evidence and not (detail or {}).get("evidence"):
                    raise Refused(f"{trigger} needs its evidence: {t.evidence}")
                seq = len(row["events"]) + 1
                row["events"].append(
                    {
                        "seq": seq,
                        "source": t.source,
                        "trigger": trigger,
                        "dest": t.dest,
                        "actor": actor,
                    }
                )
                row["state"] = t.dest
                return
        raise Refused(f"{trigger} by {actor} in {row['state']}")


def suite_of(
    service: Callable[[], TableService], spec: MachineSpec, also: MachineSpec | None = None
) -> Any:
    """A conformance suite of ``spec`` (and ``also``) over a fresh ``service()`` a run."""

    class Adapter(ConformanceAdapter[int]):
        def __init__(self) -> None:
            self.service = service()

        def create(self, context: Mapping[str, str]) -> int:
            return self.service.create(context)

        def fire(
            self,
            entity: int,
            trigger: str,
            actor: str,
            context: Mapping[str, str],
            detail: Mapping[str, Any] | None,
        ) -> None:
            self.service.fire(entity, trigger, actor, detail)

        def state(self, entity: int) -> str:
            state: str = self.service.rows[entity]["state"]
            return state

        def history(self, entity: int) -> Sequence[object]:
            events: list[object] = self.service.rows[entity]["events"]
            return events

    judged_by, tried = spec, also

    class Suite(ConformanceSuite):
        spec = judged_by
        also_try = tried

        def make_adapter(self) -> ConformanceAdapter[int]:
            return Adapter()

    return Suite


def suite_for(spec: MachineSpec, **service: bool) -> Any:
    return suite_of(lambda: TableService(spec, **service), spec)


def definition(tmp_path: Path, name: str, **parts: Any) -> MachineSpec:
    document = {
        "spec_version": 1,
        "machine": name,
        "description": "A user's own machine.",
        **parts,
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return machines.load(path)


def ship(tmp_path: Path) -> MachineSpec:
    return definition(
        tmp_path,
        "ship",
        initial="docked",
        actors={
            "stranger": {"automatic": False, "description": "A visiting captain."},
            "crew": {"automatic": True, "description": "The crew."},
        },
        states={"docked": {}, "away": {}, "sunk": {"terminal": True}},
        transitions=[
            {
                "trigger": "teleport",
                "source": "docked",
                "dest": "away",
                "actor": "stranger",
                "description": "Beam away.",
            },
            {
                "trigger": "teleport",
                "source": "away",
                "dest": "docked",
                "actor": "stranger",
                "description": "Beam back.",
            },
            {
                "trigger": "sink",
                "source": "away",
                "dest": "sunk",
                "actor": "crew",
                "description": "Sink.",
            },
        ],
    )


def test_the_unknown_names_are_ones_the_definition_lacks() -> None:
    assert unused("teleport", ["sink"]) == "teleport"
    assert unused("teleport", ["teleport", "teleport_2", "sink"]) == "teleport_3"


def test_a_service_that_takes_unknown_names_fails_though_it_uses_the_suites_own(
    tmp_path: Path,
) -> None:
    spec = ship(tmp_path)
    suite_for(spec).run(hunting(30, 10))  # the correct service passes, every edge taken
    with pytest.raises(RuleBroken) as failure:
        suite_for(spec, lenient=True).run(hunting(30, 10), require_coverage=False)
    assert failure.value.rule == "illegal-move-refused", failure.value


def island(tmp_path: Path) -> MachineSpec:
    return definition(
        tmp_path,
        "ticket",
        initial="open",
        actors={"agent": {"automatic": False, "description": "A support agent."}},
        states={
            "open": {},
            "imported": {"description": "Brought in from the old system."},
            "closed": {"terminal": True},
        },
        transitions=[
            {
                "trigger": "close",
                "source": "open",
                "dest": "closed",
                "actor": "agent",
                "description": "Close it.",
            },
            {
                "trigger": "archive_close",
                "source": "imported",
                "dest": "closed",
                "actor": "agent",
                "description": "Close an imported ticket.",
            },
        ],
        opt_out={"all_reachable": "Imported tickets start outside this lifecycle."},
    )


def test_an_edge_out_of_every_runs_reach_is_not_asked_for(tmp_path: Path) -> None:
    spec = island(tmp_path)
    suite = suite_for(spec)
    suite.run(hunting(20, 6))
    assert suite.coverage.out_of_reach(spec) == [("imported", "archive_close", "closed")]


def proved(tmp_path: Path) -> MachineSpec:
    return definition(
        tmp_path,
        "job",
        initial="running",
        actors={
            "worker": {"automatic": True, "description": "The job runner."},
            "person": {"automatic": False, "description": "Someone on call."},
        },
        states={"running": {}, "checking": {}, "done": {"terminal": True}},
        transitions=[
            {
                "trigger": "finish",
                "source": "running",
                "dest": "checking",
                "actor": "worker",
                "evidence": "The job's result.",
                "description": "The job ended.",
            },
            {
                "trigger": "accept",
                "source": "checking",
                "dest": "done",
                "actor": "person",
                "description": "Accepted.",
            },
        ],
    )


def test_a_service_that_asks_evidence_of_a_move_is_given_some(tmp_path: Path) -> None:
    spec = proved(tmp_path)
    suite_for(spec, proof=True).run(hunting(20, 6))
    assert "evidence" in EVIDENCE


class Payments(TableService):
    """A payment service written from its definition, guards included, that refuses a move
    asking evidence when none comes (safe); with ``trusting``, evidence in hand, it skips
    the actor and guard checks of that move (the one-line bug of batch 39, c B2)."""

    def __init__(self, spec: MachineSpec, *, trusting: bool = False) -> None:
        super().__init__(spec, proof=True)
        self.trusting = trusting

    def fire(self, n: int, trigger: str, actor: str, detail: Mapping[str, Any] | None) -> None:
        row = self.rows[n]
        for t in self.spec.transitions:
            if t.source != row["state"] or t.trigger != trigger:
                continue
            if t.evidence and not (detail or {}).get("evidence"):
                raise Refused(f"{trigger} needs its evidence: {t.evidence}")
            if self.trusting and t.evidence:
                actor = sorted(t.actors)[0]  # the bug: the evidence is taken as enough
            elif actor not in t.actors or not t.admits(row["context"]):
                continue
            row["events"].append(
                {"seq": len(row["events"]) + 1, "source": t.source, "trigger": trigger,
                 "dest": t.dest, "actor": actor}
            )  # fmt: skip
            row["state"] = t.dest
            return
        raise Refused(f"{trigger} by {actor} in {row['state']}")


def payment_suite(spec: MachineSpec, also: MachineSpec | None, **service: bool) -> Any:
    return suite_of(lambda: Payments(spec if also is None else also, **service), spec, also)


def payments(tmp_path: Path, *, confirm: bool = True) -> MachineSpec:
    moves = [
        {"trigger": "approve", "source": "sent", "dest": "done", "actor": "clerk",
         "description": "A clerk approves."},
    ]  # fmt: skip
    if confirm:
        moves.insert(
            0,
            {"trigger": "confirm", "source": "sent", "dest": "done", "actor": "proxy",
             "when": {"size": ["small"]}, "evidence": "The bank's answer.",
             "description": "The bank confirmed a small payment."},
        )  # fmt: skip
    return definition(
        tmp_path / ("pay" if confirm else "mutant"),
        "pay",
        initial="sent",
        context={"size": {"values": ["small", "large"], "description": "How large it is."}},
        actors={
            "proxy": {"automatic": True, "description": "The proxy."},
            "clerk": {"automatic": False, "description": "A clerk."},
        },
        states={"sent": {}, "done": {"terminal": True}},
        transitions=moves,
    )


def test_a_service_that_takes_evidence_as_enough_is_caught(tmp_path: Path) -> None:
    """Outsider batch 39 (c B2): the probes of a move that asks evidence by a wrong actor or
    under a failed guard went out without evidence, so a service that checks the evidence
    first refused them for that and its actor and guard checks were never tried: one that
    skipped them with evidence in hand passed, under every profile."""
    spec = payments(tmp_path)
    payment_suite(spec, None).run(hunting(30, 8))
    with pytest.raises(RuleBroken) as failure:
        payment_suite(spec, None, trusting=True).run(hunting(30, 8), require_coverage=False)
    assert failure.value.rule == "illegal-move-refused", failure.value


def test_a_mutant_that_drops_an_evidence_move_is_killed_by_a_safe_service(
    tmp_path: Path,
) -> None:
    """Outsider batch 39 (c B1): under a mutant without the move, the suite fired it without
    evidence; the correct service refused it (no evidence), and the mutant survived,
    blamed on the user's tests. Fired with evidence, as the definition the service runs
    on (``also_try``) asks, it is accepted, and the mutant is caught."""
    mutant, real = payments(tmp_path, confirm=False), payments(tmp_path)
    with pytest.raises(RuleBroken) as failure:
        payment_suite(mutant, real).run(hunting(30, 8), require_coverage=False)
    assert failure.value.rule == "illegal-move-refused", failure.value


class TrustsEvidenceFromAnyState(Payments):
    """Batch 40 (c B1): with evidence in hand, it moves the entity whatever its state, even
    out of a terminal one (its actor and guard checks kept)."""

    def fire(self, n: int, trigger: str, actor: str, detail: Mapping[str, Any] | None) -> None:
        row = self.rows[n]
        for t in self.spec.transitions:
            proved = t.evidence and (detail or {}).get("evidence")
            if t.trigger == trigger and proved and actor in t.actors and t.admits(row["context"]):
                row["events"].append(
                    {"seq": len(row["events"]) + 1, "source": row["state"],
                     "trigger": trigger, "dest": t.dest, "actor": actor}
                )  # fmt: skip
                row["state"] = t.dest
                return
        super().fire(n, trigger, actor, detail)


def test_a_service_that_takes_evidence_from_any_state_is_caught(tmp_path: Path) -> None:
    """Outsider batch 40 (c B1): evidence went only with fires from a state whose move asks
    it, so a service that took evidence as enough from any state, terminal ones too, was
    never tried there and passed. Evidence goes with every fire of such a trigger."""
    spec = payments(tmp_path)

    suite = suite_of(lambda: TrustsEvidenceFromAnyState(spec), spec)
    with pytest.raises(RuleBroken) as failure:
        suite.run(hunting(30, 8), require_coverage=False)
    assert failure.value.rule in {"terminal-stays-final", "illegal-move-refused"}, failure.value


def test_an_edge_its_guard_keeps_from_its_source_is_not_asked_for(tmp_path: Path) -> None:
    """Outsider batch 40 (c B2): an edge out of a state reached only under contexts its
    guard refuses can never be taken, yet the coverage check asked for it (its source was
    reached), and a correct service failed with a gap it could never close."""
    spec = definition(
        tmp_path,
        "gate",
        initial="queued",
        context={"tier": {"values": ["low", "high"], "description": "The item's tier."}},
        actors={"worker": {"automatic": True, "description": "The worker."}},
        states={"queued": {}, "review": {}, "done": {"terminal": True}},
        transitions=[
            {
                "trigger": "go",
                "source": "queued",
                "dest": "done",
                "actor": "worker",
                "description": "Straight through.",
            },
            {
                "trigger": "check",
                "source": "queued",
                "dest": "review",
                "actor": "worker",
                "when": {"tier": ["low"]},
                "description": "Review.",
            },
            {
                "trigger": "pass",
                "source": "review",
                "dest": "done",
                "actor": "worker",
                "when": {"tier": ["low"]},
                "description": "Passed.",
            },
            {
                "trigger": "fast_pass",
                "source": "review",
                "dest": "done",
                "actor": "worker",
                "when": {"tier": ["high"]},
                "description": "Never takeable.",
            },
        ],
    )
    suite = payment_suite(spec, None)
    suite.run(hunting(20, 8))
    assert suite.coverage.out_of_reach(spec) == [("review", "fast_pass", "done")]
