"""Every structural violation names its file and the line a user fixes it at.

``machines check`` prints ``file:line:`` first (``Violation.describe``), and
``machines.load``'s ``SpecViolation`` names the line of each problem. The expected line is
worked out by this test from the text it wrote, through PyYAML's own node tree (never
from the package's line table, never hard-coded): the transition's entry for a rule judged
edge by edge and for a forbidden move, the state's entry for an unreachable or stuck
state, the rule's entry for a rule about paths, the rule set's entry for a derivation.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import machines
from machines import SpecViolation
from machines.checks.report import check
from machines.cli import main
from machines.render.export import export
from machines.spec.loader import read_definition
from machines.spec.structure import Violation
from tests.conftest import Document, SpecCopy
from tests.test_check import BREAKAGES, Breakage

REFUND = Path(__file__).parent / "user_project" / "specs" / "refund.yaml"

EDGE_KINDS = {
    "terminal_final",
    "only_actors_exit",
    "only_actors_enter",
    "only_triggers_exit",
    "only_from",
    "automatic_enters_only_when",
    "automatic_needs_evidence",
    "forbidden",
}


def node_line(text: str, key_path: tuple[str | int, ...]) -> int:
    """The 1-based line where PyYAML's node tree puts ``key_path`` (a mapping entry's
    key, a list item's first line)."""
    node: Any = yaml.compose(text, Loader=yaml.SafeLoader)
    line = 1
    for part in key_path:
        if isinstance(part, int):
            node = node.value[part]
            line = node.start_mark.line + 1
            continue
        key, node = next((k, v) for k, v in node.value if k.value == part)
        line = key.start_mark.line + 1
    return line


def entry_of(doc: Document, edge: tuple[str, str, str]) -> int:
    """The index under ``transitions:`` of the entry that defines ``(source, trigger,
    dest)``."""
    source, trigger, dest = edge
    found = [
        i
        for i, t in enumerate(doc["transitions"])
        if t["trigger"] == trigger
        and t["dest"] == dest
        and source in ([t["source"]] if isinstance(t["source"], str) else t["source"])
    ]
    assert len(found) == 1, (edge, found)
    return found[0]


def expected_key_path(breakage: Breakage, v: Violation, doc: Document) -> tuple[str | int, ...]:
    if breakage.kind in EDGE_KINDS:
        match = re.search(r"'(\w+)' -> '(\w+)' \(trigger (\w+),", v.message)
        assert match is not None, v.message
        source, dest, trigger = match.groups()
        return ("transitions", entry_of(doc, (source, trigger, dest)))
    if breakage.kind in ("all_reachable", "can_terminate"):
        match = re.search(r"reaches '(\w+)'|^from '(\w+)'", v.message)
        assert match is not None, v.message
        return ("states", match.group(1) or match.group(2))
    if breakage.kind == "derivation":
        return ("derivation", "rule_sets", v.rule.split("/")[1])
    ids = [r["id"] for r in doc["invariants"]]
    return ("invariants", ids.index(v.rule))


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b.id for b in BREAKAGES])
def test_every_breakage_names_its_file_and_line(breakage: Breakage, spec_copy: SpecCopy) -> None:
    spec_copy.edit(breakage.machine, breakage.change)
    path = spec_copy.file(breakage.machine)
    text = path.read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    found = [v for v in check(spec_copy.path, max_nodes=3).violations if v.rule == breakage.rule]
    assert found, breakage.id
    for v in found:
        assert v.file == str(path)
        assert v.line == node_line(text, expected_key_path(breakage, v, doc)), v.describe()
        assert v.describe().startswith(f"{path}:{v.line}: {breakage.machine}: [{v.rule}] ")


def broken_refund(directory: Path) -> tuple[Path, int]:
    """refund.yaml with ``found_refunded`` given to ``service`` (which breaks
    ``people-settle-unknown``), and the line of that transition's entry."""
    text = REFUND.read_text(encoding="utf-8")
    old = "{trigger: found_refunded, source: unknown, dest: refunded, actor: approver,"
    assert text.count(old) == 1
    text = text.replace(old, old.replace("approver", "service"))
    path = directory / "refund.yaml"
    path.write_text(text, encoding="utf-8")
    (line,) = [n for n, t in enumerate(text.splitlines(), 1) if "trigger: found_refunded" in t]
    return path, line


