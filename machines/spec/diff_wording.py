"""The wording changes between two versions of a definition: every field of the
presentation form (``machines.spec.canonical.presentation_form``) that differs, one change
each, named by where it is ("state 'pending' description"). A part that exists in one
version only (a state added, a transition removed) is a semantic change, and its words are
not listed again; findings are words only, so one added or removed is listed here.

``machines.spec.diff`` turns each ``Found`` (change id, message) into a ``Change``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from machines.spec.canonical import (
    Form,
    forbidden_moves,
    presentation_form,
    transition_form,
    transition_key,
    transition_presentation,
)
from machines.spec.records import MachineSpec, Transition

Found = tuple[str, str]
"""A change found: its id (``machines.spec.diff.CHANGE_KINDS``) and its message."""

TEXT_LIMIT = 60
"""The longest old or new value a message quotes in full (a title, a finding id)."""


def names(noun: str, values: Iterable[str]) -> str:
    """``value 'a'`` or ``values 'a', 'b'``: what a message lists."""
    listed = list(values)
    return f"{noun}{'s' if len(listed) > 1 else ''} " + ", ".join(f"'{v}'" for v in listed)


def wording(old: MachineSpec, new: MachineSpec) -> list[Found]:
    """Every wording change from ``old`` to ``new``, in the order of the sections."""
    before, after = presentation_form(old), presentation_form(new)
    out = [
        f for name, compare in WORDING_SECTIONS.items() for f in compare(before[name], after[name])
    ]
    out.extend(_transitions(old.transitions, new.transitions))
    out.extend(_forbidden(old, new, before, after))
    return out


def _changed(old: object, new: object) -> str:
    def shown(value: object) -> str:
        if value is None:
            return "none"
        text = str(value)
        return f"'{text}'" if len(text) <= TEXT_LIMIT else f"'{text[: TEXT_LIMIT - 3]}...'"

    return f"from {shown(old)} to {shown(new)}"


Compare = Callable[[Any, Any], Iterator[Found]]
"""How one section of the presentation form is compared."""


def _verbatim(what: str, noun: str) -> Compare:
    def compare(a: str, b: str) -> Iterator[Found]:
        if a != b:
            yield what, f"{noun} changed {_changed(a, b)}"

    return compare


def _description(a: str, b: str) -> Iterator[Found]:
    if a != b:
        yield "description-changed", "machine description reworded"


def _described(noun: str) -> Compare:
    """Descriptions by name (states, actors, rules): those of the names in both."""

    def compare(a: Mapping[str, str], b: Mapping[str, str]) -> Iterator[Found]:
        for name in sorted(a.keys() & b.keys()):
            if a[name] != b[name]:
                yield "description-changed", f"{noun} '{name}' description reworded"

    return compare


def _context(a: Mapping[str, Form], b: Mapping[str, Form]) -> Iterator[Found]:
    for name in sorted(a.keys() & b.keys()):
        where = f"context variable '{name}'"
        if a[name]["description"] != b[name]["description"]:
            yield "description-changed", f"{where} description reworded"
        reasons_a, reasons_b = a[name]["excluded"], b[name]["excluded"]
        for value in sorted(reasons_a.keys() & reasons_b.keys()):
            if reasons_a[value] != reasons_b[value]:
                yield "reason-changed", f"{where} value '{value}': reason it is refused reworded"


TRANSITION_FIELDS = MappingProxyType(
    {
        "description": "description-changed",
        "evidence": "evidence-changed",
        "amendment": "finding-reference-changed",
        "unreachable_in_systems": "finding-reference-changed",
    }
)
"""What a change of each field of ``transition_presentation`` is (all but ``move``)."""


def _transitions(old: Iterable[Transition], new: Iterable[Transition]) -> Iterator[Found]:
    for a, b in _pairs(old, new):
        source, trigger, dest = transition_key(a)
        where = f"transition '{source}' --{trigger}--> '{dest}'"
        words_a, words_b = transition_presentation(a), transition_presentation(b)
        for field, what in TRANSITION_FIELDS.items():
            if words_a[field] == words_b[field]:
                continue
            if field == "description":
                yield what, f"{where} description reworded"
            elif field == "evidence":
                yield what, f"{where} evidence {_evidence(words_a[field], words_b[field])}"
            else:
                yield what, f"{where} {field} changed {_changed(words_a[field], words_b[field])}"


def _evidence(a: str | None, b: str | None) -> str:
    if a is None:
        return "added"
    return "removed" if b is None else "reworded"


def _pairs(
    old: Iterable[Transition], new: Iterable[Transition]
) -> list[tuple[Transition, Transition]]:
    """The edges of the two versions that are one edge: of one ``transition_key``, the
    same actors and guard; or the one edge left of a key on each side."""
    before: dict[tuple[str, str, str], list[Transition]] = {}
    after: dict[tuple[str, str, str], list[Transition]] = {}
    for edges, group in ((old, before), (new, after)):
        for t in edges:
            group.setdefault(transition_key(t), []).append(t)
    out = []
    for key in sorted(before.keys() & after.keys()):
        left, right = list(before[key]), list(after[key])
        for t in list(left):
            match = next((u for u in right if transition_form(u) == transition_form(t)), None)
            if match is not None:
                out.append((t, match))
                left.remove(t)
                right.remove(match)
        if len(left) == 1 and len(right) == 1:
            out.append((left[0], right[0]))
    return out


def _forbidden(old: MachineSpec, new: MachineSpec, a: Form, b: Form) -> Iterator[Found]:
    """Each entry is named by the states both versions have (one that names only states
    one version lacks is that state's change): the reasons of the entries named alike;
    and, when the moves forbidden between those states are the same but the entries group
    them differently, that (a move forbidden or no longer is a semantic change)."""
    states = frozenset(old.states.keys() & new.states.keys())
    before, after = _reasons(a, states), _reasons(b, states)
    for sides in sorted(before.keys() & after.keys()):
        if before[sides] != after[sides]:
            yield "reason-changed", f"forbidden move {sides} reason reworded"
    if before.keys() != after.keys() and forbidden_moves(old, states) == forbidden_moves(
        new, states
    ):
        gone = "; ".join(sorted(before.keys() - after.keys())) or "none"
        now = "; ".join(sorted(after.keys() - before.keys())) or "none"
        yield "forbidden-regrouped", f"forbidden entries regrouped: {gone} now {now}"


def _reasons(form: Form, states: frozenset[str]) -> dict[str, list[str]]:
    """The reasons of the entries by the moves they name between ``states``."""
    out: dict[str, list[str]] = {}
    for f in form["forbidden"]:
        sides = [
            side if side == "*" else [s for s in side if s in states]
            for side in (f["from"], f["to"])
        ]
        if all(sides):
            named = " -> ".join(
                side if isinstance(side, str) else "|".join(f"'{s}'" for s in side)
                for side in sides
            )
            out.setdefault(named, []).append(f["reason"])
    return {sides: sorted(r) for sides, r in out.items()}


FINDING_FIELDS = ("seed", "text", "resolution")


def _findings(a: list[Form], b: list[Form]) -> Iterator[Found]:
    before = {f["id"]: f for f in a}
    after = {f["id"]: f for f in b}
    for finding in sorted(before.keys() - after.keys()):
        yield "finding-removed", f"finding '{finding}' removed"
    for finding in sorted(after.keys() - before.keys()):
        yield "finding-added", f"finding '{finding}' added"
    for finding in sorted(before.keys() & after.keys()):
        for field in FINDING_FIELDS:
            if before[finding][field] != after[finding][field]:
                yield "finding-changed", f"finding '{finding}' {field} changed"


def _derivation(a: Form | None, b: Form | None) -> Iterator[Found]:
    if a is None or b is None:
        return
    sets_a, sets_b = a["rule_sets"], b["rule_sets"]
    for name in sorted(sets_a.keys() & sets_b.keys()):
        set_a, set_b = sets_a[name], sets_b[name]
        where = f"rule set '{name}'"
        if set_a["description"] != set_b["description"]:
            yield "description-changed", f"{where} description reworded"
        rules_a, rules_b = set_a["rules"], set_b["rules"]
        for rule in sorted(rules_a.keys() & rules_b.keys()):
            if rules_a[rule] != rules_b[rule]:
                yield "description-changed", f"{where} rule '{rule}' description reworded"
        known_a, known_b = set_a["known_violations"], set_b["known_violations"]
        for invariant in sorted(known_a.keys() & known_b.keys()):
            if known_a[invariant] != known_b[invariant]:
                yield (
                    "finding-reference-changed",
                    f"{where} known violation '{invariant}' recorded by finding changed "
                    f"{_changed(known_a[invariant], known_b[invariant])}",
                )


WORDING_SECTIONS: Mapping[str, Compare] = MappingProxyType(
    {
        "title": _verbatim("title-changed", "title"),
        "origin": _verbatim("origin-changed", "origin"),
        "description": _description,
        "states": _described("state"),
        "actors": _described("actor"),
        "context": _context,
        "rules": _described("rule"),
        "findings": _findings,
        "derivation": _derivation,
    }
)
"""How each section of ``presentation_form`` is compared, all but ``transitions`` (paired
as records, ``_pairs``: edges of one key differ by actors and guards) and ``forbidden``
(whose entries are judged by the moves they name)."""
