"""A stateful Hypothesis suite for any transfer engine (seed 003), behind an adapter.

Two requests, each with a plan drawn from ``PLANS``: a single withdrawal followed by an
observation, and a plan with a parallel branch, a manual gate and a second movement of
money. The venue is scripted by Hypothesis as the engine calls it: ``prepare`` may ask
for a signature, retry, or raise; ``submit`` may accept, complete, fail, lose track,
raise, die after sending (``SimulatedCrash``), or let a second engine step the same
request while the call is out; ``observe`` may still be pending. Operators, signers,
planners and reconcilers act at random; store writes (and commits) fail or die, also
right after the engine announced a request's end; the clock jumps past the submit
timeout.

The suite judges by what it sees, never by what the engine says of itself: the venue,
the gate desk and the limits service are the suite's, the engine's callbacks and
reservations are delivered to it, and it knows every operation it asked for and what it
was told. After every step it checks the rules of
``machines.testing.transfer_oracle.RULES`` (nothing resent; money that may be moving never
released or given up, nor sent work without evidence; nodes in plan order, nothing new
after a failure, work in flight followed; gates only by an operator; completion only when
every node is done; callbacks and reservations once, together; a refusal changes nothing;
the engine's histories are legal chains of the bundled definitions) and reports the first
one broken, its name first. ``adapter.check()`` is an extra.

Point it at your own engine: subclass ``TransferSuite`` and override ``make_adapter``
with an adapter that implements every method of ``TransferAdapter``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from machines.errors import MachinesError
from machines.store import open_store
from machines.store.records import StoreError
from machines.systems.transfer import (
    CALLBACKS,
    ObserveAnswer,
    PlanNode,
    PrepareAnswer,
    SubmitAnswer,
    TransferEngine,
)
from machines.testing._harness.stores import FaultyStore, Specs, StoreWatch
from machines.testing.contract import Adapter, AdapterContractError, check_adapter
from machines.testing.coverage import Coverage
from machines.testing.faults import Fault, SimulatedCrash
from machines.testing.transfer_oracle import RULES, EngineHistory, Ledger
from machines.testing.transfer_scenarios import SCENARIOS, STARTS, Start
from machines.testing.verdict import Move, RuleBroken, bundled

__all__ = [
    "ENGINES",
    "OPERATIONS",
    "PLANS",
    "REQUEST_IDS",
    "RULES",
    "SUBMIT_TIMEOUT",
    "EngineHistory",
    "Fault",
    "GateDesk",
    "Move",
    "ReferenceTransfer",
    "RuleBroken",
    "SimulatedCrash",
    "StoreError",
    "TransferAdapter",
    "TransferSuite",
    "Venue",
    "plan_node",
]

LIVE = 2  # requests in progress at once; a new one is submitted when one ends
REQUEST_IDS = tuple(f"r{i}" for i in range(1, 9))
ENGINES = ("engine-a", "engine-b")
SUBMIT_TIMEOUT = 60.0


def plan_node(
    name: str, kind: str, side_effect: bool, *after: str, executor: str = "venue"
) -> dict[str, Any]:
    """One plan entry: ``plan_node("deposit", "action", True, "withdraw")``."""
    return {
        "name": name,
        "kind": kind,
        "has_side_effect": side_effect,
        "executor": executor,
        "after": list(after),
    }


PLANS: Mapping[str, Sequence[Mapping[str, Any]]] = {
    "withdraw": [
        plan_node("withdraw", "action", True),
        plan_node("withdraw_observe", "observe", False, "withdraw"),
    ],
    "parallel": [
        plan_node("quote", "observe", False),
        plan_node("convert", "action", False, "quote"),
        plan_node("withdraw", "action", True),
        plan_node("check", "observe", False),
    ],
    "branching": [  # a person reviews the quote while the withdrawal runs
        plan_node("fx_quote", "observe", False),
        plan_node("withdraw", "action", True),
        plan_node("manual_review", "action", False, "fx_quote", executor="gate"),
        plan_node("deposit", "action", True, "manual_review", "withdraw"),
    ],
}
NODES = sorted({n["name"] for plan in PLANS.values() for n in plan})

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
        self.answer = answer
        self.ledger = ledger if ledger is not None else Ledger()
        self.announced = announced or (lambda: None)
        self.gate = GateDesk(self.ledger)

    def _call(self, call: str, node: Any) -> str:
        request, name = _identify(node, call)
        self.ledger.venue_call(request, name, call)
        answer = self.answer(call, node)
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


class TransferAdapter(Adapter):
    """What the suite needs from a transfer engine. Every method is required: a subclass
    missing one fails at its ``class`` statement, naming it and its duty.

    Build the engine in ``TransferSuite.make_adapter(venue)`` so that it calls ``venue``
    for every plan node whose executor is ``"venue"``, delivers every callback to
    ``venue.callback(name, request_id, payload)``, and announces the end of every
    request's reservation to ``venue.reservation(request_id, "released" | "consumed")``
    once committed (the reservation is held from ``submit``; a real engine tells its
    limits service here): that is what the suite judges by. An engine that never
    announces its reservations fails at the first request that ends.
    Nodes whose executor is ``"gate"`` are manual gates (names start with ``manual_``),
    passed by the ``complete_manual`` operation, never by the venue; an engine that hands
    gates to an executor uses ``venue.gate``. Two engine instances (``ENGINES``) share
    one storage and step the same requests."""

    @abstractmethod
    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        """Perform one public operation by name on the request, as ``TransferEngine`` names
        them: ``submit`` (``plan=``), ``validate``, ``request_approval``, ``approve``,
        ``reject``, ``expire``, ``start``, ``fail_before_start``, ``cancel``, ``resume``,
        ``confirm_failed``, ``confirm_completed``, ``complete_manual``, ``sign``,
        ``refuse_signature``, ``retry``, ``skip``, ``reconcile`` (arguments: see
        ``OPERATIONS``). A refusal raises a ``machines.MachinesError`` (any subclass)
        having written nothing; a store fault raises what ``fail_next_write`` asked."""

    @abstractmethod
    def step(self, request_id: str, engine: str) -> None:
        """Advance the request once as engine instance ``engine`` (one of ``ENGINES``):
        each node that can move makes at most one move and one venue call."""

    @abstractmethod
    def request_state(self, request_id: str) -> str | None:
        """The request's state (a state of the bundled ``request`` definition), or None
        if the engine does not know the request. Used to choose what to do, never to
        judge."""

    @abstractmethod
    def node_states(self, request_id: str) -> dict[str, str]:
        """The request's nodes: name -> state. Used to choose what to do, never to judge."""

    @abstractmethod
    def history(self, request_id: str) -> EngineHistory | None:
        """Every move the engine recorded for the request and each of its nodes, oldest
        first (``EngineHistory`` of ``Move``), judged as legal chains of the bundled
        ``request`` and ``node`` definitions. Return None if the engine keeps no history:
        the suite then cannot judge it (nor see a node given up before its request ends)."""

    @abstractmethod
    def fingerprint(self) -> object:
        """Anything that changes whenever the engine writes (a dump of its storage, or a
        write counter): a refused operation must leave it equal."""

    @abstractmethod
    def advance_clock(self, seconds: float) -> None:
        """Move the engine's clock on; past ``SUBMIT_TIMEOUT`` a submit that never reported
        back must be declared unknown, never resent."""

    @abstractmethod
    def fail_next_write(self, how: Fault | None) -> None:
        """Make the engine's next storage write raise ``StoreError`` (``"error"``) or die
        with ``SimulatedCrash`` (``"crash"``), nothing of it written; None clears. An
        engine without a storage to break writes an explicit no-op: the suite then cannot
        test what a crash or a failed write leaves behind."""

    @abstractmethod
    def check(self) -> list[str]:
        """The implementation's own consistency checks, each problem described (``[]``
        when there is nothing to add): an extra, never the oracle."""


