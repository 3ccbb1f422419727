"""The named system invariants (the site's ``docs/invariants.md``), as pure predicates over
a snapshot.

A ``Snapshot`` (``machines.checks.snapshots``) is every entity of every machine with its
full history, plus what a test harness observed outside the store: how often
each effect really ran upstream. Each invariant returns the ``Breach``es it finds (empty
when it holds), naming the entity and the events involved, so the explorer, ``machines
audit`` and the reference adapters' own ``check()`` judge stored state by the same code.
(The property suites judge an implementation by what they observe, not by this.)

A snapshot of a store also carries the definition version of every event and the
definition of every version the store records; each event is judged by the definition of
its own version (``machines.checks.versions``), a history without them by the current one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from machines.checks.breaches import Breach, Predicate, Specs, events_judged, histories
from machines.checks.money import (
    completion_means_done,
    derivation_consistency,
    no_auto_terminal_money_in_flight,
)
from machines.checks.snapshots import Entity, Snapshot
from machines.checks.versions import Judged, Versions
from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.records import derived_variables
from machines.spec.version_changes import kept_state_breaks
from machines.spec.visible import says_something
from machines.spec.vocabulary import APPROVAL, COMPENSATION, FAIL_CLOSED
from machines.systems.effectlog import LAST_REPLAYED, REPLAY_COUNT
from machines.systems.effectlog_runs import NOTE_PROOF, reveals, run_start, unproven_end
from machines.systems.exactly_once import RECLAIMED_AT


def terminal_final(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``terminal-final`` (``machines.spec.registry`` states it)."""
    return [
        Breach(
            "terminal-final",
            e.machine,
            e.key,
            f"left terminal state '{j.event.source}'"
            + (f" by a migration into non-terminal '{j.event.dest}'" if j.migration else ""),
            (j.event,),
        )
        for versions, e, judged in histories(specs, snap)
        for j in judged
        if versions.left_terminal(j)
    ]


