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
``machines.testing.transfer.oracle.RULES`` (nothing resent; money that may be moving never
released or given up, nor sent work without evidence; nodes in plan order, nothing new
after a failure, work in flight followed; gates only by an operator; completion only when
every node is done; callbacks and reservations once, together; a refusal changes nothing;
the engine's histories are legal chains of the bundled definitions) and reports the first
one broken, its name first. ``adapter.check()`` is an extra.

Point it at your own engine: subclass ``TransferSuite`` and override ``make_adapter``
with an adapter that implements every method of ``TransferAdapter``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from machines.errors import MachinesError
from machines.store.records import StoreError
from machines.systems.transfer import PlanNode
from machines.testing.contract import (
    check_adapter,
    chosen_policies,
    chosen_seconds,
    unknown_settings,
)
from machines.testing.faults import Fault, SimulatedCrash
from machines.testing.recorded import RecordedSuite, Step, recorded
from machines.testing.transfer.adapter import (
    ENGINES,
    SUBMIT_TIMEOUT,
    ReferenceTransfer,
    TransferAdapter,
)
from machines.testing.transfer.history import EngineHistory
from machines.testing.transfer.oracle import FOLLOW_WITHIN, POLICIES, RULES, Ledger
from machines.testing.transfer.scenarios import (
    BY_NODE_STATE,
    BY_REQUEST_STATE,
    LIFECYCLE,
    LIVE,
    NODES,
    NODES_ACTED_ON_IN,
    OPERATIONS,
    PLANS,
    SCENARIOS,
    STARTS,
    Start,
    plan_node,
)
from machines.testing.transfer.venue import AFTER_MEANWHILE, ANSWERS, MEANWHILE, GateDesk, Venue
from machines.testing.verdict import Move, RuleBroken, bundled

__all__ = [
    "ENGINES",
    "FOLLOW_WITHIN",
    "OPERATIONS",
    "PLANS",
    "POLICIES",
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

REQUEST_IDS = tuple(f"r{i}" for i in range(1, 9))
LONG_WAIT = SUBMIT_TIMEOUT + 1
"""The longest wait a step draws: past the submit timeout, and past ``follow_within``."""


class TransferSuite(RecordedSuite):
    """Subclass and override ``make_adapter(venue)`` to test your own engine.
    ``policies``: the rules of this package's choosing judged besides the guarantees
    (``POLICIES``, all by default; ``halt-after-failure``). ``follow_within``: the longest
    your engine leaves work in flight unasked about, in seconds on the suite's clock (the
    submit timeout by default); the guarantee ``in-flight-asked`` holds it to that."""

    policies: ClassVar[frozenset[str]] = POLICIES
    follow_within: ClassVar[float] = FOLLOW_WITHIN
    stray: ClassVar[str] = "contract"

    def make_adapter(self, venue: Venue) -> TransferAdapter:
        """Your engine behind a ``TransferAdapter``, built to call ``venue`` (see there)."""
        return ReferenceTransfer(venue)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown_settings(cls, "TransferSuite")
        cls.policies = chosen_policies(cls, cls.policies, POLICIES)
        cls.follow_within = chosen_seconds(cls, "follow_within", cls.follow_within)

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger(
            self.policies, chosen_seconds(type(self), "follow_within", self.follow_within)
        )  # set after the class, too
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

    @classmethod
    def tour(cls) -> list[list[Step]]:
        """Every start of ``starts`` and what can meet it next, once, on the plain paths
        (``machines.testing.transfer.tour``); ``run()`` takes it before the dice."""
        from machines.testing.transfer.tour import tour_runs

        return tour_runs(cls.starts)

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
    @recorded
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
            if not self.set_up(scenario, plan) and currently_in_test_context():
                event(f"scenario {scenario!r} did not reach its expected state")
            if then is None:
                continue
            operation, node, arguments = then
            if operation.startswith("step"):
                if operation == "step after the timeout":
                    self.adapter.advance_clock(SUBMIT_TIMEOUT + 1)
                    self.ledger.waited(SUBMIT_TIMEOUT + 1)
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
        for node in setup.skipped:
            self._do(None, request, "skip", {"node": node, "by": "planner", "reason": "not needed"})
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
    @recorded
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
    @recorded
    def advance(self, data: st.DataObject, until: str) -> None:
        """Take a request along the way to execution, as far as state ``until``."""
        self._approve(self._pick(data), until)

    @rule(
        data=st.data(),
        operation=st.sampled_from(sorted(OPERATIONS)),
        node=st.sampled_from(NODES),
    )
    @recorded
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
        self._do(data, request, operation, {**OPERATIONS[operation](data, node), **(fixed or {})})

    def _do(
        self,
        data: st.DataObject | None,
        request: str,
        operation: str,
        arguments: Mapping[str, Any],
    ) -> None:
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
    @recorded
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
        wait=st.sampled_from([0.0, 0.0, 0.0, 1.0, LONG_WAIT]),
    )
    @recorded
    def step(
        self, data: st.DataObject, engine: str, times: int, fault: Fault | None, wait: float
    ) -> None:
        """After ``wait`` seconds, advance a request ``times`` times as ``engine``; with
        ``fault``, the first store write fails (``"error"``) or the process dies there
        (``"crash"``). Waiting past the submit timeout exposes sends that never came back.

        A request not started yet is first taken to execution (and once every request
        ended, a new one comes in), so that every run that steps moves money, whichever
        rules Hypothesis' swarm testing left enabled in it.

        The longest wait, past the submit timeout, is past the suite's ``follow_within``
        too (a bound declared longer than the timeout is still exceeded in one step:
        outsider batch 46, a 17, found a bound of an hour never reached)."""
        if wait == LONG_WAIT:
            wait = max(SUBMIT_TIMEOUT, self.ledger.follow_within) + 1
        self.adapter.advance_clock(wait)
        self.ledger.waited(wait)
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
            ledger.ended(request, self._state(request))
            history = self.adapter.history(request)
            if history is None:
                continue
            ledger.recorded(request, history)
        if ledger.breach is None:
            problems = self.adapter.check()
            if problems:
                ledger.broken("adapter-check", "", "\n".join(problems))
        ledger.verdict()
