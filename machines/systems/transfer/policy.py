"""Which node moves the transfer engine and the people around it make, in which request mode.

The node machine says which moves exist; this table says when the *engine* makes them:
what it dispatches while the plan can still finish, what it abandons once a node failed,
what it still follows in ``manual_intervention``, and what people (signers, reconcilers,
operators) may do at any time. The engine checks every node move against it, and the
exhaustive explorer (``machines.explore.transfer``) enumerates it, so what the explorer
proves is about the engine's own rules, not a copy of them. Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from machines.spec.states import NodeState as N
from machines.spec.states import RequestState

# Actor names of spec/request.yaml and spec/node.yaml.
SYSTEM, TIMER, OPERATOR = "system", "timer", "operator"
PLANNER, EXECUTOR, SIGNER, OBSERVER, RECONCILER = (
    "planner",
    "executor",
    "signer",
    "observer",
    "reconciler",
)


class Mode(StrEnum):
    """What the engine may do with a request's nodes, from the request's state."""

    DISPATCH = "dispatch"  # executing, nothing failed: new work may start
    HALT = "halt"  # executing, a node failed: no new work; unsent work is abandoned
    FOLLOW = "follow"  # manual_intervention: money already in flight is still watched
    IDLE = "idle"  # any other state: the nodes are left alone


STOPPED = frozenset({N.FAILED, N.CANCELLED})
"""Node states that mean the plan cannot finish as planned."""


def request_mode(request_state: str, node_states: Iterable[str]) -> Mode:
    if request_state == RequestState.EXECUTING:
        return Mode.HALT if any(s in STOPPED for s in node_states) else Mode.DISPATCH
    if request_state == RequestState.MANUAL_INTERVENTION:
        return Mode.FOLLOW
    return Mode.IDLE


class Via(StrEnum):
    """How a node move comes about."""

    STEP = "step"  # a step of the engine: its dispatch, or its executor's answer
    PERSON = "person"  # an API call by a signer, reconciler or planner, one node at a time
    SETTLE = "settle"  # inside every transaction, while the request executes (wake)
    CANCEL = "cancel"  # part of an operator's cancellation of the whole request
    MANUAL = "manual"  # an operator passing a manual gate (complete_manual)


@dataclass(frozen=True)
class NodeMove:
    """One kind of node move and the request modes in which it may be made.

    ``gates`` says whether a manual gate may make it: a gate is dispatched only by
    ``complete_manual`` and its executor (``ManualGate``) always lets an approved gate
    through, so the executor answers that refuse or delay do not apply to it. ``kind``
    limits a move to nodes of one kind (how the engine dispatches each kind).
    """

    source: N
    trigger: str
    actor: str
    modes: frozenset[Mode]
    via: Via
    gates: bool = True
    kind: str | None = None


DISPATCHING = frozenset({Mode.DISPATCH})
HALTED = frozenset({Mode.HALT})
EXECUTING = frozenset({Mode.DISPATCH, Mode.HALT})
FOLLOWING = frozenset({Mode.DISPATCH, Mode.HALT, Mode.FOLLOW})
CANCELLED = frozenset({Mode.IDLE})
ALWAYS = frozenset(Mode)

_STEP, _PERSON = Via.STEP, Via.PERSON

NODE_MOVES: tuple[NodeMove, ...] = (
    NodeMove(N.BLOCKED, "wake", "planner", EXECUTING, Via.SETTLE),
    NodeMove(N.BLOCKED, "skip", "planner", EXECUTING, _PERSON),
    NodeMove(N.READY, "skip", "planner", EXECUTING, _PERSON),
    NodeMove(N.BLOCKED, "cancel", "operator", CANCELLED, Via.CANCEL),
    NodeMove(N.READY, "cancel", "operator", CANCELLED, Via.CANCEL),
    NodeMove(N.READY, "prepare", "executor", DISPATCHING, _STEP, gates=False, kind="action"),
    NodeMove(N.READY, "start_observing", "observer", DISPATCHING, _STEP, False, "observe"),
    NodeMove(N.READY, "prepare", "executor", DISPATCHING, Via.MANUAL, kind="action"),
    NodeMove(N.READY, "start_observing", "observer", DISPATCHING, Via.MANUAL, kind="observe"),
    NodeMove(N.READY, "fail", "executor", HALTED, _STEP),  # abandoned: the plan failed
    NodeMove(N.PREPARING, "submit", "executor", DISPATCHING, _STEP),
    NodeMove(N.PREPARING, "request_signature", "executor", DISPATCHING, _STEP, gates=False),
    NodeMove(N.PREPARING, "retry", "executor", DISPATCHING, _STEP, gates=False),
    NodeMove(N.PREPARING, "retry", "executor", ALWAYS, _PERSON, gates=False),
    NodeMove(N.PREPARING, "fail", "executor", DISPATCHING, _STEP, gates=False),
    NodeMove(N.PREPARING, "fail", "executor", HALTED, _STEP),  # abandoned
    NodeMove(N.PREPARING, "fail", "executor", CANCELLED, Via.CANCEL),
    NodeMove(N.AWAITING_SIGNATURE, "sign", "signer", DISPATCHING, _PERSON),
    NodeMove(N.AWAITING_SIGNATURE, "fail", "signer", ALWAYS, _PERSON),
    NodeMove(N.AWAITING_SIGNATURE, "retry", "executor", ALWAYS, _PERSON),
    NodeMove(N.AWAITING_SIGNATURE, "fail", "executor", HALTED, _STEP),  # abandoned
    NodeMove(N.AWAITING_SIGNATURE, "fail", "executor", CANCELLED, Via.CANCEL),
    # The answer to a submit or observe call lands whatever happened meanwhile: the
    # call is out, so its outcome is recorded in every mode.
    NodeMove(N.SUBMITTING, "accept", "executor", ALWAYS, _STEP, gates=False),
    NodeMove(N.SUBMITTING, "complete", "executor", ALWAYS, _STEP),
    NodeMove(N.SUBMITTING, "fail", "executor", ALWAYS, _STEP, gates=False),
    NodeMove(N.SUBMITTING, "lose_track", "executor", ALWAYS, _STEP),  # timeout, crash
    NodeMove(N.SUBMITTED, "start_observing", "observer", FOLLOWING, _STEP, gates=False),
    NodeMove(N.SUBMITTED, "complete", "observer", ALWAYS, _STEP, gates=False),
    NodeMove(N.SUBMITTED, "fail", "observer", ALWAYS, _STEP, gates=False),
    NodeMove(N.SUBMITTED, "lose_track", "observer", ALWAYS, _STEP, gates=False),
    NodeMove(N.OBSERVING, "complete", "observer", ALWAYS, _STEP),
    NodeMove(N.OBSERVING, "fail", "observer", ALWAYS, _STEP, gates=False),
    NodeMove(N.OBSERVING, "lose_track", "observer", ALWAYS, _STEP),
    NodeMove(N.UNKNOWN, "reconcile_submitted", "reconciler", ALWAYS, _PERSON),
    NodeMove(N.UNKNOWN, "reconcile_completed", "reconciler", ALWAYS, _PERSON),
    NodeMove(N.UNKNOWN, "reconcile_failed", "reconciler", ALWAYS, _PERSON),
)


def dispatchable(kind: str) -> bool:
    """Whether the engine has a first move for a ready node of ``kind`` (a definition may
    add a kind the engine does not know how to run)."""
    return any(m.source == N.READY and m.via is Via.STEP and m.kind == kind for m in NODE_MOVES)


def first_move(kind: str) -> tuple[str, str]:
    """(trigger, actor) by which the engine dispatches a ready node of ``kind``: action
    nodes start preparing, observe nodes start watching."""
    for m in NODE_MOVES:
        if m.source == N.READY and m.via is Via.STEP and m.kind == kind:
            return m.trigger, m.actor
    raise LookupError(f"the engine has no way to dispatch a node of kind '{kind}'")


def _modes_by_move(moves: Iterable[NodeMove]) -> Mapping[tuple[str, str, str], frozenset[Mode]]:
    out: dict[tuple[str, str, str], frozenset[Mode]] = {}
    for m in moves:
        key = (m.source.value, m.trigger, m.actor)
        out[key] = out.get(key, frozenset()) | m.modes
    return MappingProxyType(out)


MODES_BY_MOVE = _modes_by_move(NODE_MOVES)


def allowed(mode: Mode, source: str, trigger: str, actor: str) -> bool:
    """Whether the engine may move a node from ``source`` by ``trigger`` as ``actor`` while
    its request is in ``mode``. A move missing from the table is never allowed."""
    return mode in MODES_BY_MOVE.get((source, trigger, actor), frozenset())


REQUEST_CALLS: Mapping[str, str] = MappingProxyType(
    {
        "validate": "system",
        "fail_validation": "system",
        "request_approval": "system",
        "approve": "operator",
        "reject": "operator",
        "expire": "timer",
        "start": "system",
        "fail_before_start": "system",
        "cancel": "operator",
        "resume": "operator",
        "confirm_failed": "operator",
        "confirm_completed": "operator",
    }
)
"""Request triggers the engine's API makes, by the actor it makes them as; every other
request move is the derivation's."""
