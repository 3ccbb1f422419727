"""How the transfer engine moves one node: the transactions it runs in, and what a step
does with a node in each state.

A step advances each node once: at most one executor call, and each node move in its own
fenced transaction (``Session``), made only if the request's mode still allows it
(``policy``) and nobody moved the node since it was read, so engines may step the same
request concurrently. Executors are called between transactions, never inside one.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeGuard

from machines.derive import Deriver
from machines.errors import MachinesError
from machines.runtime.history import Clock
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.states import NodeState
from machines.spec.vocabulary import EFFECT_STARTED
from machines.store.records import Row, StaleWrite, Store, StoreError, Transaction
from machines.systems.transfer.errors import (
    CallbackFailed,
    TransferConfigError,
    TransferRefused,
)
from machines.systems.transfer.executor import (
    ON_OBSERVE,
    ON_PREPARE,
    ON_SUBMIT,
    Executor,
    PlanNode,
    Reply,
    ask,
)
from machines.systems.transfer.plans import node_name, started_plan
from machines.systems.transfer.policy import (
    EXECUTOR,
    OBSERVER,
    Mode,
    allowed,
    first_move,
    request_mode,
)
from machines.systems.transfer.session import (
    REQUEST,
    Callback,
    Entering,
    Movement,
    Session,
    required,
    said,
)

STARTED_PLANS_KEPT = 10_000
"""How many requests' start digests an engine keeps read (the oldest read is let go)."""

APPLY_ATTEMPTS = 64
"""How often a node move is made again when its session lost a race for the request row
while the node itself was not moved (each loss is another engine's win, so the request
makes progress; outsider batch 46, c 6: six engines on forty nodes lost five in a row)."""
BACKOFF_SECONDS = 0.05
"""The longest pause between two such attempts (each pause is random, growing with the
attempt, so engines that keep colliding spread out)."""


