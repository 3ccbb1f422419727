"""Generic mutations of any definition: each one changes what the definition allows.

A user's conformance tests compare their implementation with their definitions; a change
to a definition that the tests do not notice is a hole in them. The operators applied here
(``edits.OPERATORS``, carried out by the edits there) work on any definition, a user's own
or a bundled one, and each changes behaviour: a move dropped, added or redirected, an actor
allowed, a guard dropped, widened or narrowed, a state made terminal or not, a tag dropped.
A mutant that describes the same moves as the original (widening a guard to every value its
variable takes is dropping it) or as an earlier mutant is left out, so every mutant that
survives is a change the tests should notice.

The mutant is the parsed document edited and dumped back with ``yaml.safe_dump``: a valid
YAML file of the same name, without the original's comments and layout. Its id names the
file and the line of the original where the change is, and what changed:
``refund.yaml:47:drop-transition:approve``.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from machines.mutation.edits import (
    Edit,
    add_transition,
    as_list,
    drop_guard,
    drop_tag,
    drop_transition,
    one_or_many,
    set_guard,
    set_terminal,
    set_transition,
)
from machines.spec.files import read_text
from machines.spec.yamlsource import YamlSource, parse_yaml

Document = dict[str, Any]

ADDED_DESCRIPTION = "Added by machines mutate."


@dataclass(frozen=True)
class Mutant:
    """One mutation of one definition file: its id, the file's name, the line of the
    original it changes, its operator, what it changed in words, and the text of the
    mutated file."""

    id: str
    file: str
    line: int
    operator: str
    change: str
    document: Document = field(default_factory=dict, compare=False, repr=False)

    def describe(self) -> str:
        """The id and what changed, on one line: the value of ``MACHINES_MUTANT``."""
        return f"{self.id}: {self.change}"

    def text(self) -> str:
        """The mutated file, as YAML (dumped when asked: a definition takes a tenth of a
        second to dump without libyaml, and ``--list`` dumps none)."""
        return yaml.dump(
            self.document,
            Dumper=_DUMPER,
            sort_keys=False,
            width=100,
            allow_unicode=True,
            default_flow_style=False,
        )


_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's dumper where PyYAML has it (several times faster), else PyYAML's own; both
write the same safe YAML."""


def mutants_of(path: Path) -> list[Mutant]:
    """Every mutant of the definition at ``path`` (which must load: the caller checks),
    in the order of the file, with unique ids."""
    source = parse_yaml(read_text(path), path)
    return list(_unique(source, _candidates(source)))


def _unique(source: YamlSource, candidates: Iterator[_Candidate]) -> Iterator[Mutant]:
    seen: set[object] = {_SAME}
    ids: set[str] = set()
    base = _Base.of(source.data)
    for candidate in candidates:
        doc, behaviour = base.apply(candidate)
        if behaviour in seen:
            continue  # an equivalent mutant, or one the same as an earlier one
        seen.add(behaviour)
        base_id = f"{source.path.name}:{candidate.line}:{candidate.operator}:{candidate.target}"
        mutant_id, n = base_id, 1
        while mutant_id in ids:
            n += 1
            mutant_id = f"{base_id}#{n}"
        ids.add(mutant_id)
        yield Mutant(
            mutant_id, source.path.name, candidate.line, candidate.operator, candidate.change, doc
        )


_SAME: tuple[str, frozenset[object], frozenset[object]] = ("moves", frozenset(), frozenset())
"""The behaviour key of a mutant that allows what the original allows."""


