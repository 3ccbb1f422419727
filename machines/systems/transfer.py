"""The transfer engine (seed 003, QTG v3): a money transfer run as a plan of nodes.

A transfer is one ``request`` row and one ``node`` row per plan step. The request goes
through validation and an operator's approval; once it executes, the engine drives each
node through its executor and *derives* the request's next state from all node states
with the rules in ``spec/request.yaml`` (the default, money-safe rule set). Why it is
built this way:

- **Every change is a legal, audited move.** Rows change state only through
  ``Transaction.move``, so the store checks each move against the spec and records who
  made it (actor type as ``actor``, actor id as ``detail["by"]``) in the same transaction.
  A node move, the successors it wakes, the frontier and the request state it implies
  commit together or not at all; callbacks fire only after the commit.
- **Money is never released while it may be moving.** The request's guard context
  (``side_effects``) is computed from the nodes by the derivation on every request move,
  so the spec itself refuses ``fail`` and ``cancel`` once a side-effect node started.
- **Fail closed around the venue call.** Executors are called outside transactions. A
  node enters ``submitting`` marked ``sent`` (durably, compare-and-set on its version) in
  the transaction right before ``submit()`` is called, so ``submitting`` always means "a
  call is out", as the spec's effect-started tag says. A ``submit()`` or ``observe()``
  that raises, answers nonsense or never reports back (``submit_timeout``) moves the node
  to ``unknown``, which only ``reconcile`` leaves. ``prepare()`` runs before anything is
  sent, so its errors fail the node with the error as evidence.
- **Nothing new starts once the plan cannot finish.** While a node failed, the engine
  dispatches no ready node and abandons (fails, as their executor) nodes that are ready,
  being prepared or being signed (nothing was sent), so the derivation can settle on
  ``failed`` instead of sending money for a doomed transfer. Money already in flight is
  still followed, also in ``manual_intervention``.
- **Manual gates** (nodes named ``manual_...``) are never dispatched by ``step``: they stay
  ready, so the request derives ``waiting_manual_action``. ``complete_manual`` records the
  operator's action on the gate, resumes the request and drives the gate through its own
  executor (``ManualGate``), whose ``submit`` completes an approved gate. The node machine
  has no operator completion edge; this keeps every node move on the spec's edges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from machines.derive import Deriver, Signature
from machines.errors import InvalidStateTransition, MachinesError, message_of, storable_text
from machines.runtime.history import Clock
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.states import NodeState, RequestState
from machines.spec.vocabulary import (
    CONSUMES_RESERVATION,
    DONE,
    HOLDS_RESERVATION,
    NEEDS_HUMAN,
    RELEASES_RESERVATION,
)
from machines.store.records import Row, StaleWrite, Store, Transaction
from machines.systems import arguments
from machines.systems.exactly_once import process_identity
from machines.systems.plans import node_rows, validate_plan
from machines.systems.transfer_policy import (
    REQUEST_CALLS,
    Mode,
    allowed,
    first_move,
    request_mode,
)

REQUEST, NODE = "request", "node"

# Actor names of spec/request.yaml and spec/node.yaml.
SYSTEM, TIMER, OPERATOR = "system", "timer", "operator"
PLANNER, EXECUTOR, SIGNER, OBSERVER, RECONCILER = (
    "planner",
    "executor",
    "signer",
    "observer",
    "reconciler",
)

MAX_STEPS = 1_000_000
"""The most steps one ``run`` takes."""

CALLBACKS = ("frontier_advanced", "request_completed", "request_failed", "request_attention")
"""Every callback name the engine fires; ``callbacks`` may name only these."""


PrepareAnswer = Literal["sign", "submit", "retry"]
SubmitAnswer = Literal["accepted", "completed", "failed", "unknown"]
ObserveAnswer = Literal["completed", "failed", "pending", "unknown"]

_PREPARE = {"sign": "request_signature", "retry": "retry"}
_SUBMIT = {"accepted": "accept", "completed": "complete", "failed": "fail", "unknown": "lose_track"}
_OBSERVE = {"completed": "complete", "failed": "fail", "unknown": "lose_track"}
_RECONCILE = {
    "submitted": "reconcile_submitted",
    "completed": "reconcile_completed",
    "failed": "reconcile_failed",
}
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


# -- errors ---------------------------------------------------------------------------------


class TransferError(MachinesError):
    """Base class of the transfer engine's own errors."""


