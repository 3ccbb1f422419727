"""Pure graph checks over one ``MachineSpec``: the structural rule catalog.

Each rule kind is one small function. Guards make the graph depend on context, so every
check that talks about reachability runs once per context valuation (the product of the
declared values; a handful for every bundled machine) and reports a shortest path from the
initial state under the valuation that shows the problem.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from machines.spec.records import Guard, KeyPath, MachineSpec, Rule, Transition
from machines.spec.vacuous import vacuous
from machines.spec.visible import says_something
from machines.spec.vocabulary import BASELINE_RULES, FAIL_CLOSED, NEEDS_HUMAN, describe_guard

Context = Mapping[str, str]
Path = tuple[Transition, ...]

REQUIRED_KINDS = tuple(BASELINE_RULES)


@dataclass(frozen=True)
class Violation:
    """One broken rule, with a shortest path from the initial state that shows it."""

    machine: str
    rule: str
    kind: str
    message: str
    path: Path | None = None
    context: Context = field(default_factory=lambda: MappingProxyType({}))
    file: str | None = None
    """The definition file that breaks the rule, when it is known."""
    line: int | None = None
    """The line in ``file`` of what breaks it (the rule's, transition's or state's entry)."""

    @property
    def location(self) -> str | None:
        """``file:line`` (or ``file`` alone) for a message, None when the file is unknown."""
        if self.file is None:
            return None
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def describe(self, *, location: bool = True) -> str:
        """The violation as ``machines check`` prints it: ``file:line: machine: [rule]
        message`` and the path. ``location=False`` leaves out ``file:line`` (for a message
        that names the file already)."""
        text = f"{self.machine}: [{self.rule}] {self.message}"
        if location and self.location is not None:
            text = f"{self.location}: {text}"
        if self.path is not None:
            text += "\n    path: " + format_path(self.path, self.context)
        return text


def format_path(path: Path, context: Context) -> str:
    if not path:
        return "(the initial state itself)"
    hops = [path[0].source]
    for t in path:
        hops.append(f"--{t.trigger} ({'/'.join(t.actors)})--> {t.dest}")
    where = ", ".join(f"{k}={v}" for k, v in context.items())
    return (f"with {where}: " if where else "") + " ".join(hops)


class Graph:
    """Reachability of one spec under each context valuation, computed once."""

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.valuations: tuple[Context, ...] = spec.valuations()
        self._parents = [self._bfs(v, frozenset()) for v in self.valuations]

    def edges(self, context: Context) -> Iterator[Transition]:
        return (t for t in self.spec.transitions if t.admits(context))

    def _bfs(self, context: Context, avoid: frozenset[str]) -> dict[str, Transition | None]:
        parents: dict[str, Transition | None] = {self.spec.initial: None}
        out: dict[str, list[Transition]] = {}
        for t in self.edges(context):
            out.setdefault(t.source, []).append(t)
        queue = deque([self.spec.initial])
        while queue:
            state = queue.popleft()
            for t in out.get(state, []):
                if t.dest not in parents and t.dest not in avoid:
                    parents[t.dest] = t
                    queue.append(t.dest)
        return parents

    def reachable(self, context_index: int) -> Mapping[str, Transition | None]:
        return self._parents[context_index]

    def path_to(
        self,
        state: str,
        context_index: int,
        avoid: frozenset[str] = frozenset(),
    ) -> Path | None:
        parents = (
            self._parents[context_index]
            if not avoid
            else self._bfs(self.valuations[context_index], avoid)
        )
        if state not in parents:
            return None
        path: list[Transition] = []
        while (t := parents[state]) is not None:
            path.append(t)
            state = t.source
        return tuple(reversed(path))

    def edge_witness(
        self, t: Transition, also: Callable[[Context], bool] = lambda _: True
    ) -> tuple[Path | None, Context]:
        """Shortest path that ends by taking ``t``, under a valuation that admits it (and
        ``also``). Without such a path, the first admitting valuation and ``None``."""
        best_path: Path | None = None
        best_context: Context | None = None
        for i, v in enumerate(self.valuations):
            if not (t.admits(v) and also(v)):
                continue
            prefix = self.path_to(t.source, i)
            if prefix is not None and (best_path is None or len(prefix) + 1 < len(best_path)):
                best_path, best_context = (*prefix, t), v
            elif best_context is None:
                best_context = v
        return best_path, best_context if best_context is not None else MappingProxyType({})


def check_structure(spec: MachineSpec) -> list[Violation]:
    """Every violation of the spec's declared rules, its forbidden list and the rule kinds
    every machine must declare. An empty list means the spec is structurally sound.

    Each violation names the spec's file and the line a user fixes it at (when the spec
    was read from a file): the transition's entry for a rule judged edge by edge and for a
    forbidden move (the message gives the forbidden entry's line); the state's entry for
    a state no path reaches (``all_reachable``) or an entity is stuck in
    (``can_terminate``); the rule's own entry under ``invariants:`` for a rule about paths
    (``only_via``, ``only_reachable_when``); the ``invariants:`` key for a missing
    required kind.
    """
    graph = Graph(spec)
    out: list[Violation] = []
    declared = {r.kind for r in spec.invariants}
    for kind in REQUIRED_KINDS:
        if kind not in declared and kind not in spec.opt_out:
            out.append(
                Violation(
                    spec.name,
                    "required-rules",
                    kind,
                    f"no invariant of kind '{kind}' is declared; every machine keeps "
                    "terminal_final, all_reachable and can_terminate unless its "
                    "definition opts out of one under opt_out, with a reason",
                    line=line_of(spec, ("invariants",)),
                )
            )
    out.extend(_forbidden_moves(spec, graph))
    for i, rule in enumerate(spec.invariants):
        at = line_of(spec, ("invariants", i))
        out.extend(
            v if v.line is not None else replace(v, line=at)
            for v in RULE_KINDS[rule.kind](spec, rule, graph)
        )
        if (why := vacuous(spec, rule)) is not None:
            said = (
                f"the rule can never fail: {why}, so it keeps nothing (a mutant it should "
                "kill survives); name the states, actors, triggers or values it must keep, "
                "or remove it"
            )
            out.append(Violation(spec.name, rule.id, rule.kind, said, line=at))
    out.extend(_fail_closed_exits(spec, graph))
    out.extend(_needs_human_exits(spec, graph))
    out.extend(_fail_closed_terminal(spec))
    file = file_of(spec)
    return [replace(v, file=file) for v in out]


def file_of(spec: MachineSpec) -> str | None:
    """The file ``spec`` was read from, as a message names it."""
    return str(spec.path) if spec.path is not None else None


def line_of(spec: MachineSpec, key_path: KeyPath) -> int | None:
    """The line of ``key_path`` (or its nearest ancestor) in ``spec``'s file."""
    return spec.source.line_of(key_path) if spec.source is not None else None


def _transition_line(spec: MachineSpec, index: int) -> int | None:
    return spec.source.transition(index) if spec.source is not None else None


RuleCheck = Callable[[MachineSpec, Rule, Graph], Iterable[Violation]]
EdgeCheck = Callable[[MachineSpec, Rule, Transition], str | None]
"""A per-edge rule: the message when transition ``t`` breaks ``rule``, else ``None``."""


def _edge_rule(check: EdgeCheck, outside_when: bool = False) -> RuleCheck:
    """A rule kind judged edge by edge, each offending edge shown by a shortest path.

    ``outside_when``: pick the witness valuation outside the rule's ``when``, where the
    edge does its harm.
    """

    def run(spec: MachineSpec, rule: Rule, graph: Graph) -> Iterator[Violation]:
        for index, t in enumerate(spec.transitions):
            message = check(spec, rule, t)
            if message is None:
                continue
            path, context = graph.edge_witness(
                t, (lambda c: not _within(c, rule.when)) if outside_when else (lambda _: True)
            )
            if path is None:
                message += f" (unreachable: no path from '{spec.initial}' reaches '{t.source}')"
            line = _transition_line(spec, index)
            yield Violation(spec.name, rule.id, rule.kind, message, path, context, line=line)

    return run


def _edge_text(t: Transition) -> str:
    return f"'{t.source}' -> '{t.dest}' (trigger {t.trigger}, actor {'/'.join(t.actors)})"


def _automatic(spec: MachineSpec, t: Transition) -> list[str]:
    return [a for a in t.actors if spec.actors[a].automatic]


def _within(context: Context, when: Guard) -> bool:
    return all(context[var] in allowed for var, allowed in when.items())


def _forbidden_moves(spec: MachineSpec, graph: Graph) -> Iterable[Violation]:
    for index, t in enumerate(spec.transitions):
        for i, entry in enumerate(spec.forbidden):
            if entry.matches(t.source, t.dest):
                path, context = graph.edge_witness(t)
                entry_line = line_of(spec, ("forbidden", i))
                by = f" (forbidden at line {entry_line})" if entry_line is not None else ""
                yield Violation(
                    spec.name,
                    "forbidden",
                    "forbidden",
                    f"{_edge_text(t)} is a forbidden move{by}: {entry.reason}",
                    path,
                    context,
                    line=_transition_line(spec, index),
                )


def _fail_closed_exits(spec: MachineSpec, graph: Graph) -> Iterable[Violation]:
    """The rule the ``fail-closed`` tag states without a declaration: nobody can tell what
    happened in such a state, so an automatic actor leaves it only on evidence it states (a
    reconciler reading the venue's records), never on its own. Without the tag's rule an
    automatic exit from a fail-closed state (a worker that gives up on a parked charge)
    checked clean, and only the audit of a store caught the first such move."""
    return _automatic_exits(
        spec,
        graph,
        FAIL_CLOSED,
        "fail-closed-exits",
        lambda t: says_something(t.evidence),
        lambda t, auto: (
            f"automatic actor {auto} leaves fail-closed state '{t.source}' "
            "without stated evidence; add 'evidence:' (what it reads that proves what happened) "
            "or give the move to a person"
        ),
    )


def _needs_human_exits(spec: MachineSpec, graph: Graph) -> Iterable[Violation]:
    """The rule the ``needs-human`` tag states: a person must act before anything moves,
    so no automatic actor leaves such a state. Without it a state a worker also leaves
    was tagged, the desk listed it as a person's, and the worker moved it on anyway."""
    return _automatic_exits(
        spec,
        graph,
        NEEDS_HUMAN,
        "needs-human-exits",
        lambda t: False,
        lambda t, auto: (
            f"automatic actor {auto} leaves '{t.source}', which is tagged "
            "needs-human (a person must act before anything moves); give the move to a person, "
            "or remove the tag (the desk still lists a state only a person moves on)"
        ),
    )


def _fail_closed_terminal(spec: MachineSpec) -> Iterator[Violation]:
    """A terminal state tagged ``fail-closed`` contradicts itself: nobody can tell what
    happened there, and nothing leaves it, so no person can ever settle it. (A terminal
    ``needs-human`` state is a person's repair outside the machine, as the effect log's
    ``compensation_failed``; outsider batch 45, b 16, asked what such a tag means.)"""
    for name in sorted(spec.states_tagged(FAIL_CLOSED)):
        if spec.states[name].terminal:
            yield Violation(
                spec.name,
                "fail-closed-terminal",
                FAIL_CLOSED,
                f"terminal state '{name}' is tagged {FAIL_CLOSED} (nobody can tell what "
                "happened), and nothing leaves a terminal state, so nobody can ever settle "
                "it; make it non-terminal with a person's ways out, or remove the tag",
                line=line_of(spec, ("states", name)),
            )


def _automatic_exits(
    spec: MachineSpec,
    graph: Graph,
    tag: str,
    rule: str,
    allowed: Callable[[Transition], bool],
    said: Callable[[Transition, str], str],
) -> Iterator[Violation]:
    """A violation of ``rule`` at every move an automatic actor makes out of a state
    tagged ``tag``, unless ``allowed``; ``said`` is its message after the move."""
    tagged = spec.states_tagged(tag)
    for index, t in enumerate(spec.transitions):
        auto = _automatic(spec, t)
        if t.source not in tagged or not auto or allowed(t):
            continue
        path, context = graph.edge_witness(t)
        yield Violation(
            spec.name,
            rule,
            tag,
            f"{_edge_text(t)}: {said(t, ', '.join(auto))}",
            path,
            context,
            line=_transition_line(spec, index),
        )


def _terminal_exit(spec: MachineSpec, rule: Rule, t: Transition) -> str | None:
    if not spec.states[t.source].terminal:
        return None
    return f"terminal state '{t.source}' has a way out: {_edge_text(t)}"


def _by_other_actor(end: Literal["source", "dest"], verb: str) -> EdgeCheck:
    """The check of a rule that only its actors may ``verb`` its states: an edge whose
    ``end`` is one of them, taken by some other actor, breaks it."""

    def check(spec: MachineSpec, rule: Rule, t: Transition) -> str | None:
        state = getattr(t, end)
        extra = [a for a in t.actors if a not in rule.actors]
        if state not in rule.states or not extra:
            return None
        return (
            f"{_edge_text(t)} lets {', '.join(extra)} {verb} '{state}'; "
            f"only {', '.join(rule.actors)} may"
        )

    return check


def _exit_by_other_trigger(spec: MachineSpec, rule: Rule, t: Transition) -> str | None:
    if t.source not in rule.states or t.trigger in rule.triggers:
        return None
    return f"{_edge_text(t)} leaves '{t.source}' by a trigger other than {', '.join(rule.triggers)}"


def _entry_from_other_source(spec: MachineSpec, rule: Rule, t: Transition) -> str | None:
    if t.dest not in rule.states or t.source in rule.sources:
        return None
    return (
        f"{_edge_text(t)} enters '{t.dest}' from '{t.source}'; "
        f"allowed sources: {', '.join(rule.sources)}"
    )


def _automatic_entry_unguarded(spec: MachineSpec, rule: Rule, t: Transition) -> str | None:
    auto = _automatic(spec, t)
    loose = [
        var for var, allowed in rule.when.items() if var not in t.when or not t.when[var] <= allowed
    ]
    if t.dest not in rule.states or not auto or not loose:
        return None
    return (
        f"{_edge_text(t)}: automatic actor {', '.join(auto)} may enter '{t.dest}' "
        f"outside {describe_guard(rule.when)}; guard the transition"
    )


def _automatic_move_without_evidence(spec: MachineSpec, rule: Rule, t: Transition) -> str | None:
    auto = _automatic(spec, t)
    if t.source not in rule.sources or t.dest not in rule.dests or not auto:
        return None
    if says_something(t.evidence):
        return None
    return (
        f"{_edge_text(t)}: automatic actor {', '.join(auto)} moves '{t.source}' to "
        f"'{t.dest}' without stated evidence; add 'evidence:' or give the move to a person"
    )


def _all_reachable(spec: MachineSpec, rule: Rule, graph: Graph) -> Iterable[Violation]:
    seen = set().union(*(graph.reachable(i) for i in range(len(graph.valuations))))
    for state in spec.states:
        if state not in seen:
            yield Violation(
                spec.name,
                rule.id,
                rule.kind,
                f"no path from '{spec.initial}' reaches '{state}' under any context",
                line=line_of(spec, ("states", state)),
            )


def _can_terminate(spec: MachineSpec, rule: Rule, graph: Graph) -> Iterable[Violation]:
    reported: set[str] = set()
    goals = {s for s, st in spec.states.items() if st.terminal} | set(rule.holds)
    for i, context in enumerate(graph.valuations):
        can_finish = set(goals)
        edges = list(graph.edges(context))
        changed = True
        while changed:
            before = len(can_finish)
            can_finish |= {t.source for t in edges if t.dest in can_finish}
            changed = len(can_finish) != before
        for state in graph.reachable(i):
            if state not in can_finish and state not in reported:
                reported.add(state)
                yield Violation(
                    spec.name,
                    rule.id,
                    rule.kind,
                    f"from '{state}' no terminal state (or declared hold) can be "
                    "reached: entities that get there are stuck forever",
                    graph.path_to(state, i),
                    context,
                    line=line_of(spec, ("states", state)),
                )


def _only_via(spec: MachineSpec, rule: Rule, graph: Graph) -> Iterable[Violation]:
    for state in rule.states:
        for i, context in enumerate(graph.valuations):
            if not _within(context, rule.when):
                continue
            path = graph.path_to(state, i, avoid=frozenset(rule.via))
            if path is not None:
                yield Violation(
                    spec.name,
                    rule.id,
                    rule.kind,
                    f"'{state}' is reachable without passing through {', '.join(rule.via)}",
                    path,
                    context,
                )
                break


def _only_reachable_when(spec: MachineSpec, rule: Rule, graph: Graph) -> Iterable[Violation]:
    for state in rule.states:
        for i, context in enumerate(graph.valuations):
            if _within(context, rule.when):
                continue
            path = graph.path_to(state, i)
            if path is not None:
                yield Violation(
                    spec.name,
                    rule.id,
                    rule.kind,
                    f"'{state}' is reachable outside {describe_guard(rule.when)}",
                    path,
                    context,
                )
                break


RULE_KINDS: Mapping[str, RuleCheck] = MappingProxyType(
    {
        "terminal_final": _edge_rule(_terminal_exit),
        "all_reachable": _all_reachable,
        "can_terminate": _can_terminate,
        "only_actors_exit": _edge_rule(_by_other_actor("source", "leave")),
        "only_actors_enter": _edge_rule(_by_other_actor("dest", "enter")),
        "only_triggers_exit": _edge_rule(_exit_by_other_trigger),
        "only_from": _edge_rule(_entry_from_other_source),
        "only_via": _only_via,
        "only_reachable_when": _only_reachable_when,
        "automatic_enters_only_when": _edge_rule(_automatic_entry_unguarded, outside_when=True),
        "automatic_needs_evidence": _edge_rule(_automatic_move_without_evidence),
    }
)
"""The closed catalog of structural rule kinds; the schema's enum lists the same names."""
