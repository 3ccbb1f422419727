"""The ``fail-closed`` tag states a rule of its own: an automatic actor leaves such a state
only by a move that states its evidence (a reconciler reading the venue's records), every
other way out is a person's. Before, a worker that gave up on a parked state checked clean,
and only the audit of a store caught the first such move. The ``needs-human`` tag states a
stricter one: only people leave such a state."""

from __future__ import annotations

from pathlib import Path

import pytest

from machines.cli import main
from machines.errors import SpecViolation
from machines.spec.loader import load, read_definition
from machines.spec.structure import check_structure

PARKED = """\
spec_version: 1
machine: charge
description: A charge that may end parked.
initial: working
actors:
  worker: {automatic: true, description: The worker.}
  person: {automatic: false, description: A person.}
states:
  working: {tags: [effect-started]}
  done: {terminal: true}
  stuck: {tags: [effect-started, fail-closed]}
transitions:
  - {trigger: finish, source: working, dest: done, actor: worker, description: Done.}
  - {trigger: park, source: working, dest: stuck, actor: worker, description: Parked.}
  - {trigger: decide, source: stuck, dest: done, actor: person, description: Decided.}
"""

GIVE_UP = "  - {trigger: give_up, source: stuck, dest: done, actor: worker, description: Quit.}\n"


def written(tmp_path: Path, text: str) -> Path:
    (tmp_path / "specs").mkdir(exist_ok=True)
    path = tmp_path / "specs" / "charge.yaml"
    path.write_text(text)
    return path


def test_a_persons_exit_from_a_fail_closed_state_checks_clean(tmp_path: Path) -> None:
    assert check_structure(load(written(tmp_path, PARKED))) == []


def test_an_automatic_exit_without_evidence_is_a_violation(tmp_path: Path) -> None:
    path = written(tmp_path, PARKED + GIVE_UP)
    with pytest.raises(SpecViolation, match="line 16: charge: \\[fail-closed-exits\\]"):
        load(path)
    (v,) = check_structure(read_definition(path))
    assert (v.rule, v.kind, v.line) == ("fail-closed-exits", "fail-closed", 16)
    assert "automatic actor worker leaves fail-closed state 'stuck'" in v.message
    assert "add 'evidence:'" in v.message
    assert [t.trigger for t in v.path or ()] == ["park", "give_up"]


def test_an_automatic_exit_that_states_its_evidence_checks_clean(tmp_path: Path) -> None:
    reading = GIVE_UP.replace("actor: worker,", "actor: worker, evidence: the venue's records,")
    assert check_structure(load(written(tmp_path, PARKED + reading))) == []


@pytest.mark.parametrize("actor", ["worker", "[person, worker]"])
def test_machines_check_fails_on_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], actor: str
) -> None:
    written(tmp_path, PARKED + GIVE_UP.replace("actor: worker", f"actor: {actor}"))
    assert main(["check", "--spec-dir", str(tmp_path / "specs")]) == 1
    assert "[fail-closed-exits]" in capsys.readouterr().out


# -- needs-human: a person must act before anything moves -------------------------------

WAITING = PARKED.replace(
    "  stuck: {tags: [effect-started, fail-closed]}", "  stuck: {tags: [needs-human]}"
)


def test_a_persons_exit_from_a_needs_human_state_checks_clean(tmp_path: Path) -> None:
    assert check_structure(load(written(tmp_path, WAITING))) == []


@pytest.mark.parametrize("evidence", ["", " evidence: the venue's records,"])
def test_any_automatic_exit_from_a_needs_human_state_is_a_violation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], evidence: str
) -> None:
    """Not even on evidence: the tag says nothing moves before a person acts, and the desk
    lists the state as a person's (batch 43 b 20)."""
    move = GIVE_UP.replace("actor: worker,", f"actor: [person, worker],{evidence}")
    path = written(tmp_path, WAITING + move)
    with pytest.raises(SpecViolation, match="line 16: charge: \\[needs-human-exits\\]"):
        load(path)
    (v,) = check_structure(read_definition(path))
    assert (v.rule, v.kind, v.line) == ("needs-human-exits", "needs-human", 16)
    assert "automatic actor worker leaves 'stuck', which is tagged needs-human" in v.message
    assert main(["check", "--spec-dir", str(tmp_path / "specs")]) == 1
    assert "[needs-human-exits]" in capsys.readouterr().out


def test_a_terminal_fail_closed_state_is_a_violation(tmp_path: Path) -> None:
    """Outsider batch 45 (b 16): a terminal state tagged as waiting on a person checked
    clean. A fail-closed state that is terminal can never be settled by anyone; a
    needs-human one is a person's repair outside the machine (the effect log's
    ``compensation_failed``), which the tag's description now says."""
    ended = PARKED.replace(
        "stuck: {tags: [effect-started, fail-closed]}",
        "stuck: {tags: [effect-started, fail-closed], terminal: true}",
    ).replace(
        "  - {trigger: decide, source: stuck, dest: done, actor: person, description: Decided.}\n",
        "",
    )
    path = written(tmp_path, ended)
    (v,) = check_structure(read_definition(path))
    assert (v.rule, v.kind, v.line) == ("fail-closed-terminal", "fail-closed", 11)
    assert "terminal state 'stuck' is tagged fail-closed" in v.message
    repair = ended.replace("fail-closed], terminal", "needs-human], terminal")
    assert check_structure(read_definition(written(tmp_path, repair))) == []
