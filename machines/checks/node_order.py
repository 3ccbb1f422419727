"""The order a transfer's nodes move in, as the audit judges it from stored state: a
node woken before the nodes it comes after were done (or by a wake that names no event
that made them done), a plan rewritten after its request started, a manual gate passed
or skipped with nobody's action, and a node left blocked once all it waited for is done.
Read by ``machines.checks.money``'s ``no-auto-terminal-money-in-flight`` and
``derivation-consistency``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from machines.checks.breaches import Breach
from machines.checks.snapshots import Entity, Snapshot
from machines.checks.versions import Judged
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.states import NodeState
from machines.spec.visible import says_something
from machines.spec.vocabulary import DONE, MIGRATION_ACTOR
from machines.systems.transfer.plans import (
    APPROVED_BY,
    DONE_BY,
    node_key,
    node_name,
    plan_digest,
    plan_entries,
    predecessors,
    settled,
    started_plan,
)


def woken_early(
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
    memos: dict[str, dict[str, bool]] = {}
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
        memo = memos.setdefault(n.scope, {})
        early = [p for p in named if not _done_now(n.scope, p, nodes, plans, done, memo)]
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


def plans_rewritten(snap: Snapshot) -> list[Breach]:
    """Requests whose stored plan is not the one their start recorded (``PLAN_DIGEST``):
    from the start on the engine never changes a plan, so one with another digest was
    rewritten outside it, and the order its nodes wait in with it (outsider batch 38, b A1:
    the deposit's predecessors, taken out of the plan and the rows together, let it go
    while the withdrawal was observed)."""
    out = []
    for r in snap.of("request"):
        started = started_plan(r.history)
        if started is not None and started != plan_digest(r.data.get("plan")):
            why = (
                "its plan is not the one it started with (its start recorded "
                + ("another digest" if started else "no digest of it")
                + "): it was changed, or started, outside the engine, and the order its "
                "nodes wait in may have been with it"
            )
            out.append(Breach("no-auto-terminal-money-in-flight", r.machine, r.key, why))
    return out


def gates_passed_unsaid(
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
    memo: dict[str, bool],
) -> bool:
    """Whether node ``start`` of request ``scope`` is done now for the nodes after it, as
    the engine judges it (``plans.settled``). A done state is an end, so a node not done
    now was not done at any wake before."""

    def is_done(name: str) -> bool:
        node = nodes.get(node_key(scope, name))
        return node is not None and node.state in done

    def before(name: str) -> list[object]:
        node = nodes[node_key(scope, name)]
        return predecessors(node.data, plans.get(scope, {}).get(name, {}))

    return settled(start, is_done, before, memo)


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


def left_unwoken(node_spec: MachineSpec, request: Entity, nodes: Sequence[Entity]) -> list[Breach]:
    """Nodes of an executing request still in their initial state while every node they
    come after is done: the engine wakes a node in the transaction that makes the last of
    them done, so such a node waits on nothing and nothing will wake it (outsider batch
    38, b A7: two engines completed two withdrawals at once, and the deposit stayed
    blocked with the request executing and its reservation held)."""
    done = node_spec.states_tagged(DONE)
    plans = {request.key: plan_entries(request.data)}
    by_key = {n.key: n for n in nodes}  # the request's own: every node it waits for
    memo: dict[str, bool] = {}
    out = []
    for n in nodes:
        named = node_name(n.key)
        entry = plans[request.key].get(named)
        if n.state != node_spec.initial or entry is None:
            continue  # a node its request's plan does not name is judged elsewhere
        after = map(str, predecessors(n.data, entry))
        if all(_done_now(request.key, p, by_key, plans, done, memo) for p in after):
            why = (
                f"its node '{named}' is still {n.state} while every node it comes after is "
                "done: the engine wakes a node as the last of them is done, so nothing will "
                "wake it"
            )
            out.append(Breach("derivation-consistency", request.machine, request.key, why))
    return out


def moved_before_start(snap: Snapshot) -> list[Breach]:
    """Nodes that moved in a request that never started: the engine moves a node only once
    its request's ``start`` (which wakes the first of them) is recorded, and starts no
    request whose nodes moved, so such a move was written outside the engine (outsider
    batch 40, a 1: the withdrawal and the deposit of a request never approved were moved
    to completed by raw moves, and the audit said OK)."""
    unstarted = {
        r.key for r in snap.of("request") if not any(e.trigger == "start" for e in r.history)
    }
    out = []
    for n in snap.of("node"):
        if n.scope not in unstarted:
            continue
        early = [e for e in n.history if e.actor != MIGRATION_ACTOR]
        if early:
            why = (
                f"'{early[0].actor}' moved it ({early[0].trigger}) while request "
                f"'{n.scope}' had not started: the engine moves no node before its request's "
                "start"
            )
            breach = Breach("no-auto-terminal-money-in-flight", n.machine, n.key, why, (early[0],))
            out.append(breach)
    return out