@dataclass
class ReferenceTransfer(TransferAdapter):
    """Two ``TransferEngine`` instances sharing one faulty memory (or given) store."""

    venue: Venue
    url: str = "memory://"
    coverage: Coverage | None = None
    specs: Specs = None
    now: float = 1_000.0
    store: FaultyStore = field(init=False)
    watch: StoreWatch = field(init=False)
    engines: dict[str, TransferEngine] = field(init=False)

    def __post_init__(self) -> None:
        self.store = FaultyStore(open_store(self.url, self.specs))
        self.watch = StoreWatch(self.store, self.coverage)
        announcing = _Reservations(self.store, self.venue)
        self.engines = {
            name: TransferEngine(
                announcing,  # type: ignore[arg-type]
                {"venue": self.venue, "gate": self.venue.gate},
                self.venue.callbacks,
                clock=lambda: self.now,
                engine_id=name,
                submit_timeout=SUBMIT_TIMEOUT,
            )
            for name in ENGINES
        }

    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        getattr(self.engines[ENGINES[0]], operation)(request_id, **arguments)

    def step(self, request_id: str, engine: str) -> None:
        self.engines[engine].step(request_id)

    def request_state(self, request_id: str) -> str | None:
        with self.store.transaction() as tx:
            row = tx.get("request", request_id)
        return None if row is None else row.state

    def node_states(self, request_id: str) -> dict[str, str]:
        with self.store.transaction() as tx:
            return {row.data["name"]: row.state for row in tx.scope("node", request_id)}

    def history(self, request_id: str) -> EngineHistory | None:
        with self.store.transaction() as tx:
            request = tx.history("request", request_id)
            nodes = {
                row.data["name"]: tx.history("node", row.key)
                for row in tx.scope("node", request_id)
            }
        return EngineHistory(
            [Move(e.source, e.trigger, e.dest, e.actor) for e in request],
            {
                name: [Move(e.source, e.trigger, e.dest, e.actor) for e in events]
                for name, events in nodes.items()
            },
        )

    def fingerprint(self) -> object:
        with self.store.transaction() as tx:
            return [
                (row.machine, row.key, row.version, row.data)
                for machine in self.store.specs()
                for row in tx.rows(machine)
            ]

    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    def fail_next_write(self, how: Fault | None) -> None:
        self.store.pending = how

    def check(self) -> list[str]:
        return self.watch.check()


