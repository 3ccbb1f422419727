"""The words the package writes the same way everywhere (issue 15: "each name said once")."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import machines
from machines.errors import UnknownName
from machines.spec.vocabulary import DONE, FAIL_CLOSED, GuardForm, describe_guard

WHEN = {"tier": frozenset({"irreversible", "compensable"}), "mode": frozenset({"live"})}


@pytest.mark.parametrize(
    ("form", "text"),
    [
        ("text", "tier in [compensable, irreversible] and mode in [live]"),
        ("markdown", "`tier` in compensable, irreversible, `mode` in live"),
        ("label", "tier=compensable|irreversible, mode=live"),
    ],
)
def test_a_guard_is_written_one_way_per_medium(form: GuardForm, text: str) -> None:
    assert describe_guard(WHEN, form) == text


def test_no_module_formats_a_guard_itself() -> None:
    """A guard's text was formatted four ways in four modules (two of them identical
    copies). Every module that walks a guard's ``when.items()`` to make text now calls
    ``describe_guard``: no f-string over ``.when.items()`` or ``guard.items()`` is left."""
    root = Path(machines.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "vocabulary.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.GeneratorExp | ast.ListComp) and isinstance(
                node.elt, ast.JoinedStr
            ):
                source = ast.unparse(node.generators[0].iter)
                if source.endswith(("when.items()", "guard.items()")):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []


# -- reading tags -----------------------------------------------------------------------------


def test_a_tag_is_read_through_the_spec_and_must_be_declared() -> None:
    """Every reader of a tag asks ``MachineSpec.states_tagged``, which refuses a tag the
    vocabulary does not declare: code that misspelled one would fail, not find no state."""
    node = machines.load("node")
    assert node.states_tagged(DONE) == {"completed", "skipped"}
    assert node.states_tagged(FAIL_CLOSED) == {"unknown"}
    assert node.states_tagged("x-not-used") == frozenset()
    with pytest.raises(UnknownName, match=r"'effect-startd' is not a declared tag .*did you mean"):
        node.states_tagged("effect-startd")
    for garbage in (None, 3, b"done", ("done",)):
        with pytest.raises(UnknownName, match="is not a declared tag"):
            node.states_tagged(garbage)  # type: ignore[arg-type]


def test_valuations_are_every_combination_of_the_context_values() -> None:
    assert machines.load("effect").valuations() == (
        {"tier": "compensable"},
        {"tier": "irreversible"},
    )
    two = machines.load("effect").context | machines.load("request").context
    spec = dataclasses.replace(machines.load("effect"), context=two)
    assert [dict(v) for v in spec.valuations()] == [
        {"tier": tier, "side_effects": money}
        for tier in ("compensable", "irreversible")
        for money in ("none", "started")
    ]
    assert machines.load("outcome").valuations() == ({},)


def test_no_module_reads_a_tag_but_through_states_tagged() -> None:
    """Asking whether a state carries a tag (``tag in state.tags``) happens in one place,
    ``MachineSpec.states_tagged``, which refuses an undeclared tag. Five modules asked
    themselves before issue 15, and one wrote the tagged states' names instead."""
    package = Path(machines.__file__).resolve().parent
    asked = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "spec" / "records.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr == "tags"
                for side in (node.left, *node.comparators)
            ):
                asked.append(f"{path.relative_to(package)}:{node.lineno}")
    assert asked == []
