"""A rule that can never fail keeps nothing (outsider batch 41, c 9): ``only_actors_exit``
on a terminal state, ``only_from`` naming every state, ``only_reachable_when`` admitting
every value were all accepted, and a mutant each should kill would survive. Each is now
reported like a broken rule, at its entry's line; a rule that keeps something is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from machines.spec import MachineSpec
from machines.spec.loader import load, read_definition
from machines.spec.structure import check_structure

DOOR = """\
spec_version: 1
machine: door
description: A door.
initial: shut
context:
  kind: {values: [wood, glass], description: What it is made of.}
actors:
  hand: {automatic: false, description: Someone's hand.}
  wind: {automatic: true, description: The wind.}
states:
  shut: {}
  open: {}
  gone: {terminal: true}
transitions:
  - {trigger: push, source: shut, dest: open, actor: hand, description: Open it.}
  - {trigger: pull, source: open, dest: shut, actor: [hand, wind], description: Shut it.}
  - {trigger: remove, source: [shut, open], dest: gone, actor: hand, description: Take it.}
invariants:
"""

RULE = "  - {{id: {id}, rule: {kind}, description: A rule., {params}}}\n"

CASES = {
    "an exit rule on a terminal state": (
        "only_actors_exit", "states: [gone], actors: [hand]", "every state it names is terminal",
    ),
    "an exit rule naming every actor": (
        "only_actors_exit", "states: [open], actors: [hand, wind]", "names every actor",
    ),
    "an entry rule naming every actor": (
        "only_actors_enter", "states: [shut], actors: [hand, wind]", "names every actor",
    ),
    "a trigger rule naming every trigger": (
        "only_triggers_exit", "states: [open], triggers: [push, pull, remove]",
        "names every trigger",
    ),
    "only_from naming every state a move leaves": (
        "only_from", "states: [gone], sources: [shut, open]", "every state a move can come from",
    ),
    "a guard admitting every value": (
        "only_reachable_when", "states: [gone], when: {kind: [wood, glass]}",
        "its when admits every context",
    ),
    "only_via through the state it keeps": (  # batch 44 b 25
        "only_via", "states: [gone], via: [gone]", "one of its via states",
    ),
    "can_terminate holding every state": (  # batch 44 b 26
        "can_terminate", "holds: [shut, open]", "its holds name every state",
    ),
}  # fmt: skip


def door(tmp_path: Path, kind: str, params: str) -> Path:
    path = tmp_path / "door.yaml"
    path.write_text(DOOR + RULE.format(id="kept", kind=kind, params=params), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", CASES)
def test_a_rule_that_can_never_fail_is_reported(tmp_path: Path, case: str) -> None:
    kind, params, why = CASES[case]
    found = [
        v for v in check_structure(load_loose(door(tmp_path, kind, params))) if v.rule == "kept"
    ]
    assert len(found) == 1 and "the rule can never fail" in found[0].message, found
    assert why in found[0].message and found[0].line == 19, found


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("only_actors_exit", "states: [open], actors: [hand]"),
        ("only_from", "states: [gone], sources: [open]"),
        ("only_reachable_when", "states: [gone], when: {kind: [wood]}"),
        ("only_via", "states: [gone], via: [open]"),
        ("can_terminate", "holds: [open]"),
    ],
)
def test_a_rule_that_keeps_something_is_not(tmp_path: Path, kind: str, params: str) -> None:
    spec = load_loose(door(tmp_path, kind, params))
    assert not any("can never fail" in v.message for v in check_structure(spec))


def load_loose(path: Path) -> MachineSpec:
    """The definition read without refusing its rule violations (what ``check`` reads)."""
    return read_definition(path)


def test_a_rule_that_can_never_fail_stops_a_load(tmp_path: Path) -> None:
    from machines.errors import SpecViolation

    with pytest.raises(SpecViolation, match="can never fail"):
        load(door(tmp_path, "only_actors_exit", "states: [gone], actors: [hand]"))
