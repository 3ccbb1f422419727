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
from collections.abc import Mapping, Sequence
from typing import Any

from machines.derive import Deriver
from machines.runtime.history import Clock, checked_clock
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.states import NodeState, RequestState
from machines.spec.vocabulary import DONE
from machines.store.records import Row, StaleWrite, Store
from machines.systems import arguments
from machines.systems.arguments import plain
from machines.systems.exactly_once import process_identity
from machines.systems.reliance import require_money_proved, require_reliable
from machines.systems.transfer.driver import Driver
from machines.systems.transfer.errors import PlanError, TransferConfigError, TransferRefused
from machines.systems.transfer.executor import Executor, PlanNode, check_executors
from machines.systems.transfer.plans import (
    APPROVED_BY,
    PLAN_DIGEST,
    node_key,
    node_rows,
    plan_digest,
    transfer_version,
    validate_plan,
)
from machines.systems.transfer.policy import (
    EXECUTOR,
    OPERATOR,
    PLANNER,
    RECONCILER,
    REQUEST_CALLS,
    SIGNER,
    Mode,
    dispatchable,
    first_move,
)
from machines.systems.transfer.session import (
    CALLBACKS,
    NODE,
    REQUEST,
    Callback,
    Entering,
    Movement,
    Session,
    remark,
    required,
    said,
    statement,
)

MAX_STEPS = 1_000_000
"""The most steps one ``run`` takes."""


_RECONCILE = {
    "submitted": "reconcile_submitted",
    "completed": "reconcile_completed",
    "failed": "reconcile_failed",
}


# -- the engine -----------------------------------------------------------------------------


