"""A stateful Hypothesis suite for any transfer engine (seed 003), behind an adapter.

Two requests, each with a plan drawn from ``PLANS``: a single withdrawal followed by an
observation, and a plan with a parallel branch, a manual gate and a second movement of
money. The venue is scripted by Hypothesis as the engine calls it: ``prepare`` may ask
for a signature, retry, or raise; ``submit`` may accept, complete, fail, lose track,
raise, die after sending (``SimulatedCrash``), or let a second engine step the same
request while the call is out; ``observe`` may still be pending. Operators, signers,
planners and reconcilers act at random; store writes fail or die; the clock jumps past
the submit timeout. After every step the suite checks, from what the venue saw:

- ``submit`` was called at most once per node: nothing is ever resent;
- no request released its reservation automatically while money it sent may be moving
  (every side-effect node it sent was refused, by the venue's answer or a reconciler's
  reading), and none completed with a node not done;
- the request_completed / request_failed callbacks fired at most once, and only for a
  request in a state that consumes / releases the reservation;
- every refused operation wrote nothing;
- the implementation's own checks (the reference engine: the named invariants).

Point it at your own engine: subclass ``TransferSuite`` and override ``make_adapter``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from machines.errors import MachinesError
from machines.loader import load
from machines.store import open_store
from machines.store.records import StoreError
from machines.systems.transfer import (
    CALLBACKS,
    ManualGate,
    ObserveAnswer,
    PlanNode,
    PrepareAnswer,
    SubmitAnswer,
    TransferEngine,
)
from machines.testing.coverage import Coverage
from machines.testing.faults import Fault, FaultyStore, SimulatedCrash, Specs, StoreWatch
from machines.testing.transfer_scenarios import SCENARIOS, STARTS, Start

LIVE = 2  # requests in progress at once; a new one is submitted when one ends
REQUEST_IDS = tuple(f"r{i}" for i in range(1, 9))
ENGINES = ("engine-a", "engine-b")
SUBMIT_TIMEOUT = 60.0
_REQUEST_SPEC = load("request")
IN_FLIGHT = frozenset({"submitting", "submitted", "observing", "unknown"})
DONE = frozenset({"completed", "skipped"})


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
    "branching": [
        plan_node("fx_quote", "observe", False),
        plan_node("withdraw", "action", True),
        plan_node("manual_review", "action", False, "fx_quote", "withdraw", executor="gate"),
        plan_node("deposit", "action", True, "manual_review"),
    ],
}
NODES = sorted({n["name"] for plan in PLANS.values() for n in plan})

# What the scripted venue may answer; an Exception subclass is raised instead.
PREPARE: Sequence[str | type[BaseException]] = ("submit", "sign", "retry", RuntimeError)
SUBMIT: Sequence[str | type[BaseException]] = (
    "accepted",
    "completed",
    "failed",
    "unknown",
    ConnectionError,
    SimulatedCrash,
    "duplicate",  # another engine steps the request while this call is out; then accepted
)
OBSERVE: Sequence[str | type[BaseException]] = (
    "completed",
    "failed",
    "pending",
    "unknown",
    TimeoutError,
)

ANSWERS: Mapping[str, Sequence[str | type[BaseException]]] = {
    "prepare": PREPARE,
    "submit": SUBMIT,
    "observe": OBSERVE,
}
"""Per venue call, its answers; the first one moves the plan on, the rest are twists."""


class Venue:
    """The executor every plan uses; the suite answers for it and counts what it saw."""

    def __init__(self, answer: Callable[[str, PlanNode], str | type[BaseException]]) -> None:
        self.answer = answer
        self.submits: Counter[tuple[str, str]] = Counter()
        self.refused: set[tuple[str, str]] = set()
        """Sent nodes whose money certainly did not move: the venue (or a reconciler)
        said the operation failed."""

    def _call(self, call: str, node: PlanNode) -> str:
        key = (node.request_id, node.name)
        if call == "submit":
            self.submits[key] += 1
            assert self.submits[key] == 1, f"{node.name} was resent"
        answer = self.answer(call, node)
        if call != "prepare" and key in self.submits:
            if answer == "failed":
                self.refused.add(key)
            elif answer != "pending":
                self.refused.discard(key)
        if isinstance(answer, type):
            raise answer(f"scripted {call} fault")
        return answer

    def prepare(self, node: PlanNode) -> PrepareAnswer:
        return self._call("prepare", node)  # type: ignore[return-value]

    def submit(self, node: PlanNode) -> SubmitAnswer:
        return self._call("submit", node)  # type: ignore[return-value]

    def observe(self, node: PlanNode) -> ObserveAnswer:
        return self._call("observe", node)  # type: ignore[return-value]


class TransferAdapter:
    """What the suite needs from a transfer engine (override every method for your own).

    ``operate(request_id, operation, **arguments)`` performs one of the engine's public
    operations by name (``submit``, ``validate``, ``approve``, ``cancel``, ``reconcile``,
    ``complete_manual``, ...; the names and arguments of ``TransferEngine``) and raises a
    ``MachinesError`` when it refuses. ``step(request_id, engine)`` advances the request
    once as the named engine instance. ``callbacks`` counts the callbacks fired so far."""

    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        raise NotImplementedError

    def step(self, request_id: str, engine: str) -> None:
        raise NotImplementedError

    def request_state(self, request_id: str) -> tuple[str, str] | None:
        """(state, reservation) of the request, or None before it is submitted."""
        raise NotImplementedError

    def node_states(self, request_id: str) -> dict[str, str]:
        raise NotImplementedError

    def last_request_actor(self, request_id: str) -> str | None:
        """The actor of the request's latest move (None: none yet)."""
        raise NotImplementedError

    def fingerprint(self) -> object:
        """Anything that changes whenever something is written."""
        raise NotImplementedError

    def callbacks(self) -> Counter[tuple[str, str]]:
        raise NotImplementedError

    def advance_clock(self, seconds: float) -> None:
        raise NotImplementedError

    def fail_next_write(self, how: Fault | None) -> None:
        """Fail (``"error"``) or kill (``"crash"``) the next store write; None clears."""

    def check(self) -> list[str]:
        return []