class _Reservations:
    """The reference engine's store, announcing to the venue every committed change of a
    request's ``reservation`` (the engine keeps it on the request row; the adapter is its
    limits service)."""

    def __init__(self, store: FaultyStore, venue: Venue) -> None:
        self.store, self.venue = store, venue

    def specs(self) -> Any:
        return self.store.specs()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        changed: dict[str, str] = {}
        with self.store.transaction() as tx:
            yield _Watched(tx, changed)
        for key, what in changed.items():
            if what in ("released", "consumed"):
                self.venue.reservation(key, what)


class _Watched:
    def __init__(self, tx: Any, changed: dict[str, str]) -> None:
        self._tx, self._changed = tx, changed

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._tx, name)
        if name not in ("move", "update"):
            return attribute

        def write(row: Any, *args: Any, **kwargs: Any) -> Any:
            after = attribute(row, *args, **kwargs)
            if row.machine == "request":
                was, now = row.data.get("reservation"), after.data.get("reservation")
                if was != now and isinstance(now, str):
                    self._changed[row.key] = now
            return after

        return write


OPERATIONS: Mapping[str, Callable[[st.DataObject, str], dict[str, Any]]] = {
    "validate": lambda d, n: {"problems": d.draw(st.sampled_from([(), ("bad iban",)]))},
    "request_approval": lambda d, n: {},
    "approve": lambda d, n: {"by": "olivia"},
    "reject": lambda d, n: {"by": "olivia"},
    "expire": lambda d, n: {},
    "start": lambda d, n: {},
    "fail_before_start": lambda d, n: {"reason": "limits changed"},
    "cancel": lambda d, n: {"by": "olivia"},
    "resume": lambda d, n: {"by": "olivia"},
    "confirm_failed": lambda d, n: {"by": "olivia", "evidence": "venue statement"},
    "confirm_completed": lambda d, n: {"by": "olivia", "evidence": "venue statement"},
    "complete_manual": lambda d, n: {"node": n, "by": "olivia"},
    "sign": lambda d, n: {"node": n, "by": "hsm"},
    "refuse_signature": lambda d, n: {"node": n, "by": "hsm", "reason": "limit"},
    "retry": lambda d, n: {"node": n, "reason": "signature expired"},
    "skip": lambda d, n: {"node": n, "by": "planner", "reason": "not needed"},
    "reconcile": lambda d, n: {
        "node": n,
        "by": "recon",
        "evidence": d.draw(st.sampled_from(["submitted", "completed", "failed"])),
    },
}
# What people and other systems plausibly do to a request in each state, and to a node.
BY_REQUEST_STATE: Mapping[str, Sequence[str]] = {
    "pending_approval": ("reject", "expire"),
    "approved": ("fail_before_start",),
    "executing": ("cancel",),  # refused once money may be moving: so it must stay
    "waiting_manual_action": ("cancel", "resume", "complete_manual"),
    "manual_intervention": ("resume", "confirm_failed", "confirm_completed"),
}
BY_NODE_STATE: Mapping[str, Sequence[str]] = {
    "blocked": ("skip",),
    "ready": ("skip",),
    "awaiting_signature": ("sign", "refuse_signature", "retry"),
    "preparing": ("retry",),
    "unknown": ("reconcile",),
}
NODES_ACTED_ON_IN = frozenset({"executing", "waiting_manual_action", "manual_intervention"})

