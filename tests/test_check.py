"""``machines check``: clean on the bundled definitions, and able to fail.

Every structural rule kind, the forbidden list and the derivation invariants are broken on
purpose in a private copy of ``spec/``; the checker must exit 1 and print a readable
counterexample (a path from the initial state, or the smallest plan). The expected paths
are worked out by hand from the graphs, not copied from the checker's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from machines.checks.report import check
from machines.cli import main
from machines.derive.proof import DERIVATION_INVARIANTS
from machines.errors import MachinesError
from machines.spec.structure import RULE_KINDS
from tests.conftest import Document, SpecCopy, transition


def run_check(spec_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["check", "--spec-dir", str(spec_dir), "--max-nodes", "3", *extra])
    return code, capsys.readouterr().out


def add_transition(machine_doc: Document, **fields: object) -> None:
    machine_doc["transitions"].append({"description": "added by a test", **fields})


@dataclass(frozen=True)
class Breakage:
    id: str
    machine: str
    change: Callable[[Document], None]
    rule: str  # the rule id (or section) the checker must name
    kind: str  # the rule kind this breakage proves able to fail
    shows: tuple[str, ...]  # text the counterexample must contain


def _drop(doc: Document, source: str, dest: str) -> None:
    doc["transitions"].remove(transition(doc, source, dest))


def _unguard(doc: Document, source: str, dest: str) -> None:
    del transition(doc, source, dest)["when"]


def _drop_rule(rule_id: str) -> Callable[[Document], None]:
    def change(doc: Document) -> None:
        doc["invariants"] = [r for r in doc["invariants"] if r["id"] != rule_id]

    return change


BREAKAGES = [
    Breakage(
        "automatic-exit-from-indeterminate",
        "outcome",
        lambda d: add_transition(
            d, trigger="retry", source="indeterminate", dest="in_flight", actor="worker"
        ),
        "fail-closed-indeterminate",
        "only_actors_exit",
        ("in_flight --park (worker)--> indeterminate --retry (worker)--> in_flight",),
    ),
    Breakage(
        "exit-from-terminal",
        "effect",
        lambda d: add_transition(
            d, trigger="rerun", source="committed", dest="executing", actor="proxy"
        ),
        "terminal-final",
        "terminal_final",
        (
            "with tier=compensable: pending --execute (proxy)--> executing --commit (proxy)--> "
            "committed --rerun (proxy)--> executing",
        ),
    ),
    Breakage(
        "pending-to-committed",
        "effect",
        lambda d: add_transition(
            d, trigger="commit", source="pending", dest="committed", actor="proxy", evidence="x"
        ),
        "no-skipping-commit",
        "only_from",
        ("pending --commit (proxy)--> committed", "no skipping"),
    ),
    Breakage(
        "backward-node-move",
        "node",
        lambda d: add_transition(
            d, trigger="restart", source="observing", dest="preparing", actor="executor"
        ),
        "forbidden",
        "forbidden",
        ("no going backwards from observing", "--restart (executor)--> preparing"),
    ),
    Breakage(
        "approval-without-irreversible-tier",
        "effect",
        lambda d: _unguard(d, "pending", "approved"),
        "approval-only-irreversible",
        "only_reachable_when",
        ("with tier=compensable: pending --approve (human)--> approved",),
    ),
    Breakage(
        "compensation-without-compensable-tier",
        "effect",
        lambda d: _unguard(d, "executing", "compensating"),
        "compensation-only-compensable",
        "only_reachable_when",
        (
            "with tier=irreversible: pending --approve (human)--> approved --resume (proxy)--> "
            "executing --compensate (saga)--> compensating",
        ),
    ),
    Breakage(
        "unknown-auto-terminalized",
        "node",
        lambda d: add_transition(
            d, trigger="give_up", source="unknown", dest="failed", actor="executor"
        ),
        "unknown-only-by-reconciliation",
        "only_actors_exit",
        (
            "with kind=observe: blocked --wake (planner)--> ready --start_observing (observer)--> "
            "observing --lose_track (observer)--> unknown --give_up (executor)--> failed",
        ),
    ),
    Breakage(
        "unknown-left-by-other-trigger",
        "node",
        lambda d: add_transition(
            d, trigger="timeout", source="unknown", dest="failed", actor="reconciler"
        ),
        "unknown-reconciliation-triggers",
        "only_triggers_exit",
        ("--timeout (reconciler)--> failed",),
    ),
    Breakage(
        "reclaim-by-automatic-actor",
        "outcome",
        lambda d: transition(d, "indeterminate", "in_flight").update(actor=["caller", "worker"]),
        "fail-closed-indeterminate",
        "only_actors_exit",
        ("lets worker leave 'indeterminate'",),
    ),
    Breakage(
        "terminal-mark-dropped",
        "effect",
        lambda d: [d["states"]["committed"].pop(k) for k in ("terminal", "annotations")],
        "always-can-finish",
        "can_terminate",
        ("from 'committed' no terminal state",),
    ),
    Breakage(
        "orphan-state",
        "effect",
        lambda d: d["states"].update(limbo={"description": "nothing leads here", "terminal": True}),
        "every-state-reachable",
        "all_reachable",
        ("no path from 'pending' reaches 'limbo'",),
    ),
    Breakage(
        "approval-by-a-machine",
        "effect",
        lambda d: transition(d, "pending", "approved").update(actor=["human", "proxy"]),
        "approval-by-a-human",
        "only_actors_enter",
        ("lets proxy enter 'approved'",),
    ),
    Breakage(
        "irreversible-skips-approval",
        "effect",
        lambda d: transition(d, "pending", "executing")["when"].update(
            tier=["compensable", "irreversible"]
        ),
        "irreversible-runs-only-after-approval",
        "only_via",
        ("with tier=irreversible: pending --execute (proxy)--> executing",),
    ),
    Breakage(
        "request-failed-while-money-moves",
        "request",
        lambda d: _unguard(d, "executing", "failed"),
        "no-auto-release-with-money-in-flight",
        "automatic_enters_only_when",
        ("with side_effects=started:", "--fail (system)--> failed"),
    ),
    Breakage(
        "node-completed-without-evidence",
        "node",
        lambda d: transition(d, "observing", "completed").pop("evidence"),
        "no-auto-terminal-money-in-flight",
        "automatic_needs_evidence",
        ("without stated evidence", "--complete (observer)--> completed"),
    ),
    Breakage(
        "cancel-after-start",
        "node",
        lambda d: add_transition(
            d, trigger="cancel", source="submitted", dest="cancelled", actor="operator"
        ),
        "started-nodes-are-not-cancelled",
        "only_from",
        ("--cancel (operator)--> cancelled",),
    ),
    Breakage(
        "baseline-rule-implied-when-dropped",
        "outcome",
        lambda d: (
            _drop_rule("terminal-final")(d),
            add_transition(
                d, trigger="revive", source="succeeded", dest="in_flight", actor="operator"
            ),
        ),
        "terminal-final",
        "terminal_final",
        ("'succeeded' -> 'in_flight' (trigger revive",),
    ),
    Breakage(
        "dropped-executing-to-manual-intervention",
        "request",
        lambda d: _drop(d, "executing", "manual_intervention"),
        "derivation/money-safe/derivation-consistency",
        "derivation",
        ("-> manual_intervention",),
    ),
]


def test_bundled_definitions_are_clean(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "OK: no violations" in out
    for machine in ("effect", "outcome", "node", "request"):
        assert f"\n  {machine} " in out


def test_findings_are_printed_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    report = check(max_nodes=2)
    main(["check", "--max-nodes", "2", "--findings"])
    out = capsys.readouterr().out
    assert len(report.findings) >= 20
    for finding in report.findings:
        assert f"{finding.machine}/{finding.id} (seed {finding.seed})" in out


def test_by_default_the_findings_are_counted_and_the_report_fits_a_screen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """issue 16: ``machines check`` printed 290 lines, the findings in full."""
    report = check(max_nodes=2)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 30, out
    assert f"findings: {len(report.findings)} recorded" in out
    assert "machines check --findings prints them" in out
    assert not any(f"{f.machine}/{f.id} (seed" in out for f in report.findings)


def test_the_hint_repeats_the_options_given(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    spaced = spec_copy.path.rename(spec_copy.path.parent / "my spec")
    assert main(["check", "--spec-dir", str(spaced), "--max-nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"machines check --spec-dir '{spaced}' --max-nodes 2 --findings prints them" in out


def test_findings_with_json_is_refused_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """The JSON document always holds the findings: ``--findings`` would change nothing."""
    with pytest.raises(SystemExit) as stop:
        main(["check", "--findings", "--format", "json", "--max-nodes", "3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "the JSON document always holds the findings" in err
    assert "run machines check --max-nodes 3 --format json" in err


def test_no_findings_is_refused_with_a_hint(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    """The findings are left out by default now: the old flag is an error, not a no-op."""
    with pytest.raises(SystemExit) as stop:
        main(["check", "--no-findings", "--spec-dir", str(spec_copy.path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--no-findings is gone" in err
    assert f"run machines check --spec-dir {spec_copy.path}" in err


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b.id for b in BREAKAGES])
def test_breakage_is_caught_with_a_counterexample(
    breakage: Breakage, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_copy.edit(breakage.machine, breakage.change)
    code, out = run_check(spec_copy.path, capsys)
    assert code == 1, out
    violations = out[out.index("violations (") :]
    assert f"{breakage.machine}: [{breakage.rule}]" in violations
    for text in breakage.shows:
        assert text in violations, f"{text!r} not in:\n{violations}"


def test_every_rule_kind_is_proven_able_to_fail() -> None:
    tested = {b.kind for b in BREAKAGES}
    assert set(RULE_KINDS) <= tested, (
        f"rule kinds without a breaking test: {set(RULE_KINDS) - tested}"
    )


def test_at_least_eight_distinct_broken_copies() -> None:
    assert len({b.id for b in BREAKAGES}) >= 8


def test_clean_copy_is_clean(spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]) -> None:
    """Round-tripping the YAML through the test helper changes nothing the checker sees."""
    for machine in ("effect", "outcome", "node", "request"):
        spec_copy.edit(machine, lambda d: None)
    code, out = run_check(spec_copy.path, capsys)
    assert code == 0, out


@pytest.mark.parametrize(
    ("content", "why"),
    [("states: [unclosed\n", "not valid YAML"), ("a: 1\na: 2\n", "duplicate key 'a'")],
)
def test_unreadable_input_exits_2(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str], content: str, why: str
) -> None:
    spec_copy.file("outcome").write_text(content)
    code, out = run_check(spec_copy.path, capsys)
    assert code == 2
    assert "UNREADABLE" in out and why in out and "outcome.yaml" in out


def test_missing_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_check(tmp_path / "nope", capsys)
    assert code == 2
    assert "not a directory" in out


def test_schema_violation_exits_1_with_line(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_copy.edit("outcome", lambda d: d["states"]["failed"].update(colour="red"))
    code, out = run_check(spec_copy.path, capsys)
    assert code == 1
    assert "unknown key(s) 'colour'" in out
    assert "at states.failed" in out


class TestDerivationBreakages:
    def test_seed_rules_as_default_fail(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        spec_copy.edit("request", lambda d: d["derivation"].update(default="qtg-v3"))
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "the default rule set may break nothing" in out
        assert "[submitting (side effect), failed] -> failed (rule failed-only)" in out

    def test_dropped_in_flight_rule_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        def drop(d: Document) -> None:
            rules = d["derivation"]["rule_sets"]["money-safe"]["rules"]
            rules[:] = [r for r in rules if r["id"] != "stopped-with-money-in-flight"]

        spec_copy.edit("request", drop)
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "[derivation/money-safe/no-auto-terminal-money-in-flight]" in out
        assert "[submitting (side effect), failed] -> failed (rule safe-failure)" in out

    def test_dropped_manual_intervention_rule_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        def drop(d: Document) -> None:
            rules = d["derivation"]["rule_sets"]["money-safe"]["rules"]
            rules[:] = [r for r in rules if r["id"] != "stopped-after-money-moved"]

        spec_copy.edit("request", drop)
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "[derivation/money-safe/no-auto-terminal-money-in-flight]" in out
        assert "[completed (side effect), failed] -> failed (rule safe-failure)" in out

    def test_stale_known_violation_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        spec_copy.edit(
            "request",
            lambda d: d["derivation"]["rule_sets"]["money-safe"].update(
                known_violations={"derivation-settles": "in-progress-undefined"}
            ),
        )
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "no plan breaks it" in out

    def test_unrecorded_seed_violation_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        spec_copy.edit(
            "request", lambda d: d["derivation"]["rule_sets"]["qtg-v3"].pop("known_violations")
        )
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "[derivation/qtg-v3/derivation-settles]" in out
        assert "[cancelled] -> None (no rule matched)" in out

    def test_dead_rule_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        def shadow(d: Document) -> None:
            rules = d["derivation"]["rule_sets"]["money-safe"]["rules"]
            rules.insert(
                0,
                {
                    "id": "anything-unknown",
                    "when": [{"any": {"state": ["unknown"]}}],
                    "result": None,
                    "description": "shadows later unknown rules",
                },
            )

        spec_copy.edit("request", shadow)
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "rule 'unknown-awaits-reconciliation' decides no plan" in out

    @pytest.mark.parametrize(
        ("change", "plan"),
        [
            # too loose: a withdrawal being sent does not count as money moving
            ("remove", "[submitting (side effect)]"),
            # too strict: a withdrawal still being prepared counts, so it cannot be cancelled
            ("add", "[preparing (side effect)]"),
        ],
    )
    def test_a_derived_context_that_disagrees_with_the_tags_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str], change: str, plan: str
    ) -> None:
        def edit(d: Document) -> None:
            started = d["derivation"]["context"]["side_effects"][0]["when"][0]["any"]["state"]
            if change == "remove":
                started.remove("submitting")
            else:
                started.append("preparing")

        spec_copy.edit("request", edit)
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "[derivation/money-safe/context-matches-money]" in out
        assert plan in out

    def test_completion_with_a_failed_node_is_caught(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        def sloppy(d: Document) -> None:
            rule = d["derivation"]["rule_sets"]["money-safe"]["rules"][0]
            rule["when"][0]["all"]["state"].append("failed")

        spec_copy.edit("request", sloppy)
        code, out = run_check(spec_copy.path, capsys)
        assert code == 1
        assert "[derivation/money-safe/completion-means-done]" in out
        assert "[failed] -> completed (rule all-done)" in out


def test_every_derivation_invariant_is_proven_able_to_fail() -> None:
    """Each derivation invariant is named by a breakage assertion in this file."""
    source = Path(__file__).read_text()
    broken = {i for i in DERIVATION_INVARIANTS if re.search(rf"derivation/[\w-]+/{i}\b", source)}
    if "decides no plan" in source:
        broken.add("no-dead-rule")
    assert broken == set(DERIVATION_INVARIANTS), set(DERIVATION_INVARIANTS) - broken


def test_cli_entry_points(tmp_path: Path) -> None:
    """The module entry point runs from a folder outside the checkout and sets the exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "machines", "check", "--max-nodes", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: no violations" in done.stdout


def test_schema_and_ir_list_exactly_the_rule_catalog() -> None:
    import json
    import typing

    from machines.spec import RuleKind
    from machines.spec.loader import SCHEMA_FILE, bundled_spec_dir

    schema = json.loads((bundled_spec_dir() / SCHEMA_FILE).read_text())
    assert schema["$defs"]["rule"]["properties"]["rule"]["enum"] == list(RULE_KINDS)
    assert set(typing.get_args(RuleKind)) == set(RULE_KINDS)


@pytest.mark.parametrize("max_nodes", [0, 7, -1, True, "5", None, 10**100])
def test_the_derivation_check_is_bounded_in_the_library_too(max_nodes: Any) -> None:
    """issue 13 item 21: `check --max-nodes 8` ran for minutes and 100000 ended in a
    MemoryError; the CLI bounds it, and so does `machines.check` itself."""
    with pytest.raises(MachinesError, match="max_nodes"):
        check(max_nodes=max_nodes)


@pytest.mark.parametrize("spec_dir", [5, b"spec", ["spec"], object()])
def test_check_reports_a_spec_dir_that_is_not_a_path(spec_dir: Any) -> None:
    report = check(spec_dir)
    assert report.exit_code == 2 and "str or a Path" in report.unreadable[0]
