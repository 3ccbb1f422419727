"""The stored-state invariants of a transfer's money (``no-auto-terminal-money-in-flight``,
``derivation-consistency``): nodes are their request's plan, a request records the
reservation its state sets, nothing automatic releases a reservation while money may be
moving, and no derived decision is left unapplied. ``machines.checks.invariants`` lists
them with the others."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from machines.checks.breaches import Breach, Specs, events_judged
from machines.checks.node_order import (
    gates_passed_unsaid,
    left_unwoken,
    moved_before_start,
    plans_rewritten,
    woken_early,
)
from machines.checks.snapshots import Entity, Snapshot
from machines.checks.versions import Judged
from machines.derive import Deriver
from machines.spec import MachineSpec
from machines.spec.visible import says_something
from machines.spec.vocabulary import CONSUMES_RESERVATION as CONSUMES
from machines.spec.vocabulary import DONE, EFFECT_STARTED
from machines.spec.vocabulary import RELEASES_RESERVATION as RELEASES
from machines.systems.transfer.plans import (
    node_key,
    node_name,
    plan_entries,
    recorded_side_effect,
    row_differences,
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
    out += plans_rewritten(snap)
    out += moved_before_start(snap)
    out += _reservations_recorded(request_spec, snap)
    node_events = {n.key: events_judged(node_spec, snap, n) for n in snap.of("node")}
    out += woken_early(node_spec, snap, plans, node_events)
    out += gates_passed_unsaid(node_spec, snap, prefix, node_events)
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
        out += left_unwoken(node_spec, r, nodes.get(r.key, []))
    return out
