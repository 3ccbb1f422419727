"""One registry of invariants (issue 15): every id the code judges by is registered for the
judge that uses it, every registered judge judges it, and the pages, the proof and the
suites read their statements from it."""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import pytest

import machines
from machines.errors import DISTRIBUTION, UnknownName
from machines.spec.registry import INVARIANTS, LAYERS, Layer, judged_by

PACKAGE = Path(machines.__file__).resolve().parent
ID = re.compile(r"^[a-z]+(-[a-z]+)+$")

JUDGES: dict[Layer, tuple[str, ...]] = {
    "definitions": ("spec/structure.py",),
    "derivation": ("derive/proof.py",),
    "stored state": ("checks/invariants.py", "checks/money.py"),
    "audit": ("checks/audit.py", "checks/heads.py"),
    "explorer": ("explore/outcome.py", "explore/worlds.py", "explore/transfer*.py"),
    "exactly-once suite": ("testing/exactly_once/*.py",),
    "effect-log suite": ("testing/effectlog/*.py",),
    "transfer suite": ("testing/transfer/*.py",),
    "conformance suite": ("testing/conformance/*.py",),
}
"""Where each judge's code lives (globs under ``machines/``)."""

NOT_IDS = {
    "engine-a",
    "engine-b",
    "suite-human",
    DISTRIBUTION,
    "rev-parse",
    "ls-tree",
    "add-account",
    "no-store",
    "sec-fetch-site",
    "same-origin",
    "content-length",
    "content-type",
    "signed-out",
    "drawn-text",
}
"""Kebab-case strings in the package that are not invariant ids (names of test actors, the
name the package is published under, the git commands ``machines diff --base`` runs, the
desk's subcommand, the HTTP header names and values it sends and reads, the code of its
sign-in page's one message, and the schema's format of a definition's text)."""


def _literals(paths: list[Path]) -> set[str]:
    """The strings spelled in ``paths`` that are registered ids or look like one (words
    joined by hyphens)."""
    return {
        node.value
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in INVARIANTS or ID.match(node.value))
    }


def _files(layer: Layer) -> list[Path]:
    files = [p for pattern in JUDGES[layer] for p in sorted(PACKAGE.glob(pattern))]
    assert files, f"no module of {layer} found: update JUDGES"
    return files


@pytest.mark.parametrize("layer", LAYERS)
def test_a_judge_judges_exactly_the_invariants_registered_for_it(layer: Layer) -> None:
    """Every id-shaped string a judge's code spells is a registered invariant of that judge
    (or a tag, or a name listed as not an id), and every invariant registered for the judge
    is spelled there: nothing judged unregistered, nothing registered unjudged."""
    from machines.spec.vocabulary import TAGS

    spelled = _literals(_files(layer)) - (set(TAGS) - set(INVARIANTS)) - NOT_IDS
    registered = set(judged_by(layer))
    assert spelled - set(INVARIANTS) == set(), "unregistered ids"
    assert {i for i in spelled if layer not in INVARIANTS[i].layers} == set(), (
        f"ids {layer} judges but the registry does not say so"
    )
    assert registered - spelled == set(), f"registered for {layer} but never judged there"


def test_every_id_anywhere_in_the_package_is_registered_or_a_known_other_name() -> None:
    """Outside the judges, an id-shaped string is a tag, a registered id, a mutation's name
    (of the catalog, or a generic operator's), a rule (or derivation rule set) of a
    bundled definition, which the mutation catalog names, or the id of a kind of change
    ``machines diff`` lists (``machines.spec.diff.CHANGE_KINDS``)."""
    from machines.mutation.catalog import CATALOG
    from machines.mutation.edits import BUNDLED_OPERATORS, OPERATORS
    from machines.spec.diff import CHANGE_KINDS
    from machines.spec.vocabulary import BASELINE_RULES, TAGS

    bundled = [machines.load(name) for name in ("effect", "outcome", "node", "request")]
    rules = {r.id for spec in bundled for r in spec.invariants}
    derivation = machines.load("request").derivation
    assert derivation is not None
    rules |= set(derivation.rule_sets) | {
        rule.id for rule_set in derivation.rule_sets.values() for rule in rule_set.rules
    }
    mutations = {m.id for m in CATALOG} | set(OPERATORS) | set(BUNDLED_OPERATORS)
    spelled = _literals(sorted(PACKAGE.rglob("*.py")))
    unknown = spelled - set(INVARIANTS) - set(TAGS) - rules - mutations - NOT_IDS
    unknown -= set(CHANGE_KINDS) | {rule.id for rule in BASELINE_RULES.values()}
    assert unknown == set()
    for mutation in CATALOG:
        assert set(mutation.breaks) <= set(INVARIANTS) | rules, mutation.id


def test_the_stored_state_predicates_are_the_registered_ones() -> None:
    from machines.checks.invariants import PREDICATES

    assert list(PREDICATES) == list(judged_by("stored state"))


def test_the_explorer_models_flag_only_registered_invariants() -> None:
    from machines.explore import outcome, transfer

    flagged = {*outcome.WHAT, *transfer.WHAT}
    assert flagged == set(judged_by("explorer"))


def test_the_pages_and_the_proof_read_the_registry() -> None:
    from machines.derive.proof import DERIVATION_INVARIANTS

    assert dict(DERIVATION_INVARIANTS) == dict(judged_by("derivation"))
    page = (PACKAGE.parent / "docs" / "invariants.md").read_text(encoding="utf-8")
    for statement in judged_by("stored state").values():
        assert html.escape(statement, quote=False) in page  # a page escapes its free text


def test_an_unknown_layer_is_refused() -> None:
    with pytest.raises(UnknownName, match=r"'stored-state' is not a layer .*did you mean"):
        judged_by("stored-state")  # type: ignore[arg-type]


def test_every_invariant_has_a_statement_and_a_judge() -> None:
    for invariant in INVARIANTS.values():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", invariant.id)
        assert invariant.statement.endswith(".") and "  " not in invariant.statement
        assert invariant.layers and invariant.layers <= set(LAYERS)
