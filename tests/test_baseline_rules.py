"""A definition says only what is its own (issue 29): the three baseline rules are implied
unless a definition opts out of one with a reason; the title, the origin and the states'
descriptions are optional. An implied rule is judged like a written one, and a definition
that writes it out has the same digest."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from machines.cli import main
from machines.errors import SpecError, SpecViolation
from machines.render.pages import machine_page
from machines.spec.canonical import semantic_digest
from machines.spec.document import as_document
from machines.spec.loader import load
from machines.spec.structure import check_structure
from machines.spec.vocabulary import BASELINE_RULES

MINIMAL = """\
spec_version: 1
machine: door
description: A door.
initial: shut
actors:
  hand: {automatic: false, description: Someone's hand.}
states:
  shut: {}
  open:
  gone: {terminal: true}
transitions:
  - {trigger: push, source: shut, dest: open, actor: hand, description: Open it.}
  - {trigger: pull, source: open, dest: shut, actor: hand, description: Shut it.}
  - {trigger: remove, source: [shut, open], dest: gone, actor: hand, description: Take it.}
"""


def written(tmp_path: Path, text: str, name: str = "door") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_a_minimal_definition_loads_with_the_baseline_rules_implied(tmp_path: Path) -> None:
    spec = load(written(tmp_path, MINIMAL))
    assert spec.title == "Door" and spec.origin == ""
    assert spec.states["shut"].description == ""
    implied = {r.kind: r.id for r in spec.invariants}
    assert implied == {kind: rule.id for kind, rule in BASELINE_RULES.items()}
    assert check_structure(spec) == []


def test_a_state_written_with_nothing_is_a_state_with_nothing(tmp_path: Path) -> None:
    spec = load(written(tmp_path, MINIMAL))
    assert spec.states["open"].description == "" and not spec.states["open"].terminal


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        # a terminal state with a way out
        (
            lambda t: t.replace(
                "description: Take it.}",
                "description: Take it.}\n  - {trigger: back, source: gone, dest: shut, "
                "actor: hand, description: Back.}",
            ),
            "terminal-final",
        ),
        # a state nothing reaches
        (lambda t: t.replace("  gone:", "  attic: {}\n  gone:"), "all-reachable"),
        # a state no path leaves for a terminal one
        (
            lambda t: t.replace("  gone:", "  stuck: {}\n  gone:").replace(
                "description: Shut it.}",
                "description: Shut it.}\n  - {trigger: jam, source: open, dest: stuck, "
                "actor: hand, description: Jam.}",
            ),
            "can-terminate",
        ),
    ],
    ids=["terminal_final", "all_reachable", "can_terminate"],
)
def test_an_implied_rule_is_judged_like_a_written_one(
    tmp_path: Path, edit: object, rule: str
) -> None:
    text = MINIMAL
    assert callable(edit)
    with pytest.raises(SpecViolation, match=rule):
        load(written(tmp_path, edit(text)))


def test_writing_the_baseline_rules_out_keeps_the_digest(tmp_path: Path) -> None:
    text = MINIMAL
    implied = load(written(tmp_path, text))
    rules = "".join(
        f"  - {{id: {r.id}, rule: {kind}, description: My own words.}}\n"
        for kind, r in BASELINE_RULES.items()
    )
    (tmp_path / "explicit").mkdir()
    explicit = load(written(tmp_path / "explicit", text + "invariants:\n" + rules))
    assert semantic_digest(implied) == semantic_digest(explicit)


def test_opting_out_needs_a_reason_and_changes_the_digest(tmp_path: Path) -> None:
    forever = MINIMAL.replace(
        "  - {trigger: remove, source: [shut, open], dest: gone, actor: hand, "
        "description: Take it.}\n",
        "",
    )
    forever = forever.replace("  gone: {terminal: true}\n", "")
    with pytest.raises(SpecViolation, match="can-terminate"):
        load(written(tmp_path, forever))
    (tmp_path / "out").mkdir()
    spec = load(
        written(
            tmp_path / "out",
            forever + "opt_out:\n  can_terminate: A door is never taken away.\n",
        )
    )
    assert {r.kind for r in spec.invariants} == {"all_reachable", "terminal_final"}
    assert dict(spec.opt_out) == {"can_terminate": "A door is never taken away."}
    assert "Opts out of `can_terminate`: A door is never taken away." in machine_page(
        spec, "diagrams"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="opt_out"):
        load(written(tmp_path / "empty", forever + "opt_out:\n  can_terminate: ''\n"))
    with pytest.raises(SpecError, match="opt_out"):
        load(written(tmp_path / "empty", forever + "opt_out:\n  can_finish: Typo.\n"))


def test_an_opt_out_digest_differs_from_the_rule_kept(tmp_path: Path) -> None:
    text = MINIMAL
    kept = load(written(tmp_path, text))
    (tmp_path / "out").mkdir()
    out = load(written(tmp_path / "out", text + "opt_out:\n  all_reachable: Not needed.\n"))
    assert semantic_digest(kept) != semantic_digest(out)


def test_a_rule_both_declared_and_opted_out_of_is_refused(tmp_path: Path) -> None:
    text = MINIMAL + (
        "invariants:\n  - {id: mine, rule: can_terminate, description: Mine.}\n"
        "opt_out:\n  can_terminate: But also not.\n"
    )
    with pytest.raises(SpecError, match="both declares a can_terminate rule and opts out"):
        load(written(tmp_path, text))


def test_an_id_an_implied_rule_needs_is_refused_when_taken(tmp_path: Path) -> None:
    text = MINIMAL + (
        "invariants:\n  - {id: can-terminate, rule: only_actors_exit, states: [open], "
        "actors: [hand], description: Taken.}\n"
    )
    with pytest.raises(SpecError, match="'can-terminate' names a only_actors_exit rule"):
        load(written(tmp_path, text))


def test_export_leaves_the_defaults_out_and_loads_back(tmp_path: Path) -> None:
    spec = load(written(tmp_path, MINIMAL))
    doc = as_document(spec)
    assert not {"title", "origin", "invariants", "opt_out"} & set(doc)
    assert doc["states"]["shut"] == {}
    (tmp_path / "again").mkdir()
    again = load(written(tmp_path / "again", yaml.safe_dump(doc, sort_keys=False)))
    assert again.same_definition(spec)


def test_a_page_without_origin_or_findings_says_neither(tmp_path: Path) -> None:
    page = machine_page(load(written(tmp_path, MINIMAL)), "diagrams")
    assert page.startswith("# door: Door\n")
    assert "Origin:" not in page and "## Findings" not in page
    assert "`terminal-final`" in page or "terminal-final" in page


def test_export_finds_a_machine_of_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "specs").mkdir()
    written(tmp_path / "specs", MINIMAL)
    (tmp_path / "pyproject.toml").write_text('[tool.machines]\nspec_dir = "specs"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINES_SPEC_DIR", raising=False)
    assert main(["export", "door", "--format", "yaml"]) == 0
    assert "machine: door" in capsys.readouterr().out
    assert main(["export", "dor"]) == 2
    said = capsys.readouterr().err
    assert "no machine 'dor' here (did you mean 'door'?)" in said and "[tool.machines]" in said


def test_terminal_final_is_never_opted_out_of(tmp_path: Path) -> None:
    """Outsider batch 15: a v2 that opted out of terminal_final and added an automatic
    exit from a terminal state was accepted by check, the store and migrate, and then
    called a breach by the audit. A terminal state is one nothing leaves, always."""
    reopened = MINIMAL + ("opt_out:\n  terminal_final: Jobs may be reopened.\n")
    with pytest.raises(SpecError, match="opt_out"):
        load(written(tmp_path, reopened))
    exit_from_terminal = (
        MINIMAL.replace(
            "description: Take it.}",
            "description: Take it.}\n  - {trigger: back, source: gone, dest: shut, "
            "actor: hand, description: Back.}",
        )
        + "opt_out:\n  can_terminate: Not needed.\n"
    )
    (tmp_path / "two").mkdir()
    with pytest.raises(SpecViolation, match="terminal-final"):
        load(written(tmp_path / "two", exit_from_terminal))


@pytest.mark.parametrize("name", ["findings", "rules"])
def test_a_machine_may_not_take_the_name_of_a_page_beside_it(tmp_path: Path, name: str) -> None:
    """Outsider batch 15: a machine named findings or rules lost its page to the findings
    or rules page, on the site and in machines docs, with exit 0."""
    text = MINIMAL.replace("machine: door", f"machine: {name}")
    with pytest.raises(SpecError, match=f"machine name '{name}' is taken by a page"):
        load(written(tmp_path, text, name))


@pytest.mark.parametrize(
    "name",
    ["machines_repairs", "machines_definitions", "machines_x", "sqlite_x", "pg_x", "sqlite", "pg"],
)
def test_a_machine_may_not_take_the_prefix_of_a_stores_own_tables(
    tmp_path: Path, name: str
) -> None:
    """Outsider batch 35 (a G): a machine named ``machines_repairs`` passed ``machines
    check``, and every PostgreSQL open then failed as if the store were tampered with, its
    guard's name taken by the record of repairs' own function. The store's prefix is
    reserved where definitions are read."""
    text = MINIMAL.replace("machine: door", f"machine: {name}")
    prefix = f"{name}_"[: f"{name}_".index("_") + 1]  # batch 37: sqlite makes sqlite_moves
    with pytest.raises(
        SpecError, match=f"machine name '{name}' makes tables that start with '{prefix}'"
    ):
        load(written(tmp_path, text, name))
