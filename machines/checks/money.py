"""The stored-state invariants of a transfer's money (``no-auto-terminal-money-in-flight``,
``derivation-consistency``): nodes are their request's plan, a request records the
reservation its state sets, nothing automatic releases a reservation while money may be
moving, and no derived decision is left unapplied. ``machines.checks.invariants`` lists
them with the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from machines.checks.breaches import Breach, Specs, events_judged
from machines.checks.snapshots import Entity, Snapshot
from machines.checks.versions import Judged
from machines.derive import Deriver
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.states import NodeState
from machines.spec.visible import says_something
from machines.spec.vocabulary import CONSUMES_RESERVATION as CONSUMES
from machines.spec.vocabulary import DONE, EFFECT_STARTED
from machines.spec.vocabulary import RELEASES_RESERVATION as RELEASES
from machines.systems.transfer.plans import (
    APPROVED_BY,
    DONE_BY,
    node_key,
    node_name,
    plan_digest,
    plan_entries,
    predecessors,
    recorded_side_effect,
    row_differences,
    started_plan,
)
from machines.systems.transfer.session import Entering


def _nodes_not_planned(snap: Snapshot, plans: Mapping[str, Mapping[str, Any]]) -> list[Breach]:
    """Node rows that are not their request's plan, and plan entries with no row: the
    engine acts on neither (it refuses the request), and a forged node could otherwise
    stand in for a real one or end the transfer (``no-auto-terminal-money-in-flight``)."""
    out = []
    held: dict[str, set[str]] = {}
    requests = {r.key: r for r in snap.of("request")}
    for n in snap.of("node"):
        named = node_name(n.key)
        planned = plans.get(n.scope or "")
        if not planned:
            continue  # no request, or one with no plan: not a node the engine made
        held.setdefault(n.scope or "", set()).add(named)
        if n.key != node_key(n.scope or "", named) or named not in planned:
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    n.machine,
                    n.key,
                    f"request '{n.scope}' has this node row, and its plan does not name it: "
                    "it was written outside the engine",
                )
            )
            continue
        owner = requests.get(n.scope or "")
        differs = (
            []
            if owner is None
            else row_differences(owner.data, named, n.data, n.context.get("kind"))
        )
        if differs:
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    n.machine,
                    n.key,
                    f"the row is not what its request's plan made it ({'; '.join(differs)}): "
                    "it was changed outside the engine",
                )
            )
    for r in snap.of("request"):
        if "plan" in r.data and not plans.get(r.key):
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    "request",
                    r.key,
                    "its stored plan is not one the engine wrote: it was changed outside the "
                    "engine, and what its nodes may be moving cannot be read",
                )
            )
    for request, planned in plans.items():
        missing = sorted(set(planned) - held.get(request, set()))
        if missing:
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    "request",
                    request,
                    f"its plan names node(s) {', '.join(missing)} that the store does not "
                    "hold: they were removed outside the engine",
                )
            )
    return out


def _woken_early(
    node_spec: MachineSpec,
    snap: Snapshot,
    plans: Mapping[str, Mapping[str, Any]],
    judged: Mapping[str, list[Judged]],
) -> list[Breach]:
    """A node woken (moved out of its initial state into one that is not an end) while a
    predecessor is not done: the engine wakes a node only once every predecessor is done,
    and a done state is an end, so a predecessor not done now was not done then (outsider
    batch 34, c B5: a forged wake of the deposit while the withdrawal was unknown)."""
    done = node_spec.states_tagged(DONE)
    nodes = {n.key: n for n in snap.of("node")}
    out = []
    for n in snap.of("node"):
        woke = [
            j.event
            for j in judged[n.key]
            if j.event.source == node_spec.initial
            and j.event.dest in node_spec.states
            and not node_spec.states[j.event.dest].terminal
            and not j.migration
        ]
        if not n.scope or not woke:
            continue
        entry = plans.get(n.scope, {}).get(node_name(n.key), {})
        named = sorted(set(map(str, predecessors(n.data, entry))))
        early = [p for p in named if not _done_now(n.scope, p, nodes, plans, done)]
        if not early:
            early = [
                p for p in named if not _done_by(woke[0], nodes.get(node_key(n.scope, p)), p, done)
            ]
        if early:
            why = (
                f"'{woke[0].actor}' woke it while its predecessor(s) {', '.join(early)} "
                "were not done: the engine wakes a node only after every one of them, and "
                f"records the event that made each done ({DONE_BY})"
            )
            breach = Breach("no-auto-terminal-money-in-flight", n.machine, n.key, why, (woke[0],))
            out.append(breach)
    return out


def _plans_rewritten(snap: Snapshot) -> list[Breach]:
    """Requests whose stored plan is not the one their start recorded (``PLAN_DIGEST``):
    from the start on the engine never changes a plan, so one with another digest was
    rewritten outside it, and the order its nodes wait in with it (outsider batch 38, b A1:
    the deposit's predecessors, taken out of the plan and the rows together, let it go
    while the withdrawal was observed)."""
    out = []
    for r in snap.of("request"):
        started = started_plan(r.history)
        if started and started != plan_digest(r.data.get("plan")):
            why = (
                "its plan is not the one it started with (its start recorded another "
                "digest): it was changed outside the engine, and the order its nodes wait "
                "in may have been with it"
            )
            out.append(Breach("no-auto-terminal-money-in-flight", r.machine, r.key, why))
    return out


def _gates_passed_unsaid(
    node_spec: MachineSpec,
    snap: Snapshot,
    prefix: str | None,
    judged: Mapping[str, list[Judged]],
) -> list[Breach]:
    """A manual gate moved on out of ready (not ended) by a move that names no person: the
    engine moves a gate on only in ``complete_manual``, whose move names who passed it
    (``approved_by``); the gate's executor passes any gate whose data holds the action
    (outsider batch 37, a B2: a forged ``start_observing`` and ``data.manual`` passed a
    gate, the deposit was sent, and the audit said OK). The store cannot tell a name the
    application wrote through the engine from one it wrote by hand; this names the move
    that gives none."""
    if prefix is None:
        return []
    ready = NodeState.READY.value
    out = []
    for n in snap.of("node"):
        label = n.data.get("name")
        if not n.scope or not isinstance(label, str) or not label.startswith(prefix):
            continue
        for j in judged[n.key]:
            ev = j.event
            if ev.dest == NodeState.SKIPPED.value and not j.migration:
                why = (
                    f"'{ev.actor}' skipped manual gate {label!r}: a gate is passed only by "
                    "an operator's complete_manual, and a skip passes it with nobody's action"
                )
                out.append(Breach("no-auto-terminal-money-in-flight", n.machine, n.key, why, (ev,)))
                continue
            moved_on = ev.source == ready and ev.dest in node_spec.states
            if not moved_on or node_spec.states[ev.dest].terminal or j.migration:
                continue
            if not says_something((ev.detail or {}).get(APPROVED_BY)):
                why = (
                    f"'{ev.actor}' moved manual gate {label!r} on from {ready} to {ev.dest} "
                    f"naming no person who did its action ({APPROVED_BY}): the engine passes "
                    "a gate only on an operator's complete_manual"
                )
                out.append(Breach("no-auto-terminal-money-in-flight", n.machine, n.key, why, (ev,)))
    return out


def _done_now(
    scope: str,
    start: str,
    nodes: Mapping[str, Entity],
    plans: Mapping[str, Mapping[str, Any]],
    done: frozenset[str],
) -> bool:
    """Whether node ``start`` of request ``scope`` is done now, a skipped node only when
    the nodes it waited for are too, however far back: the engine wakes a node after a
    skipped predecessor only once what that one waited for is done (outsider batch 37,
    a N1). A done state is an end, so a node not done now was not done at the wake."""
    seen, stack = set(), [start]
    while stack:
        name = stack.pop()
        node = nodes.get(node_key(scope, name))
        if node is None or node.state not in done:
            return False
        if name in seen or node.state != NodeState.SKIPPED.value:
            seen.add(name)
            continue
        seen.add(name)
        entry = plans.get(scope, {}).get(name, {})
        stack.extend(map(str, predecessors(node.data, entry)))
    return True


def _done_by(
    wake: TransitionEvent, predecessor: Entity | None, name: str, done: frozenset[str]
) -> bool:
    """Whether ``wake`` names the event of ``predecessor`` (node ``name``) that made it
    done, as that node's history holds it: its number, its time, a done state. Only the
    engine, at the wake, could know that event's time; a wake forged while the predecessor
    was still out names none, or one its history does not show."""
    claimed = (wake.detail or {}).get(DONE_BY)
    said = claimed.get(name) if isinstance(claimed, Mapping) else None
    if predecessor is None or not isinstance(said, Sequence) or len(said) != 2:
        return False
    seq, at = said
    if (
        isinstance(seq, bool)
        or not isinstance(seq, int)
        or not 1 <= seq <= len(predecessor.history)
    ):
        return False
    event = predecessor.history[seq - 1]
    return event.dest in done and isinstance(at, float) and event.at == at


def _reservations_recorded(request_spec: MachineSpec, snap: Snapshot) -> list[Breach]:
    """A request's recorded reservation is the one its state sets, as the engine writes it
    with every move (outsider batch 24: a data-only write said ``released`` while a node
    of unknown fate held the money, and nothing noticed until the request next moved)."""
    sets = Entering.of(request_spec).reservation
    out = []
    for r in snap.of("request"):
        if r.row is None or not ({"plan", "reservation"} & set(r.data)):
            continue  # not the engine's: a request made through the store alone
        wanted, recorded = sets.get(r.state), r.data.get("reservation")
        if wanted is not None and recorded != wanted:
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    r.machine,
                    r.key,
                    f"its data says the reservation is {recorded!r}, but in {r.state} it is "
                    f"{wanted!r}: its data was changed outside the engine",
                )
            )
    return out


def no_auto_terminal_money_in_flight(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``no-auto-terminal-money-in-flight`` (stated in the registry)."""
    node_spec, request_spec = specs.get("node"), specs.get("request")
    if node_spec is None or request_spec is None:
        return []
    started = node_spec.states_tagged(EFFECT_STARTED)
    releases = request_spec.states_tagged(RELEASES)
    out = []
    moved: dict[str, list[Entity]] = {}
    read: dict[str, list[tuple[str, bool, bool]]] = {}
    derivation = request_spec.derivation
    prefix = None if derivation is None else derivation.manual_prefix
    plans = {r.key: plan_entries(r.data) for r in snap.of("request")}
    out += _nodes_not_planned(snap, plans)
    out += _plans_rewritten(snap)
    out += _reservations_recorded(request_spec, snap)
    node_events = {n.key: events_judged(node_spec, snap, n) for n in snap.of("node")}
    out += _woken_early(node_spec, snap, plans, node_events)
    out += _gates_passed_unsaid(node_spec, snap, prefix, node_events)
    for n in snap.of("node"):
        named = node_name(n.key)
        entry = plans.get(n.scope or "", {}).get(named)
        said = None if entry is None else entry.get("has_side_effect") is True
        if n.scope and said is not None and n.data.get("name") != named:
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    n.machine,
                    n.key,
                    f"its data names it {n.data.get('name')!r}, and its key and its request's "
                    "plan name it otherwise: its data was changed outside the engine",
                )
            )
        if said is not None and said != (n.data.get("has_side_effect") is True):
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    n.machine,
                    n.key,
                    f"its has_side_effect ({n.data.get('has_side_effect')!r}) differs from its "
                    f"request's plan ({said!r}): one of them was changed outside the engine",
                )
            )
        recorded = recorded_side_effect(n.history)
        if recorded and n.data.get("has_side_effect") is not True:
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    n.machine,
                    n.key,
                    "its moves recorded it with a side effect, and its data and its "
                    "request's plan now say it has none: they were changed outside the engine",
                )
            )
        for j in node_events[n.key]:
            ev = j.event
            if ev.source == "unknown" and ev.actor != "reconciler" and not j.migration:
                out.append(
                    Breach(
                        "no-auto-terminal-money-in-flight",
                        n.machine,
                        n.key,
                        f"'{ev.actor}' moved a node out of unknown",
                        (ev,),
                    )
                )
            elif (rule := _needed_evidence(j)) and not says_something(
                (ev.detail or {}).get("evidence")
            ):
                why = (
                    f"'{ev.actor}' moved it from {ev.source} to {ev.dest} with no evidence in "
                    f"its record, which its definition's rule '{rule}' asks of "
                    "an automatic move: the engine records what the venue said"
                )
                out.append(Breach("no-auto-terminal-money-in-flight", n.machine, n.key, why, (ev,)))
        side_effect = bool(n.data.get("has_side_effect") or said or recorded)
        if side_effect and n.state in started:
            moved.setdefault(n.scope or "", []).append(n)
        label = n.data.get("name")
        manual = prefix is not None and isinstance(label, str) and label.startswith(prefix)
        read.setdefault(n.scope or "", []).append((n.state, side_effect, manual))
    for r in snap.of("request"):
        judged = events_judged(request_spec, snap, r)[-1:]
        last = judged[0].event if judged else None
        if last is None or r.state not in releases or not moved.get(r.key):
            continue
        names = ", ".join(n.key for n in moved[r.key])
        if _automatic(judged[0]):
            why = f"'{last.actor}' moved it to {r.state} after side-effect nodes started ({names})"
            out.append(Breach("no-auto-terminal-money-in-flight", r.machine, r.key, why, (last,)))
            continue
        implied = {} if derivation is None else derivation.implied_context(read.get(r.key, []))
        claimed = {v: last.context.get(v) for v in implied if last.context.get(v) != implied[v]}
        if claimed:
            why = (
                f"'{last.actor}' moved it to {r.state} under "
                + ", ".join(f"{v} {c!r}" for v, c in claimed.items())
                + f", but its nodes imply {', '.join(f'{v} {implied[v]!r}' for v in claimed)} "
                f"({names} started): the move's guard was passed on a false claim"
            )
            out.append(Breach("no-auto-terminal-money-in-flight", r.machine, r.key, why, (last,)))
    return out


