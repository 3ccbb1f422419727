"""The world outside a transfer engine, played by the transfer suite: the venue, its gate
desk for manual gates, the limits service and the receiver of callbacks.

The venue answers ``prepare``, ``submit`` and ``observe`` as the suite draws (``ANSWERS``:
the first answer of each call moves the plan on, the rest are twists, ``MEANWHILE`` among
them); the gate desk passes a gate only once an operator did. Both write every call and
answer into the suite's ``Ledger``, and so do the callbacks and reservation announcements
the engine delivers: that is what the suite judges by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from machines.errors import InvalidArgument
from machines.spec.jsonvalue import describe
from machines.systems.transfer import (
    CALLBACKS,
    ObserveAnswer,
    PlanNode,
    PrepareAnswer,
    SubmitAnswer,
)
from machines.testing.contract import AdapterContractError
from machines.testing.faults import SimulatedCrash
from machines.testing.transfer.oracle import Ledger

# What the scripted venue may answer; an Exception subclass is raised instead.
MEANWHILE = "meanwhile"
"""A twist of every call: the other engine steps the same request while this call is out,
then the call answers as ``AFTER_MEANWHILE`` says. An engine that does not fence its
writes (compare-and-set) acts on what it read before: a resend, a rewritten history."""
AFTER_MEANWHILE = {"prepare": "submit", "submit": "accepted", "observe": "pending"}
PREPARE: Sequence[str | type[BaseException]] = (
    "submit",
    "sign",
    "retry",
    RuntimeError,
    MEANWHILE,
)
SUBMIT: Sequence[str | type[BaseException]] = (
    "accepted",
    "completed",
    "failed",
    "unknown",
    ConnectionError,
    SimulatedCrash,
    MEANWHILE,
)
OBSERVE: Sequence[str | type[BaseException]] = (
    "completed",
    "failed",
    "pending",
    "unknown",
    TimeoutError,
    MEANWHILE,
)

ANSWERS: Mapping[str, Sequence[str | type[BaseException]]] = {
    "prepare": PREPARE,
    "submit": SUBMIT,
    "observe": OBSERVE,
}
"""Per venue call, its answers; the first one moves the plan on, the rest are twists."""


Callback = Callable[[str, Mapping[str, Any]], None]


ENDINGS = frozenset({"request_completed", "request_failed"})
"""The callbacks that announce a request's end: the process may die right after one."""


class Venue:
    """The world outside the engine, played by the suite: the executor every plan names
    (``"venue"``: ``prepare``, ``submit``, ``observe``), the desk where operators pass
    manual gates (``gate``, the executor of ``"gate"`` nodes), the limits service that
    holds each request's reservation (``reservation``) and the receiver of the engine's
    callbacks (``callback``, or ``callbacks`` ready for ``TransferEngine``). It answers as
    Hypothesis draws and writes everything it sees into the suite's ``Ledger``.

    A node handed to ``prepare``/``submit``/``observe`` is anything with ``request_id``
    and ``name`` attributes (a ``PlanNode`` is one)."""

    def __init__(
        self,
        answer: Callable[[str, Any], str | type[BaseException]],
        ledger: Ledger | None = None,
        announced: Callable[[], None] | None = None,
    ) -> None:
        if not callable(answer) or (announced is not None and not callable(announced)):
            raise InvalidArgument(
                f"Venue: answer (and announced) must be functions, not {describe(answer)}"
            )
        if ledger is not None and not isinstance(ledger, Ledger):
            raise InvalidArgument(f"Venue: ledger must be a Ledger, not {describe(ledger)}")
        self.answer = answer
        self.ledger = ledger if ledger is not None else Ledger()
        self.announced = announced or (lambda: None)
        self.gate = GateDesk(self.ledger)

    def _call(self, call: str, node: Any) -> str:
        request, name = _identify(node, call)
        self.ledger.venue_call(request, name, call)
        try:
            answer = self.answer(call, node)
        except BaseException as escaped:  # another engine's step, run meanwhile, failed
            self.ledger.venue_escaped(request, name, call, escaped)
            raise
        if isinstance(answer, type):
            self.ledger.venue_answer(request, name, call, f"{answer.__name__} raised")
            raise answer(f"scripted {call} fault")
        self.ledger.venue_answer(request, name, call, answer)
        return answer

    def prepare(self, node: PlanNode) -> PrepareAnswer:
        return self._call("prepare", node)  # type: ignore[return-value]

    def submit(self, node: PlanNode) -> SubmitAnswer:
        return self._call("submit", node)  # type: ignore[return-value]

    def observe(self, node: PlanNode) -> ObserveAnswer:
        return self._call("observe", node)  # type: ignore[return-value]

    def callback(self, name: str, request_id: str, payload: Mapping[str, Any]) -> None:
        """The engine fired callback ``name`` (one of ``CALLBACKS``) for ``request_id``."""
        self.ledger.callback(name, request_id, payload)
        if name in ENDINGS:
            self.announced()

    def reservation(self, request_id: str, what: str) -> None:
        """The engine released (``"released"``) or consumed (``"consumed"``) the
        reservation ``request_id`` held since it was submitted, and committed that: call
        it once, after the commit, as the request ends (see ``TransferAdapter``)."""
        self.ledger.reservation(request_id, what)
        self.announced()

    @property
    def callbacks(self) -> dict[str, Callback]:
        """Every callback name, bound to ``callback``: ``TransferEngine(..., callbacks)``."""
        return {name: partial(self.callback, name) for name in CALLBACKS}


class GateDesk:
    """The executor of manual gates (``"gate"`` nodes), played by the suite: it passes a
    gate (``prepare`` -> ``"submit"``, ``submit``/``observe`` -> ``"completed"``) only once an
    operator's ``complete_manual`` for it was accepted, and refuses (``"failed"``,
    ``"pending"``) otherwise. Every call is judged (rule ``gate-waits-for-operator``)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def _call(self, call: str, node: Any, passed: str, waiting: str) -> str:
        request, name = _identify(node, call)
        self.ledger.venue_call(request, name, call, desk=True)
        return passed if self.ledger.gate_passed(request, name) else waiting

    def prepare(self, node: PlanNode) -> PrepareAnswer:
        return self._call("prepare", node, "submit", "retry")  # type: ignore[return-value]

    def submit(self, node: PlanNode) -> SubmitAnswer:
        return self._call("submit", node, "completed", "failed")  # type: ignore[return-value]

    def observe(self, node: PlanNode) -> ObserveAnswer:
        return self._call("observe", node, "completed", "pending")  # type: ignore[return-value]


def _identify(node: Any, call: str) -> tuple[str, str]:
    request, name = getattr(node, "request_id", None), getattr(node, "name", None)
    if not isinstance(request, str) or not isinstance(name, str):
        raise AdapterContractError(
            f"the engine called venue.{call}() with a {type(node).__name__}; the venue "
            "needs a node with 'request_id' and 'name' (strings), e.g. a PlanNode"
        )
    return request, name