def test_a_users_broken_rule_names_the_transition_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, line = broken_refund(tmp_path)
    v, also, human = check(tmp_path).violations  # 'unknown' is fail-closed and needs-human
    assert (v.machine, v.rule, v.kind) == ("refund", "people-settle-unknown", "only_actors_exit")
    assert (also.rule, also.line) == ("fail-closed-exits", line)
    assert (human.rule, human.line) == ("needs-human-exits", line)
    assert (v.file, v.line, v.location) == (str(path), line, f"{path}:{line}")
    assert main(["check", "--spec-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"refund.yaml:{line}: refund: [people-settle-unknown] 'unknown' -> 'refunded'" in out


def test_load_names_the_line_of_each_violation(tmp_path: Path) -> None:
    """``machines.load`` refuses the broken file with a ``SpecViolation`` that names the
    file (its path) and the line of the entry."""
    path, line = broken_refund(tmp_path)
    with pytest.raises(SpecViolation) as info:
        machines.load(path)
    assert info.value.path == path
    problem, also, human = info.value.problems
    assert problem.startswith(f"line {line}: refund: [people-settle-unknown] ")
    assert also.startswith(f"line {line}: refund: [fail-closed-exits] ")
    assert human.startswith(f"line {line}: refund: [needs-human-exits] ")
    assert str(info.value).startswith(f"{path}: 3 problems:\n  - line {line}: refund: ")


def test_lines_come_from_the_file_that_was_read(tmp_path: Path) -> None:
    """The same broken definition exported and read again is located in the exported
    file, at its own line: lines belong to where a spec was read, not to the spec."""
    path, line = broken_refund(tmp_path)
    spec = read_definition(path)
    other = tmp_path / "exported"
    other.mkdir()
    (other / "refund.yaml").write_text(export(spec, "yaml"), encoding="utf-8")
    exported_text = (other / "refund.yaml").read_text(encoding="utf-8")
    index = entry_of(yaml.safe_load(exported_text), ("unknown", "found_refunded", "refunded"))
    v, _, _ = check(other).violations
    assert v.file == str(other / "refund.yaml")
    assert v.line == node_line(exported_text, ("transitions", index)) != line
    assert read_definition(other / "refund.yaml").same_definition(spec)


def test_a_forbidden_move_names_the_transition_and_the_entry(tmp_path: Path) -> None:
    text = REFUND.read_text(encoding="utf-8").replace(
        "  - {trigger: found_not_refunded,",
        "  - {trigger: resend, source: unknown, dest: sending, actor: approver,\n"
        "     description: sent again.}\n"
        "  - {trigger: found_not_refunded,",
    )
    (tmp_path / "refund.yaml").write_text(text, encoding="utf-8")
    doc = yaml.safe_load(text)
    (v,) = [v for v in check(tmp_path).violations if v.rule == "forbidden"]
    assert v.line == node_line(
        text, ("transitions", entry_of(doc, ("unknown", "resend", "sending")))
    )
    assert f"(forbidden at line {node_line(text, ('forbidden', 0))}):" in v.message


def test_a_definition_problem_names_its_line(tmp_path: Path) -> None:
    """A problem the loader finds (here an undefined state) is a violation at its line,
    the line said once: in ``line``, not again in the message."""
    text = REFUND.read_text(encoding="utf-8").replace(
        "dest: declined, actor: approver,\n", "dest: delined, actor: approver,\n", 1
    )
    (tmp_path / "refund.yaml").write_text(text, encoding="utf-8")
    (v,) = check(tmp_path).violations
    index = [t["trigger"] for t in yaml.safe_load(text)["transitions"]].index("reject")
    assert (v.rule, v.file) == ("definition", str(tmp_path / "refund.yaml"))
    assert v.line == node_line(text, ("transitions", index, "dest"))
    assert v.message.startswith(f"at transitions[{index}].dest: 'delined' is not a state")


def test_a_known_violation_that_is_no_invariant_names_its_entry(spec_copy: SpecCopy) -> None:
    spec_copy.edit(
        "request",
        lambda d: d["derivation"]["rule_sets"]["qtg-v3"]["known_violations"].update(
            {"no-such-invariant": "qtg-fails-with-money-in-flight"}
        ),
    )
    text = spec_copy.file("request").read_text(encoding="utf-8")
    (v,) = [
        v for v in check(spec_copy.path, max_nodes=2).violations if "no-such-invariant" in v.message
    ]
    at = ("derivation", "rule_sets", "qtg-v3", "known_violations", "no-such-invariant")
    assert (v.file, v.line) == (str(spec_copy.file("request")), node_line(text, at))


def test_a_spec_built_without_a_file_names_none() -> None:
    """A violation of a spec that was not read from a file has no location, and
    ``describe`` starts with the machine."""
    v = Violation("m", "r", "k", "text")
    assert v.location is None and v.describe() == "m: [r] text"
    assert Violation("m", "r", "k", "text", file="f.yaml").describe() == "f.yaml: m: [r] text"


def test_the_bundled_copy_has_no_violation_to_locate(tmp_path: Path) -> None:
    shutil.copy(REFUND, tmp_path / "refund.yaml")
    assert check(tmp_path).violations == []
