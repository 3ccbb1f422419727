"""One unit of work of the transfer engine: a request and its nodes inside one transaction.

Every node move, the successors it wakes, the request state the nodes then imply and the
frontier are made here, in the caller's transaction, so they commit together or not at
all. The callbacks the moves announce are only collected: the engine fires them after the
commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from machines.derive import Deriver, Signature
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.states import NodeState, RequestState
from machines.spec.vocabulary import (
    CONSUMES_RESERVATION,
    HOLDS_RESERVATION,
    NEEDS_HUMAN,
    RELEASES_RESERVATION,
)
from machines.store.records import Row, Transaction
from machines.systems import arguments
from machines.systems.arguments import plain
from machines.systems.reliance import require_bundled_move
from machines.systems.transfer.errors import TransferRefused, UnknownTransfer
from machines.systems.transfer.plans import (
    DONE_BY,
    SIDE_EFFECT,
    node_key,
    node_name,
    plan_digest,
    plan_entries,
    predecessors,
    recorded_side_effect,
    row_differences,
    settled,
)
from machines.systems.transfer.policy import PLANNER, Mode, allowed, request_mode

REQUEST, NODE = "request", "node"

CALLBACKS = ("frontier_advanced", "request_completed", "request_failed", "request_attention")
"""Every callback name the engine fires; ``callbacks`` may name only these."""

Callback = Callable[[str, Mapping[str, Any]], None]
"""``callback(request_id, payload)``, called after the commit of the change it announces."""

_RESERVATION_BY_TAG = {
    CONSUMES_RESERVATION: "consumed",
    RELEASES_RESERVATION: "released",
    HOLDS_RESERVATION: "held",
}
_CALLBACK_BY_TAG = {
    CONSUMES_RESERVATION: "request_completed",
    RELEASES_RESERVATION: "request_failed",
    NEEDS_HUMAN: "request_attention",
}


@dataclass(frozen=True)
class Entering:
    """What entering each request state does, read once from the request definition's tags
    (the seed's post-transition handling): the reservation it sets, the callbacks it fires."""

    reservation: Mapping[str, str]
    callbacks: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, request_spec: MachineSpec) -> Entering:
        reservation: dict[str, str] = {}
        for tag, value in _RESERVATION_BY_TAG.items():
            reservation |= dict.fromkeys(request_spec.states_tagged(tag), value)
        callbacks: dict[str, tuple[str, ...]] = {}
        for tag, callback in _CALLBACK_BY_TAG.items():
            for state in request_spec.states_tagged(tag):
                callbacks[state] = (*callbacks.get(state, ()), callback)
        return cls(MappingProxyType(reservation), MappingProxyType(callbacks))


class Rules(Protocol):
    """What a session needs of its engine: the derivation, the request machine, the node
    states that count as done, and the id its own moves are made under."""

    deriver: Deriver
    request_spec: MachineSpec
    done_states: frozenset[str]
    entering: Entering
    engine_id: str

    def started_plan(self, tx: Transaction, request: Row) -> str | None:
        """The plan digest ``request``'s start recorded (``plans.started_plan``)."""


@dataclass(frozen=True)
class Movement:
    """One state change the engine made."""

    machine: str
    key: str
    source: str
    dest: str
    trigger: str
    actor: str