@dataclass(frozen=True)
class _Base:
    """The original definition, read once, so that a mutant is made by copying only what
    its edit touches (one transition, one state, or the list of transitions) and judged by
    what it changes: the moves it takes away and adds, or the state it changes. Copying
    and judging the whole definition for each mutant took minutes on 2,000 transitions
    (outsider batch 34, b note 24)."""

    doc: Document
    declared: dict[str, frozenset[str]]
    counts: Counter[tuple[object, ...]]
    states: dict[str, tuple[object, ...]]

    @classmethod
    def of(cls, doc: Document) -> _Base:
        declared = {
            var: frozenset(c.get("values", [])) for var, c in doc.get("context", {}).items()
        }
        counts: Counter[tuple[object, ...]] = Counter()
        for t in doc["transitions"]:
            counts.update(_moves(t, declared))
        states = {name: _state(state) for name, state in doc["states"].items()}
        return cls(doc, declared, counts, states)

    def apply(self, candidate: _Candidate) -> tuple[Document, object]:
        """The mutated document (sharing what the edit leaves alone) and its behaviour."""
        kind, where = candidate.scope
        if kind == "state":
            assert isinstance(where, str)
            doc = {**self.doc, "states": dict(self.doc["states"])}
            doc["states"][where] = copy.deepcopy(self.doc["states"][where])
            candidate.edit(doc)
            changed = _state(doc["states"][where])
            return doc, (_SAME if changed == self.states[where] else ("state", where, changed))
        doc = {**self.doc, "transitions": list(self.doc["transitions"])}
        old: list[tuple[object, ...]] = []
        if kind == "transition":
            assert isinstance(where, int)
            old = _moves(self.doc["transitions"][where], self.declared)
            doc["transitions"][where] = copy.deepcopy(self.doc["transitions"][where])
        before = len(doc["transitions"])
        candidate.edit(doc)
        after = doc["transitions"]
        if len(after) > before:
            new = _moves(after[-1], self.declared)
        elif len(after) == before and kind == "transition":
            new = _moves(after[where], self.declared)
        else:
            new = []
        return doc, self._moved(old, new)

    def _moved(self, old: list[tuple[object, ...]], new: list[tuple[object, ...]]) -> object:
        """What replacing moves ``old`` of one transition by ``new`` changes in the set of
        moves the definition allows: the moves no transition allows any more, and those
        none allowed before."""
        gone, came = Counter(old), Counter(new)
        removed = frozenset(m for m in gone if self.counts[m] - gone[m] + came[m] == 0)
        added = frozenset(m for m in came if m not in self.counts)
        return ("moves", removed, added)


def _moves(t: Document, declared: dict[str, frozenset[str]]) -> list[tuple[object, ...]]:
    """The moves a transition allows: one per source, with its actors and guard (a guard
    variable that admits every value it takes is no guard)."""
    guard = frozenset(
        (var, frozenset(values))
        for var, values in t.get("when", {}).items()
        if frozenset(values) != declared.get(var)
    )
    actors = frozenset(as_list(t["actor"]))
    return [(s, t["trigger"], t["dest"], actors, guard) for s in as_list(t["source"])]


def _state(state: Document) -> tuple[object, ...]:
    return (bool(state.get("terminal", False)), frozenset(state.get("tags", [])))


@dataclass(frozen=True)
class _Candidate:
    target: str
    line: int
    change: str
    edit: Edit
    scope: tuple[str, int | str | None] = ("transitions", None)
    """What the edit touches: ``("transition", i)``, ``("state", name)``, or the list of
    transitions as a whole (a move appended)."""

    @property
    def operator(self) -> str:
        return self.edit.operator


def _candidates(source: YamlSource) -> Iterator[_Candidate]:
    doc: Document = source.data
    labels = _labels(doc["transitions"])
    for i, t in enumerate(doc["transitions"]):
        for c in _transition_candidates(source, i, t, labels[i]):
            yield replace(c, scope=("transition", i))
    for name, state in doc["states"].items():
        for c in _state_candidates(source, name, state):
            yield replace(c, scope=("state", name))
    yield from _new_edges(source)


def _labels(transitions: list[Document]) -> list[str]:
    """A name for each transition: its trigger, with its sources when the trigger is not
    unique in the file."""
    counts: dict[str, int] = {}
    for t in transitions:
        counts[t["trigger"]] = counts.get(t["trigger"], 0) + 1
    return [
        t["trigger"]
        if counts[t["trigger"]] == 1
        else f"{t['trigger']}@{'+'.join(as_list(t['source']))}"
        for t in transitions
    ]


def _move(t: Document) -> str:
    return f"{t['trigger']} ({'|'.join(as_list(t['source']))} -> {t['dest']})"


