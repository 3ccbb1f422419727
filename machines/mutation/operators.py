"""Generic mutations of any definition: each one changes what the definition allows.

A user's conformance tests compare their implementation with their definitions; a change
to a definition that the tests do not notice is a hole in them. The operators here work on
any definition, a user's own or a bundled one, and each changes behaviour: a move dropped,
added or redirected, an actor allowed, a guard dropped, widened or narrowed, a state made
terminal or not, a tag dropped. A mutant that describes the same moves as the original
(widening a guard to every value its variable takes is dropping it) or as an earlier
mutant is left out, so every mutant that survives is a change the tests should notice.

The mutant is the parsed document edited and dumped back with ``yaml.safe_dump``: a valid
YAML file of the same name, without the original's comments and layout. Its id names the
file and the line of the original where the change is, and what changed:
``refund.yaml:47:drop-transition:approve``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from machines.spec.files import read_text
from machines.spec.yamlsource import YamlSource, parse_yaml

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
"""Every operator, by name, and what its mutants change."""

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
    seen = {_behaviour(source.data)}
    ids: set[str] = set()
    for candidate in candidates:
        doc = copy.deepcopy(source.data)
        candidate.edit(doc)
        behaviour = _behaviour(doc)
        if behaviour in seen:
            continue  # an equivalent mutant, or one the same as an earlier one
        seen.add(behaviour)
        base = f"{source.path.name}:{candidate.line}:{candidate.operator}:{candidate.target}"
        mutant_id, n = base, 1
        while mutant_id in ids:
            n += 1
            mutant_id = f"{base}#{n}"
        ids.add(mutant_id)
        yield Mutant(
            mutant_id, source.path.name, candidate.line, candidate.operator, candidate.change, doc
        )


@dataclass(frozen=True)
class _Candidate:
    operator: str
    target: str
    line: int
    change: str
    edit: Callable[[Document], None]


def _as_list(value: str | list[str]) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


def _one_or_many(values: list[str]) -> str | list[str]:
    return values[0] if len(values) == 1 else values


def _candidates(source: YamlSource) -> Iterator[_Candidate]:
    doc: Document = source.data
    labels = _labels(doc["transitions"])
    for i, t in enumerate(doc["transitions"]):
        yield from _transition_candidates(source, i, t, labels[i])
    for name, state in doc["states"].items():
        yield from _state_candidates(source, name, state)
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
        else f"{t['trigger']}@{'+'.join(_as_list(t['source']))}"
        for t in transitions
    ]


def _move(t: Document) -> str:
    return f"{t['trigger']} ({'|'.join(_as_list(t['source']))} -> {t['dest']})"


def _transition_candidates(
    source: YamlSource, i: int, t: Document, label: str
) -> Iterator[_Candidate]:
    here = ("transitions", i)
    line = source.line_of(here) or 1
    move = _move(t)

    def drop(doc: Document) -> None:
        del doc["transitions"][i]

    yield _Candidate("drop-transition", label, line, f"the transition {move} removed", drop)

    sources = _as_list(t["source"])
    if len(sources) > 1:
        for s in sources:
            yield _Candidate(
                "drop-source",
                f"{label}:{s}",
                source.line_of((*here, "source")) or line,
                f"{move} no longer leaves {s}",
                _setter(i, "source", _one_or_many([x for x in sources if x != s])),
            )

    actors = _as_list(t["actor"])
    actor_line = source.line_of((*here, "actor")) or line
    for a in _actors(source.data):
        if a not in actors:
            yield _Candidate(
                "add-actor",
                f"{label}:{a}",
                actor_line,
                f"{move} may also be fired by {a}",
                _setter(i, "actor", [*actors, a]),
            )
    if len(actors) > 1:
        for a in actors:
            yield _Candidate(
                "drop-actor",
                f"{label}:{a}",
                actor_line,
                f"{move} may no longer be fired by {a}",
                _setter(i, "actor", _one_or_many([x for x in actors if x != a])),
            )

    if "when" in t:
        yield from _guard_candidates(source, i, t, label, move)

    dest_line = source.line_of((*here, "dest")) or line
    for state in source.data["states"]:
        if state != t["dest"]:
            yield _Candidate(
                "change-dest",
                f"{label}:{state}",
                dest_line,
                f"{move} leads to {state} instead",
                _setter(i, "dest", state),
            )


def _actors(doc: Document) -> list[str]:
    """The declared actors of a parsed definition, in order."""
    return list(doc["actors"])


def _setter(i: int, key: str, value: object) -> Callable[[Document], None]:
    def edit(doc: Document) -> None:
        doc["transitions"][i][key] = value

    return edit


def _guard_candidates(
    source: YamlSource, i: int, t: Document, label: str, move: str
) -> Iterator[_Candidate]:
    here = ("transitions", i, "when")
    when: dict[str, list[str]] = t["when"]
    context: Document = source.data.get("context", {})

    def drop_guard(doc: Document) -> None:
        del doc["transitions"][i]["when"]

    yield _Candidate(
        "drop-guard",
        label,
        source.line_of(here) or 1,
        f"{move} loses its guard: it fires in every context",
        drop_guard,
    )
    for var, values in when.items():
        line = source.line_of((*here, var)) or 1
        if len(when) > 1:
            yield _Candidate(
                "drop-guard-variable",
                f"{label}:{var}",
                line,
                f"{move} no longer asks for {var}",
                _guard_edit(i, var, None),
            )
        declared = context.get(var, {}).get("values", [])
        for value in declared:
            if value not in values:
                yield _Candidate(
                    "widen-guard",
                    f"{label}:{var}={value}",
                    line,
                    f"{move} also fires when {var} is {value}",
                    _guard_edit(i, var, [*values, value]),
                )
        if len(values) > 1:
            for value in values:
                yield _Candidate(
                    "narrow-guard",
                    f"{label}:{var}={value}",
                    line,
                    f"{move} no longer fires when {var} is {value}",
                    _guard_edit(i, var, [v for v in values if v != value]),
                )


def _guard_edit(i: int, var: str, values: list[str] | None) -> Callable[[Document], None]:
    def edit(doc: Document) -> None:
        when = doc["transitions"][i]["when"]
        if values is None:
            del when[var]
        else:
            when[var] = values

    return edit


def _state_candidates(source: YamlSource, name: str, state: Document) -> Iterator[_Candidate]:
    line = source.line_of(("states", name)) or 1
    if state.get("terminal", False):

        def unterminal(doc: Document) -> None:
            del doc["states"][name]["terminal"]

        yield _Candidate(
            "make-non-terminal", name, line, f"{name} is no longer terminal", unterminal
        )
    else:

        def terminal(doc: Document) -> None:
            doc["states"][name]["terminal"] = True

        yield _Candidate("make-terminal", name, line, f"{name} made terminal", terminal)
    for j, tag in enumerate(state.get("tags", [])):

        def untag(doc: Document, tag: str = tag) -> None:
            doc["states"][name]["tags"].remove(tag)

        yield _Candidate(
            "drop-tag",
            f"{name}:{tag}",
            source.line_of(("states", name, "tags", j)) or line,
            f"{name} loses its tag {tag}",
            untag,
        )


def _new_edges(source: YamlSource) -> Iterator[_Candidate]:
    """A move between every two distinct states that no transition joins and no
    forbidden entry names, from each state that is not terminal, by the first declared
    actor, under a new trigger."""
    doc: Document = source.data
    joined = {(s, t["dest"]) for t in doc["transitions"] for s in _as_list(t["source"])}
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

            def add(doc: Document, added: Document = added) -> None:
                doc["transitions"].append(added)

            yield _Candidate(
                "add-transition",
                f"{s}:{d}",
                source.line_of(("states", s)) or 1,
                f"a new move {trigger} ({s} -> {d}) by {actor}",
                add,
            )


def _forbidden(doc: Document, source: str, dest: str) -> bool:
    def names(value: str | list[str], name: str) -> bool:
        return value == "*" or name in _as_list(value)

    return any(
        names(f["source"], source) and names(f["dest"], dest) for f in doc.get("forbidden", [])
    )


def _behaviour(doc: Document) -> tuple[object, ...]:
    """What a definition allows, as a value: its initial state, each state's terminal
    flag and tags, and each move with its actors and guard (a guard variable that admits
    every value it takes is no guard)."""
    declared = {var: frozenset(c.get("values", [])) for var, c in doc.get("context", {}).items()}
    moves = frozenset(
        (
            s,
            t["trigger"],
            t["dest"],
            frozenset(_as_list(t["actor"])),
            frozenset(
                (var, frozenset(values))
                for var, values in t.get("when", {}).items()
                if frozenset(values) != declared.get(var)
            ),
        )
        for t in doc["transitions"]
        for s in _as_list(t["source"])
    )
    states = frozenset(
        (name, bool(state.get("terminal", False)), frozenset(state.get("tags", [])))
        for name, state in doc["states"].items()
    )
    return (doc["initial"], states, moves)
