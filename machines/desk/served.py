"""Whether the store still serves the definitions a desk was started with.

A desk reads its definitions once, when it starts, and judges every page by them: what
waits on a person, what each person may do. ``machines migrate`` can move the store to the
next version while the desk runs; from then on the desk would list nothing in a renamed
state and refuse a right move with the wrong reason (outsider batch 45, b 37: "Nothing
waits." while an email waited, and a 500 on its page). So before each request the desk
compares the versions the store serves now with those it started with, and answers
nothing from stale definitions.
"""

from __future__ import annotations

from collections.abc import Mapping

from machines.store.records import Store

Served = Mapping[str, tuple[int, str]]
"""Each machine's current version in a store, and its semantic digest."""


def served(store: Store) -> Served:
    """The version (and digest) of each of ``store``'s machines that the store serves now."""
    found: dict[str, tuple[int, str]] = {}
    with store.transaction() as tx:
        for machine in store.specs():
            versions = tx.definition_versions(machine)
            if versions:
                newest = max(versions, key=lambda v: v.version)
                found[machine] = (newest.version, newest.digest)
    return found


def moved_on(store: Store, started: Served) -> str | None:
    """Why the desk must not answer from the definitions it ``started`` with, or None:
    a machine whose version in the store changed since (a migration), naming each."""
    now = served(store)
    changed = [
        f"{machine} was at version {was[0]}, now "
        + (f"at version {now[machine][0]}" if machine in now else "has none")
        for machine, was in sorted(started.items())
        if now.get(machine) != was
    ]
    if not changed:
        return None
    return (
        f"the store's definitions changed since this desk started ({'; '.join(changed)}, by "
        "machines migrate): nothing was shown or done; restart the desk with the definitions "
        "the store serves now (--spec-dir)"
    )