def _planned_nodes(
    request_id: str,
    request_data: Mapping[str, Any],
    planned: Mapping[str, Mapping[str, Any]],
    rows: Iterable[Row],
) -> dict[str, Row]:
    """The request's node rows by name, exactly those of its stored plan: a row in its
    scope whose key is not the request's own (``node_key``), or that its plan does not
    name, or a plan entry with no row, was written outside the engine, and the engine acts
    on none of them (a forged row could stand in for a real node, or fail the transfer)."""
    nodes: dict[str, Row] = {}
    for row in rows:
        named = node_name(row.key)
        if row.key != node_key(request_id, named) or named not in planned:
            raise TransferRefused(
                f"request '{request_id}' has a node row '{row.key}' that its plan does not "
                "name: it was written outside the engine; the engine acts on no node of this "
                "request until the row is gone (machines audit names it)"
            )
        differs = row_differences(request_data, named, row.data, row.context.get("kind"))
        if differs:
            raise TransferRefused(
                f"request '{request_id}': node row '{row.key}' is not what its plan made it "
                f"({'; '.join(differs)}): it was changed outside the engine; the engine acts on "
                "no node of this request until it is put back (machines audit names it)"
            )
        nodes[named] = row
    missing = sorted(set(planned) - set(nodes))
    if missing:
        raise TransferRefused(
            f"request '{request_id}' plans node(s) {', '.join(missing)} that the store does "
            "not hold: they were removed outside the engine (machines audit names them)"
        )
    return nodes