class PlanError(TransferError, ValueError):
    """A plan that cannot run; ``problems`` lists every problem, each naming its node.
    Raised before anything is written."""

    def __init__(self, request_id: object, problems: Sequence[str]) -> None:
        self.request_id = request_id
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            text = f"{len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"plan of request {describe(request_id)}: {text}")


class TransferConfigError(TransferError, ValueError):
    """The engine was built with an executor or callback it cannot use."""


class UnknownTransfer(TransferError, LookupError):
    """No request, or no node of that request, under this name."""


class TransferRefused(TransferError):
    """The engine refuses an operation the current situation does not allow (a signature
    for a request that stopped executing, a manual completion of a normal node, ...).
    Nothing was written."""


class CallbackFailed(TransferError):
    """A callback raised. The state change it announced is committed; every other
    callback of the same change was still called."""

    def __init__(self, request_id: str, failures: Sequence[tuple[str, BaseException]]) -> None:
        self.request_id = request_id
        self.failures = tuple(failures)
        names = ", ".join(f"{name} ({type(e).__name__}: {e})" for name, e in failures)
        super().__init__(f"request '{request_id}': callbacks raised after the commit: {names}")


# -- what executors see and implement ---------------------------------------------------


@dataclass(frozen=True)
class PlanNode:
    """One node as executors and callers see it."""

    request_id: str
    name: str
    kind: str
    has_side_effect: bool
    executor: str
    predecessors: tuple[str, ...]
    successors: tuple[str, ...]
    state: NodeState
    data: Mapping[str, Any]

    @classmethod
    def of(cls, request_id: str, row: Row) -> PlanNode:
        d = row.data
        return cls(
            request_id,
            d["name"],
            row.context["kind"],
            d["has_side_effect"],
            d["executor"],
            tuple(d["predecessors"]),
            tuple(d["successors"]),
            NodeState(row.state),
            d,
        )


class Executor(Protocol):
    """Talks to one venue. Called outside any transaction, at most once per move.

    - ``prepare``: preflight checks, before anything is sent. ``"sign"`` (action nodes
      only) waits for the external signer; ``"submit"`` goes on to sending; ``"retry"``
      (not now, e.g. the venue is busy) puts the node back to ready for a later step.
      Raising fails the node with the error as evidence.
    - ``submit``: sends the operation. ``"accepted"`` (the venue took it), ``"completed"``
      (final in the response), ``"failed"`` (certainly refused), ``"unknown"``. Raising
      means the money may have moved: the node goes ``unknown``.
    - ``observe``: watches a submitted operation or an observe node. ``"pending"`` leaves
      the node observing; raising or ``"unknown"`` moves it to ``unknown``.
    """

    def prepare(self, node: PlanNode) -> PrepareAnswer: ...

    def submit(self, node: PlanNode) -> SubmitAnswer: ...

    def observe(self, node: PlanNode) -> ObserveAnswer: ...


class ManualGate:
    """The executor of manual gate nodes: it passes a gate only after an operator's
    ``complete_manual`` recorded the action on the node (``data["manual"]``)."""

    def prepare(self, node: PlanNode) -> PrepareAnswer:
        return "submit"

    def submit(self, node: PlanNode) -> SubmitAnswer:
        return "completed" if "manual" in node.data else "failed"

    def observe(self, node: PlanNode) -> ObserveAnswer:
        return "completed" if "manual" in node.data else "pending"