def completion_means_done(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``completion-means-done`` in a store (stated in the registry): a
    request an automatic move completed while a node of its plan is not done (outsider
    batch 34, c B6: a forged completion with the withdrawal of unknown fate and the deposit
    never sent consumed the reservation, and nobody followed the money)."""
    node_spec, request_spec = specs.get("node"), specs.get("request")
    if node_spec is None or request_spec is None:
        return []
    done = node_spec.states_tagged(DONE)
    consumes = request_spec.states_tagged(CONSUMES)
    undone: dict[str, list[str]] = {}
    for n in snap.of("node"):
        if n.scope and n.state not in done:
            undone.setdefault(n.scope, []).append(f"{n.key} {n.state}")
    out = []
    for r in snap.of("request"):
        judged = events_judged(request_spec, snap, r)[-1:]
        if r.state in consumes and undone.get(r.key) and judged and _automatic(judged[0]):
            last = judged[0].event
            why = (
                f"'{last.actor}' completed it while node(s) of its plan are not done "
                f"({', '.join(sorted(undone[r.key]))})"
            )
            out.append(Breach("completion-means-done", r.machine, r.key, why, (last,)))
    return out


def _needed_evidence(judged: Judged) -> str | None:
    """The rule of the event's version (``automatic_needs_evidence``) that asks an automatic
    move like it for evidence, if any. The engine records what the venue said with every
    such move; one recorded without it was written by no reading (outsider batch 34, c B3:
    a node failed while its submit call was out, the venue's acceptance then discarded)."""
    spec, ev = judged.spec, judged.event
    if judged.migration or spec is None or ev.actor not in spec.actors:
        return None
    if not spec.actors[ev.actor].automatic:
        return None
    for rule in spec.invariants:
        asks = rule.kind == "automatic_needs_evidence"
        if asks and ev.source in rule.sources and ev.dest in rule.dests:
            return rule.id
    return None


def _automatic(judged: Judged) -> bool:
    """Whether an automatic actor made the event, by its version's definition. A
    migration's event is automatic too: the command decided nothing about the entity."""
    spec = judged.spec
    if judged.migration:
        return True
    return spec is not None and spec.actors[judged.event.actor].automatic


def derivation_consistency(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``derivation-consistency`` (``machines.spec.registry`` states it)."""
    node_spec, request_spec = specs.get("node"), specs.get("request")
    if node_spec is None or request_spec is None or request_spec.derivation is None:
        return []
    deriver = Deriver.build(request_spec, node_spec)
    nodes: dict[str, list[Entity]] = {}
    for n in snap.of("node"):
        nodes.setdefault(n.scope or "", []).append(n)
    out = []
    for r in snap.of("request"):
        if r.state not in request_spec.derivation.applied_in:
            continue
        plan = [
            (n.data.get("name", n.key), n.state, bool(n.data.get("has_side_effect")))
            for n in nodes.get(r.key, [])
        ]
        derived = deriver.derive(plan)
        if derived is not None:
            out.append(
                Breach(
                    "derivation-consistency",
                    r.machine,
                    r.key,
                    f"nodes imply '{derived}' but the request is still {r.state}",
                )
            )
        out += _left_unwoken(node_spec, snap, r, nodes.get(r.key, []))
    return out


def _left_unwoken(
    node_spec: MachineSpec, snap: Snapshot, request: Entity, nodes: Sequence[Entity]
) -> list[Breach]:
    """Nodes of an executing request still in their initial state while every node they
    come after is done: the engine wakes a node in the transaction that makes the last of
    them done, so such a node waits on nothing and nothing will wake it (outsider batch
    38, b A7: two engines completed two withdrawals at once, and the deposit stayed
    blocked with the request executing and its reservation held)."""
    done = node_spec.states_tagged(DONE)
    plans = {request.key: plan_entries(request.data)}
    by_key = {n.key: n for n in snap.of("node") if n.scope == request.key}
    out = []
    for n in nodes:
        named = node_name(n.key)
        entry = plans[request.key].get(named)
        if n.state != node_spec.initial or entry is None:
            continue  # a node its request's plan does not name is judged elsewhere
        after = map(str, predecessors(n.data, entry))
        if all(_done_now(request.key, p, by_key, plans, done) for p in after):
            why = (
                f"its node '{named}' is still {n.state} while every node it comes after is "
                "done: the engine wakes a node as the last of them is done, so nothing will "
                "wake it"
            )
            out.append(Breach("derivation-consistency", request.machine, request.key, why))
    return out
