"""What an executor sees, implements and hands back, and what each answer means.

An executor talks to one venue. The engine calls it outside any transaction, so a slow or
crashing venue never holds the store; whatever it does (answers, raises, answers nonsense)
becomes a ``Reply`` the node's data records, and each answer maps to exactly one node move.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from machines.errors import message_of, storable_text
from machines.spec.jsonvalue import describe
from machines.spec.states import NodeState
from machines.store.records import Row
from machines.systems.transfer.errors import TransferConfigError, TransferError

PrepareAnswer = Literal["sign", "submit", "retry"]
SubmitAnswer = Literal["accepted", "completed", "failed", "unknown"]
ObserveAnswer = Literal["completed", "failed", "pending", "unknown"]

ON_PREPARE = {"sign": "request_signature", "retry": "retry"}
ON_SUBMIT = {
    "accepted": "accept",
    "completed": "complete",
    "failed": "fail",
    "unknown": "lose_track",
}
ON_OBSERVE = {"completed": "complete", "failed": "fail", "unknown": "lose_track"}
"""The node trigger each answer leads to. ``"submit"`` (prepare) and ``"pending"``
(observe) are handled apart; any other answer fails a node that sent nothing and moves a
node whose call is out to ``unknown``."""
_NODE_STATES = frozenset(state.value for state in NodeState)
"""The node states the engine drives: the bundled definition's."""


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
        """The node of ``row``; ``TransferError`` when its state is one the store's
        definition adds, which the engine does not drive (outsider batch 30: a raw
        ``ValueError``)."""
        d = row.data
        if row.state not in _NODE_STATES:
            raise TransferError(
                f"node '{d.get('name')}' of request '{request_id}' is in '{row.state}', a "
                "state the store's node definition adds: the engine neither reads nor moves "
                "a node there (the owner's own code does)"
            )
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


@dataclass(frozen=True)
class Reply:
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


def ask(executor: Executor, call: str, node: PlanNode) -> Reply:
    """Call ``executor.<call>(node)``; an exception or an answer that is no string is a
    reply too, never an error of the caller's."""
    method = getattr(executor, call)
    try:
        answer = method(node)
    except Exception as error:
        return Reply(call, None, f"{type(error).__name__}: {message_of(error)}")
    if not isinstance(answer, str):
        return Reply(call, None, f"answered {describe(answer)}, not one of the answers")
    return Reply(call, storable_text(answer, 200), None)


def check_executors(executors: Mapping[str, object]) -> None:
    for name, executor in executors.items():
        missing = [
            m for m in ("prepare", "submit", "observe") if not callable(getattr(executor, m, None))
        ]
        if missing:
            raise TransferConfigError(
                f"executor '{name}' ({type(executor).__name__}) lacks {', '.join(missing)}; "
                "an executor implements prepare, submit and observe"
            )
