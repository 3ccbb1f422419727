"""The one catalog of mutation operators, and the edits that carry them out.

Two detectors use these operators. ``machines mutate`` on a user's definitions applies every
operator of ``OPERATORS`` wherever it applies (``operators``), and the catalog of the
bundled machines (``catalog``) applies chosen operators, generic and ``BUNDLED_OPERATORS``
alike, at the places a careless change would touch. Each edit changes a parsed definition
in place; a transition is found by its index, or by a source and a trigger
(``transition``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from machines.errors import MachinesError

Document = dict[str, Any]

OPERATORS: Mapping[str, str] = MappingProxyType(
    {
        "drop-transition": "a transition removed: a move the definition allowed is refused",
        "drop-source": "one source of a many-source transition removed",
        "add-actor": "another declared actor may fire a transition",
        "drop-actor": "one actor of a many-actor transition removed",
        "drop-guard": "a transition's when guard removed: it fires in every context",
        "drop-guard-variable": "one variable of a many-variable guard removed",
        "widen-guard": "a guard admits one more value of its variable",
        "narrow-guard": "a guard admits one value fewer",
        "change-dest": "a transition leads to another state",
        "make-terminal": "a state that is not terminal made terminal",
        "make-non-terminal": "a terminal state made not terminal",
        "drop-tag": "a state loses one of its tags",
        "add-transition": "a new move between two states that had none (and no forbidden entry)",
    }
)
"""The operators applied to any definition, by name, and what their mutants change."""

BUNDLED_OPERATORS: Mapping[str, str] = MappingProxyType(
    {
        "change-actor": "a transition fired by another actor instead of its own",
        "add-trigger": "a new trigger between two states, whether or not a move joins them",
        "drop-evidence": "an automatic move no longer records its evidence",
        "drop-derivation-rule": "a derivation rule removed from a rule set",
        "drop-derived-state": "a derived context no longer counts one state",
        "change-default-rule-set": "another rule set made the default",
    }
)
"""The operators only the bundled catalog applies, at chosen places: they change what a
move records or how a machine's state is derived, which no generic operator touches."""


@dataclass(frozen=True)
class Edit:
    """One operator applied at one place: ``apply`` changes a parsed definition in place."""

    operator: str
    apply: Callable[[Document], None]

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS and self.operator not in BUNDLED_OPERATORS:
            raise MachinesError(f"unknown mutation operator {self.operator!r}")

    def __call__(self, doc: Document) -> None:
        self.apply(doc)


def as_list(value: str | list[str]) -> list[str]:
    """A transition's ``source`` or ``actor``, one name or many, as a list."""
    return list(value) if isinstance(value, list) else [value]


def one_or_many(values: list[str]) -> str | list[str]:
    """The inverse of ``as_list``: one name alone, several as a list."""
    return values[0] if len(values) == 1 else values


def transition(doc: Document, source: str, trigger: str) -> int:
    """The index of the transition that ``trigger`` fires from ``source``."""
    for i, t in enumerate(doc["transitions"]):
        if t["trigger"] == trigger and source in as_list(t["source"]):
            return i
    raise MachinesError(f"the definition has no move {trigger} from {source}")


def drop_transition(i: int) -> Edit:
    def apply(doc: Document) -> None:
        del doc["transitions"][i]

    return Edit("drop-transition", apply)


def set_transition(operator: str, i: int, key: str, value: object) -> Edit:
    """``drop-source``, ``add-actor``, ``drop-actor``, ``change-actor``, ``change-dest``:
    one key of a transition given a new value."""

    def apply(doc: Document) -> None:
        doc["transitions"][i][key] = value

    return Edit(operator, apply)


def drop_guard(i: int) -> Edit:
    def apply(doc: Document) -> None:
        del doc["transitions"][i]["when"]

    return Edit("drop-guard", apply)


def drop_evidence(i: int) -> Edit:
    def apply(doc: Document) -> None:
        del doc["transitions"][i]["evidence"]

    return Edit("drop-evidence", apply)


def set_guard(operator: str, i: int, var: str, values: list[str] | None) -> Edit:
    """``drop-guard-variable`` (``values`` None), ``widen-guard``, ``narrow-guard``."""

    def apply(doc: Document) -> None:
        when = doc["transitions"][i]["when"]
        if values is None:
            del when[var]
        else:
            when[var] = values

    return Edit(operator, apply)


def set_terminal(state: str, terminal: bool) -> Edit:
    def apply(doc: Document) -> None:
        if terminal:
            doc["states"][state]["terminal"] = True
        else:
            del doc["states"][state]["terminal"]

    return Edit("make-terminal" if terminal else "make-non-terminal", apply)


def drop_tag(state: str, tag: str) -> Edit:
    def apply(doc: Document) -> None:
        doc["states"][state]["tags"].remove(tag)

    return Edit("drop-tag", apply)


def add_transition(added: Document, *, operator: str = "add-transition") -> Edit:
    """``add-transition`` (two states no move joined) or ``add-trigger`` (any two)."""

    def apply(doc: Document) -> None:
        doc["transitions"].append(dict(added))

    return Edit(operator, apply)


def drop_derivation_rule(rule_set: str, rule: str) -> Edit:
    def apply(doc: Document) -> None:
        rules = doc["derivation"]["rule_sets"][rule_set]["rules"]
        rules[:] = [r for r in rules if r["id"] != rule]

    return Edit("drop-derivation-rule", apply)


def drop_derived_state(variable: str, state: str) -> Edit:
    """The derived context ``variable`` no longer counts nodes in ``state``."""

    def apply(doc: Document) -> None:
        for option in doc["derivation"]["context"][variable]:
            for condition in option.get("when", []):
                for test in condition.values():
                    test["state"].remove(state)

    return Edit("drop-derived-state", apply)


def set_default_rule_set(name: str) -> Edit:
    def apply(doc: Document) -> None:
        doc["derivation"]["default"] = name

    return Edit("change-default-rule-set", apply)
