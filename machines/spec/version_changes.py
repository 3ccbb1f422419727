"""What a new version may change while entities live under the old one.

A store's histories and every reader of a state's or an actor's name keep the meaning the
versions gave them: a new version keeps what a state in which entities wait means
(``kept_state_breaks``), gives no new state a name an earlier version used for another
meaning (``reused_name_breaks``), and keeps every actor's nature (``actor_breaks``). The
store's migration refuses a version that breaks one, and the audit judges every version an
entity waited through by ``kept_state_breaks``.
"""

from __future__ import annotations

from collections.abc import Sequence

from machines.spec.entering import (
    Valuations,
    kept_for_people,
    people_only,
    people_only_always,
)
from machines.spec.records import MachineSpec
from machines.spec.state_meaning import annotations_kept, exits_kept, fate, tags_shown
from machines.spec.vocabulary import EFFECT_STARTED, TAGS


def kept_state_breaks(old: MachineSpec, new: MachineSpec, state: str) -> list[str]:
    """What a new version would change in the meaning of ``state``, which both versions
    have and in which entities live: it may not stop saying the effect may have run, change
    what it does to a reservation, let a finished entity move again or finish a waiting one
    with no move, or give up what keeps the state for people (a reserved tag, a rule naming
    who or what alone leaves it; a new way out is the owner's to add, say an expiry of an
    approval, and the rules judge it). Such a change would reach every entity already there
    with no move, and a later map out of the state would then be judged by the weaker
    meaning."""
    if state not in old.states or state not in new.states:
        return []
    out = []
    if state in old.states_tagged(EFFECT_STARTED) and state not in new.states_tagged(
        EFFECT_STARTED
    ):
        out.append(
            f"'{state}' loses the tag {EFFECT_STARTED}: its entities' effects may have run, and "
            "the state would say they did not"
        )
    if fate(old, state) != fate(new, state):
        out.append(
            f"'{state}' changes what it does to a reservation ({tags_shown(fate(old, state))} to "
            f"{tags_shown(fate(new, state))})"
        )
    if old.states[state].terminal and not new.states[state].terminal:
        out.append(f"'{state}' is no longer terminal: its finished entities could move again")
    out += annotations_kept(old, new, state, state)
    if not old.states[state].terminal and new.states[state].terminal:
        out.append(
            f"'{state}' becomes terminal: its entities would be finished where they wait, with "
            "no move"
        )
    if kept_for_people(new, state) and not people_only_always(old, state):
        out.append(
            f"'{state}' gains a rule that only people enter it, while automatic moves put "
            "its entities there: they would look put there by a person"
        )
    out += exits_kept(old, new, state, state)
    return out


def actor_breaks(earlier: Sequence[tuple[int, MachineSpec]], new: MachineSpec) -> list[str]:
    """An actor of ``new`` whose nature (automatic or a person) an earlier stored version
    gave the other way: every history event that names it, and every rule that keeps a
    state for people, would read in the new nature (a refund settled by a person would
    read as settled by a program, or the reverse)."""
    out = []
    for actor, record in new.actors.items():
        for version, spec in earlier:
            was = spec.actors.get(actor)
            if was is not None and was.automatic != record.automatic:
                nature = "automatic" if record.automatic else "a person"
                out.append(
                    f"the new version makes actor '{actor}' {nature}, and version {version} "
                    "had it the other way: its histories would read in the new nature; add "
                    "a new actor instead"
                )
                break
    return out


def reused_name_breaks(earlier: Sequence[tuple[int, MachineSpec]], new: MachineSpec) -> list[str]:
    """A state ``new`` adds under a name an earlier stored version gave a state that meant
    something else (other built-in tags, terminal or not, entered only by people or not):
    the store's histories, and every system that reads a state by its name, would read the
    old entities' record in the new meaning (a charge that landed, renamed away from
    ``succeeded``, found later in a new ``failed``; a human's approval, in a new state of
    the name that the proxy enters)."""
    out = []
    last = earlier[-1][1] if earlier else None
    for state in new.states:
        if last is not None and state in last.states:
            continue
        for version, spec in earlier:
            if state not in spec.states:
                continue
            was = _meaning_of(spec, state)
            now = _meaning_of(new, state)
            if was != now:
                out.append(
                    f"the new version adds a state '{state}' ({_said(now)}), and version "
                    f"{version} had a state of that name that meant something else "
                    f"({_said(was)}): its history and every reader of the name would take the "
                    "one for the other; give the new state a name of its own"
                )
                break
    return out


Meaning = tuple[bool, frozenset[str], Valuations]
"""What a state's name says of its entities: final or not, its built-in tags, and the
contexts under which only people put them there."""


def _meaning_of(spec: MachineSpec, state: str) -> Meaning:
    """What a state's name says of its entities: final or not, its built-in tags, and
    under which contexts only people put them there (an approval reads as a person's)."""
    tags = frozenset(t for t in TAGS if state in spec.states_tagged(t))
    return spec.states[state].terminal, tags, people_only(spec, state)


def _said(meaning: Meaning) -> str:
    terminal, tags, people = meaning
    if not people:
        entered = "entered by automatic moves"
    elif people == frozenset({()}):
        entered = "entered only by people"
    else:
        entered = f"entered only by people when {_contexts(people)}"
    return f"{'terminal' if terminal else 'not terminal'}, tags {tags_shown(set(tags))}, {entered}"


def _contexts(valuations: Valuations) -> str:
    return " or ".join(
        ", ".join(f"{var}={value}" for var, value in valuation) for valuation in sorted(valuations)
    )
