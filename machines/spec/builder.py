"""Build the immutable IR from a definition that passed the JSON Schema.

The second of the loader's three layers of checking: every cross-reference (states, actors,
context values, findings, tags, reserved names, the derivation's node states, ambiguous
triggers) is checked as the records are built, and every problem is reported with its line,
all at once. A derivation's node machine is read through the ``read_nodes`` function the
loader hands over, so this module never finds or opens a file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from machines.errors import SpecError
from machines.spec.builder_derivation import build_derivation
from machines.spec.files import MAX_VALUATION_MOVES, MAX_VALUATIONS
from machines.spec.records import (
    EMPTY_GUARD,
    Actor,
    ContextVariable,
    Finding,
    Forbidden,
    Guard,
    KeyPath,
    MachineSpec,
    Rule,
    SourceLines,
    State,
    Transition,
)
from machines.spec.routing import suggest
from machines.spec.visible import says_something
from machines.spec.vocabulary import (
    BASELINE_RULES,
    MAX_CONTEXT_NAME,
    RESERVED_ACTORS,
    RESERVED_CONTEXT,
    RESERVED_MACHINES,
    RESERVED_TRIGGER_PREFIXES,
    RESERVED_TRIGGERS,
    STORE_PREFIX,
    TAGS,
    USER_TAG_PREFIX,
    is_declared_tag,
    reserved_prefix,
)
from machines.spec.yamlsource import MAX_PROBLEMS, YamlSource, bounded, clip, quote


class Builder:
    """Cross-reference checks and IR construction for one parsed, schema-valid document."""

    def __init__(self, source: YamlSource, read_nodes: Callable[[str], MachineSpec]) -> None:
        self.src = source
        self.doc: dict[str, Any] = source.data
        self.read_nodes = read_nodes
        self.problems: list[str] = []
        self.states: Mapping[str, Any] = {
            name: raw if raw is not None else {} for name, raw in self.doc["states"].items()
        }
        self.actors: Mapping[str, Any] = self.doc["actors"]
        self.context: Mapping[str, Any] = self.doc.get("context", {})
        self.finding_ids = {f["id"] for f in self.doc.get("findings", [])}
        self.name = self.doc["machine"]
        self.transition_index: list[int] = []  # YAML entry of each expanded transition

    def problem(self, key_path: KeyPath, text: str) -> None:
        self.problems.append(f"{self.src.where(key_path)}: {text}")

    def build(self) -> MachineSpec:
        stem = self.src.path.stem
        if self.name != stem:
            self.problem(
                ("machine",), f"machine {quote(self.name)} must equal the file name {quote(stem)}"
            )
        if self.name in RESERVED_MACHINES:
            self.problem(
                ("machine",),
                f"machine name {quote(self.name)} is taken by a page the site and machines "
                f"docs make beside the machine pages ({', '.join(sorted(RESERVED_MACHINES))}); "
                "choose another name",
            )
        taken = reserved_prefix(self.name)
        if taken is not None:
            self.problem(
                ("machine",),
                f"machine name {quote(self.name)} makes tables that start with "
                f"{quote(taken)}, which "
                + (
                    "a store's own tables and functions take (its registry, its record of repairs)"
                    if taken == STORE_PREFIX
                    else "the database keeps for its own tables"
                )
                + "; choose another name",
            )
        self.state_ref(("initial",), self.doc["initial"])
        for actor in self.actors:
            if actor in RESERVED_ACTORS:
                self.problem(
                    ("actors", actor),
                    f"actor name {quote(actor)} is reserved for the history event a "
                    "migration writes (machines migrate); choose another name",
                )
        context = self.build_context()
        transitions = self.build_transitions()
        self.check_ambiguity(transitions)
        spec = MachineSpec(
            name=self.name,
            title=self.doc.get("title", default_title(self.name)),
            origin=self.doc.get("origin", ""),
            description=self.doc["description"],
            initial=self.doc["initial"],
            context=context,
            actors=MappingProxyType(
                {n: Actor(n, a["automatic"], a["description"]) for n, a in self.actors.items()}
            ),
            states=self.build_states(),
            transitions=transitions,
            forbidden=self.build_forbidden(),
            invariants=self.build_rules(),
            opt_out=self.build_opt_out(),
            findings=self.build_findings(),
            derivation=build_derivation(self),
            path=self.src.path,
            source=SourceLines(self.src.lines, tuple(self.transition_index)),
        )
        if self.problems:
            raise SpecError(self.src.path, bounded(self.problems))
        return spec

    # -- references ---------------------------------------------------------------------

    def state_ref(
        self,
        at: KeyPath,
        name: str,
        states: Iterable[str] | None = None,
        machine: str | None = None,
    ) -> None:
        known = list(self.states if states is None else states)
        if name not in known:
            self.problem(
                at,
                f"{quote(name)} is not a state of machine {quote(machine or self.name)}"
                f"{suggest(name, known)}; define it under states or fix the name",
            )

    def actor_ref(self, at: KeyPath, name: str) -> None:
        if name not in self.actors:
            self.problem(
                at,
                f"{quote(name)} is not an actor{suggest(name, self.actors)}; "
                f"declare it under actors (known: {', '.join(self.actors)})",
            )

    def guard(self, at: KeyPath, raw: Mapping[str, list[str]] | None) -> Guard:
        if not raw:
            return EMPTY_GUARD
        for var, values in raw.items():
            spec = self.context.get(var)
            if spec is None:
                self.problem(
                    (*at, var),
                    f"{quote(var)} is not a context variable"
                    f"{suggest(var, self.context)}; declare it under context",
                )
                continue
            for i, value in enumerate(values):
                if value in spec.get("excluded", {}):
                    self.problem(
                        (*at, var, i),
                        f"{clip(f'{var}={value}')} is excluded from this machine; "
                        "a guard cannot admit it",
                    )
                elif value not in spec["values"]:
                    self.problem(
                        (*at, var, i),
                        f"{quote(value)} is not a value of {quote(var)}"
                        f"{suggest(value, spec['values'])}; values: "
                        f"{', '.join(spec['values'])}",
                    )
        return MappingProxyType({var: frozenset(vals) for var, vals in raw.items()})

    def finding_ref(self, at: KeyPath, finding_id: str) -> None:
        if finding_id not in self.finding_ids:
            self.problem(
                at,
                f"{quote(finding_id)} is not a finding of this file"
                f"{suggest(finding_id, self.finding_ids)}; add it under findings",
            )

    def state_tags(self, state: str, tags: list[str]) -> tuple[str, ...]:
        """The state's tags, each one declared (``machines.spec.vocabulary``): a misspelled tag
        would silently switch off the logic that reads it."""
        for i, tag in enumerate(tags):
            if not is_declared_tag(tag):
                self.problem(
                    ("states", state, "tags", i),
                    f"unknown tag {quote(tag)}{suggest(tag, TAGS)}; the tags are "
                    f"{', '.join(TAGS)}, and a tag of your own starts with "
                    f"'{USER_TAG_PREFIX}'",
                )
        return tuple(tags)

    # -- sections -----------------------------------------------------------------------

    def build_context(self) -> Mapping[str, ContextVariable]:
        out = {}
        for var, raw in self.context.items():
            if len(var) > MAX_CONTEXT_NAME:
                self.problem(
                    ("context", var),
                    f"context variable name {quote(var[:20])}... has {len(var)} characters; "
                    f"at most {MAX_CONTEXT_NAME} (a store keeps it as a column whose name "
                    "PostgreSQL cuts at 63 bytes): choose a shorter name",
                )
            if var in RESERVED_CONTEXT:
                self.problem(
                    ("context", var),
                    f"context variable name {quote(var)} is reserved (it is a keyword of "
                    "spec.machine(), trigger(), can() or step()); choose another name",
                )
            excluded = raw.get("excluded", {})
            for value in excluded:
                if value in raw["values"]:
                    self.problem(
                        ("context", var, "excluded", value),
                        f"{quote(value)} is both a value and excluded; keep one",
                    )
            out[var] = ContextVariable(
                var, tuple(raw["values"]), raw["description"], MappingProxyType(dict(excluded))
            )
        combinations = math.prod(len(c.values) for c in out.values())
        moves = combinations * max(1, len(self.doc["transitions"]))
        if combinations > MAX_VALUATIONS or moves > MAX_VALUATION_MOVES:
            sizes = " x ".join(f"{c.name} {len(c.values)}" for c in out.values())
            count = len(self.doc["transitions"])
            broken = (
                f"at most {MAX_VALUATIONS:,} are walked"
                if combinations > MAX_VALUATIONS
                else f"counted once for each of its {count:,} transitions that is {moves:,}, "
                f"and at most {MAX_VALUATION_MOVES:,} are walked"
            )
            self.problem(
                ("context",),
                f"the context has {combinations:,} combinations of values ({sizes}), and "
                f"machines walks the machine under each: {broken}; use fewer variables or "
                "values, or split the machine",
            )
        return MappingProxyType(out)

    def build_states(self) -> Mapping[str, State]:
        out = {}
        seen_db: dict[str, str] = {}
        for name, raw in self.states.items():
            db_value = raw.get("db_value", name)
            if db_value in seen_db:
                self.problem(
                    ("states", name, "db_value"),
                    f"db_value {quote(db_value)} is already used by {quote(seen_db[db_value])}",
                )
            seen_db[db_value] = name
            annotations = tuple(raw.get("annotations", ()))
            if annotations and not raw.get("terminal", False):
                self.problem(
                    ("states", name, "annotations"),
                    "annotations name the data fields that may change in a terminal state; "
                    f"'{name}' is not terminal (its data may change anyway): remove them",
                )
            out[name] = State(
                name,
                raw.get("description", ""),
                raw.get("terminal", False),
                db_value,
                self.state_tags(name, raw.get("tags", [])),
                annotations,
            )
        return MappingProxyType(out)

    def build_transitions(self) -> tuple[Transition, ...]:
        out = []
        for i, raw in enumerate(self.doc["transitions"]):
            at: KeyPath = ("transitions", i)
            trigger = raw["trigger"]
            if trigger in RESERVED_TRIGGERS or trigger.startswith(RESERVED_TRIGGER_PREFIXES):
                self.problem(
                    (*at, "trigger"),
                    f"trigger name {quote(trigger)} is reserved (it would "
                    "shadow a runtime attribute); choose another verb",
                )
            sources = _as_list(raw["source"])
            actors = _as_list(raw["actor"])
            for j, s in enumerate(sources):
                self.state_ref(_item_at(at, "source", raw, j), s)
            self.state_ref((*at, "dest"), raw["dest"])
            for j, a in enumerate(actors):
                self.actor_ref(_item_at(at, "actor", raw, j), a)
            when = self.guard((*at, "when"), raw.get("when"))
            for key in ("amendment", "unreachable_in_systems"):
                if key in raw:
                    self.finding_ref((*at, key), raw[key])
            if "evidence" in raw and not says_something(raw["evidence"]):
                self.problem(
                    (*at, "evidence"),
                    "evidence says nothing (it needs a letter or a digit: what the move "
                    "reads before it is made); write it, or leave the key out",
                )
            for source in sources:
                self.transition_index.append(i)
                out.append(
                    Transition(
                        trigger=trigger,
                        source=source,
                        dest=raw["dest"],
                        actors=tuple(actors),
                        description=raw["description"],
                        when=when,
                        evidence=raw.get("evidence"),
                        amendment=raw.get("amendment"),
                        unreachable_in_systems=raw.get("unreachable_in_systems"),
                    )
                )
        return tuple(out)

    def check_ambiguity(self, transitions: tuple[Transition, ...]) -> None:
        """Two edges with one source and trigger must never both fire for one actor and
        context: the move would depend on definition order. Edges are compared within
        their (source, trigger, actor) group only: comparing every pair took minutes on a
        26 KB file of 300 states, one alias expanding to 90,000 edges (outsider batch 36,
        c 1), and 4,000 actors of one trigger from one state took 11.7 s (batch 37)."""
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, t in enumerate(transitions):  # only edges of one source, trigger, actor clash
            for actor in t.actors:
                groups.setdefault((t.source, t.trigger, actor), []).append(i)
        pairs = sorted(
            {(i, j) for g in groups.values() for n, i in enumerate(g) for j in g[n + 1 :]}
        )
        for i, j in pairs:
            a, b = transitions[i], transitions[j]
            if len(self.problems) > MAX_PROBLEMS or not _guards_overlap(a.when, b.when):
                continue
            if any(var not in self.context for var in (*a.when, *b.when)):
                continue  # a guard on an unknown variable is reported already (batch 46, b 5)
            first, second = self.transition_index[i], self.transition_index[j]
            self.problem(
                ("transitions", second),
                f"trigger {quote(a.trigger)} from {quote(a.source)} is ambiguous: "
                f"transitions[{first}] goes to {quote(a.dest)} and transitions[{second}] "
                f"to {quote(b.dest)} for the same "
                "actor and context; give one a different trigger name, actor or guard",
            )

    def build_forbidden(self) -> tuple[Forbidden, ...]:
        out = []
        for i, raw in enumerate(self.doc.get("forbidden", [])):
            sides: list[frozenset[str] | None] = []
            for side in ("source", "dest"):
                value = raw[side]
                if value == "*":
                    sides.append(None)
                    continue
                names = _as_list(value)
                for n in names:
                    self.state_ref(("forbidden", i, side), n)
                sides.append(frozenset(names))
            out.append(Forbidden(sides[0], sides[1], raw["reason"]))
        return tuple(out)

    def build_rules(self) -> tuple[Rule, ...]:
        out = []
        seen: set[str] = set()
        triggers = {t["trigger"] for t in self.doc["transitions"]}
        for i, raw in enumerate(self.doc.get("invariants", [])):
            at: KeyPath = ("invariants", i)
            if raw["id"] in seen:
                self.problem((*at, "id"), f"invariant id {quote(raw['id'])} is used twice")
            seen.add(raw["id"])
            states = _as_list(raw.get("state", [])) + list(raw.get("states", []))
            for key in ("state", "states", "sources", "dests", "via", "holds"):
                for j, n in enumerate(_as_list(raw.get(key, []))):
                    self.state_ref(_item_at(at, key, raw, j), n)
            for j, a in enumerate(raw.get("actors", [])):
                self.actor_ref((*at, "actors", j), a)
            for j, t in enumerate(raw.get("triggers", [])):
                if t not in triggers:
                    self.problem(
                        (*at, "triggers", j),
                        f"{quote(t)} is not a trigger of this machine{suggest(t, triggers)}",
                    )
            out.append(
                Rule(
                    id=raw["id"],
                    kind=raw["rule"],
                    description=raw["description"],
                    states=tuple(states),
                    actors=tuple(raw.get("actors", ())),
                    triggers=tuple(raw.get("triggers", ())),
                    sources=tuple(raw.get("sources", ())),
                    dests=tuple(raw.get("dests", ())),
                    via=tuple(raw.get("via", ())),
                    holds=tuple(raw.get("holds", ())),
                    when=self.guard((*at, "when"), raw.get("when")),
                )
            )
        return tuple(out) + self.implied_rules(out)

    def implied_rules(self, declared: list[Rule]) -> tuple[Rule, ...]:
        """The baseline rules the definition neither declares nor opts out of, under
        their own ids (``BASELINE_RULES``), which no declared rule may take."""
        kinds = {r.kind for r in declared}
        ids = {r.id: r.kind for r in declared}
        opted = self.doc.get("opt_out", {})
        out = []
        for kind, baseline in BASELINE_RULES.items():
            if kind in opted and kind in kinds:
                self.problem(
                    ("opt_out", kind),
                    f"the definition both declares a {kind} rule and opts out of it: "
                    "remove one of the two",
                )
            if kind in kinds or kind in opted:
                continue
            if baseline.id in ids:
                self.problem(
                    ("invariants",),
                    f"invariant id {quote(baseline.id)} names a {ids[baseline.id]} rule, "
                    f"but it is the id of the implied {kind} rule: rename yours, or declare "
                    f"a {kind} rule yourself",
                )
                continue
            out.append(Rule(baseline.id, baseline.kind, baseline.description))
        return tuple(out)

    def build_opt_out(self) -> Mapping[str, str]:
        return MappingProxyType(dict(self.doc.get("opt_out", {})))

    def build_findings(self) -> tuple[Finding, ...]:
        out = []
        seen: set[str] = set()
        for i, raw in enumerate(self.doc.get("findings", [])):
            if raw["id"] in seen:
                self.problem(("findings", i, "id"), f"finding id {quote(raw['id'])} is used twice")
            seen.add(raw["id"])
            out.append(Finding(self.name, raw["id"], raw["seed"], raw["text"], raw["resolution"]))
        return tuple(out)


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _item_at(at: KeyPath, key: str, raw: Mapping[str, Any], j: int) -> KeyPath:
    """Where the ``j``-th name of ``raw[key]`` is: the list item, or the key given one name."""
    return (*at, key, j) if isinstance(raw.get(key), list) else (*at, key)


def _guards_overlap(a: Guard, b: Guard) -> bool:
    return all(a[var] & b[var] for var in a.keys() & b.keys())


def default_title(name: str) -> str:
    """The title of a definition that gives none: its name, capitalised, words spaced."""
    return name.replace("_", " ").capitalize()