# The way to execution: what ``advance`` does in each request state, so random runs get
# there (four specific operations in a row are rare among all of them).
LIFECYCLE = {
    "received": "validate",
    "validated": "request_approval",
    "pending_approval": "approve",
    "approved": "start",
}


class TransferSuite(RuleBasedStateMachine):
    """Subclass and override ``make_adapter(venue)`` to test your own engine."""

    def make_adapter(self, venue: Venue) -> TransferAdapter:
        """Your engine behind a ``TransferAdapter``, built to call ``venue`` (see there)."""
        return ReferenceTransfer(venue)

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()
        self.venue = Venue(self._answer, self.ledger, self._announced)
        self.adapter = self.make_adapter(self.venue)
        check_adapter(self.adapter, TransferAdapter)
        self.data: st.DataObject | None = None
        self.plans: dict[str, str] = {}
        self.stepping: str | None = None
        self.armed = False
        self.meanwhile = False
        self.twists: dict[str, set[object]] = {c: set(a[1:]) for c, a in ANSWERS.items()}
        self.script: dict[tuple[str, str], list[str | type[BaseException]]] | None = None

    starts: Sequence[Start] = STARTS
    """The starts this suite draws from; a subclass may pin one (see tests/test_suites)."""

    @initialize(
        data=st.data(),
        plans=st.lists(st.sampled_from(sorted(PLANS)), min_size=LIVE, max_size=LIVE),
        twists=st.fixed_dictionaries(
            {
                call: st.sets(st.sampled_from(answers[1:]), min_size=1, max_size=3)
                for call, answers in ANSWERS.items()
            }
        ),
    )
    def submit(
        self,
        data: st.DataObject,
        plans: list[str],
        twists: dict[str, set[object]],
    ) -> None:
        """A fresh engine per run (built in ``__init__``) with ``LIVE`` requests, each set
        up by a start drawn from ``starts``: a scenario (drawn first, so each corner is as
        likely as the next), then what happens next. A fresh start submits ``plans``.

        Swarm testing: each run allows only a few of the venue's unhappy answers, so some
        runs go deep along one kind of trouble instead of every run drowning in a little
        of everything."""
        self.twists = twists
        scenarios = sorted({scenario for scenario, _ in self.starts})
        for plan in plans:
            scenario = data.draw(st.sampled_from(scenarios), label="start")
            thens = [then for s, then in self.starts if s == scenario]
            then = data.draw(st.sampled_from(thens), label="then")
            request = REQUEST_IDS[len(self.plans)]
            if not self.set_up(scenario, plan):
                event(f"scenario {scenario!r} did not reach its expected state")
            if then is None:
                continue
            operation, node, arguments = then
            if operation.startswith("step"):
                if operation == "step after the timeout":
                    self.adapter.advance_clock(SUBMIT_TIMEOUT + 1)
                with self._outage(data):
                    self._step(request, ENGINES[0])
            else:
                self._operate(data, request, operation, node, arguments)

    def set_up(self, scenario: str, plan: str | None = None) -> bool:
        """Play ``scenario`` on a new request (a fresh start: submit ``plan``, if given);
        whether it reached ``expect``. A system that behaves otherwise (another rule set,
        your engine) is not wrong for that: the run goes on from wherever it is."""
        setup = SCENARIOS[scenario]
        if setup is None:
            if plan is not None:
                self._submit(plan)
            return True
        request = self._submit(setup.plan)
        self._approve(request, setup.until)
        self.script = {key: list(answers) for key, answers in setup.answers.items()}
        for _ in range(setup.steps):
            with self._outage():
                self._step(request, ENGINES[0])
        self.script = None
        return (self._state(request), self.adapter.node_states(request)) == setup.expect

    def _submit(self, plan: str) -> str:
        request = REQUEST_IDS[len(self.plans)]
        self.ledger.planned(request, PLANS[plan])
        self.plans[request] = plan
        self.ledger.begin(request, "submit", {})
        self.adapter.operate(request, "submit", plan=PLANS[plan])
        self.ledger.end("done")
        return request

    def _step(self, request: str, engine: str) -> None:
        self.ledger.stepping(engine, request)
        following = self.ledger.following(request)
        self.adapter.step(request, engine)
        self.ledger.stepped(request, following)

    def _approve(self, request: str, until: str) -> None:
        """Along the way to execution, as far as state ``until``."""
        for _ in LIFECYCLE:
            state = self._state(request)
            operation = LIFECYCLE.get(state)
            if operation is None or state == until:
                return
            arguments = {"by": "olivia"} if operation == "approve" else {}
            self.ledger.begin(request, operation, arguments)
            with self._outage():
                try:
                    self.adapter.operate(request, operation, **arguments)
                except StoreError:
                    raise
                except MachinesError as refusal:  # not the expected way on; judged below
                    self.ledger.end("refused", refusal)
                    return
                self.ledger.end("done")

    def _live(self) -> list[str]:
        """Requests not yet in a terminal state (all of them once every one ended)."""
        live = [r for r in self.plans if not bundled("request").is_terminal(self._state(r))]
        return live or list(self.plans)

    def _state(self, request: str) -> str:
        found = self.adapter.request_state(request)
        if found is None:
            self.ledger.broken("request-kept", request, "the adapter no longer knows it")
            return bundled("request").initial
        return found

    def _pick(self, data: st.DataObject, running: bool = False) -> str:
        """A live request; with ``running``, one whose nodes run, if there is one."""
        live = self._live()
        if running:
            live = [r for r in live if self._state(r) in NODES_ACTED_ON_IN] or live
        return data.draw(st.sampled_from(live), label="request")

    @precondition(lambda self: len(self._live()) < LIVE and len(self.plans) < len(REQUEST_IDS))
    @rule(plan=st.sampled_from(sorted(PLANS)))
    def new_request(self, plan: str) -> None:
        """A request ended: a new one comes in (the engine sees many in one run)."""
        self._submit(plan)

    def _answer(self, call: str, node: PlanNode) -> str | type[BaseException]:
        choices = ANSWERS[call]
        if self.script is not None:  # setting up a scenario: scripted, else moving on
            queue = self.script.get((node.name, call))
            return queue.pop(0) if queue else choices[0]
        assert self.data is not None, "the venue was called outside a step"
        twists = [c for c in choices[1:] if c in self.twists[call]]
        # Half the time the answer that moves the plan on, so runs get deep enough.
        options = [choices[0]] * max(1, len(twists)) + twists
        answer = self.data.draw(st.sampled_from(options), label=f"{node.name}.{call}")
        if answer != MEANWHILE:
            return answer
        if not self.meanwhile:  # one engine steps inside another's call, never deeper
            other = ENGINES[1] if self.stepping == ENGINES[0] else ENGINES[0]
            doing, self.meanwhile = self.ledger.doing, True
            try:
                self._step(node.request_id, other)  # must not redo what this call does
            except BaseException:
                self.ledger.interrupted()  # the engine may take it for the venue's error
                raise
            finally:
                self.ledger.doing, self.meanwhile = doing, False
        return AFTER_MEANWHILE[call]

    def _announced(self) -> None:
        """The engine announced something (a callback, a reservation): sometimes the
        process dies at its next write, so an announcement made before its commit is
        one of a change that never happens (and a change made early, by halves)."""
        if self.data is None or self.script is not None:
            return
        if self.data.draw(st.sampled_from([False, False, False, True]), label="then dies"):
            self.adapter.fail_next_write("crash")

    # -- rules ---------------------------------------------------------------------------

    @contextmanager
    def _outage(
        self, data: st.DataObject | None = None, engine: str = ENGINES[0]
    ) -> Iterator[None]:
        """Run one operation as ``engine``, answering the venue from ``data``; survive the
        process dying (``SimulatedCrash``) and an injected store failure, nothing else."""
        self.data, self.stepping = data, engine
        armed, self.armed = self.armed, False
        try:
            yield
        except SimulatedCrash:
            self.ledger.end("interrupted")
        except StoreError:
            if not armed:
                raise
            self.ledger.end("interrupted")
        finally:
            self.data = None
            self.adapter.fail_next_write(None)

    @rule(data=st.data(), until=st.sampled_from(["executing", "executing", *LIFECYCLE]))
    def advance(self, data: st.DataObject, until: str) -> None:
        """Take a request along the way to execution, as far as state ``until``."""
        self._approve(self._pick(data), until)

    @rule(
        data=st.data(),
        operation=st.sampled_from(sorted(OPERATIONS)),
        node=st.sampled_from(NODES),
    )
    def operate(self, data: st.DataObject, operation: str, node: str) -> None:
        """Anything at all, mostly refused: a refusal must write nothing."""
        self._operate(data, self._pick(data), operation, node)

    def _operate(
        self,
        data: st.DataObject,
        request: str,
        operation: str,
        node: str,
        fixed: Mapping[str, Any] | None = None,
    ) -> None:
        """Do ``operation`` (arguments drawn, or ``fixed`` where given); a refusal must
        write nothing."""
        arguments = {**OPERATIONS[operation](data, node), **(fixed or {})}
        before = self.adapter.fingerprint()
        self.ledger.begin(request, operation, arguments)
        with self._outage(data):
            try:
                self.adapter.operate(request, operation, **arguments)
            except StoreError:
                raise
            except MachinesError as refusal:
                wrote = self.adapter.fingerprint() != before
                self.ledger.end("refused", refusal, wrote)
                return
            self.ledger.end("done")

    @rule(data=st.data())
    def someone_acts(self, data: st.DataObject) -> None:
        """An operator, signer, planner or reconciler does something that fits the state
        of a request or of one of its nodes (it may still be refused)."""
        targets: dict[str, list[tuple[str, str]]] = {}
        for request in self._live():
            state = self._state(request)
            for op in BY_REQUEST_STATE.get(state, ()):
                targets.setdefault(op, []).append((request, ""))
            if state not in NODES_ACTED_ON_IN:
                continue
            for name, state in self.adapter.node_states(request).items():
                for op in BY_NODE_STATE.get(state, ()):
                    targets.setdefault(op, []).append((request, name))
        if targets:  # first what to do, then to what: no operation crowds out the rest
            operation = data.draw(st.sampled_from(sorted(targets)), label="acts")
            request, node = data.draw(st.sampled_from(targets[operation]), label="on")
            if operation == "complete_manual":
                node = data.draw(st.sampled_from(NODES), label="gate")
            self._operate(data, request, operation, node)

    @rule(
        data=st.data(),
        engine=st.sampled_from(ENGINES),
        times=st.integers(1, 6),
        fault=st.sampled_from([None, None, None, None, None, None, "error", "crash"]),
        wait=st.sampled_from([0.0, 0.0, 0.0, 1.0, SUBMIT_TIMEOUT + 1]),
    )
    def step(
        self, data: st.DataObject, engine: str, times: int, fault: Fault | None, wait: float
    ) -> None:
        """After ``wait`` seconds, advance a request ``times`` times as ``engine``; with
        ``fault``, the first store write fails (``"error"``) or the process dies there
        (``"crash"``). Waiting past the submit timeout exposes sends that never came back.

        A request not started yet is first taken to execution (and once every request
        ended, a new one comes in), so that every run that steps moves money, whichever
        rules Hypothesis' swarm testing left enabled in it."""
        self.adapter.advance_clock(wait)
        request = self._pick(data, running=True)
        ended = bundled("request").is_terminal(self._state(request))
        if ended and len(self.plans) < len(REQUEST_IDS):
            request = self._submit(data.draw(st.sampled_from(sorted(PLANS)), label="plan"))
        if self._state(request) in LIFECYCLE:
            self._approve(request, "executing")
        self.adapter.fail_next_write(fault)
        self.armed = fault is not None
        for _ in range(times):
            with self._outage(data, engine):
                self._step(request, engine)

    # -- judged after every step --------------------------------------------------------

    @invariant()
    def judge(self) -> None:
        """Every rule of ``RULES``, from what the suite saw: the breaches seen as they
        happened (a resend, a callback, a refusal that wrote), then the histories the
        engine exposes, then the implementation's own checks. The first breach is the one
        report of the run."""
        ledger = self.ledger
        for request in self.plans:
            if ledger.breach is not None:
                break
            history = self.adapter.history(request)
            if history is None:
                break
            ledger.recorded(request, history)
        if ledger.breach is None:
            problems = self.adapter.check()
            if problems:
                ledger.broken("adapter-check", "", "\n".join(problems))
        ledger.verdict()
