"""What a state says happened, and what keeps it for people: the tags and rules a
migration's map (``machines.spec.migration_moves``) and a new version
(``machines.spec.version_changes``) must keep for the entities that live in it."""

from __future__ import annotations

from collections.abc import Iterator

from machines.spec.records import MachineSpec, Rule
from machines.spec.vocabulary import (
    CONSUMES_RESERVATION,
    EFFECT_STARTED,
    FAIL_CLOSED,
    HOLDS_RESERVATION,
    NEEDS_HUMAN,
    RELEASES_RESERVATION,
    TAGS,
)

RESERVED_TAGS = (FAIL_CLOSED, NEEDS_HUMAN)
"""Tags that keep a state for people: no migration takes an entity out of one."""
RESERVATION_TAGS = (HOLDS_RESERVATION, CONSUMES_RESERVATION, RELEASES_RESERVATION)
"""Tags that say a reservation's fate: no migration changes it."""


def meaning_kept(old: MachineSpec, new: MachineSpec, source: str, dest: str) -> Iterator[str]:
    """The map must keep what the state says under every version that has the state it
    enters: a new version that also retags that state cannot make the map look faithful
    (``failed`` tagged ``effect-started`` in v2 is still the old ``failed`` its callers
    were told)."""
    if source not in old.states:
        return
    for entered in dict.fromkeys(s for s in (old, new) if dest in s.states):
        yield from meaning_in(old, entered, source, dest)
    kept = fate(old, source)
    if dest not in old.states and dest in new.states and fate(new, dest) != kept:
        yield (
            f"'{source}' gives its reservation the fate {tags_shown(kept)} and '{dest}' "
            f"{tags_shown(fate(new, dest))}: a rename never changes a reservation's fate (only "
            "the definition's own moves hold, consume or release one)"
        )
    was, now = fate(old, dest), fate(new, dest)
    if dest in old.states and dest in new.states and was != now:
        yield (
            f"the new version changes what '{dest}' does to a reservation ({tags_shown(was)} to "
            f"{tags_shown(now)}): no map into it can be judged; migrate that change with no entity "
            "mapped into it"
        )


def fate(spec: MachineSpec, state: str) -> set[str]:
    return {t for t in RESERVATION_TAGS if state in spec.states_tagged(t)}


def meaning_in(old: MachineSpec, entered: MachineSpec, source: str, dest: str) -> Iterator[str]:
    if source in old.states_tagged(EFFECT_STARTED) and dest not in entered.states_tagged(
        EFFECT_STARTED
    ):
        yield (
            f"'{source}' is tagged {EFFECT_STARTED} (the effect may have run) and '{dest}' is "
            "not: the map would say it never ran"
        )
    if old.states[source].terminal and entered.states[dest].terminal:
        was = {t for t in TAGS if source in old.states_tagged(t)}
        then = {t for t in TAGS if dest in entered.states_tagged(t)}
        if was != then:
            yield (
                f"'{source}' is terminal, and what it records differs from '{dest}' (tags "
                f"{tags_shown(was)} against {tags_shown(then)}): a finished entity keeps how it "
                "ended"
            )


def tags_shown(tags: set[str]) -> str:
    return "[" + ", ".join(t for t in TAGS if t in tags) + "]"


def rules_of(spec: MachineSpec, kind: str, state: str) -> Iterator[Rule]:
    return (r for r in spec.invariants if r.kind == kind and state in r.states)


def named(rule: Rule) -> str:
    return f"rule '{rule.id}' ({rule.kind})"


def annotations_kept(old: MachineSpec, new: MachineSpec, state: str, now: str) -> Iterator[str]:
    """A terminal ``state`` of ``old``, now called ``now``, may let no more of its
    finished entities' data change (``annotations``)."""
    opened = sorted(set(new.states[now].annotations) - set(old.states[state].annotations))
    if old.states[state].terminal and opened:
        called = f"'{state}'" if now == state else f"'{state}' (now '{now}')"
        yield (
            f"{called} lets {', '.join(repr(a) for a in opened)} of its finished entities' "
            "data change: what they recorded when they finished would become writable"
        )


def exits_kept(old: MachineSpec, new: MachineSpec, state: str, now: str) -> Iterator[str]:
    """What ``new`` gives up, for ``state`` of ``old`` now called ``now``, of what kept it
    for people."""
    called = f"'{state}'" if now == state else f"'{state}' (now '{now}')"
    for tag in RESERVED_TAGS:
        if state in old.states_tagged(tag) and now not in new.states_tagged(tag):
            yield (
                f"{called} loses the tag {tag}: its entities wait for a person's decision, and "
                "the state would no longer say so"
            )
    for rule in rules_of(old, "only_actors_exit", state):
        if not any(set(r.actors) <= set(rule.actors) for r in rules_of(new, rule.kind, now)):
            yield (
                f"{named(rule)} is dropped or widened: it lets only {', '.join(rule.actors)} "
                f"leave {called}"
            )
    for rule in rules_of(old, "only_triggers_exit", state):
        if not any(set(r.triggers) <= set(rule.triggers) for r in rules_of(new, rule.kind, now)):
            yield (
                f"{named(rule)} is dropped or widened: it lets only {', '.join(rule.triggers)} "
                f"leave {called}"
            )