Callback = Callable[[str, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Movement:
    """One state change the engine made."""

    machine: str
    key: str
    source: str
    dest: str
    trigger: str
    actor: str


@dataclass(frozen=True)
class _Reply:
    """What an executor call gave: an answer, or the error it raised."""

    call: str
    answer: str | None
    error: str | None

    def record(self, at: float) -> dict[str, Any]:
        """What the node's data keeps of its last executor call."""
        return {"call": self.call, "answer": self.answer, "error": self.error, "at": at}

    @property
    def evidence(self) -> str:
        if self.error is not None:
            return f"{self.call}() raised {self.error}"
        return f"{self.call}() answered {self.answer!r}"


# -- the engine -----------------------------------------------------------------------------


class TransferEngine:
    """``TransferEngine(store, executors, callbacks)``: submit plans, move requests through
    approval, and ``run`` them; see the module docstring for the rules it keeps.

    ``executors`` maps the names plans use to ``Executor`` objects; ``callbacks`` maps
    names of ``CALLBACKS`` to ``callable(request_id, payload)``, called after the commit.
    ``clock`` stamps node data and times ``submit_timeout``: how long a ``submit`` call may
    stay out before a step declares its node unknown (a crashed or lost call; a reply that
    arrives later cannot overwrite that). ``engine_id`` is the actor id of the engine's own
    moves (``detail["by"]``); by default host, process and a random suffix.
    """

    def __init__(
        self,
        store: Store,
        executors: Mapping[str, Executor],
        callbacks: Mapping[str, Callback] | None = None,
        *,
        clock: Clock = time.time,
        engine_id: str | None = None,
        submit_timeout: float = 300.0,
    ) -> None:
        specs = store.specs()
        if REQUEST not in specs or NODE not in specs:
            raise TransferConfigError("the store needs both the 'request' and 'node' machines")
        if submit_timeout <= 0:
            raise TransferConfigError("submit_timeout must be > 0 seconds")
        self.store = store
        self.executors = dict(executors)
        self.callbacks = dict(callbacks or {})
        _check_executors(self.executors)
        _check_callbacks(self.callbacks)
        self.clock = clock
        self.engine_id = engine_id or process_identity("engine:")
        self.submit_timeout = submit_timeout
        self.request_spec: MachineSpec = specs[REQUEST]
        self.node_spec: MachineSpec = specs[NODE]
        self.deriver = Deriver.build(self.request_spec, self.node_spec)
        self.manual_prefix = self.deriver.derivation.manual_prefix
        self.done_states = frozenset(
            name for name, s in self.node_spec.states.items() if DONE in s.tags
        )

    # -- reading ----------------------------------------------------------------------------

    def request(self, request_id: str) -> Row:
        """The stored request row: state and data (plan, reservation, current_frontier)."""
        return self._read(request_id)[0]

    def nodes(self, request_id: str) -> dict[str, PlanNode]:
        """The request's nodes by name, in plan order."""
        return {
            name: PlanNode.of(request_id, row) for name, row in self._read(request_id)[1].items()
        }

    # -- the request's lifecycle ------------------------------------------------------------

    def submit(self, request_id: str, plan: Sequence[Mapping[str, Any]]) -> RequestState:
        """Record the request (received, reservation held) and its nodes (blocked) in one
        transaction, after validating the whole plan. Submitting the same plan again is a
        no-op; a different plan under the same id is a ``PlanError``."""
        nodes = self._validate_plan(request_id, plan)
        with self.store.transaction() as tx:
            data = {"plan": nodes, "reservation": "held", "current_frontier": []}
            row, created = tx.insert(REQUEST, request_id, data=data)
            if not created:
                if row.data.get("plan") != nodes:
                    raise PlanError(request_id, ["a different plan exists under this id"])
                return RequestState(row.state)
            for node, node_data in zip(nodes, node_rows(nodes), strict=True):
                tx.insert(
                    NODE,
                    f"{request_id}/{node['name']}",
                    scope=request_id,
                    context={"kind": node["kind"]},
                    data=node_data,
                )
        return RequestState(row.state)

    def validate(self, request_id: str, *, problems: Sequence[str] = ()) -> RequestState:
        """The engine's input check: ``problems`` found by the caller fail the request
        (``fail_validation``); none validates it."""
        if problems:
            detail = {"by": self.engine_id, "problems": list(problems)}
            return self._request_move(request_id, "fail_validation", detail)
        return self._request_move(request_id, "validate", {"by": self.engine_id})

    def request_approval(self, request_id: str) -> RequestState:
        return self._request_move(request_id, "request_approval", {"by": self.engine_id})

    def approve(self, request_id: str, *, by: str, reason: str = "") -> RequestState:
        return self._request_move(request_id, "approve", _said(by, reason=reason))

    def reject(self, request_id: str, *, by: str, reason: str = "") -> RequestState:
        return self._request_move(request_id, "reject", _said(by, reason=reason))

    def expire(self, request_id: str, *, by: str | None = None) -> RequestState:
        """The approval window closed (``by``: the timer's id, default the engine's)."""
        return self._request_move(request_id, "expire", _said(by or self.engine_id))

    def fail_before_start(self, request_id: str, *, reason: str) -> RequestState:
        detail = _said(self.engine_id, reason=reason)
        return self._request_move(request_id, "fail_before_start", detail)

    def start(self, request_id: str) -> RequestState:
        """approved -> executing; the nodes without predecessors wake in the same
        transaction and ``frontier_advanced`` fires."""
        return self._request_move(request_id, "start", {"by": self.engine_id})

    def cancel(self, request_id: str, *, by: str, reason: str = "") -> RequestState:
        """Cancel a request before any money moved (the spec refuses it after). Nodes not
        started are cancelled; nodes being prepared or signed are abandoned (failed, with
        the cancellation as evidence); anything else is left as it stands."""
        detail = _said(by, reason=reason)
        with self._session(request_id) as s:
            s.move_request("cancel", REQUEST_CALLS["cancel"], detail)
            for row in list(s.nodes.values()):
                if row.state in (NodeState.BLOCKED, NodeState.READY):
                    s.move_node(row, "cancel", OPERATOR, detail)
                elif row.state in (NodeState.PREPARING, NodeState.AWAITING_SIGNATURE):
                    why = f"the request was cancelled by {by} before anything was sent"
                    s.move_node(row, "fail", EXECUTOR, _said(self.engine_id, evidence=why))
        return RequestState(s.request.state)

    def resume(self, request_id: str, *, by: str, reason: str = "") -> RequestState:
        """waiting_manual_action / manual_intervention -> executing. The derivation runs
        at once, so a request whose nodes still imply a stop goes straight back."""
        return self._request_move(request_id, "resume", _said(by, reason=reason))

    def confirm_failed(self, request_id: str, *, by: str, evidence: str) -> RequestState:
        detail = _said(by, evidence=_required(evidence, "evidence"))
        return self._request_move(request_id, "confirm_failed", detail)

    def confirm_completed(self, request_id: str, *, by: str, evidence: str) -> RequestState:
        detail = _said(by, evidence=_required(evidence, "evidence"))
        return self._request_move(request_id, "confirm_completed", detail)

    # -- driving the nodes ------------------------------------------------------------------

    def step(self, request_id: str) -> list[Movement]:
        """Advance every node that can move by one move (one executor call at most each),
        in plan order; what moved, including the wakes and request moves that followed."""
        _, nodes = self._read(request_id)
        moved: list[Movement] = []
        for name, row in nodes.items():
            moved += self._advance(request_id, name, row.version)
        return moved

    def run(self, request_id: str, *, max_steps: int = 1000) -> RequestState:
        """``step`` until nothing moves (or ``max_steps``, 1 to ``MAX_STEPS``); the
        request's state then."""
        arguments.count(max_steps, "max_steps", least=1, most=MAX_STEPS)
        for _ in range(max_steps):
            if not self.step(request_id):
                break
        return RequestState(self.request(request_id).state)

    def sign(self, request_id: str, node: str, *, by: str) -> NodeState:
        """The external signer signed: awaiting_signature -> submitting, and the engine
        sends the transaction at once. Refused while the request is not executing
        unhindered (a node failed: the next step abandons the unsent node)."""
        with self._session(request_id) as s:
            row = s.node(node)
        if self._send(request_id, row, "sign", SIGNER, _said(by)) is None:
            state = self.request(request_id).state
            raise TransferRefused(
                f"request '{request_id}' is {state}; the signature for '{node}' is accepted "
                "only while the request executes and no node failed"
            )
        return self.nodes(request_id)[node].state

    def refuse_signature(self, request_id: str, node: str, *, by: str, reason: str) -> NodeState:
        """The signer refused: the node fails (nothing was sent)."""
        detail = _said(by, evidence=_required(reason, "reason"))
        with self._session(request_id) as s:
            s.move_node(s.node(node), "fail", SIGNER, detail)
        return NodeState(s.node(node).state)

    def retry(self, request_id: str, node: str, *, reason: str) -> NodeState:
        """Put a node that sent nothing yet (preparing, or awaiting a signature that will
        not come, e.g. it expired) back to ready; a later step dispatches it afresh."""
        detail = _said(self.engine_id, reason=_required(reason, "reason"))
        with self._session(request_id) as s:
            s.move_node(s.node(node), "retry", EXECUTOR, detail)
        return NodeState(s.node(node).state)

    def skip(self, request_id: str, node: str, *, by: str, reason: str) -> NodeState:
        """The planner decided a conditional node is not needed (blocked or ready only:
        nothing of it ran). Skipped counts as done, so its successors may wake."""
        detail = _said(by, reason=_required(reason, "reason"))
        with self._session(request_id) as s:
            if s.request.state != RequestState.EXECUTING:
                raise TransferRefused(
                    f"request '{request_id}' is {s.request.state}; nodes are skipped only "
                    "while it executes"
                )
            s.move_node(s.node(node), "skip", PLANNER, detail)
        return NodeState(s.node(node).state)

    def reconcile(
        self, request_id: str, node: str, evidence: str, *, by: str, note: str = ""
    ) -> NodeState:
        """What the venue's records show about an ``unknown`` node: ``"submitted"``,
        ``"completed"`` or ``"failed"``. The only way out of ``unknown``; refused (with
        ``InvalidStateTransition``, nothing written) for a node in any other state."""
        trigger = _RECONCILE.get(evidence) if isinstance(evidence, str) else None
        if trigger is None:
            raise TransferRefused(
                f"reconcile evidence must be one of {', '.join(_RECONCILE)}; "
                f"got {describe(evidence)}"
            )
        with self._session(request_id) as s:
            s.move_node(s.node(node), trigger, RECONCILER, _said(by, evidence=evidence, note=note))
        return NodeState(s.node(node).state)

    def complete_manual(self, request_id: str, node: str, *, by: str) -> RequestState:
        """An operator did the manual action of gate ``node``: record it on the gate,
        resume a waiting request, and drive the gate through its executor (``ManualGate``
        completes it). Returns the request's state afterwards."""
        _required(node, "node")
        if not node.startswith(self.manual_prefix):
            raise TransferRefused(
                f"'{node}' is not a manual gate (its name does not start with "
                f"'{self.manual_prefix}'); it completes through its executor"
            )
        with self._session(request_id) as s:
            gate = s.node(node)
            if gate.state != NodeState.READY:
                raise TransferRefused(f"manual gate '{node}' is {gate.state}, not ready")
            if s.request.state == RequestState.WAITING_MANUAL_ACTION:
                s.move_request(
                    "resume", REQUEST_CALLS["resume"], _said(by, reason=f"did the action of {node}")
                )
            if s.mode is not Mode.DISPATCH:
                raise TransferRefused(
                    f"request '{request_id}' is {s.request.state} ({s.mode} mode); gate "
                    f"'{node}' can be passed only while the request executes unhindered"
                )
            data = {**gate.data, "manual": {"by": _required(by, "by"), "at": self.clock()}}
            trigger, actor = first_move(gate.context["kind"])
            s.move_node(gate, trigger, actor, {"by": self.engine_id, "approved_by": by}, data)
        while any(m.key == gate.key for m in self._advance(request_id, node)):
            pass
        return RequestState(self.request(request_id).state)

    # -- one node, one move -----------------------------------------------------------------

    def _advance(self, request_id: str, name: str, version: int | None = None) -> list[Movement]:
        """One move of node ``name`` (skipped when it moved since ``version`` was read)."""
        request, nodes = self._read(request_id)
        row = nodes[name]
        if version is not None and row.version != version:
            return []
        mode = request_mode(request.state, (n.state for n in nodes.values()))
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
            detail = _said(self.engine_id, evidence=reply.evidence)
            return self._send(request_id, row, "submit", EXECUTOR, detail, reply) or []
        trigger = _PREPARE.get(reply.answer or "", "fail")
        return self._report(request_id, row, trigger, EXECUTOR, reply)

    def _abandon(self, request_id: str, row: Row) -> list[Movement]:
        why = "abandoned before anything was sent: another node of the plan failed"
        detail = _said(self.engine_id, evidence=why)
        return self._apply(request_id, row, "fail", EXECUTOR, detail)

    def _send(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        reply: _Reply | None = None,
    ) -> list[Movement] | None:
        """Move into submitting and mark the node sent in one fenced transaction, then
        call ``submit`` once. So a node is never submitting without a call behind it.
        None when the request may not start sending (or the node moved meanwhile)."""
        data = {**row.data, "sent": {"by": self.engine_id, "at": self.clock()}}
        if reply is not None:
            data["last"] = reply.record(self.clock())
        try:
            with self._session(request_id) as s:
                if not allowed(s.mode, row.state, trigger, actor):
                    return None
                sending = s.move_node(row, trigger, actor, detail, data)
        except StaleWrite:
            return None
        answer = self._ask(request_id, sending, "submit")
        outcome = _SUBMIT.get(answer.answer or "", "lose_track")
        return s.moved + self._report(request_id, sending, outcome, EXECUTOR, answer)

    def _recover_send(self, request_id: str, row: Row) -> list[Movement]:
        """A submitting node found by a step: its ``submit`` call is still out, or never
        reported back (a crash). After ``submit_timeout`` it goes unknown, never resent."""
        sent = row.data.get("sent")
        if sent is not None and self.clock() - sent["at"] < self.submit_timeout:
            return []
        who = f"by {sent['by']} " if sent else ""
        why = (
            f"submit() started {who}did not report back within {self.submit_timeout:g}s; "
            "the money may have moved"
        )
        detail = _said(self.engine_id, evidence=why)
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
        trigger = _OBSERVE.get(reply.answer or "", "lose_track")
        return self._report(request_id, row, trigger, OBSERVER, reply)

    def _ask(self, request_id: str, row: Row, call: str) -> _Reply:
        """Call the node's executor outside any transaction; an exception is an answer."""
        method = getattr(self.executors[row.data["executor"]], call)
        try:
            answer = method(PlanNode.of(request_id, row))
        except Exception as error:
            return _Reply(call, None, f"{type(error).__name__}: {message_of(error)}")
        if not isinstance(answer, str):
            return _Reply(call, None, f"answered {describe(answer)}, not one of the answers")
        return _Reply(call, storable_text(answer, 200), None)

    def _report(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        reply: _Reply,
    ) -> list[Movement]:
        data = {**row.data, "last": reply.record(self.clock())}
        detail = _said(self.engine_id, evidence=reply.evidence)
        return self._apply(request_id, row, trigger, actor, detail, data)

    def _apply(
        self,
        request_id: str,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        data: Mapping[str, Any] | None = None,
    ) -> list[Movement]:
        """Move ``row`` if the request is (still) in a mode that allows the move
        (``transfer_policy``) and nobody moved the node since it was read; else nothing."""
        try:
            with self._session(request_id) as s:
                if not allowed(s.mode, row.state, trigger, actor):
                    return []
                s.move_node(row, trigger, actor, detail, data)
        except StaleWrite:
            return []
        return s.moved

    # -- transactions -----------------------------------------------------------------------

    def _request_move(
        self, request_id: str, trigger: str, detail: Mapping[str, Any]
    ) -> RequestState:
        """One API call on the request, made as the actor ``REQUEST_CALLS`` names."""
        with self._session(request_id) as s:
            s.move_request(trigger, REQUEST_CALLS[trigger], detail)
        return RequestState(s.request.state)

    @contextmanager
    def _session(self, request_id: str) -> Iterator[_Session]:
        """One transaction over a request and its nodes; it settles (wakes, frontier,
        derivation) before committing, and fires the callbacks after the commit."""
        _required(request_id, "request_id")
        with self.store.transaction() as tx:
            session = _Session(self, tx, request_id)
            yield session
            session.settle()
        self._fire(request_id, session.calls)

    def _read(self, request_id: str) -> tuple[Row, dict[str, Row]]:
        _required(request_id, "request_id")
        with self.store.transaction() as tx:
            session = _Session(self, tx, request_id)
        return session.request, session.nodes

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

    # -- plan validation --------------------------------------------------------------------

    def _validate_plan(
        self, request_id: str, plan: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The plan as stored (every key present), or ``PlanError`` with every problem."""
        kinds = self.node_spec.context["kind"].values
        nodes, problems = validate_plan(request_id, plan, kinds, self.executors)
        if problems:
            raise PlanError(request_id, problems)
        return nodes


class _Session:
    """A request and its nodes inside one transaction, with the moves made so far."""

    def __init__(self, engine: TransferEngine, tx: Transaction, request_id: str) -> None:
        self.engine = engine
        self.tx = tx
        self.request_id = request_id
        request = tx.get(REQUEST, request_id)
        if request is None:
            raise UnknownTransfer(f"no transfer request '{request_id}'")
        self.request = request
        self.nodes = {row.data["name"]: row for row in tx.scope(NODE, request_id)}
        self.moved: list[Movement] = []
        self.calls: list[tuple[str, Mapping[str, Any]]] = []

    @property
    def mode(self) -> Mode:
        return request_mode(self.request.state, (n.state for n in self.nodes.values()))

    def node(self, name: str) -> Row:
        _required(name, "node")
        try:
            return self.nodes[name]
        except KeyError:
            raise UnknownTransfer(
                f"request '{self.request_id}' has no node '{name}'; nodes: {', '.join(self.nodes)}"
            ) from None

    def signature(self) -> Signature:
        deriver = self.engine.deriver
        triples = [
            (r.data["name"], r.state, r.data["has_side_effect"]) for r in self.nodes.values()
        ]
        return deriver.alphabet.signature(deriver.kinds_of(triples))

    def move_node(
        self,
        row: Row,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any],
        data: Mapping[str, Any] | None = None,
    ) -> Row:
        mode = self.mode
        moved = self.tx.move(row, trigger, actor=actor, detail=detail, data=data)
        if not allowed(mode, row.state, trigger, actor):
            raise TransferRefused(
                f"request '{self.request_id}' is {self.request.state} ({mode} mode): the engine "
                f"does not move node '{row.data['name']}' from {row.state} by {trigger} as "
                f"{actor} now (machines.systems.transfer_policy)"
            )
        self.nodes[moved.data["name"]] = moved
        self._record(row, moved, trigger, actor)
        return moved

    def move_request(self, trigger: str, actor: str, detail: Mapping[str, Any]) -> Row:
        """A request move under the guard context the nodes imply, with the seed's
        post-transition handling: reservation and callback from the new state's tags."""
        engine, before = self.engine, self.request
        context = engine.deriver.context(self.signature())
        dest = engine.request_spec.step(before.state, trigger, actor=actor, **context)
        tags = engine.request_spec.states[dest].tags
        data = dict(before.data)
        for tag, reservation in _RESERVATION_BY_TAG.items():
            if tag in tags:
                data["reservation"] = reservation
        if engine.request_spec.is_terminal(dest):  # a finished request's data never changes
            data["current_frontier"] = []
        self.request = self.tx.move(
            before, trigger, actor=actor, context=context, detail=detail, data=data
        )
        self._record(before, self.request, trigger, actor)
        for tag, callback in _CALLBACK_BY_TAG.items():
            if tag in tags:
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
        """Wake every blocked node whose predecessors are ALL done (completed or skipped)."""
        done = self.engine.done_states
        woken = []
        for name, row in list(self.nodes.items()):
            after = row.data["predecessors"]
            if row.state == NodeState.BLOCKED and all(self.nodes[p].state in done for p in after):
                reason = "every predecessor is completed or skipped"
                self.move_node(row, "wake", PLANNER, _said(self.engine.engine_id, reason=reason))
                woken.append(name)
        return woken

    def _derive(self) -> None:
        """Apply the derived request state when it is a legal move for the derivation's
        actor under the derived context; otherwise leave the request as it is."""
        engine = self.engine
        derivation = engine.deriver.derivation
        state = self.request.state
        if state not in derivation.applied_in:
            return
        signature = self.signature()
        decision = engine.deriver.decide(signature)
        if decision.result is None or decision.result == state:
            return
        context = engine.deriver.context(signature)
        for t in engine.request_spec.transitions:
            if t.source != state or t.dest != decision.result or derivation.actor not in t.actors:
                continue
            try:
                engine.request_spec.step(state, t.trigger, actor=derivation.actor, **context)
            except InvalidStateTransition:
                continue
            detail = {"by": engine.engine_id, "rule": decision.rule}
            self.move_request(t.trigger, derivation.actor, detail)
            return

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


# -- helpers --------------------------------------------------------------------------------


def _said(by: str, **more: str) -> dict[str, Any]:
    """An audit detail: who (``by``) plus the non-empty reasons or evidence (strings)."""
    detail = {"by": _required(by, "by")}
    for what, text in more.items():
        if not isinstance(text, str):
            raise TransferRefused(f"'{what}' must be a string; got {describe(text)}")
        if text:
            detail[what] = text
    return detail


def _required(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TransferRefused(f"'{what}' must be a non-empty string; got {describe(value)}")
    return value


def _check_executors(executors: Mapping[str, object]) -> None:
    for name, executor in executors.items():
        missing = [
            m for m in ("prepare", "submit", "observe") if not callable(getattr(executor, m, None))
        ]
        if missing:
            raise TransferConfigError(
                f"executor '{name}' ({type(executor).__name__}) lacks {', '.join(missing)}; "
                "an executor implements prepare, submit and observe"
            )


def _check_callbacks(callbacks: Mapping[str, object]) -> None:
    for name, callback in callbacks.items():
        if name not in CALLBACKS:
            raise TransferConfigError(
                f"unknown callback '{name}'; the engine fires: {', '.join(CALLBACKS)}"
            )
        if not callable(callback):
            raise TransferConfigError(f"callback '{name}' is not callable: {callback!r}")
