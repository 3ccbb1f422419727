"""The changes to a definition's transitions, edge by edge: for each (source, trigger,
dest), what it admits before and after (which actors, under which contexts:
``machines.spec.admits``), as ``machines.spec.diff`` names them (a transition removed or
added, its actors or its guard narrowed or widened). Two entries of one edge count as the
one edge they admit together, so an edge split in two that admits the same is no change."""

from __future__ import annotations

from collections.abc import Iterator

from machines.spec.admits import Space, actors_of, minus, restricted
from machines.spec.canonical import Form
from machines.spec.diff_wording import Found

Key = tuple[str, str, str]


def edge_key(t: Form) -> Key:
    return (t["source"], t["trigger"], t["dest"])


def edge_text(key: Key) -> str:
    source, trigger, dest = key
    return f"'{source}' --{trigger}--> '{dest}'"


def transitions(old: Form, new: Form) -> Iterator[Found]:
    before, after = _grouped(old["transitions"]), _grouped(new["transitions"])
    declared: dict[str, set[str]] = {}
    for form in (old, new):
        for var, v in form["context"].items():
            declared.setdefault(var, set()).update(v["values"])
    for key in sorted(before.keys() | after.keys()):
        move = edge_text(key)
        if key not in after:
            yield "transition-removed", f"transition {move} removed"
            continue
        edges_before, edges_after = before.get(key, []), after[key]
        space = Space([*edges_before, *edges_after], declared)
        a, b = space.cubes(edges_before), space.cubes(edges_after)
        if not a:
            yield "transition-added", f"transition {move} added: {space.text(b)}"
            continue
        lost_actors, gained_actors = actors_of(a) - actors_of(b), actors_of(b) - actors_of(a)
        if lost_actors:
            was = space.text(restricted(a, lost_actors))
            yield "actors-narrowed", f"transition {move} no longer admits {was}"
        if gained_actors:
            now = space.text(restricted(b, gained_actors))
            yield "actors-widened", f"transition {move} now admits {now}"
        common = actors_of(a) & actors_of(b)
        lost = restricted(minus(a, b), common)
        if lost:
            yield "guard-narrowed", f"transition {move} no longer admits {space.text(lost)}"
        gained = restricted(minus(b, a), common)
        if gained:
            yield "guard-widened", f"transition {move} now admits {space.text(gained)}"


def _grouped(transitions: list[Form]) -> dict[Key, list[Form]]:
    out: dict[Key, list[Form]] = {}
    for t in transitions:
        out.setdefault(edge_key(t), []).append(t)
    return out