class Driver:
    """The engine's node moves and transactions; ``TransferEngine`` sets the attributes."""

    store: Store
    executors: dict[str, Executor]
    callbacks: dict[str, Callback]
    clock: Clock
    engine_id: str
    submit_timeout: float
    deriver: Deriver
    request_spec: MachineSpec
    node_spec: MachineSpec
    done_states: frozenset[str]
    entering: Entering
    manual_prefix: str
    _started_plans: dict[str, str]

    # -- transactions -----------------------------------------------------------------------

    def started_plan(self, tx: Transaction, request: Row) -> str | None:
        """The plan digest ``request``'s start recorded, read from its history once it has
        one and kept (a history is append-only; at most ``STARTED_PLANS_KEPT`` of them)."""
        known = self._started_plans.get(request.key)
        if known is not None:
            return known
        if not request.moves:
            return None
        found = started_plan(tx.history(REQUEST, request.key))
        if found:  # a start without a digest is read again: it is refused each time
            if len(self._started_plans) >= STARTED_PLANS_KEPT:
                self._started_plans.pop(next(iter(self._started_plans)))
            self._started_plans[request.key] = found
        return found

    @contextmanager
    def _session(self, request_id: str) -> Iterator[Session]:
        """One transaction over a request and its nodes; it settles (wakes, frontier,
        derivation) before committing, and fires the callbacks after the commit."""
        request_id = required(request_id, "request_id")  # the checked text is what is used
        with self.store.transaction() as tx:
            session = Session(self, tx, request_id)
            yield session
            session.settle()
        self._fire(request_id, session.calls)

    def _read(self, request_id: str) -> tuple[Row, dict[str, Row]]:
        session = self._session_read(request_id)
        return session.request, session.nodes

    def _session_read(self, request_id: str) -> Session:
        """A request and its nodes as one transaction read them (nothing written)."""
        request_id = required(request_id, "request_id")
        with self.store.transaction() as tx:
            return Session(self, tx, request_id)

    def _fire(self, request_id: str, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        failures: list[tuple[str, BaseException]] = []
        for name, payload in calls:
            callback = self.callbacks.get(name)
            if callback is None:
                continue
            try:
                callback(request_id, payload)
            except Exception as error:
                failures.append((name, error))
        if failures:
            raise CallbackFailed(request_id, failures) from failures[0][1]

    # -- one node, one move -----------------------------------------------------------------

    def _advance(self, request_id: str, name: str, version: int | None = None) -> list[Movement]:
        """One move of node ``name`` (skipped when it moved since ``version`` was read)."""
        read = self._session_read(request_id)
        request, nodes = read.request, read.nodes
        row = nodes[name]
        if version is not None and row.version != version:
            return []
        mode = request_mode(request.state, (n.state for n in nodes.values()))
        moving = row.state != NodeState.BLOCKED and not self.node_spec.is_terminal(row.state)
        if mode is Mode.DISPATCH and moving:
            read.refuse_early(name)  # no node goes on before those it waits for are done
        if row.state == NodeState.READY:
            return self._dispatch(request_id, row, mode)
        if row.state == NodeState.PREPARING:
            return self._prepare(request_id, row, mode)
        if row.state == NodeState.AWAITING_SIGNATURE:
            return self._abandon(request_id, row) if mode is Mode.HALT else []
        if row.state == NodeState.SUBMITTING:
            return self._recover_send(request_id, row)
        if row.state in (NodeState.SUBMITTED, NodeState.OBSERVING) and mode is not Mode.IDLE:
            return self._observe(request_id, row)
        return []

    def _dispatch(self, request_id: str, row: Row, mode: Mode) -> list[Movement]:
        if mode is Mode.HALT:
            return self._abandon(request_id, row)  # it will never run: say so
        if mode is not Mode.DISPATCH or row.data["name"].startswith(self.manual_prefix):
            return []  # a ready manual gate waits for complete_manual
        trigger, actor = first_move(row.context["kind"])
        return self._apply(request_id, row, trigger, actor, {"by": self.engine_id})

    def _prepare(self, request_id: str, row: Row, mode: Mode) -> list[Movement]:
        if mode is Mode.HALT:
            return self._abandon(request_id, row)
        if mode is not Mode.DISPATCH:
            return []
        reply = self._ask(request_id, row, "prepare")
        if reply.answer == "submit":
            detail = said(self.engine_id, evidence=reply.evidence)
            return self._send(request_id, row, "submit", EXECUTOR, detail, reply) or []
        trigger = ON_PREPARE.get(reply.answer or "", "fail")
        return self._report(request_id, row, trigger, EXECUTOR, reply)

    def _abandon(self, request_id: str, row: Row) -> list[Movement]:
        why = "abandoned before anything was sent: another node of the plan failed"
        detail = said(self.engine_id, evidence=why)
        return self._apply(request_id, row, "fail", EXECUTOR, detail)

    def _send(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        reply: Reply | None = None,
    ) -> list[Movement] | None:
        """Move into submitting and mark the node sent in one fenced transaction, then
        call ``submit`` once. So a node is never submitting without a call behind it.
        None when the request may not start sending (or the node moved meanwhile)."""
        data = {**row.data, "sent": {"by": self.engine_id, "at": self.clock()}}
        if reply is not None:
            data["last"] = reply.record(self.clock())
        self._executor(request_id, row)  # before the node is marked sent
        marked = self._mark_sent(request_id, row, trigger, actor, detail, data)
        if marked is None:
            return None
        moved, sending = marked
        answer = self._ask(request_id, sending, "submit")
        outcome = ON_SUBMIT.get(answer.answer or "", "lose_track")
        return moved + self._report(request_id, sending, outcome, EXECUTOR, answer)

    def _mark_sent(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        data: Mapping[str, Any],
    ) -> tuple[list[Movement], Row] | None:
        """The fenced transaction of ``_send``: the moves it made and the node marked
        sent, made again when it lost a race for the request row while the node is as
        read; None when the mode forbids it, the node moved, or the request kept moving."""
        for _ in range(APPLY_ATTEMPTS):
            try:
                with self._session(request_id) as s:
                    if not allowed(s.mode, row.state, trigger, actor):
                        return None
                    s.refuse_early(node_name(row.key))
                    s.hold_request()
                    sending = s.move_node(row, trigger, actor, detail, data)
                return s.moved, sending
            except StaleWrite:
                now = self._now_of(row)
                if now is None or now.version != row.version:
                    return None
        return None

    def _recover_send(self, request_id: str, row: Row) -> list[Movement]:
        """A submitting node found by a step: its ``submit`` call is still out, or never
        reported back (a crash). After ``submit_timeout`` it goes unknown, never resent."""
        sent = row.data.get("sent")
        at = sent.get("at") if isinstance(sent, Mapping) else None
        by = sent.get("by") if isinstance(sent, Mapping) else None
        now = self.clock()
        if _a_time(at) and now - at < self.submit_timeout and at <= now + self.submit_timeout:
            return []  # still out, sent at a time that can be: wait for it
        # no readable mark of when it was sent (none, or one rewritten outside the engine:
        # a text, no time, a time far ahead): it may have moved money, so it goes unknown
        who = f"by {describe(by)} " if isinstance(by, str) else ""
        why = (
            f"submit() started {who}did not report back within {self.submit_timeout:g}s; "
            "the money may have moved"
        )
        detail = said(self.engine_id, evidence=why)
        return self._apply(request_id, row, "lose_track", EXECUTOR, detail)

    def _observe(self, request_id: str, row: Row) -> list[Movement]:
        """Ask the venue about a submitted or observing node. A first "pending" moves a
        submitted node to observing (it is being watched); a final answer moves it
        straight to its end, from either state."""
        reply = self._ask(request_id, row, "observe")
        if reply.answer == "pending":
            if row.state == NodeState.OBSERVING:
                return []
            return self._report(request_id, row, "start_observing", OBSERVER, reply)
        trigger = ON_OBSERVE.get(reply.answer or "", "lose_track")
        return self._report(request_id, row, trigger, OBSERVER, reply)

    def _ask(self, request_id: str, row: Row, call: str) -> Reply:
        """Call the node's executor outside any transaction; an exception is an answer."""
        return ask(self._executor(request_id, row), call, PlanNode.of(request_id, row))

    def _executor(self, request_id: str, row: Row) -> Executor:
        """The executor that sends node ``row``; ``TransferConfigError`` when this engine
        has none by its name (outsider batch 35, b 5: a raw ``KeyError`` escaped a step),
        asked before anything is marked sent."""
        named = row.data.get("executor")
        if not isinstance(named, str) or named not in self.executors:
            raise TransferConfigError(
                f"node '{node_name(row.key)}' of request '{request_id}' is sent by executor "
                f"{describe(named)}, which this engine does not have (it has "
                f"{', '.join(map(repr, self.executors)) or 'none'}): step it with an engine "
                "that has it; nothing was sent"
            )
        return self.executors[named]

    def _report(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        reply: Reply,
    ) -> list[Movement]:
        detail = said(self.engine_id, evidence=reply.evidence)
        return self._apply(
            request_id, row, trigger, actor, detail, {"last": reply.record(self.clock())}
        )

    def _apply(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        fields: Mapping[str, Any] | None = None,
    ) -> list[Movement]:
        """Move ``row`` (its data given ``fields`` as well) if the request is (still) in a
        mode that allows the move (``policy``) and nobody moved the node since it was
        read; else nothing. A session that lost a race for the request row (another
        engine's derived move, say) while the node is as it was read is made again, and
        so is one that lost to a write of the node's data alone (the application's: its
        state and moves as read): the move may be a venue's answer, which would otherwise
        be lost, and the node later taken for one that never reported back (outsider
        batches 30 and 36, b A)."""
        for attempt in range(1, APPLY_ATTEMPTS + 1):
            data = None if fields is None else {**row.data, **fields}
            try:
                with self._session(request_id) as s:
                    if not allowed(s.mode, row.state, trigger, actor):
                        return []
                    s.move_node(row, trigger, actor, detail, data)
            except StaleWrite as lost:
                now = self._now_of(row)
                same = now is not None and (now.state, now.moves) == (row.state, row.moves)
                if same and attempt < APPLY_ATTEMPTS:
                    row = now if now is not None else row
                    time.sleep(random.uniform(0, min(BACKOFF_SECONDS, 0.001 * 2**attempt)))
                    continue
                if same:
                    raise StoreError(
                        f"request '{request_id}': node '{row.data.get('name')}': {trigger} by "
                        f"{actor} ({describe(dict(detail))}) could not be recorded: the request "
                        f"moved under it {APPLY_ATTEMPTS} times (other engines stepping it), "
                        "and the node is as it was read; this error alone holds it, so log "
                        "it, then step the request again"
                    ) from lost
                self._refuse_contradicted(request_id, row, trigger, actor, now)
                return []
            return s.moved
        return []

    def _now_of(self, row: Row) -> Row | None:
        """``row`` as it is stored now."""
        with self.store.transaction() as tx:
            return tx.get(row.machine, row.key)

    def _venue_failed(self, now: Row) -> bool:
        """Whether ``now`` was last moved by an observer reading the venue's own "failed":
        a final word that stands over an earlier "accepted" or "pending" that came back
        late (outsider batch 45: two engines observing one node, the later call answered
        first)."""
        with self.store.transaction() as tx:
            history = tx.history(now.machine, now.key)
        last = history[-1] if history else None
        return last is not None and (last.trigger, last.actor) == ("fail", OBSERVER)

    def _refuse_contradicted(
        self, request_id: str, row: Row, trigger: str, actor: str, now: Row | None
    ) -> None:
        """A move that could not be made because the node was moved under it is dropped,
        unless what it records contradicts where the node was moved: a venue's answer that
        money may have moved, for a node moved to a state that says none did (outsider
        batch 34, c B3: a node failed by a forged move while its submit call was out; the
        venue's acceptance was dropped, and the reservation released), or an answer that
        none did, for a node moved to a final state that says it did (batch 44, c B1: a
        reconciler completed it, and the venue's later refusal left no trace). Then
        ``TransferRefused``, for a person to look."""
        started = self.node_spec.states_tagged(EFFECT_STARTED)
        try:
            dest = self.node_spec.step(row.state, trigger, actor=actor, **row.context)
        except MachinesError:
            return
        if now is None:
            return
        if dest in started and now.state not in started:
            if not self.node_spec.is_terminal(dest) and self._venue_failed(now):
                return  # its later final word stands over this earlier one
            said, found = "money may have moved", "none did"
        elif dest not in started and now.state in started and self.node_spec.is_terminal(now.state):
            said, found = "no money moved", "it did"
        else:
            return
        raise TransferRefused(
            f"request '{request_id}': node '{row.data.get('name')}': the venue's answer "
            f"({trigger}, to {dest}) says {said}, but the node was moved to "
            f"'{now.state}' meanwhile, which says {found}: the answer is not recorded "
            "anywhere but in this error, so log it; a person must look, with the venue's "
            "records (a person's reconciliation made on them too early is recorded as such; "
            "a move written outside the engine, machines audit --from-store names)"
        )


def _a_time(value: object) -> TypeGuard[float]:
    """A time a clock could have given: a finite float, or an int a float holds exactly."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and abs(value) < 2**53