@dataclass
class ReferenceTransfer(TransferAdapter):
    """Two ``TransferEngine`` instances sharing one faulty memory (or given) store."""

    venue: Venue
    url: str = "memory://"
    coverage: Coverage | None = None
    specs: Specs = None
    now: float = 1_000.0
    fired: Counter[tuple[str, str]] = field(default_factory=Counter)
    store: FaultyStore = field(init=False)
    watch: StoreWatch = field(init=False)
    engines: dict[str, TransferEngine] = field(init=False)

    def __post_init__(self) -> None:
        self.store = FaultyStore(open_store(self.url, self.specs))
        self.watch = StoreWatch(self.store, self.coverage)
        callbacks = {name: self._callback(name) for name in CALLBACKS}
        self.engines = {
            name: TransferEngine(
                self.store,
                {"venue": self.venue, "gate": ManualGate()},
                callbacks,
                clock=lambda: self.now,
                engine_id=name,
                submit_timeout=SUBMIT_TIMEOUT,
            )
            for name in ENGINES
        }

    def _callback(self, name: str) -> Callable[[str, Mapping[str, Any]], None]:
        def fired(request_id: str, payload: Mapping[str, Any]) -> None:
            self.fired[(name, request_id)] += 1

        return fired

    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        getattr(self.engines[ENGINES[0]], operation)(request_id, **arguments)

    def step(self, request_id: str, engine: str) -> None:
        self.engines[engine].step(request_id)

    def request_state(self, request_id: str) -> tuple[str, str] | None:
        with self.store.transaction() as tx:
            row = tx.get("request", request_id)
        return None if row is None else (row.state, row.data["reservation"])

    def node_states(self, request_id: str) -> dict[str, str]:
        with self.store.transaction() as tx:
            return {row.data["name"]: row.state for row in tx.scope("node", request_id)}

    def last_request_actor(self, request_id: str) -> str | None:
        with self.store.transaction() as tx:
            history = tx.history("request", request_id)
        return history[-1].actor if history else None

    def fingerprint(self) -> object:
        with self.store.transaction() as tx:
            return [
                (row.machine, row.key, row.version, row.data)
                for machine in self.store.specs()
                for row in tx.rows(machine)
            ]

    def callbacks(self) -> Counter[tuple[str, str]]:
        return Counter(self.fired)

    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    def fail_next_write(self, how: Fault | None) -> None:
        self.store.pending = how

    def check(self) -> list[str]:
        return self.watch.check()


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
        return ReferenceTransfer(venue)

    def __init__(self) -> None:
        super().__init__()
        self.venue = Venue(self._answer)
        self.adapter = self.make_adapter(self.venue)
        self.data: st.DataObject | None = None
        self.plans: dict[str, str] = {}
        self.stepping: str | None = None
        self.armed = False
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
        """A fresh engine per run (built in ``__init__``) with ``LIVE`` requests, the first
        one set up by a start drawn from ``starts`` (a scenario and what happens next).

        Swarm testing: each run allows only a few of the venue's unhappy answers, so some
        runs go deep along one kind of trouble instead of every run drowning in a little
        of everything."""
        self.twists = twists
        scenario, then = data.draw(st.sampled_from(self.starts), label="start")
        if not self.set_up(scenario):
            event(f"scenario {scenario!r} did not reach its expected state")
        if then is not None:
            operation, node, arguments = then
            if operation.startswith("step"):
                if operation == "step after the timeout":
                    self.adapter.advance_clock(SUBMIT_TIMEOUT + 1)
                with self._outage(data):
                    self.adapter.step(REQUEST_IDS[0], ENGINES[0])
            else:
                self._operate(data, REQUEST_IDS[0], operation, node, arguments)
        while len(self.plans) < LIVE:
            self._submit(plans[len(self.plans)])

    def set_up(self, scenario: str) -> bool:
        """Play ``scenario`` on a new request; whether it reached ``expect``. A system that
        behaves otherwise (another rule set, your engine) is not wrong for that: the run
        goes on from wherever it is."""
        setup = SCENARIOS[scenario]
        if setup is None:
            return True
        request = self._submit(setup.plan)
        self._approve(request, setup.until)
        self.script = {key: list(answers) for key, answers in setup.answers.items()}
        for _ in range(setup.steps):
            with self._outage():
                self.adapter.step(request, ENGINES[0])
        self.script = None
        return (self._state(request), self.adapter.node_states(request)) == setup.expect

    def _submit(self, plan: str) -> str:
        request = REQUEST_IDS[len(self.plans)]
        self.adapter.operate(request, "submit", plan=PLANS[plan])
        self.plans[request] = plan
        return request

    def _approve(self, request: str, until: str) -> None:
        """Along the way to execution, as far as state ``until``."""
        for _ in LIFECYCLE:
            state = self._state(request)
            operation = LIFECYCLE.get(state)
            if operation is None or state == until:
                return
            arguments = {"by": "olivia"} if operation == "approve" else {}
            with self._outage():
                self.adapter.operate(request, operation, **arguments)

    def _live(self) -> list[str]:
        """Requests not yet in a terminal state (all of them once every one ended)."""
        live = [r for r in self.plans if not _REQUEST_SPEC.is_terminal(self._state(r))]
        return live or list(self.plans)

    def _state(self, request: str) -> str:
        found = self.adapter.request_state(request)
        assert found is not None, f"{request} disappeared"
        return found[0]

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
        if answer == "duplicate":
            other = ENGINES[1] if self.stepping == ENGINES[0] else ENGINES[0]
            self.adapter.step(node.request_id, other)  # must not send it again
            return "accepted"
        return answer

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
            pass
        except StoreError:
            if not armed:
                raise
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
        with self._outage(data):
            try:
                self.adapter.operate(request, operation, **arguments)
            except StoreError:
                raise
            except MachinesError:
                after = self.adapter.fingerprint()
                assert after == before, f"refused {operation} on {request} wrote something"
                return
            if operation == "reconcile":  # the venue's records, as the reconciler read them
                if arguments["evidence"] == "failed":
                    self.venue.refused.add((request, node))
                else:
                    self.venue.refused.discard((request, node))

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
        (``"crash"``). Waiting past the submit timeout exposes sends that never came back."""
        self.adapter.advance_clock(wait)
        request = self._pick(data, running=True)
        self.adapter.fail_next_write(fault)
        self.armed = fault is not None
        for _ in range(times):
            with self._outage(data, engine):
                self.adapter.step(request, engine)

    # -- checked after every step --------------------------------------------------------

    @invariant()
    def nothing_is_resent(self) -> None:
        resent = {key: n for key, n in self.venue.submits.items() if n > 1}
        assert not resent, f"submit() called more than once: {resent}"

    @invariant()
    def money_is_never_released_in_flight(self) -> None:
        for request in self.plans:
            found = self.adapter.request_state(request)
            assert found is not None, f"{request} disappeared"
            state, reservation = found
            nodes = self.adapter.node_states(request)
            money = {n["name"] for n in PLANS[self.plans[request]] if n["has_side_effect"]}
            sent = [n for n in nodes if n in money and self.venue.submits[(request, n)]]
            if reservation == "released" and self.adapter.last_request_actor(request) != "operator":
                moving = {n: nodes[n] for n in sent if (request, n) not in self.venue.refused}
                assert not moving, f"{request} {state}, released, money may be moving: {moving}"
            if reservation == "consumed" and self.adapter.last_request_actor(request) != "operator":
                undone = {n: s for n, s in nodes.items() if s not in DONE}
                assert not undone, f"{request} completed with {undone}"

    @invariant()
    def callbacks_fire_once_and_truly(self) -> None:
        fired = self.adapter.callbacks()
        for request in self.plans:
            found = self.adapter.request_state(request)
            reservation = found[1] if found else None
            completed = fired[("request_completed", request)]
            failed = fired[("request_failed", request)]
            assert completed <= 1 and failed <= 1, f"{request}: a callback fired twice"
            assert not completed or reservation == "consumed", f"{request}: false completion"
            assert not failed or reservation == "released", f"{request}: false failure"

    @invariant()
    def implementation_is_consistent(self) -> None:
        problems = self.adapter.check()
        assert not problems, "\n".join(problems)