class TransferEngine(Driver):
    """``TransferEngine(store, executors, callbacks)``: submit plans, move requests through
    approval, and ``run`` them; see the module docstring for the rules it keeps.

    ``executors`` maps the names plans use to ``Executor`` objects; ``callbacks`` maps
    names of ``CALLBACKS`` to ``callable(request_id, payload)``, called after the commit.
    ``clock`` stamps node data and times ``submit_timeout``: how long a ``submit`` call may
    stay out before a step declares its node unknown (a crashed or lost call; a reply that
    arrives later cannot overwrite that). A late reply that contradicts a final state the
    node was moved to meanwhile (money moved, for a node a reconciler failed; none did,
    for one a reconciler completed) is raised to the caller of ``step``
    (``TransferRefused`` naming it) and recorded nowhere else, since the node's state is
    final: log it, and let a person check the venue's records. ``engine_id`` is the actor
    id of the engine's own moves (``detail["by"]``); by default host, process and a
    random suffix.
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
        store = arguments.store_with(store, REQUEST, "TransferEngine")
        specs = store.specs()
        if NODE not in specs:
            raise TransferConfigError("the store needs both the 'request' and 'node' machines")
        require_reliable(specs, NODE, "TransferEngine")
        require_money_proved(specs[REQUEST], specs[NODE], "TransferEngine")
        if not isinstance(executors, Mapping) or not all(isinstance(n, str) for n in executors):
            raise TransferConfigError(
                f"executors must map names to executors, not {describe(executors)}"
            )
        if callbacks is not None and (
            not isinstance(callbacks, Mapping) or not all(isinstance(n, str) for n in callbacks)
        ):
            raise TransferConfigError(
                f"callbacks must map event names to functions, not {describe(callbacks)}"
            )
        self._started_plans = {}
        self.submit_timeout = arguments.seconds(submit_timeout, "submit_timeout")
        engine_id = arguments.optional_name(
            engine_id, "engine_id", "TransferEngine"
        )  # batch 46, c 11
        self.store = store
        self.executors = dict(executors)
        self.callbacks = dict(callbacks) if callbacks is not None else {}
        check_executors(self.executors)
        _check_callbacks(self.callbacks)
        self.clock = checked_clock(clock, "TransferEngine", consequence="nothing was written")
        self.engine_id = engine_id or process_identity("engine:")
        self.request_spec = specs[REQUEST]
        self.node_spec: MachineSpec = specs[NODE]
        self.deriver = Deriver.build(self.request_spec, self.node_spec)
        self.manual_prefix = self.deriver.derivation.manual_prefix
        self.done_states = self.node_spec.states_tagged(DONE)
        self.entering = Entering.of(self.request_spec)

    # -- reading ----------------------------------------------------------------------------

    def request(self, request_id: str) -> Row:
        """The stored request row: state and data (plan, reservation, current_frontier)."""
        return self._read(request_id)[0]

    def nodes(self, request_id: str) -> dict[str, PlanNode]:
        """The request's nodes by name, in plan order."""
        request_id = required(request_id, "request_id")
        return {
            name: PlanNode.of(request_id, row) for name, row in self._read(request_id)[1].items()
        }

    def transfer_version(self, request_id: str) -> int:
        """The version a person's decision on the request names (``seen=``): its request's
        and its nodes' versions together (``plans.transfer_version``), so a decision is
        refused when any of them moved since the person read the transfer."""
        request, nodes = self._read(request_id)
        return transfer_version(request, nodes.values())

    def guard_context(self, request_id: str) -> dict[str, str]:
        """The context the request's next move is judged under: its own, with what its
        nodes imply now (``side_effects``), as every request move of the engine uses it."""
        request_id = required(request_id, "request_id")
        with self.store.transaction() as tx:
            session = Session(self, tx, request_id)
            return {**session.request.context, **self.deriver.context(session.signature())}

    def ready_gates(self, request_id: str) -> list[str]:
        """The manual gates that wait for an operator's action (ready), in plan order."""
        return [
            name
            for name, row in self._read(request_id)[1].items()
            if name.startswith(self.manual_prefix) and row.state == NodeState.READY
        ]

    # -- the request's lifecycle ------------------------------------------------------------

    def submit(self, request_id: str, plan: Sequence[Mapping[str, Any]]) -> RequestState:
        """Record the request (received, reservation held) and its nodes (blocked) in one
        transaction, after validating the whole plan. Submitting the same plan again is a
        no-op; a different plan under the same id is a ``PlanError``."""
        request_id = required(request_id, "request_id")  # the checked text is what is used
        nodes = self._validate_plan(request_id, plan)
        with self.store.transaction() as tx:
            data = {"plan": nodes, "reservation": "held", "current_frontier": []}
            row, created = tx.insert(REQUEST, request_id, data=data)
            if not created:
                if row.data.get("plan") != nodes:
                    raise PlanError(request_id, ["a different plan exists under this id"])
                return RequestState(row.state)
            for node, node_data in zip(nodes, node_rows(nodes), strict=True):
                key = node_key(request_id, node["name"])
                context = {"kind": node["kind"]}
                found, made = tx.insert(
                    NODE, key, scope=request_id, context=context, data=node_data
                )
                if not made and (found.scope, found.context, found.data, found.moves) != (
                    request_id,
                    context,
                    node_data,
                    0,
                ):
                    raise PlanError(
                        request_id,
                        [
                            f"a node row '{key}' was there before the request, and is not its "
                            "plan's untouched node (another's data, or moved already)"
                        ],
                    )
        return RequestState(row.state)

    def validate(self, request_id: str, *, problems: Sequence[str] = ()) -> RequestState:
        """The engine's input check: ``problems`` found by the caller fail the request
        (``fail_validation``); none validates it."""
        if isinstance(problems, str | bytes) or not isinstance(problems, Sequence):
            raise TransferRefused(
                f"validate: problems must be a list of texts, not {describe(problems)}"
            )
        said_problems = [statement(p, "validate: each problem") for p in problems]
        if said_problems:
            detail = {"by": self.engine_id, "problems": said_problems}
            return self._request_move(request_id, "fail_validation", detail)
        return self._request_move(request_id, "validate", {"by": self.engine_id})

    def request_approval(self, request_id: str) -> RequestState:
        return self._request_move(request_id, "request_approval", {"by": self.engine_id})

    def approve(
        self, request_id: str, *, by: str, reason: str = "", seen: int | None = None
    ) -> RequestState:
        """A person approves the request. ``seen`` here and in every person's call: the
        version the person decided on (``transfer_version``: the request's and its nodes'
        together; a node's own for ``sign`` and ``refuse_signature``), and ``StaleWrite``
        with nothing written if it moved."""
        return self._request_move(request_id, "approve", said(by, reason=reason), seen)

    def reject(
        self, request_id: str, *, by: str, reason: str = "", seen: int | None = None
    ) -> RequestState:
        return self._request_move(request_id, "reject", said(by, reason=reason), seen)

    def expire(self, request_id: str, *, by: str | None = None) -> RequestState:
        """The approval window closed (``by``: the timer's id, default the engine's)."""
        return self._request_move(request_id, "expire", said(by or self.engine_id))

    def fail_before_start(self, request_id: str, *, reason: str) -> RequestState:
        detail = said(self.engine_id, reason=reason)
        return self._request_move(request_id, "fail_before_start", detail)

    def start(self, request_id: str) -> RequestState:
        """approved -> executing; the nodes without predecessors wake in the same
        transaction and ``frontier_advanced`` fires."""
        with self._session(request_id) as s:
            detail = {"by": self.engine_id, PLAN_DIGEST: plan_digest(s.request.data.get("plan"))}
            s.move_request("start", REQUEST_CALLS["start"], detail)
            if moved := sorted(name for name, row in s.nodes.items() if row.moves):
                raise TransferRefused(  # rolls the start back
                    f"request '{request_id}' is not started, yet its node(s) {', '.join(moved)} "
                    "moved: they were moved outside the engine; nothing was started, and a "
                    "person must look (machines audit names them)"
                )
        return RequestState(s.request.state)

    def cancel(
        self, request_id: str, *, by: str, reason: str = "", seen: int | None = None
    ) -> RequestState:
        """Cancel a request before any money moved (the spec refuses it after). Nodes not
        started are cancelled; nodes being prepared or signed are abandoned (failed, with
        the cancellation as evidence); anything else is left as it stands."""
        detail = said(by, reason=reason)
        seen = arguments.seen(seen, "cancel: seen")
        with self._session(request_id) as s:
            _unchanged(s, seen)
            s.move_request("cancel", REQUEST_CALLS["cancel"], detail)
            for row in list(s.nodes.values()):
                if row.state in (NodeState.BLOCKED, NodeState.READY):
                    s.move_node(row, "cancel", OPERATOR, detail)
                elif row.state in (NodeState.PREPARING, NodeState.AWAITING_SIGNATURE):
                    why = f"the request was cancelled by {detail['by']} before anything was sent"
                    s.move_node(row, "fail", EXECUTOR, said(self.engine_id, evidence=why))
        return RequestState(s.request.state)

    def resume(
        self, request_id: str, *, by: str, reason: str = "", seen: int | None = None
    ) -> RequestState:
        """waiting_manual_action / manual_intervention -> executing. The derivation runs
        at once, so a request whose nodes still imply a stop goes straight back."""
        return self._request_move(request_id, "resume", said(by, reason=reason), seen)

    def confirm_failed(
        self, request_id: str, *, by: str, evidence: str, seen: int | None = None
    ) -> RequestState:
        detail = said(by, evidence=statement(evidence, "evidence"))
        return self._request_move(request_id, "confirm_failed", detail, seen)

    def confirm_completed(
        self, request_id: str, *, by: str, evidence: str, seen: int | None = None
    ) -> RequestState:
        detail = said(by, evidence=statement(evidence, "evidence"))
        return self._request_move(request_id, "confirm_completed", detail, seen)

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

    def sign(self, request_id: str, node: str, *, by: str, seen: int | None = None) -> NodeState:
        """The external signer signed: awaiting_signature -> submitting, and the engine
        sends the transaction at once. Refused while the request is not executing
        unhindered (a node failed: the next step abandons the unsent node). ``seen``: the
        node's version the signer signed (``StaleWrite`` if it moved since)."""
        request_id = required(request_id, "request_id")
        seen = arguments.seen(seen, "sign: seen")
        with self._session(request_id) as s:
            row = arguments.unchanged(s.node(node), seen)
        if self._send(request_id, row, "sign", SIGNER, said(by)) is None:
            state = self.request(request_id).state
            raise TransferRefused(
                f"request '{request_id}' is {state}; the signature for '{node}' is accepted "
                "only while the request executes and no node failed"
            )
        return self.nodes(request_id)[node].state

    def refuse_signature(
        self, request_id: str, node: str, *, by: str, reason: str, seen: int | None = None
    ) -> NodeState:
        """The signer refused: the node fails (nothing was sent). ``seen`` as for ``sign``."""
        detail = said(by, evidence=statement(reason, "reason"))
        seen = arguments.seen(seen, "refuse_signature: seen")
        with self._session(request_id) as s:
            s.move_node(arguments.unchanged(s.node(node), seen), "fail", SIGNER, detail)
        return NodeState(s.node(node).state)

    def retry(self, request_id: str, node: str, *, reason: str) -> NodeState:
        """Put a node that sent nothing yet (preparing, or awaiting a signature that will
        not come, e.g. it expired) back to ready; a later step dispatches it afresh."""
        detail = said(self.engine_id, reason=statement(reason, "reason"))
        with self._session(request_id) as s:
            s.move_node(s.node(node), "retry", EXECUTOR, detail)
        return NodeState(s.node(node).state)

    def skip(self, request_id: str, node: str, *, by: str, reason: str) -> NodeState:
        """The planner decided a conditional node is not needed (blocked or ready only:
        nothing of it ran). Skipped counts as done once what it waited for is done: its
        successors then wake, and not before (a skip leaves the plan, not its order)."""
        detail = said(by, reason=statement(reason, "reason"))
        node = required(node, "node")
        if node.startswith(self.manual_prefix):
            raise TransferRefused(
                f"'{node}' is a manual gate: only an operator passes it (complete_manual), "
                "and a skip would pass it with nobody's action recorded; cancel the request "
                "if the gate is not wanted"
            )
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
        evidence = plain(evidence) if isinstance(evidence, str) else evidence
        trigger = _RECONCILE.get(evidence) if isinstance(evidence, str) else None
        if trigger is None:
            raise TransferRefused(
                f"reconcile evidence must be one of {', '.join(_RECONCILE)}; "
                f"got {describe(evidence)}"
            )
        with self._session(request_id) as s:
            s.move_node(s.node(node), trigger, RECONCILER, said(by, evidence=evidence, note=note))
        return NodeState(s.node(node).state)

    def complete_manual(
        self,
        request_id: str,
        node: str,
        *,
        by: str,
        drive: bool = True,
        seen: int | None = None,
        reason: str = "",
    ) -> RequestState:
        """An operator did the manual action of gate ``node``: record it on the gate,
        resume a waiting request, and drive the gate through its executor (``ManualGate``
        completes it). Returns the request's state afterwards. ``drive=False`` leaves the
        driving to the engine that has the executors (its next ``step``): a desk, which
        has none, records the action and resumes only. ``seen``: the transfer's version
        the operator acted on (``transfer_version``; ``StaleWrite`` if it moved since).
        ``reason``: what the operator says they did, kept on the resume and on the gate's
        move."""
        node = required(node, "node")  # the checked text is what is used
        by = statement(by, "by")  # who passed the gate, said before anything is read
        arguments.flag(drive, "drive")
        reason = remark(reason, "complete_manual: reason")
        seen = arguments.seen(seen, "complete_manual: seen")
        if not node.startswith(self.manual_prefix):
            raise TransferRefused(
                f"'{node}' is not a manual gate (its name does not start with "
                f"'{self.manual_prefix}'); it completes through its executor"
            )
        with self._session(request_id) as s:
            _unchanged(s, seen)
            gate = s.node(node)
            if gate.state != NodeState.READY:
                raise TransferRefused(f"manual gate '{node}' is {gate.state}, not ready")
            s.refuse_early(node)
            did = f"did the action of {node}" + (f": {reason}" if reason else "")
            if s.request.state == RequestState.WAITING_MANUAL_ACTION:
                s.move_request("resume", REQUEST_CALLS["resume"], said(by, reason=did))
            if s.mode is not Mode.DISPATCH:
                raise TransferRefused(
                    f"request '{request_id}' is {s.request.state} ({s.mode} mode); gate "
                    f"'{node}' can be passed only while the request executes unhindered"
                )
            data = {**gate.data, "manual": {"by": statement(by, "by"), "at": self.clock()}}
            trigger, actor = first_move(gate.context["kind"])
            detail = {"by": self.engine_id, APPROVED_BY: by, "reason": did}
            s.move_node(gate, trigger, actor, detail, data)
        while drive and any(m.key == gate.key for m in self._advance(request_id, node)):
            pass
        return RequestState(self.request(request_id).state)

    # -- transactions -----------------------------------------------------------------------

    def _request_move(
        self,
        request_id: str,
        trigger: str,
        detail: Mapping[str, Any],
        seen: int | None = None,
    ) -> RequestState:
        """One API call on the request, made as the actor ``REQUEST_CALLS`` names, on the
        request as the caller saw it at version ``seen`` (if given)."""
        seen = arguments.seen(seen, f"{trigger}: seen")
        with self._session(request_id) as s:
            _unchanged(s, seen)
            s.move_request(trigger, REQUEST_CALLS[trigger], detail)
        return RequestState(s.request.state)

    # -- plan validation --------------------------------------------------------------------

    def _validate_plan(
        self, request_id: str, plan: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The plan as stored (every key present), or ``PlanError`` with every problem."""
        kinds = tuple(k for k in self.node_spec.context["kind"].values if dispatchable(k))
        nodes, problems = validate_plan(request_id, plan, kinds, self.executors)
        if problems:
            raise PlanError(request_id, problems)
        return nodes


def _unchanged(s: Session, seen: int | None) -> None:
    """Nothing of the transfer moved since the person read it at ``seen``
    (``transfer_version``), checked in the transaction that writes the decision; else
    ``StaleWrite``, nothing written."""
    now = transfer_version(s.request, s.nodes.values())
    if seen is not None and now != seen:
        raise StaleWrite(
            f"request {describe(s.request_id)} is at version {now} (its request and nodes "
            f"together), not the {seen} the decision was made on: it or one of its nodes "
            f"moved since (the request is {s.request.state}); nothing was written, read it "
            "again and decide again"
        )


def _check_callbacks(callbacks: Mapping[str, object]) -> None:
    for name, callback in callbacks.items():
        if name not in CALLBACKS:
            raise TransferConfigError(
                f"unknown callback '{name}'; the engine fires: {', '.join(CALLBACKS)}"
            )
        if not callable(callback):
            raise TransferConfigError(f"callback '{name}' is not callable: {describe(callback)}")
