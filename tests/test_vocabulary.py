"""The words the package writes the same way everywhere (issue 15: "each name said once")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import machines
from machines.spec.vocabulary import GuardForm, describe_guard

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
