"""The changes between two versions of a definition, each with its kind.

``diff_specs`` compares two versions of one machine, ``diff_sets`` two sets of machines by
name, and ``diff_report`` adds each machine's digests (``machines.spec.canonical``). Each
change is a ``Change``: the machine, its kind, a short id (``what``) and a message that
names the state, transition, actor or values. What is compared is the canonical forms,
so the order a file is written in never makes a change, and the semantic digests differ
exactly when some change is breaking or widening.

- **breaking**: something legal becomes illegal, or something an existing entity or a
  service relies on goes away (a state, a value, a tag, an actor's standing, a rule);
- **widening**: something illegal becomes legal;
- **wording**: only what a person reads differs (titles, descriptions, reasons, evidence,
  findings); the semantic digest is the same, and a store needs no migration.

Edges are compared by what they admit: the edges with one ``transition_key`` (source,
trigger, dest) are taken together, and what they admit is every actor with every context
value they allow, a variable a guard leaves out admitting each of its values (in either
version). One change may narrow and widen one edge: that is two changes.

| id | kind | when |
|---|---|---|
| `machine-removed` | breaking | a machine is gone |
| `state-removed` | breaking | a state is gone |
| `initial-changed` | breaking | a new entity starts in another state |
| `state-made-terminal` | breaking | a state becomes terminal |
| `transition-removed` | breaking | no edge (source, trigger, dest) is left |
| `actors-narrowed` | breaking | an actor may no longer take an edge |
| `guard-narrowed` | breaking | an edge admits fewer context values (a guard added or narrowed) |
| `actor-removed` | breaking | an actor is gone from the definition |
| `actor-made-automatic` | breaking | an actor becomes automatic (who may do what changes) |
| `actor-made-non-automatic` | breaking | an actor stops being automatic |
| `context-variable-added` | breaking | every entity must now carry a new context variable |
| `context-variable-removed` | breaking | a context variable is gone |
| `context-value-removed` | breaking | a context variable loses a value |
| `context-value-excluded` | breaking | a value is now refused by name |
| `tag-removed` | breaking | a state loses a tag (a reader of the tag loses the state) |
| `annotation-removed` | breaking | a terminal state's field may no longer change |
| `db-value-changed` | breaking | a state is stored under another value |
| `forbidden-added` | breaking | a move is newly documented as forbidden |
| `rule-added` | breaking | a structural rule is added |
| `rule-changed` | breaking | a structural rule says something else |
| `derivation-changed` | breaking | the derivation is added, removed, or a setting of it changes |
| `rule-set-added` | breaking | a derivation rule set is added |
| `rule-set-removed` | breaking | a derivation rule set is gone |
| `rule-set-changed` | breaking | a derivation rule set's rules or known violations change |
| `machine-added` | widening | a machine is new |
| `state-added` | widening | a state is new |
| `transition-added` | widening | an edge (source, trigger, dest) is new |
| `actors-widened` | widening | an actor may now take an edge |
| `guard-widened` | widening | an edge admits more context values (a guard widened or removed) |
| `actor-added` | widening | an actor is new |
| `context-value-added` | widening | a context variable gains a value |
| `context-exclusion-removed` | widening | a value is no longer refused by name |
| `state-made-non-terminal` | widening | a terminal state is no longer terminal, with no new exit |
| `terminal-given-exit` | widening | a terminal state is no longer terminal and gains an exit |
| `tag-added` | widening | a state gains a tag |
| `annotation-added` | widening | a terminal state's field may now change |
| `forbidden-removed` | widening | a forbidden move is no longer documented |
| `rule-removed` | widening | a structural rule is gone |
| `title-changed` | wording | the title |
| `origin-changed` | wording | the origin |
| `description-changed` | wording | the description of anything |
| `evidence-changed` | wording | a transition's evidence |
| `reason-changed` | wording | a forbidden move's reason, an excluded value's reason |
| `forbidden-regrouped` | wording | the forbidden entries group the same moves differently |
| `finding-reference-changed` | wording | the finding an amendment or a note names |
| `finding-added` | wording | a finding is new |
| `finding-removed` | wording | a finding is gone |
| `finding-changed` | wording | a finding's seed, text or resolution |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from machines.errors import InvalidArgument
from machines.spec.canonical import (
    Form,
    presentation_digest,
    semantic_digest,
    semantic_form,
)
from machines.spec.diff_edges import edge_key, edge_text, transitions
from machines.spec.diff_wording import Found, names, wording
from machines.spec.records import MachineSpec

Kind = Literal["breaking", "widening", "wording"]
BREAKING: Kind = "breaking"
WIDENING: Kind = "widening"
WORDING: Kind = "wording"
KINDS: tuple[Kind, ...] = (BREAKING, WIDENING, WORDING)
"""The kinds of change, in the order changes are listed."""

CHANGE_KINDS: Mapping[str, Kind] = MappingProxyType(
    {
        "machine-removed": BREAKING,
        "state-removed": BREAKING,
        "initial-changed": BREAKING,
        "state-made-terminal": BREAKING,
        "transition-removed": BREAKING,
        "actors-narrowed": BREAKING,
        "guard-narrowed": BREAKING,
        "actor-removed": BREAKING,
        "actor-made-automatic": BREAKING,
        "actor-made-non-automatic": BREAKING,
        "context-variable-added": BREAKING,
        "context-variable-removed": BREAKING,
        "context-value-removed": BREAKING,
        "context-value-excluded": BREAKING,
        "tag-removed": BREAKING,
        "annotation-removed": BREAKING,
        "db-value-changed": BREAKING,
        "forbidden-added": BREAKING,
        "rule-added": BREAKING,
        "rule-changed": BREAKING,
        "derivation-changed": BREAKING,
        "rule-set-added": BREAKING,
        "rule-set-removed": BREAKING,
        "rule-set-changed": BREAKING,
        "machine-added": WIDENING,
        "state-added": WIDENING,
        "transition-added": WIDENING,
        "actors-widened": WIDENING,
        "guard-widened": WIDENING,
        "actor-added": WIDENING,
        "context-value-added": WIDENING,
        "context-exclusion-removed": WIDENING,
        "state-made-non-terminal": WIDENING,
        "terminal-given-exit": WIDENING,
        "tag-added": WIDENING,
        "annotation-added": WIDENING,
        "forbidden-removed": WIDENING,
        "rule-removed": WIDENING,
        "title-changed": WORDING,
        "origin-changed": WORDING,
        "description-changed": WORDING,
        "evidence-changed": WORDING,
        "reason-changed": WORDING,
        "forbidden-regrouped": WORDING,
        "finding-reference-changed": WORDING,
        "finding-added": WORDING,
        "finding-removed": WORDING,
        "finding-changed": WORDING,
    }
)
"""Every change id and its kind (the table of the module's docstring)."""


REWRITTEN = (
    "it allows the same moves, written otherwise (an edge split in two, a guard naming "
    "every value), so its semantic digest differs: machines migrate installs it as the "
    "next version and moves no entity"
)
"""What differs when two definitions' semantic digests do and no change is found."""


@dataclass(frozen=True)
class Change:
    """One difference between two versions of ``machine``: its ``kind``, its id ``what``
    (a key of ``CHANGE_KINDS``, whose kind it must have) and a ``message`` a person reads."""

    machine: str
    kind: Kind
    what: str
    message: str

    def __post_init__(self) -> None:
        expected = CHANGE_KINDS.get(self.what)
        if expected is None:
            raise InvalidArgument(
                f"'{self.what}' is not a change id; ids: {', '.join(CHANGE_KINDS)}"
            )
        if expected != self.kind:
            raise InvalidArgument(f"a '{self.what}' change is {expected}, not {self.kind}")

    @property
    def breaking(self) -> bool:
        return self.kind == BREAKING


def change(machine: str, what: str, message: str) -> Change:
    """A ``Change`` of the kind its id has (an unknown id: ``InvalidArgument``)."""
    return Change(machine, CHANGE_KINDS.get(what, BREAKING), what, message)


def ordered(changes: Iterable[Change]) -> tuple[Change, ...]:
    """``changes`` by machine, then kind (breaking, widening, wording), then message."""
    return tuple(sorted(changes, key=lambda c: (c.machine, KINDS.index(c.kind), c.message, c.what)))


def is_breaking(changes: Iterable[Change]) -> bool:
    """Whether any of ``changes`` is breaking (``machines diff`` exits 1)."""
    return any(c.breaking for c in changes)


def diff_specs(old: MachineSpec | None, new: MachineSpec | None) -> tuple[Change, ...]:
    """Every change from ``old`` to ``new`` (``None``: the machine does not exist on that
    side), ordered. Two machines of different names are one removed and one added."""
    if old is None and new is None:
        return ()
    if old is None or new is None or old.name != new.name:
        out = []
        if old is not None:
            out.append(change(old.name, "machine-removed", f"machine '{old.name}' removed"))
        if new is not None:
            out.append(change(new.name, "machine-added", f"machine '{new.name}' added"))
        return ordered(out)
    before, after = semantic_form(old), semantic_form(new)
    found = [f for compare in SEMANTIC_SECTIONS.values() for f in compare(before, after)]
    found.extend(wording(old, new))
    return ordered(change(new.name, what, message) for what, message in found)


def diff_sets(old: Mapping[str, MachineSpec], new: Mapping[str, MachineSpec]) -> tuple[Change, ...]:
    """Every change from the machines ``old`` to the machines ``new`` (each by name)."""
    return ordered(
        c
        for name in sorted(old.keys() | new.keys())
        for c in diff_specs(old.get(name), new.get(name))
    )


@dataclass(frozen=True)
class MachineDigests:
    """One machine's digests on each side (``None``: it is not on that side)."""

    machine: str
    old_semantic: str | None
    new_semantic: str | None
    old_presentation: str | None
    new_presentation: str | None

    @property
    def same_semantics(self) -> bool:
        return self.old_semantic == self.new_semantic


@dataclass(frozen=True)
class DiffReport:
    """The changes between two sets of machines, and every machine's digests by name."""

    changes: tuple[Change, ...]
    machines: tuple[MachineDigests, ...]

    @property
    def breaking(self) -> bool:
        return is_breaking(self.changes)

    def count(self, kind: Kind) -> int:
        return sum(1 for c in self.changes if c.kind == kind)


def diff_report(old: Mapping[str, MachineSpec], new: Mapping[str, MachineSpec]) -> DiffReport:
    """``diff_sets(old, new)`` with each machine's semantic and presentation digests."""

    def of(spec: MachineSpec | None, digest: Callable[[MachineSpec], str]) -> str | None:
        return None if spec is None else digest(spec)

    machines = tuple(
        MachineDigests(
            name,
            of(old.get(name), semantic_digest),
            of(new.get(name), semantic_digest),
            of(old.get(name), presentation_digest),
            of(new.get(name), presentation_digest),
        )
        for name in sorted(old.keys() | new.keys())
    )
    return DiffReport(diff_sets(old, new), machines)


# -- the semantic sections ---------------------------------------------------------------


def _presence(
    before: Mapping[str, Any], after: Mapping[str, Any], noun: str, removed: str, added: str
) -> Iterator[Found]:
    for name in sorted(before.keys() - after.keys()):
        yield removed, f"{noun} '{name}' removed"
    for name in sorted(after.keys() - before.keys()):
        yield added, f"{noun} '{name}' added"


def _lost_gained(before: Iterable[str], after: Iterable[str]) -> tuple[list[str], list[str]]:
    a, b = set(before), set(after)
    return sorted(a - b), sorted(b - a)


def _initial(old: Form, new: Form) -> Iterator[Found]:
    if old["initial"] != new["initial"]:
        yield (
            "initial-changed",
            f"initial state changed from '{old['initial']}' to '{new['initial']}'",
        )


def _states(old: Form, new: Form) -> Iterator[Found]:
    before, after = old["states"], new["states"]
    yield from _presence(before, after, "state", "state-removed", "state-added")
    old_moves = {edge_key(t) for t in old["transitions"]}
    for name in sorted(before.keys() & after.keys()):
        a, b = before[name], after[name]
        if b["terminal"] and not a["terminal"]:
            yield "state-made-terminal", f"state '{name}' made terminal"
        elif a["terminal"] and not b["terminal"]:
            exits = sorted(
                edge_key(t)
                for t in new["transitions"]
                if t["source"] == name and edge_key(t) not in old_moves
            )
            if exits:
                moves = ", ".join(edge_text(key) for key in exits)
                yield "terminal-given-exit", f"terminal state '{name}' given an exit: {moves}"
            else:
                yield "state-made-non-terminal", f"state '{name}' no longer terminal"
        for field, noun in (("tags", "tag"), ("annotations", "annotation")):
            lost, gained = _lost_gained(a[field], b[field])
            if lost:
                yield f"{noun}-removed", f"state '{name}' loses {names(noun, lost)}"
            if gained:
                yield f"{noun}-added", f"state '{name}' gains {names(noun, gained)}"
        if a["db_value"] != b["db_value"]:
            yield (
                "db-value-changed",
                f"state '{name}' stored as '{b['db_value']}' instead of '{a['db_value']}'",
            )


def _actors(old: Form, new: Form) -> Iterator[Found]:
    before, after = old["actors"], new["actors"]
    yield from _presence(before, after, "actor", "actor-removed", "actor-added")
    for name in sorted(before.keys() & after.keys()):
        automatic = after[name]["automatic"]
        if before[name]["automatic"] != automatic:
            what = "actor-made-automatic" if automatic else "actor-made-non-automatic"
            yield what, f"actor '{name}' made {'' if automatic else 'non-'}automatic"


def _context(old: Form, new: Form) -> Iterator[Found]:
    before, after = old["context"], new["context"]
    yield from _presence(
        before, after, "context variable", "context-variable-removed", "context-variable-added"
    )
    for name in sorted(before.keys() & after.keys()):
        a, b = before[name], after[name]
        where = f"context variable '{name}'"
        lost, gained = _lost_gained(a["values"], b["values"])
        if lost:
            yield "context-value-removed", f"{where} loses {names('value', lost)}"
        if gained:
            yield "context-value-added", f"{where} gains {names('value', gained)}"
        unrefused, refused = _lost_gained(a["excluded"], b["excluded"])
        if refused:
            yield "context-value-excluded", f"{where} now refuses {names('value', refused)} by name"
        if unrefused:
            yield (
                "context-exclusion-removed",
                f"{where} no longer refuses {names('value', unrefused)} by name",
            )


def _forbidden(old: Form, new: Form) -> Iterator[Found]:
    """The documented illegal moves compared move by move, between the states both
    versions have (a move into or out of a state one version lacks is that state's
    change); how the entries group the moves is wording (``diff_wording``)."""
    states = old["states"].keys() & new["states"].keys()
    before, after = (
        {(s, d) for s, d in form["forbidden"] if s in states and d in states} for form in (old, new)
    )
    lost, gained = before - after, after - before
    if lost:
        moves = _moves(lost, frozenset(states))
        yield "forbidden-removed", f"{_plural('forbidden move', lost)} removed: {moves}"
    if gained:
        moves = _moves(gained, frozenset(states))
        yield "forbidden-added", f"{_plural('forbidden move', gained)} added: {moves}"


def _plural(noun: str, items: Iterable[object]) -> str:
    return noun if len(list(items)) == 1 else f"{noun}s"


def _moves(moves: set[tuple[str, str]], states: frozenset[str]) -> str:
    """``moves`` for a person: ``'a'|'b' -> *; 'c' -> 'd'`` (``*``: every state)."""
    dests: dict[str, set[str]] = {}
    for source, dest in moves:
        dests.setdefault(source, set()).add(dest)
    sources: dict[str, list[str]] = {}
    for source, to in sorted(dests.items()):
        shown = "*" if to == states else "|".join(f"'{d}'" for d in sorted(to))
        sources.setdefault(shown, []).append(f"'{source}'")
    return "; ".join(f"{'|'.join(froms)} -> {to}" for to, froms in sorted(sources.items()))


def _rules(old: Form, new: Form) -> Iterator[Found]:
    before = {r["id"]: r for r in old["rules"]}
    after = {r["id"]: r for r in new["rules"]}
    for rule in sorted(before.keys() - after.keys()):
        yield "rule-removed", f"rule '{rule}' ({before[rule]['kind']}) removed"
    for rule in sorted(after.keys() - before.keys()):
        yield "rule-added", f"rule '{rule}' ({after[rule]['kind']}) added"
    for rule in sorted(before.keys() & after.keys()):
        fields = [f for f in before[rule] if before[rule][f] != after[rule][f]]
        if fields:
            yield "rule-changed", f"rule '{rule}' changed: {', '.join(fields)}"


DERIVATION_SETTINGS = ("node_machine", "applied_in", "actor", "manual_prefix", "default")


def _derivation(old: Form, new: Form) -> Iterator[Found]:
    a, b = old["derivation"], new["derivation"]
    if a is None or b is None:
        if a is not b:
            yield "derivation-changed", f"derivation {'added' if a is None else 'removed'}"
        return
    for setting in DERIVATION_SETTINGS:
        if a[setting] != b[setting]:
            yield (
                "derivation-changed",
                f"derivation {setting} changed from {_shown(a[setting])} to {_shown(b[setting])}",
            )
    for var in sorted(a["context"].keys() | b["context"].keys()):
        if a["context"].get(var) != b["context"].get(var):
            yield "derivation-changed", f"derivation of context variable '{var}' changed"
    sets_a, sets_b = a["rule_sets"], b["rule_sets"]
    yield from _presence(sets_a, sets_b, "rule set", "rule-set-removed", "rule-set-added")
    for name in sorted(sets_a.keys() & sets_b.keys()):
        details = _rule_set_changes(sets_a[name], sets_b[name])
        if details:
            yield "rule-set-changed", f"rule set '{name}' changed: {'; '.join(details)}"


def _rule_set_changes(a: Form, b: Form) -> list[str]:
    rules_a = {r["id"]: r for r in a["rules"]}
    rules_b = {r["id"]: r for r in b["rules"]}
    out = [f"rule '{r}' removed" for r in sorted(rules_a.keys() - rules_b.keys())]
    out += [f"rule '{r}' added" for r in sorted(rules_b.keys() - rules_a.keys())]
    out += [
        f"rule '{r}' changed"
        for r in sorted(rules_a.keys() & rules_b.keys())
        if rules_a[r] != rules_b[r]
    ]
    common = rules_a.keys() & rules_b.keys()
    if [r for r in rules_a if r in common] != [r for r in rules_b if r in common]:
        out.append("rules reordered")
    lost, gained = _lost_gained(a["known_violations"], b["known_violations"])
    if lost:
        out.append(f"{names('known violation', lost)} no longer recorded")
    if gained:
        out.append(f"{names('known violation', gained)} now recorded")
    return out


def _shown(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return f"'{value}'"


SEMANTIC_SECTIONS = MappingProxyType(
    {
        "initial": _initial,
        "states": _states,
        "actors": _actors,
        "context": _context,
        "transitions": transitions,
        "forbidden": _forbidden,
        "rules": _rules,
        "derivation": _derivation,
    }
)
"""How each section of ``semantic_form`` is compared (all but ``machine``, the name the
two versions share)."""