def _transition_candidates(
    source: YamlSource, i: int, t: Document, label: str
) -> Iterator[_Candidate]:
    here = ("transitions", i)
    line = source.line_of(here) or 1
    move = _move(t)

    yield _Candidate(label, line, f"the transition {move} removed", drop_transition(i))

    sources = as_list(t["source"])
    if len(sources) > 1:
        for s in sources:
            yield _Candidate(
                f"{label}:{s}",
                source.line_of((*here, "source")) or line,
                f"{move} no longer leaves {s}",
                set_transition(
                    "drop-source", i, "source", one_or_many([x for x in sources if x != s])
                ),
            )

    actors = as_list(t["actor"])
    actor_line = source.line_of((*here, "actor")) or line
    for a in _actors(source.data):
        if a not in actors:
            yield _Candidate(
                f"{label}:{a}",
                actor_line,
                f"{move} may also be fired by {a}",
                set_transition("add-actor", i, "actor", [*actors, a]),
            )
    if len(actors) > 1:
        for a in actors:
            yield _Candidate(
                f"{label}:{a}",
                actor_line,
                f"{move} may no longer be fired by {a}",
                set_transition(
                    "drop-actor", i, "actor", one_or_many([x for x in actors if x != a])
                ),
            )

    if "when" in t:
        yield from _guard_candidates(source, i, t, label, move)

    dest_line = source.line_of((*here, "dest")) or line
    for state in source.data["states"]:
        if state != t["dest"]:
            yield _Candidate(
                f"{label}:{state}",
                dest_line,
                f"{move} leads to {state} instead",
                set_transition("change-dest", i, "dest", state),
            )


def _actors(doc: Document) -> list[str]:
    """The declared actors of a parsed definition, in order."""
    return list(doc["actors"])


def _guard_candidates(
    source: YamlSource, i: int, t: Document, label: str, move: str
) -> Iterator[_Candidate]:
    here = ("transitions", i, "when")
    when: dict[str, list[str]] = t["when"]
    context: Document = source.data.get("context", {})

    yield _Candidate(
        label,
        source.line_of(here) or 1,
        f"{move} loses its guard: it fires in every context",
        drop_guard(i),
    )
    for var, values in when.items():
        line = source.line_of((*here, var)) or 1
        if len(when) > 1:
            yield _Candidate(
                f"{label}:{var}",
                line,
                f"{move} no longer asks for {var}",
                set_guard("drop-guard-variable", i, var, None),
            )
        declared = context.get(var, {}).get("values", [])
        for value in declared:
            if value not in values:
                yield _Candidate(
                    f"{label}:{var}={value}",
                    line,
                    f"{move} also fires when {var} is {value}",
                    set_guard("widen-guard", i, var, [*values, value]),
                )
        if len(values) > 1:
            for value in values:
                yield _Candidate(
                    f"{label}:{var}={value}",
                    line,
                    f"{move} no longer fires when {var} is {value}",
                    set_guard("narrow-guard", i, var, [v for v in values if v != value]),
                )


def _state_candidates(source: YamlSource, name: str, state: Document) -> Iterator[_Candidate]:
    line = source.line_of(("states", name)) or 1
    if state.get("terminal", False):
        yield _Candidate(
            name,
            line,
            f"{name} is no longer terminal",
            set_terminal(name, False),
        )
    else:
        yield _Candidate(name, line, f"{name} made terminal", set_terminal(name, True))
    for j, tag in enumerate(state.get("tags", [])):
        yield _Candidate(
            f"{name}:{tag}",
            source.line_of(("states", name, "tags", j)) or line,
            f"{name} loses its tag {tag}",
            drop_tag(name, tag),
        )


def _new_edges(source: YamlSource) -> Iterator[_Candidate]:
    """A move between every two distinct states that no transition joins and no
    forbidden entry names, from each state that is not terminal, by the first declared
    actor, under a new trigger."""
    doc: Document = source.data
    joined = {(s, t["dest"]) for t in doc["transitions"] for s in as_list(t["source"])}
    triggers = {t["trigger"] for t in doc["transitions"]}
    actor = _actors(doc)[0]
    for s, state in doc["states"].items():
        if state.get("terminal", False):
            continue
        for d in doc["states"]:
            if d == s or (s, d) in joined or _forbidden(doc, s, d):
                continue
            trigger = f"mutant_{s}_to_{d}"
            while trigger in triggers:
                trigger += "_"
            added = {
                "trigger": trigger,
                "source": s,
                "dest": d,
                "actor": actor,
                "description": ADDED_DESCRIPTION,
            }
            yield _Candidate(
                f"{s}:{d}",
                source.line_of(("states", s)) or 1,
                f"a new move {trigger} ({s} -> {d}) by {actor}",
                add_transition(added),
            )


def _forbidden(doc: Document, source: str, dest: str) -> bool:
    def names(value: str | list[str], name: str) -> bool:
        return value == "*" or name in as_list(value)

    return any(
        names(f["source"], source) and names(f["dest"], dest) for f in doc.get("forbidden", [])
    )