def append_only_history(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``append-only-history`` (``machines.spec.registry`` states it)."""
    out = []
    for versions, e, judged in histories(specs, snap):

        def breach(message: str, events: tuple[TransitionEvent, ...], e: Entity = e) -> None:
            out.append(Breach("append-only-history", e.machine, e.key, message, events))

        starts = versions.starts(judged[0] if judged else None)
        state: str | None = None
        last: int | None = None  # the version of the event before
        renamed: dict[int, set[tuple[str, str]]] = {}  # version -> this entity's maps
        for i, j in enumerate(judged, start=1):
            ev, spec = j.event, j.spec or versions.current
            derived = derived_variables(spec)
            fixed = {k: v for k, v in e.context.items() if k not in derived}
            named = (set(fixed) | set(ev.context)) & (set(spec.context) - derived)
            forged = sorted(k for k in named if ev.context.get(k) != fixed.get(k))
            if forged:  # a value changed, or bound after the first event (batch 36, c 6)
                breach(
                    "an event judged under another context than the entity's: "
                    + ", ".join(f"{k}={ev.context.get(k)!r}, not {fixed.get(k)!r}" for k in forged),
                    (ev,),
                )
            expected = starts if state is None else [state]
            if ev.seq != i or ev.source not in expected:
                breach(f"event {i} does not continue from {_either(expected)}", (ev,))
                break
            state = ev.dest
            if j.spec is None:
                breach(
                    f"made under definition version {j.version}, which the store does not "
                    f"record (it has {versions.numbers})",
                    (ev,),
                )
                continue
            if j.migration:
                for problem in versions.migration_problems(j, last, renamed):
                    breach(f"a migration event the versions do not allow: {problem}", (ev,))
                if j.version is not None:
                    renamed.setdefault(j.version, set()).add((ev.source, ev.dest))
            else:
                if last is not None and j.version is not None and j.version < last:
                    breach(
                        f"made under definition version {j.version} after an event of "
                        f"version {last}: versions never go back along a history",
                        (ev,),
                    )
                for why in _waited_across(versions, ev.source, last, j.version):
                    breach(why, (ev,))
                why = _refused(spec, ev, fixed)
                if why:
                    breach(f"an event the spec does not allow{_of(j)}{why}", (ev,))
            last = j.version
        else:
            if state is not None and versions.known:
                for why in _waited_across(versions, state, last, max(versions.known)):
                    breach(why, e.history[-1:])
            if (state is None and e.state not in starts) or state not in (None, e.state):
                breach(
                    f"history ends in {_either(starts if state is None else [state])} but the "
                    f"entity is '{e.state}'",
                    e.history[-1:],
                )
        if e.row is not None and e.row.moves != len(e.history):
            breach(
                f"the row counts {e.row.moves} moves and its history holds {len(e.history)} "
                "events: one of them was changed outside machines",
                e.history[-1:],
            )
        if previous is not None:
            key = (e.machine, e.key)
            before = previous.entities.get(key)
            if before is not None and e.history[: len(before.history)] != before.history:
                breach("history was rewritten since the previous snapshot", before.history)
            elif before is not None and key in previous.event_versions:
                then, now = previous.event_versions[key], snap.event_versions.get(key, ())
                if now[: len(then)] != then:
                    breach(
                        "the definition versions of its history were rewritten since the "
                        "previous snapshot",
                        before.history,
                    )
    for key in previous.entities.keys() - snap.entities.keys() if previous else ():
        out.append(Breach("append-only-history", key[0], key[1], "the entity disappeared"))
    return out


def _waited_across(
    versions: Versions, state: str, since: int | None, until: int | None
) -> Iterator[str]:
    """What each version after ``since`` up to ``until`` changed in the meaning of
    ``state``, where the entity waited all along (``kept_state_breaks``): ``machines
    migrate`` refuses such a version while entities wait there, so one found here was
    installed some other way (by hand, with the store's own generator)."""
    if since is None or until is None:
        return
    for version in range(since + 1, until + 1):
        before, after = versions.of(version - 1), versions.of(version)
        if before is None or after is None:
            continue
        for why in kept_state_breaks(before, after, state):
            yield (
                f"it waited in '{state}' while version {version} was installed, which no "
                f"migration installs over a state entities wait in: {why}"
            )


def _refused(spec: MachineSpec, ev: TransitionEvent, fixed: Mapping[str, str]) -> str:
    """Why ``spec`` does not allow the move ``ev`` records (empty: it does)."""
    try:
        dest = spec.step(ev.source, ev.trigger, actor=ev.actor, **{**ev.context, **fixed})
    except MachinesError as refused:
        return f": {refused}"
    return "" if dest == ev.dest else f": the move leads to '{dest}', not '{ev.dest}'"


def _of(judged: Judged) -> str:
    return "" if judged.version is None else f" (version {judged.version})"


def _either(states: list[str]) -> str:
    return " or ".join(f"'{s}'" for s in states)


def fail_closed_indeterminate(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``fail-closed-indeterminate`` (``machines.spec.registry`` states it),
    judged on every state the event's version tags ``fail-closed`` (``indeterminate`` in the
    bundled outcome, and whatever a migration renamed it to), and every other machine's
    fail-closed exits whether or not an ``outcome`` is judged with them (outsider batch
    36, c 2: a project of its own machines was never judged)."""
    spec = specs.get("outcome")
    out = [] if spec is None else _outcome_exits(spec, snap)
    return out + _fail_closed_exits_say_why(specs, snap)


def _outcome_exits(spec: MachineSpec, snap: Snapshot) -> list[Breach]:
    """An ``outcome``'s exits from its fail-closed states: a person's, saying who and why."""
    out: list[Breach] = []
    for e in snap.of("outcome"):
        for j in events_judged(spec, snap, e):
            ev = j.event
            if j.migration or j.spec is None or ev.source not in j.spec.states_tagged(FAIL_CLOSED):
                continue  # a migration's own rule judges it (append-only-history)
            if j.spec.actors[ev.actor].automatic:
                out.append(
                    Breach(
                        "fail-closed-indeterminate",
                        e.machine,
                        e.key,
                        f"automatic actor '{ev.actor}' left {ev.source}",
                        (ev,),
                    )
                )
            elif not _says_who_and_why(ev.detail, ("reason",)):
                out.append(_unexplained(e, ev))
    return out


def _unexplained(e: Entity, ev: TransitionEvent) -> Breach:
    return Breach(
        "fail-closed-indeterminate",
        e.machine,
        e.key,
        f"left {ev.source} without recording who and why",
        (ev,),
    )


def _fail_closed_exits_say_why(specs: Specs, snap: Snapshot) -> list[Breach]:
    """Of every other machine, each event that leaves a state tagged ``fail-closed`` (a
    node's ``unknown``: money of unknown fate) records who (``by``) and why (``evidence``
    or ``reason``): its designated actor may be automatic (a reconciler reading the
    venue's records), but a move out of it that says nothing was written by no such
    reading (outsider batch 23: a raw reconcile with an empty detail released a
    reservation, the audit saying OK)."""
    out = []
    for machine, spec in specs.items():
        if machine == "outcome":
            continue  # judged above, by its own rule
        for e in snap.of(machine):
            for j in events_judged(spec, snap, e):
                ev = j.event
                if j.migration or j.spec is None:
                    continue
                if ev.source not in j.spec.states_tagged(FAIL_CLOSED):
                    continue
                if not _says_who_and_why(ev.detail, ("evidence", "reason")):
                    out.append(_unexplained(e, ev))
    return out


def _says_who_and_why(detail: Mapping[str, Any] | None, why: tuple[str, ...]) -> bool:
    """Whether ``detail`` names who (``by``) and why (one of ``why``), each as a text that
    shows something (``says_something``), as every system writes them: ``true``, ``1``,
    ``[0]`` or a blank name nobody (outsider batch 24: a raw reclaim saying ``{"by":
    true}``; batch 34: evidence of a zero-width space)."""

    return (
        detail is not None
        and says_something(detail.get("by"))
        and any(says_something(detail.get(w)) for w in why)
    )


def exactly_once(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``exactly-once`` (``machines.spec.registry`` states it)."""
    out = []
    for e in snap.of("outcome"):
        allowed = 1 + sum(ev.trigger == "reclaim" for ev in e.history)
        ran = snap.runs.get(("outcome", e.key), 0)
        if ran > allowed:
            out.append(
                Breach(
                    "exactly-once",
                    e.machine,
                    e.key,
                    f"ran {ran} times upstream; allowed {allowed}",
                    e.history,
                )
            )
        runs = e.data.get("runs")
        if type(runs) is int and runs > allowed:
            out.append(
                Breach(
                    "exactly-once",
                    e.machine,
                    e.key,
                    f"its data records {runs} claims (runs); {allowed - 1} reclaims allow "
                    f"{allowed}: a claim was taken without a reclaim",
                    e.history,
                )
            )
        if e.state == "in_flight" and "owner" in e.data and e.data["owner"] is None:
            problem = _holder_removed(e)
            if problem:
                out.append(Breach("exactly-once", e.machine, e.key, problem, e.history))
        elif e.state == "in_flight" and "owner" in e.data:
            until = e.data.get("lease_until")
            if not isinstance(until, int | float) or isinstance(until, bool):
                why = (
                    f"in flight under a lease whose expiry is {describe(until)}, no time: "
                    "written outside a move (its next caller parks it)"
                )
                out.append(Breach("exactly-once", e.machine, e.key, why, e.history))
        if e.state == "succeeded" and "result" not in e.data:
            out.append(Breach("exactly-once", e.machine, e.key, "succeeded without a result"))
        if e.state == "failed" and not e.data.get("error"):
            out.append(Breach("exactly-once", e.machine, e.key, "failed without an error"))
    for e in snap.of("effect"):
        allowed = sum(ev.dest == "executing" for ev in e.history)
        ran = snap.runs.get(("effect", e.key), 0)
        if ran > allowed:
            out.append(
                Breach(
                    "exactly-once",
                    e.machine,
                    e.key,
                    f"ran {ran} times upstream; only {allowed} executions started",
                    e.history,
                )
            )
        out += [Breach("exactly-once", e.machine, e.key, why, e.history) for why in _runs(e)]
        odd = _replays(e)
        if odd is not None:
            out.append(Breach("exactly-once", e.machine, e.key, odd, e.history))
    return out


def _replays(e: Entity) -> str | None:
    """Why a committed effect's replay annotations were written outside machines: a count
    that is no count, a time that is no time. Its replays serve its result and leave them
    as they are (``EffectLog._replay``), so only the audit says so."""
    count, at = e.data.get(REPLAY_COUNT, 0), e.data.get(LAST_REPLAYED)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return f"its {REPLAY_COUNT} is {describe(count)}, no count: written outside a move"
    if at is not None and (isinstance(at, bool) or not isinstance(at, int | float)):
        return f"its {LAST_REPLAYED} is {describe(at)}, no time: written outside a move"
    return None


def _runs(e: Entity) -> Iterator[str]:
    """What shows that someone else than an effect's runner wrote where only the runner or
    a move may (``machines.systems.effectlog_runs``)."""
    row = e.row
    if e.state in ("pending", "approved") and row is not None and row.version != row.moves + 1:
        yield (
            f"{e.state} at version {row.version} after {row.moves} move(s): written outside "
            "a move where the log could run it again (a run that ended unknown, reopened?)"
        )
    forged = unproven_end(e.history)
    if forged is not None:
        yield (
            f"its '{forged.trigger}' (move #{forged.seq}) out of executing was not made by the "
            "run's runner: it does not reveal the secret the run started with"
        )
    note = e.data.get("unknown_outcome")
    noted = e.state == "executing" and isinstance(note, Mapping)
    if noted and not reveals(run_start(e.history), note, NOTE_PROOF):
        yield "its note of an unknown outcome was not written by the run's runner"


def _holder_removed(e: Entity) -> str | None:
    """Why an in-flight outcome without a lease holder is not free for a fresh claim: only
    a reclaim frees one, and nothing may write the row after it (the reclaim's detail
    names the version it wrote; a reclaim recorded before that field is taken as is)."""
    last = e.history[-1] if e.history else None
    if last is None or last.trigger != "reclaim":
        return (
            "in flight without a lease holder, but its last move is no reclaim: the holder "
            "was removed outside a move"
        )
    wrote = (last.detail or {}).get(RECLAIMED_AT)
    if type(wrote) is int and e.version is not None and e.version != wrote:
        return (
            f"in flight without a lease holder at version {e.version}, but its reclaim wrote "
            f"version {wrote}: the row was changed outside a move since"
        )
    return None


def tier_discipline(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``tier-discipline`` (``machines.spec.registry`` states it)."""
    effect_spec = specs.get("effect")
    if effect_spec is None:
        return []
    out = []
    for e in snap.of("effect"):
        tier = e.context.get("tier")
        judged = events_judged(effect_spec, snap, e)
        wrong = {tag: _reached(effect_spec, e, judged, tag) for tag in (COMPENSATION, APPROVAL)}
        if tier not in ("compensable", "irreversible"):
            out.append(Breach("tier-discipline", e.machine, e.key, f"logged with tier {tier!r}"))
        if tier != "compensable" and wrong[COMPENSATION]:
            out.append(
                Breach(
                    "tier-discipline",
                    e.machine,
                    e.key,
                    f"{tier} effect reached {sorted(wrong[COMPENSATION])}",
                    e.history,
                )
            )
        if tier != "irreversible" and wrong[APPROVAL]:
            out.append(
                Breach(
                    "tier-discipline",
                    e.machine,
                    e.key,
                    f"{tier} effect reached {sorted(wrong[APPROVAL])}",
                    e.history,
                )
            )
    return out


def _reached(spec: MachineSpec, entity: Entity, judged: list[Judged], tag: str) -> set[str]:
    """The states tagged ``tag`` that ``entity`` is in (by ``spec``, the current definition)
    or that an event led to (by the definition of the event's version)."""
    tagged: dict[int, frozenset[str]] = {}
    found = {entity.state} & spec.states_tagged(tag)
    for j in judged:
        if j.spec is not None:
            if id(j.spec) not in tagged:
                tagged[id(j.spec)] = j.spec.states_tagged(tag)
            if j.event.dest in tagged[id(j.spec)]:
                found.add(j.event.dest)
    return found


PREDICATES: Mapping[str, Predicate] = MappingProxyType(
    {
        "terminal-final": terminal_final,
        "append-only-history": append_only_history,
        "fail-closed-indeterminate": fail_closed_indeterminate,
        "exactly-once": exactly_once,
        "tier-discipline": tier_discipline,
        "no-auto-terminal-money-in-flight": no_auto_terminal_money_in_flight,
        "derivation-consistency": derivation_consistency,
        "completion-means-done": completion_means_done,
    }
)
"""The predicate of every invariant judged on stored state, by its registry id."""


def check_invariants(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None = None,
) -> list[Breach]:
    """Every breach of every invariant in ``snap`` (and against ``previous``, if given)."""
    return [breach for check in PREDICATES.values() for breach in check(specs, snap, previous)]
