"""A migration's map judged as a move: what the definitions' rules say of it.

``machines migrate --map MACHINE:OLD=NEW`` moves every entity in ``OLD`` (a state the new
version removes) to ``NEW``, as one event by the ``migration`` actor with the ``migrate``
trigger (``machines.spec.vocabulary``). That actor is automatic: nobody decided anything
about each entity. So a map is judged like any automatic move, by the rules of the
definition the entity lives under (the stored version) for the state it leaves, and by
the rules of both versions for the state it enters:

- it may not leave a state whose exits the definition reserves: a state tagged
  ``fail-closed`` or ``needs-human``, one whose every way out is a person's, one that
  ``only_actors_exit`` keeps for named actors or ``only_triggers_exit`` for named
  triggers (an ``indeterminate`` outcome, a transfer waiting for an operator). A map
  into a state the stored version does not have is a rename (the entity waits where it
  waited, under the new name), and is allowed if the new state is final only when the old
  one was, and keeps the reserved tags and the exit rules of the old;
- it may not make a move ``automatic_needs_evidence`` asks evidence for;
- a map into a state the stored version already has is an automatic move there: it may
  not enter a state only people's moves enter (for the entity's context), nor one no move
  enters for it, follow a move the definition forbids by name, skip a state ``only_via``
  or ``only_from`` requires, leave a state the definition derives from other entities,
  or finish an entity (a state that is not terminal into one that is) except where the
  definition has an automatic move between the two that needs no evidence; between final
  states it lets no more of the entity's data change (``annotations``);
- it may not enter a state ``only_actors_enter`` keeps for people, nor one that
  ``automatic_enters_only_when`` or ``only_reachable_when`` admits only under a context
  the entity does not have (a request released while a node with a side effect has
  started: its derived context, from its nodes, says so); a rule that guards one state
  releasing a reservation guards every such state a map enters;
- it may not change what the entity's state says happened: a map out of a state tagged
  ``effect-started`` (the effect may have run) goes only into another such state, and a
  map out of a terminal state into another goes only into one with the same built-in tags
  (``succeeded`` is never read as ``failed``, nor a completed transfer as a released one,
  nor the reverse; a removed terminal state is renamed, or kept), each judged under both
  versions' tags where both have the state entered; a rename keeps a reservation's fate
  (held, consumed, released), and no map enters a state whose fate the new version
  changes;
- a map obeys, and keeps the meaning of, every version under which the entity may have
  lived in the state it leaves (``lineage``), not only the last: a rule dropped, or a tag
  added, in one version cannot open a map in the next;
- a new version keeps what a state in which entities live means, gives no new state a name
  an earlier version used for another meaning, and keeps every actor's nature
  (``machines.spec.version_changes``).

The store's migration refuses such a map before it writes anything, and the audit judges
every recorded migration event the same way; both read ``migration_breaks``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from machines.spec.entering import admits, people_enter, people_enter_more, ways_in
from machines.spec.records import MachineSpec, Rule
from machines.spec.state_meaning import (
    RESERVED_TAGS,
    annotations_kept,
    exits_kept,
    meaning_in,
    meaning_kept,
    named,
    rules_of,
)
from machines.spec.vocabulary import (
    EFFECT_STARTED,
    MIGRATION_ACTOR,
    MIGRATION_TRIGGER,
    RELEASES_RESERVATION,
    describe_guard,
)

EARLIER = "(by an earlier version under which the entities may have lived there)"


def migration_breaks(
    old: MachineSpec,
    new: MachineSpec | None,
    source: str,
    dest: str,
    context: Mapping[str, str] | None = None,
    earlier: Sequence[tuple[MachineSpec, str]] = (),
    engine_moved: bool = False,
) -> list[str]:
    """What an automatic migration move ``source`` -> ``dest`` would break: each a
    sentence naming the rule (its id and kind) or the tag. ``old`` is the version the
    entity lives under, ``new`` the one it moves to (``None``: judge by ``old`` alone).
    ``context``: the entity's context, its derived variables included; without it, the
    rules that depend on the context are not judged. ``earlier``: the versions before
    ``old`` under which the entity may have lived, each with the name the state had there
    (``lineage``); a map obeys their rules and keeps their meaning too, so that no chain
    of versions, each harmless alone, can carry an entity where none of them would have
    let it go. ``engine_moved``: the machine's entities are a derivation's nodes
    (``engine_moved_machines``), whose states that are not final only their engine leaves.
    """
    renamed = new is not None and dest in new.states and dest not in old.states
    lived = [*earlier, (old, source)]
    specs = [spec for spec, _ in lived]
    entered = [s for s in specs if dest in s.states]  # gap or not: each judged its entry
    final = any(t.states[dest].terminal for t in (*entered, new or old) if dest in t.states)
    out: list[str] = []
    for spec, name in lived:
        if renamed and new is not None:
            found = list(_renamed(spec, new, name, dest, context))
        else:
            found = [*_leaving(spec, name), *_evidence(spec, name, dest), *_derived(spec, name)]
            found += _engine_moved(spec, name) if engine_moved else []
            if name in spec.states and dest in spec.states:
                found += [
                    *_forbidden(spec, name, dest),
                    *_finishing(spec, name, dest, final, context),
                ]
        for there in dict.fromkeys([*entered, new or old]) if spec is not old else ():
            if name in spec.states and dest in there.states:
                found += meaning_in(spec, there, name, dest)
        out += found if spec is old else [f"{why} {EARLIER}" for why in found]
    out += meaning_kept(old, new or old, source, dest)
    for there in dict.fromkeys([*entered, new or old]):
        if dest in there.states and source in old.states:
            out += _only_by_way_of(old, source, there, dest, context)
        if dest in there.states:
            found = [] if renamed else list(_arriving(there, dest, context))
            if not renamed and source in old.states:
                found += annotations_kept(old, there, source, dest)
            found += _entering(there, dest, context)
            out += found if there in (old, new) else [f"{why} {EARLIER}" for why in found]
    said, suffix = set(out), f" {EARLIER}"
    return [w for w in dict.fromkeys(out) if not (w.endswith(suffix) and w[: -len(suffix)] in said)]


def lineage(
    versions: Sequence[MachineSpec],
    source: str,
    renames: Sequence[Collection[tuple[str, str]]] = (),
) -> list[tuple[MachineSpec, str]]:
    """The versions before the last of ``versions`` (oldest first, the last being the one
    the entities live under) under which an entity may have lived in ``source``, each with
    the name the state had there: the unbroken run of them that have the state, by its
    name or by a name a recorded migration mapped into it. ``renames[i]``: the (old, new)
    maps the migration that installed ``versions[i]`` recorded (a state renamed in v2 is
    the one v1 knew by its old name, and v1's rules still judge a map out of it)."""
    out: list[tuple[MachineSpec, str]] = []
    names = {source}
    for i in range(len(versions) - 1, 0, -1):
        spec = versions[i - 1]
        mapped = renames[i] if i < len(renames) else ()
        before = {n for n in names if n in spec.states}
        before |= {was for was, now in mapped if now in names and was in spec.states}
        if not before:
            break
        out[:0] = [(spec, name) for name in sorted(before)]
        names = before
    return out


def way_out(old: MachineSpec, source: str) -> str:
    """How such entities can leave ``source`` instead: its moves by people, or nothing; a
    finished entity is settled already (outsider batch 46, b 38: "settle them first" for
    a removed terminal state), so the new version keeps the state, or a new name for it."""
    if source in old.states and old.states[source].terminal:
        return (
            f"its entities are finished: keep '{source}' in the new version, or map them to "
            "a new terminal state of the same tags and rules (a rename)"
        )
    people = [
        f"{t.trigger} by {'/'.join(a for a in t.actors if not old.actors[a].automatic)}"
        for t in old.transitions
        if t.source == source and any(not old.actors[a].automatic for a in t.actors)
    ]
    first = (
        f"settle them first through the definition ({', '.join(dict.fromkeys(people))}), "
        "then migrate"
        if people
        else "settle them first through the definition, then migrate"
    )
    return first


def _leaving(old: MachineSpec, source: str) -> Iterator[str]:
    if source not in old.states:
        return
    for tag in RESERVED_TAGS:
        if source in old.states_tagged(tag):
            yield f"'{source}' is tagged {tag}: only a person's decision leaves it"
    exits = [t for t in old.transitions if t.source == source]
    if exits and all(not old.actors[a].automatic for t in exits for a in t.actors):
        yield f"every way out of '{source}' is a person's: nothing automatic leaves it"
    for rule in rules_of(old, "only_actors_exit", source):
        if MIGRATION_ACTOR not in rule.actors:
            yield f"{named(rule)} lets only {', '.join(rule.actors)} leave '{source}'"
    for rule in rules_of(old, "only_triggers_exit", source):
        if MIGRATION_TRIGGER not in rule.triggers:
            yield f"{named(rule)} lets only {', '.join(rule.triggers)} leave '{source}'"


def _renamed(
    old: MachineSpec,
    new: MachineSpec,
    source: str,
    dest: str,
    context: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """A rename carries the entities to a new name where they wait as they waited: the new
    state keeps whether it is final and everything that kept the old one for people (the
    reserved tags, the rules naming who or what alone leaves it)."""
    if source not in old.states:
        return
    reserved = list(_leaving(old, source))
    if reserved and new.states[dest].terminal:
        yield (
            f"'{dest}' is terminal, and {reserved[0]}: a state kept for people is not "
            "renamed into a final one"
        )
    elif not old.states[source].terminal and new.states[dest].terminal:
        yield (
            f"'{source}' is not terminal and '{dest}' is: a rename would finish its entities "
            "with no move"
        )
    if people_enter_more(old, source, new, dest, context):
        yield (
            f"only people's moves enter '{dest}', and automatic ones entered '{source}': a "
            "rename would make its entities look put there by a person"
        )
    yield from exits_kept(old, new, source, dest)
    yield from _rules_renamed(old, new, source, dest)
    yield from annotations_kept(old, new, source, dest)


_STATE_FIELDS = ("states", "sources", "dests", "via", "holds")
_WIDER_OK = ("only_actors_exit", "only_triggers_exit")
"""Kinds ``exits_kept`` judges, where a narrower rule keeps the promise too."""


def _still_forbidden(
    new: MachineSpec, sources: Collection[str] | None, dests: Collection[str] | None
) -> bool:
    """Whether ``new`` forbids every move from one of ``sources`` to one of ``dests`` (None:
    any state) between its states, by whichever of its entries (outsider batch 46, b 31:
    an entry that also gained a new state was taken for a dropped one)."""
    among = list(new.states)
    return all(
        any(f.matches(s, d) for f in new.forbidden)
        for s in (among if sources is None else [x for x in sources if x in new.states])
        for d in (among if dests is None else [x for x in dests if x in new.states])
    )


def _rules_renamed(old: MachineSpec, new: MachineSpec, source: str, dest: str) -> Iterator[str]:
    """Every rule of ``old`` that names ``source`` must be in ``new`` with ``dest`` in its
    place: a later map out of the renamed state is judged by the versions that have that
    name, so a rule left behind at the rename (an evidence rule, an only_via) would never
    be judged again."""

    def renamed(rule: Rule) -> Rule:
        fields: dict[str, Any] = {
            f: tuple(sorted(dest if x == source else x for x in getattr(rule, f)))
            for f in _STATE_FIELDS
        }
        return replace(rule, id="", description="", **fields)

    def listed(rule: Rule) -> Rule:  # the states of a rule, in any order
        fields: dict[str, Any] = {f: tuple(sorted(getattr(rule, f))) for f in _STATE_FIELDS}
        return replace(rule, id="", description="", **fields)

    kept = [listed(r) for r in new.invariants]
    for rule in old.invariants:
        if rule.kind in _WIDER_OK or not any(source in getattr(rule, f) for f in _STATE_FIELDS):
            continue
        if renamed(rule) not in kept:
            yield (
                f"{named(rule)} names '{source}', and the new version has no such rule naming "
                f"'{dest}': a rename keeps every rule of the state"
            )
    for entry in old.forbidden:
        names = (*(entry.sources or ()), *(entry.dests or ()))
        if source not in names:
            continue
        sources = (
            None if entry.sources is None else {dest if x == source else x for x in entry.sources}
        )
        dests = None if entry.dests is None else {dest if x == source else x for x in entry.dests}
        if not _still_forbidden(new, sources, dests):
            yield (
                f"the forbidden move {_shown(entry.sources)} -> {_shown(entry.dests)} names "
                f"'{source}', and the new version does not forbid it for '{dest}'"
            )


def _shown(states: frozenset[str] | None) -> str:
    return "*" if states is None else "/".join(sorted(states))


def _evidence(old: MachineSpec, source: str, dest: str) -> Iterator[str]:
    for rule in old.invariants:
        if (
            rule.kind == "automatic_needs_evidence"
            and source in rule.sources
            and dest in rule.dests
        ):
            yield (
                f"{named(rule)} moves '{source}' to '{dest}' only on evidence, and a "
                "migration has none"
            )


def _arriving(there: MachineSpec, dest: str, context: Mapping[str, str] | None) -> Iterator[str]:
    """A map into a state the entity's version already has is an automatic move into it:
    never into a state that only people enter (an approval, a decision)."""
    if people_enter(there, dest, context):
        yield f"only people's moves enter '{dest}': nothing automatic does"
    elif context is not None and dest != there.initial and not ways_in(there, dest, context):
        yield f"no move of the definition enters '{dest}' for such an entity"


def _finishing(
    spec: MachineSpec, source: str, dest: str, final: bool, context: Mapping[str, str] | None
) -> Iterator[str]:
    """A map from a state that is not final into a final one (``final``: ``dest`` is final
    in some version the map is judged by, the new one included: a state made final while
    empty finishes whatever a map brings) ends the entity's life, which only the
    definition's own moves do: it is made only where ``spec`` has such a move by an
    automatic actor that needs no evidence (a running call, a blocked node, an unapproved
    transfer is never finished by a migration); with ``context``, one whose guard admits
    it. Never out of a state tagged ``effect-started``, whatever move the definition has
    (outsider batch 35, b 4: a definition of the owner's gave a withdrawal on hold an
    automatic move to ``completed`` without evidence, and a map along it completed the
    transfer on money nobody had seen land)."""
    if spec.states[source].terminal or not (final or spec.states[dest].terminal):
        return
    if source in spec.states_tagged(EFFECT_STARTED):
        yield (
            f"'{source}' is tagged {EFFECT_STARTED} and '{dest}' is final: the effect may "
            "still be running, and only a reading of how it ended finishes it, whatever "
            "move the definition has; a migration reads nothing"
        )
        return
    moves = [
        t
        for t in spec.transitions
        if t.source == source and t.dest == dest and admits(t.when, context)
    ]
    if any(t.evidence is None and any(spec.actors[a].automatic for a in t.actors) for t in moves):
        return
    how = ", ".join(
        f"{t.trigger} by {'/'.join(t.actors)}{' on evidence' if t.evidence else ''}" for t in moves
    )
    yield (
        f"'{source}' is not terminal and '{dest}' is, and the definition finishes such an "
        f"entity {f'only by {how}' if how else 'by no move at all'}: a migration makes none"
    )


def _derived(spec: MachineSpec, source: str) -> Iterator[str]:
    """A state the definition derives from other entities (a request's ``executing``,
    from its nodes) is left only by the derivation: a map out of it into another state
    would decide what only the nodes decide (a transfer completed with its withdrawal in
    flight). A rename keeps it where it is, and is judged apart."""
    derivation = spec.derivation
    if derivation is not None and source in derivation.applied_in:
        yield (
            f"'{source}' is derived from its {derivation.node_machine} entities: only the "
            "derivation moves an entity out of it, and a map would decide in its place"
        )


def engine_moved_machines(specs: Iterable[MachineSpec]) -> frozenset[str]:
    """The machines whose entities an engine moves by a plan: the node machine of each
    derivation among ``specs``."""
    return frozenset(s.derivation.node_machine for s in specs if s.derivation is not None)


def _engine_moved(spec: MachineSpec, source: str) -> Iterator[str]:
    """A node of a plan waits, is woken, skipped or sent as its engine decides from the
    plan: once every predecessor is done, on a person's skip, on an operator's action on a
    gate. Its definition cannot say all of that (its ``wake`` and ``skip`` are the
    planner's), so a map out of a state that is not final would decide in the engine's
    place (outsider batch 41, b M1 to M3: maps woke a deposit while the withdrawal was
    unknown, skipped a manual gate, and skipped a deposit while the withdrawal was out,
    and the transfer completed with its deposit never sent). A rename keeps the node where
    it waits, and is judged apart."""
    if source in spec.states and not spec.states[source].terminal:
        yield (
            f"'{source}' is a state of a plan's node, which only its engine leaves: it "
            "decides from the plan (every predecessor done, a person's skip, an operator's "
            "action on a gate), and a map would decide in its place"
        )


def _only_by_way_of(
    lived: MachineSpec,
    source: str,
    ruler: MachineSpec,
    dest: str,
    context: Mapping[str, str] | None,
) -> Iterator[str]:
    """A map into a state that ``ruler`` (a version with ``dest``: one the entity lived
    under, or the new one) lets in only from named states (``only_from``), or only by way
    of named states (``only_via``: an execution only after an approval). The entity came
    from ``source`` of ``lived``: it passed a via state when ``source`` is one, or when no
    path of ``lived`` reaches ``source`` without one (under its context); a rename (``dest``
    new) entered ``dest`` when it entered ``source``, by the moves of ``lived`` into it. A
    rule limited by ``when`` is judged only with the entity's context."""
    renamed = dest not in lived.states  # the entity entered it as source: judge that entry
    for rule in rules_of(ruler, "only_from", dest):
        entries = {t.source for t in ways_in(lived, source, context)} if renamed else {source}
        if not entries or not entries <= set(rule.sources):
            yield f"{named(rule)} lets '{dest}' be entered only from {_either_of(rule.sources)}"
    for rule in rules_of(ruler, "only_via", dest):
        if rule.when and context is None:
            continue  # judged per entity, under its own context
        if not admits(rule.when, context) or source in rule.via:
            continue
        if _reached_avoiding(lived, source, frozenset(rule.via), context):
            yield f"{named(rule)} lets '{dest}' be reached only by way of {_either_of(rule.via)}"


def _reached_avoiding(
    spec: MachineSpec, target: str, avoid: frozenset[str], context: Mapping[str, str] | None
) -> bool:
    """Whether some path of ``spec`` from its initial state reaches ``target`` without
    passing any state of ``avoid``, by moves whose guard admits ``context``."""
    if spec.initial in avoid or target not in spec.states:
        return spec.initial == target
    seen, frontier = {spec.initial}, [spec.initial]
    while frontier:
        state = frontier.pop()
        if state == target:
            return True
        for t in spec.transitions:
            onward = t.source == state and t.dest not in avoid and t.dest not in seen
            if onward and admits(t.when, context):
                seen.add(t.dest)
                frontier.append(t.dest)
    return False


def _either_of(states: Sequence[str]) -> str:
    return " or ".join(f"'{s}'" for s in states)


def _forbidden(spec: MachineSpec, source: str, dest: str) -> Iterator[str]:
    """A map along a move ``spec`` forbids by name (an entry naming its destination; one
    into ``*`` says a state is final, which a map between final states keeps)."""
    for entry in spec.forbidden:
        if entry.dests is not None and entry.matches(source, dest):
            yield f"the move {source} -> {dest} is forbidden ({entry.reason})"


def _entering(spec: MachineSpec, dest: str, context: Mapping[str, str] | None) -> Iterator[str]:
    for rule in rules_of(spec, "only_actors_enter", dest):
        if MIGRATION_ACTOR not in rule.actors:
            yield f"{named(rule)} lets only {', '.join(rule.actors)} enter '{dest}'"
    if context is None:
        return
    for kind in ("automatic_enters_only_when", "only_reachable_when"):
        for rule in (*rules_of(spec, kind, dest), *_releasing_rules(spec, kind, dest)):
            outside = {
                var: context.get(var)
                for var, allowed in rule.when.items()
                if context.get(var) not in allowed
            }
            if outside:
                now = ", ".join(f"{var}={value}" for var, value in outside.items())
                yield (
                    f"{named(rule)} admits '{dest}' only when {describe_guard(rule.when)}, "
                    f"not {now}"
                )


def _releasing_rules(spec: MachineSpec, kind: str, state: str) -> Iterator[Rule]:
    """The rules of ``kind`` that guard some state releasing a reservation, for another
    releasing ``state`` they do not name: a map carries an entity there with no move of
    the definition, so what keeps a reservation from being released while money may be
    moving holds for every state that releases one (``expired`` as much as ``failed``)."""
    releasing = spec.states_tagged(RELEASES_RESERVATION)
    if state not in releasing:
        return
    for rule in spec.invariants:
        if rule.kind == kind and state not in rule.states and set(rule.states) & releasing:
            yield rule