class Session:
    """A request and its nodes inside one transaction, with the moves made so far."""

    def __init__(self, engine: Rules, tx: Transaction, request_id: str) -> None:
        self.engine = engine
        self.tx = tx
        self.request_id = request_id
        request = tx.get(REQUEST, request_id)
        if request is None:
            raise UnknownTransfer(f"no transfer request '{request_id}'")
        self.request = request
        started = engine.started_plan(tx, request)
        if started is not None and started != plan_digest(request.data.get("plan")):
            raise TransferRefused(
                f"request '{request_id}': its plan is not the one it started with (its start "
                + ("recorded another digest" if started else "recorded no digest of it")
                + "): it was changed, or started, outside the engine; the engine acts on no "
                "node of this request until a person looks (machines audit names it)"
            )
        self.planned = plan_entries(request.data)
        """The request's plan by node name: the engine never changes a stored plan."""
        self.nodes = _planned_nodes(
            request_id, request.data, self.planned, tx.scope(NODE, request_id)
        )
        """By the name the node's key carries, which no write can change (its data's
        ``name`` is the application's to write)."""
        self.moved: list[Movement] = []
        self.calls: list[tuple[str, Mapping[str, Any]]] = []
        self._recorded: dict[str, bool] = {}
        self._known_settled: dict[str, bool] = {}
        self._held = False  # the request's row written in this transaction (hold_request)

    @property
    def mode(self) -> Mode:
        return request_mode(self.request.state, (n.state for n in self.nodes.values()))

    def node(self, name: str) -> Row:
        name = required(name, "node")
        try:
            return self.nodes[name]
        except KeyError:
            raise UnknownTransfer(
                f"request '{self.request_id}' has no node '{name}'; nodes: {', '.join(self.nodes)}"
            ) from None

    def signature(self) -> Signature:
        """The nodes' signature for the derivation, each node's side effect as
        ``has_side_effect`` says."""
        deriver = self.engine.deriver
        triples = [(named, r.state, self.has_side_effect(named)) for named, r in self.nodes.items()]
        return deriver.alphabet.signature(deriver.kinds_of(triples))

    def has_side_effect(self, named: str) -> bool:
        """Whether node ``named`` counts as having a side effect: when its own data or the
        request's plan says so, when the two do not agree on which node it is (its key
        names it), or when any of its moves recorded it so (its history, which no write
        changes): neither one row nor the plan and the rows rewritten together, outside
        the engine, can make money in flight look idle."""
        row = self.nodes[named]
        entry = self.planned.get(named)
        if (
            row.data.get("has_side_effect") is not False
            or entry is None
            or entry.get("has_side_effect") is not False
            or row.data.get("name") != named
        ):
            return True
        if named not in self._recorded:  # read once a session, for a node said to have none
            history = self.tx.history(NODE, row.key) if row.moves else []
            self._recorded[named] = recorded_side_effect(history)
        return self._recorded[named]

    def move_node(
        self,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        data: Mapping[str, Any] | None = None,
    ) -> Row:
        mode = self.mode
        detail = {**detail, SIDE_EFFECT: self.has_side_effect(node_name(row.key))}
        self.hold_request()
        moved = self.tx.move(row, trigger, actor=actor, detail=detail, data=data)
        if not allowed(mode, row.state, trigger, actor):
            raise TransferRefused(
                f"request '{self.request_id}' is {self.request.state} ({mode} mode): the engine "
                f"does not move node '{row.data['name']}' from {row.state} by {trigger} as "
                f"{actor} now (machines.systems.transfer.policy)"
            )
        self.nodes[moved.data["name"]] = moved
        self._known_settled.clear()
        self._record(row, moved, trigger, actor)
        return moved

    def move_request(self, trigger: str, actor: str, detail: Mapping[str, Any]) -> Row:
        """A request move under the guard context the nodes imply, with the seed's
        post-transition handling: reservation and callback from the new state's tags."""
        engine, before = self.engine, self.request
        context = engine.deriver.context(self.signature())
        dest = engine.request_spec.step(before.state, trigger, actor=actor, **context)
        require_bundled_move(engine.request_spec.name, before.state, trigger, actor, context)
        data = dict(before.data)
        reservation = engine.entering.reservation.get(dest)
        if reservation is not None:
            data["reservation"] = reservation
        if engine.request_spec.is_terminal(dest):  # a finished request's data never changes
            data["current_frontier"] = []
        self.request = self.tx.move(
            before, trigger, actor=actor, context=context, detail=detail, data=data
        )
        self._record(before, self.request, trigger, actor)
        for callback in engine.entering.callbacks.get(dest, ()):
            payload = {"state": dest, "reservation": data["reservation"], "trigger": trigger}
            self.calls.append((callback, {**payload, "by": detail.get("by")}))
        return self.request

    def settle(self) -> None:
        """Wake successors (while executing), derive the request state, sync the frontier."""
        if self.request.state == RequestState.EXECUTING:
            woken = self._wake()
            if woken:
                payload = {"frontier": self._ready(), "woken": woken}
                self.calls.append(("frontier_advanced", payload))
            self._derive()
        self._sync_frontier()

    def _ready(self) -> list[str]:
        return [name for name, row in self.nodes.items() if row.state == NodeState.READY]

    def _wake(self) -> list[str]:
        """Wake every blocked node whose predecessors are ALL done (``undone_predecessors``)."""
        woken = []
        for name, row in list(self.nodes.items()):
            if not self.undone_predecessors(name) and row.state == NodeState.BLOCKED:
                reason = "every predecessor is completed or skipped"
                detail = said(self.engine.engine_id, reason=reason)
                detail[DONE_BY] = self._done_by(name)
                self.move_node(row, "wake", PLANNER, detail)
                woken.append(name)
        return woken

    def _done_by(self, name: str) -> dict[str, list[object]]:
        """For each predecessor of node ``name`` (all done), its last event: its number
        and its time, as its history holds them (``DONE_BY``)."""
        after = predecessors(self.nodes[name].data, self.planned.get(name, {}))
        out: dict[str, list[object]] = {}
        for p in dict.fromkeys(map(str, after)):
            row = self.nodes[p]
            history = self.tx.history(NODE, row.key) if row.moves else []
            out[p] = [history[-1].seq, history[-1].at] if history else [0, None]
        return out

    def undone_predecessors(self, name: str) -> list[str]:
        """The predecessors of node ``name`` that are not done (completed, or skipped with
        what they waited for done: ``_settled``), by its row and by its request's plan
        alike; ``TransferRefused`` when one of them is no node of the request (a row
        rewritten outside the engine)."""
        entry = self.planned.get(name, {})
        after = predecessors(self.nodes[name].data, entry)
        unknown = [p for p in after if not isinstance(p, str) or p not in self.nodes]
        if unknown:
            raise TransferRefused(
                f"request '{self.request_id}': node '{name}' waits for {unknown}, which "
                "its request does not have: its stored data was changed outside the engine"
            )
        memo = self._known_settled
        return [str(p) for p in dict.fromkeys(after) if not self._settled(str(p), memo)]

    def _settled(self, name: str, memo: dict[str, bool]) -> bool:
        """Whether node ``name`` is done for its successors (``plans.settled``), by the
        rows and this request's plan."""
        done = self.engine.done_states

        def is_done(p: str) -> bool:
            row = self.nodes.get(p)
            return row is not None and row.state in done

        def before(p: str) -> list[object]:
            return predecessors(self.nodes[p].data, self.planned.get(p, {}))

        return settled(name, is_done, before, memo)

    def refuse_early(self, name: str) -> None:
        """``TransferRefused`` when node ``name`` would go on toward sending while a
        predecessor is not done: it was woken (or moved on) outside the engine, and
        sending it could move money before theirs settled. Asked when a ready node is
        dispatched and again in the transaction that marks any node sent, whatever state
        it was found in (outsider batch 35, b 1: a forged wake and prepare sent a deposit
        while its withdrawal was still observed)."""
        if early := self.undone_predecessors(name):
            raise TransferRefused(
                f"request '{self.request_id}': node '{name}' is "
                f"{self.nodes[name].state} while its predecessor(s) {', '.join(early)} "
                "are not done (completed, or skipped with what they waited for done): it was "
                "moved outside the engine, and "
                "sending it could move money before theirs settled; nothing was sent, and "
                "a person must look"
            )

    def hold_request(self) -> None:
        """Write the request's row, its data unchanged, once in this transaction, before
        any node of it moves: a write of the request (a move, or another session's node
        move) that another writer committed since this session read it makes the
        transaction ``StaleWrite``, and one made later waits for it and then finds the row
        written. So the sessions that move a request's nodes take turns, and each settles
        (wakes, derives) on the nodes as the one before it left them. Outsider batch 35,
        b 6: on PostgreSQL an operator's cancel committed between the read and the send,
        and the engine sent money for a released reservation; batch 38, b A7: two engines
        each completed one of two withdrawals at once, each saw the other still observed,
        and the deposit was never woken."""
        if not self._held:
            self._held = True
            self.request = self.tx.update(self.request, self.request.data)

    def _derive(self) -> None:
        """Apply the derived request state when it is a legal move for the derivation's
        actor under the derived context (``Deriver.derived_move``); otherwise leave the
        request as it is."""
        deriver = self.engine.deriver
        move = deriver.derived_move(self.request.state, self.signature())
        if move is not None and move.trigger is not None:
            detail = {"by": self.engine.engine_id, "rule": move.decision.rule}
            self.move_request(move.trigger, deriver.derivation.actor, detail)

    def _sync_frontier(self) -> None:
        terminal = self.engine.request_spec.is_terminal(self.request.state)
        frontier = [] if terminal else self._ready()
        if self.request.data.get("current_frontier") != frontier:
            self.request = self.tx.update(
                self.request, {**self.request.data, "current_frontier": frontier}
            )

    def _record(self, before: Row, after: Row, trigger: str, actor: str) -> None:
        self.moved.append(
            Movement(before.machine, before.key, before.state, after.state, trigger, actor)
        )


def said(by: str, **more: str) -> dict[str, Any]:
    """An audit detail: who (``by``) plus the reasons or evidence given. A text may be left
    out (``""``); one that is given must say something (``statement``)."""
    detail = {"by": statement(by, "by")}
    for what, text in more.items():
        if said_text := remark(text, what):
            detail[what] = said_text
    return detail


def remark(value: object, what: str) -> str:
    """An optional reason (``arguments.remark``), refused as the engine refuses."""
    return arguments.remark(value, f"'{what}'", TransferRefused)


def statement(value: object, what: str) -> str:
    """Who moved, or the evidence or reason a person gives (``arguments.statement``),
    refused as the engine refuses."""
    return arguments.statement(value, f"'{what}'", TransferRefused)


def required(value: str, what: str) -> str:
    if not isinstance(value, str) or not plain(value).strip():
        raise TransferRefused(f"'{what}' must be a non-empty string; got {describe(value)}")
    return plain(value)
