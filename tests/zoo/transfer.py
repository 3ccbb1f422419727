"""Transfer engines written from the outside, as a user of ``TransferSuite`` would write
one: their own classes, their own storage, their own derivation; only the lifecycle
definitions (``machines.load``) are the package's. ``Engine`` is correct and must pass
the suite; every other engine is ``Engine`` with one realistic bug, which the suite must
catch with the rule named in ``BUGS``.

The storage (``Disk``) is a dict of records written in transactions that commit together
or not at all; ``fail_next`` makes its next write raise ``StoreError`` or die
(``SimulatedCrash``), as ``TransferAdapter.fail_next_write`` asks. Two ``Engine``
instances share one disk, each move a compare-and-set on the node's version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from machines import load
from machines.errors import InvalidStateTransition, MachinesError
from machines.store.records import StoreError
from machines.testing.faults import Fault, SimulatedCrash
from machines.testing.transfer.suite import (
    ENGINES,
    SUBMIT_TIMEOUT,
    EngineHistory,
    TransferAdapter,
    Venue,
)
from machines.testing.verdict import Move

REQUEST, NODE = load("request"), load("node")
IN_FLIGHT = frozenset({"submitting", "submitted", "observing", "unknown"})
MONEY_MOVED = IN_FLIGHT | {"completed"}
IN_PROGRESS = frozenset({"preparing", "awaiting_signature", "submitting", "submitted", "observing"})
DONE = frozenset({"completed", "skipped"})
STOPPED = frozenset({"failed", "cancelled"})


def done(nodes: Mapping[str, Any], name: str) -> bool:
    """Node ``name`` is completed, or skipped with every node it comes after done: a skip
    leaves the plan, not its order."""
    node = nodes[name]
    if node.state == "skipped":
        return all(done(nodes, p) for p in node.data["after"])
    return bool(node.state in DONE)


RELEASING = frozenset({"failed", "rejected", "expired", "cancelled"})
ATTENTION = frozenset({"manual_intervention", "waiting_manual_action"})
DERIVED = {
    "completed": "complete",
    "failed": "fail",
    "manual_intervention": "escalate",
    "waiting_manual_action": "await_manual_action",
}
SUBMITTED = {"accepted": "accept", "completed": "complete", "failed": "fail"}
OBSERVED = {"completed": "complete", "failed": "fail"}
RECONCILED = {"submitted": "reconcile_submitted", "completed": "reconcile_completed"}
RECONCILED["failed"] = "reconcile_failed"
GATE = "manual_"


class Refused(MachinesError):
    """The engine will not do that now; nothing was written."""


# -- storage ----------------------------------------------------------------------------------


@dataclass
class Record:
    state: str
    data: dict[str, Any]
    history: list[Move] = field(default_factory=list)
    version: int = 0


class Disk:
    """The engine's storage: records by key, changed only by committed transactions."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.commits = 0
        self.fail_next: Fault | None = None

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        tx = Tx(self)
        yield tx
        if tx.pending:
            tx.fail()  # the commit is a write too: a fault armed since the last one hits it
            self.records.update(tx.pending)
            self.commits += 1

    def read(self, key: str) -> Record | None:
        return self.records.get(key)


class Tx:
    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.pending: dict[str, Record] = {}

    def get(self, key: str) -> Record | None:
        """A private copy of the record (its lists and dicts of lists are never changed in
        place, so one level of copying is enough)."""
        found = self.pending.get(key) or self.disk.records.get(key)
        if found is None:
            return None
        return Record(found.state, dict(found.data), list(found.history), found.version)

    def put(self, key: str, record: Record) -> None:
        self.fail()
        self.pending[key] = record

    def fail(self) -> None:
        how, self.disk.fail_next = self.disk.fail_next, None
        if how == "error":
            raise StoreError("the disk refused the write")
        if how == "crash":
            raise SimulatedCrash()


def request_key(request_id: str) -> str:
    return f"request/{request_id}"


def node_key(request_id: str, name: str) -> str:
    return f"node/{request_id}/{name}"


# -- the engine -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """What the venue is handed."""

    request_id: str
    name: str


class Session:
    """One request and its nodes in one transaction; callbacks fire after the commit."""

    def __init__(self, engine: Engine, tx: Tx, request_id: str) -> None:
        self.engine, self.tx, self.id = engine, tx, request_id
        request = tx.get(request_key(request_id))
        if request is None:
            raise Refused(f"no request {request_id}")
        self.request = request
        self.names: list[str] = [n["name"] for n in request.data["plan"]]
        self.fired: list[tuple[str, dict[str, Any]]] = []
        self.reservation: str | None = None  # released or consumed in this transaction

    def node(self, name: object) -> Record:
        if not isinstance(name, str) or name not in self.names:
            raise Refused(f"request {self.id} has no node {name!r}")
        found = self.tx.get(node_key(self.id, name))
        assert found is not None
        return found

    def nodes(self) -> dict[str, Record]:
        return {name: self.node(name) for name in self.names}

    def mode(self) -> str:
        if self.request.state == "executing":
            return "halt" if self.engine.stops(self.nodes()) else "dispatch"
        return "follow" if self.request.state == "manual_intervention" else "idle"

    def money(self) -> str:
        return self.engine.money(self.nodes())

    def move_node(self, name: str, record: Record, trigger: str, actor: str) -> Record:
        dest = NODE.step(record.state, trigger, actor=actor, kind=record.data["kind"])
        record.history.append(Move(record.state, trigger, dest, actor))
        record.state, record.version = dest, record.version + 1
        self.tx.put(node_key(self.id, name), record)
        return record

    def move_request(self, trigger: str, actor: str) -> None:
        request = self.request
        dest = REQUEST.step(request.state, trigger, actor=actor, side_effects=self.money())
        request.history.append(Move(request.state, trigger, dest, actor))
        request.state, request.version = dest, request.version + 1
        self.tx.put(request_key(self.id), request)
        self.engine.announce(self, dest)

    def settle(self) -> None:
        """While executing: wake what can run, then apply the derived state if legal."""
        if self.request.state != "executing":
            return
        self.engine.tidy(self)
        nodes = self.nodes()
        result = self.engine.derive([(n, r.state, r.data["side_effect"]) for n, r in nodes.items()])
        if result is None or result == self.request.state:
            return
        with suppress(InvalidStateTransition):  # refused now: the nodes settle it later
            self.move_request(DERIVED[result], "system")


class Engine:
    """A small transfer engine for the suite's plans: one request row, one row per node."""

    def __init__(self, disk: Disk, venue: Venue, *, name: str, clock: Callable[[], float]) -> None:
        self.disk, self.venue, self.name, self.clock = disk, venue, name, clock

    # -- rules a user writes from seed 003 ----------------------------------------------------

    @staticmethod
    def money(nodes: Mapping[str, Record]) -> str:
        """The request's guard context: has any node with a side effect started?"""
        started = any(n.data["side_effect"] and n.state in MONEY_MOVED for n in nodes.values())
        return "started" if started else "none"

    @staticmethod
    def derive(nodes: Sequence[tuple[str, str, bool]]) -> str | None:
        """The money-safe derivation, in order."""
        states = [s for _, s, _ in nodes]
        if all(s in DONE for s in states):
            return "completed"
        stopped = any(s in STOPPED for s in states)
        moved = any(se and s == "completed" for _, s, se in nodes)
        if (stopped or "unknown" in states) and moved:
            return "manual_intervention"
        if stopped and any(se and s in IN_FLIGHT for _, s, se in nodes):
            return "manual_intervention"
        if stopped and any(se and s in ("preparing", "awaiting_signature") for _, s, se in nodes):
            return None
        if stopped:
            return "failed"
        if "unknown" in states:
            return None
        gate_ready = any(n.startswith(GATE) and s == "ready" for n, s, _ in nodes)
        if gate_ready and not any(s in IN_PROGRESS for s in states):
            return "waiting_manual_action"
        return None

    @staticmethod
    def stops(nodes: Mapping[str, Record]) -> bool:
        """Whether the plan can no longer finish: then nothing new starts."""
        return any(n.state in STOPPED for n in nodes.values())

    def announce(self, session: Session, dest: str) -> None:
        """The callbacks of a request entering ``dest``, and the end of its reservation,
        announced after the commit."""
        if dest == "completed":
            session.fired.append(("request_completed", {"state": dest}))
            session.reservation = "consumed"
        elif dest in RELEASING:
            session.fired.append(("request_failed", {"state": dest}))
            session.reservation = "released"
        elif dest in ATTENTION:
            session.fired.append(("request_attention", {"state": dest}))

    def tidy(self, session: Session) -> None:
        """What a transaction does to the nodes before deriving: wake every blocked node
        whose predecessors are all done."""
        nodes = session.nodes()
        woken = []
        for name, record in nodes.items():
            after = record.data["after"]
            if record.state == "blocked" and all(done(nodes, p) for p in after):
                session.move_node(name, record, "wake", "planner")
                woken.append(name)
        if woken:
            session.fired.append(("frontier_advanced", {"woken": woken}))

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def session(self, request_id: str) -> Iterator[Session]:
        with self.disk.transaction() as tx:
            s = Session(self, tx, request_id)
            yield s
            s.settle()
        self.publish(s, request_id)

    def publish(self, s: Session, request_id: str) -> None:
        """Tell the world what the session decided: its callbacks, then the reservation."""
        for name, payload in s.fired:
            self.venue.callback(name, request_id, payload)
        if s.reservation is not None:
            self.venue.reservation(request_id, s.reservation)

    def current(self, s: Session, name: str, seen: Record) -> Record | None:
        """The node as stored now, if nobody moved it since ``seen`` was read."""
        record = s.node(name)
        return record if record.version == seen.version else None

    # -- operations -----------------------------------------------------------------------------

    def submit(self, request_id: str, plan: Sequence[Mapping[str, Any]]) -> None:
        with self.disk.transaction() as tx:
            found = tx.get(request_key(request_id))
            if found is not None:
                if found.data["plan"] != list(plan):
                    raise Refused(f"a different plan exists under {request_id}")
                return
            tx.put(request_key(request_id), Record("received", {"plan": list(plan)}))
            for n in plan:
                data = {
                    "kind": n["kind"],
                    "side_effect": n["has_side_effect"],
                    "after": list(n["after"]),
                    "gate": n["executor"] != "venue",
                }
                tx.put(node_key(request_id, n["name"]), Record("blocked", data))

    def _request(self, request_id: str, trigger: str, actor: str) -> None:
        with self.session(request_id) as s:
            s.move_request(trigger, actor)

    def validate(self, request_id: str, *, problems: Sequence[str] = ()) -> None:
        self._request(request_id, "fail_validation" if problems else "validate", "system")

    def request_approval(self, request_id: str) -> None:
        self._request(request_id, "request_approval", "system")

    def approve(self, request_id: str, *, by: str) -> None:
        self._request(request_id, "approve", "operator")

    def reject(self, request_id: str, *, by: str) -> None:
        self._request(request_id, "reject", "operator")

    def expire(self, request_id: str) -> None:
        self._request(request_id, "expire", "timer")

    def start(self, request_id: str) -> None:
        self._request(request_id, "start", "system")

    def fail_before_start(self, request_id: str, *, reason: str) -> None:
        self._request(request_id, "fail_before_start", "system")

    def resume(self, request_id: str, *, by: str) -> None:
        self._request(request_id, "resume", "operator")

    def confirm_failed(self, request_id: str, *, by: str, evidence: str) -> None:
        self._request(request_id, "confirm_failed", "operator")

    def confirm_completed(self, request_id: str, *, by: str, evidence: str) -> None:
        self._request(request_id, "confirm_completed", "operator")

    def cancel(self, request_id: str, *, by: str) -> None:
        with self.session(request_id) as s:
            s.move_request("cancel", "operator")
            for name, record in s.nodes().items():
                if record.state in ("blocked", "ready"):
                    s.move_node(name, record, "cancel", "operator")
                elif record.state in ("preparing", "awaiting_signature"):
                    s.move_node(name, record, "fail", "executor")

    def complete_manual(self, request_id: str, *, node: str, by: str) -> None:
        with self.session(request_id) as s:
            self.pass_gates(s, request_id, node, [node])

    @staticmethod
    def pass_gates(s: Session, request_id: str, node: str, gates: list[str]) -> None:
        """An operator passed ``node``, a ready gate: the request resumes, and ``gates``
        (the careful engine: ``node`` alone) are passed."""
        gate = s.node(node)
        if not node.startswith(GATE) or gate.state != "ready":
            raise Refused(f"{node} is not a ready manual gate")
        if s.request.state == "waiting_manual_action":
            s.move_request("resume", "operator")
        if s.mode() != "dispatch":
            raise Refused(f"request {request_id} is {s.request.state}")
        for name in gates:
            record = s.node(name)
            for trigger in ("prepare", "submit", "complete"):
                record = s.move_node(name, record, trigger, "executor")

    def sign(self, request_id: str, *, node: str, by: str) -> None:
        with self.session(request_id) as s:
            record = s.node(node)
            if s.mode() != "dispatch":
                raise Refused(f"request {request_id} is {s.request.state}")
            sent = self.mark_sent(s, node, record, "sign", "signer")
        self.send(request_id, node, sent)

    def refuse_signature(self, request_id: str, *, node: str, by: str, reason: str) -> None:
        with self.session(request_id) as s:
            s.move_node(node, s.node(node), "fail", "signer")

    def retry(self, request_id: str, *, node: str, reason: str) -> None:
        with self.session(request_id) as s:
            s.move_node(node, s.node(node), "retry", "executor")

    def skip(self, request_id: str, *, node: str, by: str, reason: str) -> None:
        if node.startswith("manual_"):
            raise Refused(f"{node} is a manual gate: only an operator passes it")
        with self.session(request_id) as s:
            if s.request.state != "executing":
                raise Refused(f"request {request_id} is {s.request.state}")
            s.move_node(node, s.node(node), "skip", "planner")

    def reconcile(self, request_id: str, *, node: str, by: str, evidence: str) -> None:
        trigger = RECONCILED.get(evidence)
        if trigger is None:
            raise Refused(f"no such reading: {evidence!r}")
        with self.session(request_id) as s:
            s.move_node(node, s.node(node), trigger, "reconciler")

    # -- stepping -------------------------------------------------------------------------------

    def step(self, request_id: str) -> None:
        with self.session(request_id) as s:
            seen = s.nodes()
        for name, record in seen.items():
            self.advance(request_id, name, record)

    def advance(self, request_id: str, name: str, seen: Record) -> None:
        """One move of one node, if nobody moved it since the step read it."""
        call = None
        with self.session(request_id) as s:
            record = self.current(s, name, seen)
            if record is None:
                return
            mode, state = s.mode(), record.state
            if state in ("ready", "preparing", "awaiting_signature") and mode == "halt":
                s.move_node(name, record, "fail", "executor")  # abandoned: nothing was sent
            elif state == "ready" and mode == "dispatch" and not record.data["gate"]:
                if record.data["kind"] == "observe":
                    s.move_node(name, record, "start_observing", "observer")
                else:
                    s.move_node(name, record, "prepare", "executor")
            elif state == "submitting":
                self.timed_out(s, name, record)
            elif state == "preparing" and mode == "dispatch":
                call = "prepare"
            elif state in ("submitted", "observing") and mode != "idle":
                call = "observe"
        if call == "prepare":
            self.prepare(request_id, name, record)
        elif call == "observe":
            self.observe(request_id, name, record)

    def timed_out(self, s: Session, name: str, record: Record) -> None:
        """A submit out longer than the timeout never reported back: the money may have
        moved, so the node is unknown until a reconciler reads the venue's records."""
        if self.clock() - record.data["sent_at"] >= SUBMIT_TIMEOUT:
            s.move_node(name, record, "lose_track", "executor")

    def prepare(self, request_id: str, name: str, seen: Record) -> None:
        try:
            answer = self.venue.prepare(Node(request_id, name))  # type: ignore[arg-type]
        except Exception:
            answer = "fail"
        if answer == "submit":
            with self.session(request_id) as s:
                record = self.current(s, name, seen)
                if record is None or s.mode() != "dispatch":
                    return
                sent = self.mark_sent(s, name, record, "submit", "executor")
            self.send(request_id, name, sent)
            return
        trigger = {"sign": "request_signature", "retry": "retry"}.get(answer, "fail")
        self.record(request_id, name, seen, trigger, "executor", "dispatch")

    def mark_sent(self, s: Session, name: str, record: Record, trigger: str, actor: str) -> Record:
        """Into submitting, durably, before the venue is called."""
        record = s.move_node(name, record, trigger, actor)
        record.data["sent_at"] = self.clock()
        s.tx.put(node_key(s.id, name), record)
        return record

    def send(self, request_id: str, name: str, sent: Record) -> None:
        """Call submit once; an exception means the money may have moved."""
        try:
            answer = self.venue.submit(Node(request_id, name))  # type: ignore[arg-type]
        except Exception:
            answer = "unknown"
        self.record(request_id, name, sent, SUBMITTED.get(answer, "lose_track"), "executor")

    def observe(self, request_id: str, name: str, seen: Record) -> None:
        try:
            answer = self.venue.observe(Node(request_id, name))  # type: ignore[arg-type]
        except Exception:
            answer = "unknown"
        if answer == "pending":
            if seen.state == "submitted":
                self.record(request_id, name, seen, "start_observing", "observer")
            return
        self.record(request_id, name, seen, OBSERVED.get(answer, "lose_track"), "observer")

    def record(
        self, request_id: str, name: str, seen: Record, trigger: str, actor: str, mode: str = ""
    ) -> None:
        """Apply an executor's answer, unless someone moved the node meanwhile (or, with
        ``mode``, the request left it)."""
        with self.session(request_id) as s:
            record = self.current(s, name, seen)
            if record is not None and (not mode or s.mode() == mode):
                s.move_node(name, record, trigger, actor)


# -- the adapter ------------------------------------------------------------------------------


class ZooAdapter(TransferAdapter):
    """Two engines of class ``engine`` on one disk, behind the suite's contract."""

    engine: type[Engine] = Engine

    def __init__(self, venue: Venue) -> None:
        self.disk = Disk()
        self.now = 1_000.0
        self.engines = {
            name: self.engine(self.disk, venue, name=name, clock=lambda: self.now)
            for name in ENGINES
        }

    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        if operation.startswith("_") or operation in ("step", "advance"):
            raise Refused(f"no operation {operation}")
        getattr(self.engines[ENGINES[0]], operation)(request_id, **arguments)

    def step(self, request_id: str, engine: str) -> None:
        self.engines[engine].step(request_id)

    def request_state(self, request_id: str) -> str | None:
        found = self.disk.read(request_key(request_id))
        return None if found is None else found.state

    def node_states(self, request_id: str) -> dict[str, str]:
        request = self.disk.read(request_key(request_id))
        if request is None:
            return {}
        names = [n["name"] for n in request.data["plan"]]
        return {n: self.disk.records[node_key(request_id, n)].state for n in names}

    def history(self, request_id: str) -> EngineHistory | None:
        request = self.disk.read(request_key(request_id))
        if request is None:
            return EngineHistory([], {})
        names = [n["name"] for n in request.data["plan"]]
        nodes = {n: list(self.disk.records[node_key(request_id, n)].history) for n in names}
        return EngineHistory(list(request.history), nodes)

    def fingerprint(self) -> object:
        return self.disk.commits

    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    def fail_next_write(self, how: Fault | None) -> None:
        self.disk.fail_next = how

    def check(self) -> list[str]:
        return []


# -- the bugs: Engine with one realistic mistake each ------------------------------------------


class ResendsAfterTimeout(Engine):
    """A submit that never reported back is sent again ("the venue must have dropped it")
    instead of being declared unknown."""

    def timed_out(self, s: Session, name: str, record: Record) -> None:
        if self.clock() - record.data["sent_at"] >= SUBMIT_TIMEOUT:
            self.resend.append((s.id, name, record))

    def advance(self, request_id: str, name: str, seen: Record) -> None:
        self.resend: list[tuple[str, str, Record]] = []
        super().advance(request_id, name, seen)
        for request, node, record in self.resend:
            self.send(request, node, record)


class RetriesTransientErrors(Engine):
    """A submit that raised a connection error is retried at once: the error does not
    prove the call was not sent (the double charge)."""

    def send(self, request_id: str, name: str, sent: Record) -> None:
        node = Node(request_id, name)
        try:
            answer = self.venue.submit(node)  # type: ignore[arg-type]
        except ConnectionError:
            try:
                answer = self.venue.submit(node)  # type: ignore[arg-type]
            except Exception:
                answer = "unknown"
        except Exception:
            answer = "unknown"
        self.record(request_id, name, sent, SUBMITTED.get(answer, "lose_track"), "executor")


class MarksSentAfterTheCall(Engine):
    """The node is marked submitting only once the venue answered, so a crash or a second
    engine during the call finds it still preparing and sends it again."""

    def prepare(self, request_id: str, name: str, seen: Record) -> None:
        try:
            answer = self.venue.prepare(Node(request_id, name))  # type: ignore[arg-type]
        except Exception:
            answer = "fail"
        if answer != "submit":
            trigger = {"sign": "request_signature", "retry": "retry"}.get(answer, "fail")
            self.record(request_id, name, seen, trigger, "executor", "dispatch")
            return
        try:
            sent = self.venue.submit(Node(request_id, name))  # type: ignore[arg-type]
        except Exception:
            sent = "unknown"
        with self.session(request_id) as s:
            record = self.current(s, name, seen)
            if record is None:
                return
            record = self.mark_sent(s, name, record, "submit", "executor")
            s.move_node(name, record, SUBMITTED.get(sent, "lose_track"), "executor")


class LastWriterWins(Engine):
    """No compare-and-set: a step writes the node as it read it at the start of the step,
    over whatever another engine did meanwhile."""

    def current(self, s: Session, name: str, seen: Record) -> Record | None:
        return Record(seen.state, dict(seen.data), list(seen.history), seen.version)


class FailsOnSiblingFailure(Engine):
    """The seed's flowchart taken literally: a failed node fails the transfer unless money
    already *arrived*; money still in flight is not counted, neither by the derivation
    nor by the guard context."""

    @staticmethod
    def money(nodes: Mapping[str, Record]) -> str:
        done = any(n.data["side_effect"] and n.state == "completed" for n in nodes.values())
        return "started" if done else "none"

    @staticmethod
    def derive(nodes: Sequence[tuple[str, str, bool]]) -> str | None:
        states = [s for _, s, _ in nodes]
        moved = any(se and s == "completed" for _, s, se in nodes)
        if any(s in STOPPED for s in states) and not moved:
            return "failed"
        return Engine.derive(nodes)


class AbandonsSentNodes(Engine):
    """Once a node failed, the plan is aborted: every unfinished node is failed, also the
    ones already sent ("the transfer is dead anyway")."""

    def tidy(self, session: Session) -> None:
        nodes = session.nodes()
        if any(n.state in STOPPED for n in nodes.values()):
            for name, record in nodes.items():
                if record.state in ("submitted", "observing"):
                    session.move_node(name, record, "fail", "observer")
                elif record.state == "submitting":
                    session.move_node(name, record, "fail", "executor")
        super().tidy(session)


class CancelsWithMoneyInFlight(Engine):
    """Cancellation checks only that no money *arrived*, so an operator can cancel (and
    release the reservation) while a withdrawal is being sent."""

    def cancel(self, request_id: str, *, by: str) -> None:
        with self.session(request_id) as s:
            moved = any(
                n.data["side_effect"] and n.state == "completed" for n in s.nodes().values()
            )
            if moved:
                raise Refused("money moved")
            request = s.request
            dest = REQUEST.step(request.state, "cancel", actor="operator", side_effects="none")
            request.history.append(Move(request.state, "cancel", dest, "operator"))
            request.state, request.version = dest, request.version + 1
            s.tx.put(request_key(s.id), request)
            self.announce(s, dest)
            for name, record in s.nodes().items():
                if record.state in ("blocked", "ready"):
                    s.move_node(name, record, "cancel", "operator")


class CompletesWhenTheMoneyArrived(Engine):
    """The transfer is completed as soon as every node that moves money completed; the
    observations after it are not waited for."""

    @staticmethod
    def derive(nodes: Sequence[tuple[str, str, bool]]) -> str | None:
        money = [s for _, s, se in nodes if se]
        if money and all(s == "completed" for s in money):
            return "completed"
        return Engine.derive(nodes)


class AnnouncesEveryTime(Engine):
    """The completion callback is fired whenever a transaction finds the request
    completed, not once when it becomes so."""

    def announce(self, session: Session, dest: str) -> None:
        if dest != "completed":
            super().announce(session, dest)
        else:
            session.reservation = "consumed"

    @contextmanager
    def session(self, request_id: str) -> Iterator[Session]:
        with super().session(request_id) as s:
            yield s
        if s.request.state == "completed":
            self.venue.callback("request_completed", request_id, {"state": "completed"})


class AnnouncesNothing(Engine):
    """Neither the callbacks nor the reservation are ever announced (outsider batch 25: it
    passed, since none of zero announcements was left unpaired)."""

    def publish(self, s: Session, request_id: str) -> None:
        return None


class NotesBeforeChecking(Engine):
    """An operator's approval is written to the request (who approved) before the engine
    checks that the request can be approved now."""

    def approve(self, request_id: str, *, by: str) -> None:
        with self.disk.transaction() as tx:
            request = tx.get(request_key(request_id))
            if request is None:
                raise Refused(f"no request {request_id}")
            request.data["approved_by"] = by
            tx.put(request_key(request_id), request)
        super().approve(request_id, by=by)


class ObservesStraightAway(Engine):
    """An observe node whose predecessors are done is put to observing in one go, saving
    a step: blocked --start_observing--> observing, an edge the definition does not have."""

    def tidy(self, session: Session) -> None:
        nodes = session.nodes()
        for name, record in nodes.items():
            after = record.data["after"]
            ready = record.state == "blocked" and all(done(nodes, p) for p in after)
            if ready and record.data["kind"] == "observe" and after:
                record.history.append(Move("blocked", "start_observing", "observing", "observer"))
                record.state, record.version = "observing", record.version + 1
                session.tx.put(node_key(session.id, name), record)
        super().tidy(session)


class DispatchesTheGate(Engine):
    """A manual gate is dispatched like any ready node ("the gate's executor knows
    whether it was approved"): it reaches an executor before any operator passed it."""

    def advance(self, request_id: str, name: str, seen: Record) -> None:
        if seen.data["gate"] and seen.state == "ready":
            with self.session(request_id) as s:
                record = self.current(s, name, seen)
                if record is not None and s.mode() == "dispatch":
                    s.move_node(name, record, "prepare", "executor")
            return
        super().advance(request_id, name, seen)


class AbandonsSentWork(Engine):
    """Once a node failed, every node still on its way is abandoned, also one whose
    submit is out ("it moves no money anyway")."""

    def timed_out(self, s: Session, name: str, record: Record) -> None:
        if s.mode() == "halt":
            s.move_node(name, record, "fail", "executor")
            return
        super().timed_out(s, name, record)


class ReleasesOnFailure(Engine):
    """The reservation is given back to the limits service as soon as a node fails
    ("the transfer is not going through"), before the request ends."""

    def record(
        self, request_id: str, name: str, seen: Record, trigger: str, actor: str, mode: str = ""
    ) -> None:
        super().record(request_id, name, seen, trigger, actor, mode)
        request = self.disk.read(request_key(request_id))
        if trigger == "fail" and request is not None and request.state not in RELEASING:
            self.venue.reservation(request_id, "released")


class AnnouncesBeforeCommit(Engine):
    """Callbacks and the reservation are announced as soon as the transaction decided
    them, before it commits ("the commit never fails")."""

    @contextmanager
    def session(self, request_id: str) -> Iterator[Session]:
        with self.disk.transaction() as tx:
            s = Session(self, tx, request_id)
            yield s
            s.settle()
            self.publish(s, request_id)


class WakesOnAnyPredecessor(Engine):
    """A blocked node wakes as soon as one of its predecessors is done ("the first
    result is enough to go on")."""

    def tidy(self, session: Session) -> None:
        nodes = session.nodes()
        woken = []
        for name, record in nodes.items():
            after = record.data["after"]
            if record.state == "blocked" and (
                not after or any(nodes[p].state in DONE for p in after)
            ):
                session.move_node(name, record, "wake", "planner")
                woken.append(name)
        if woken:
            session.fired.append(("frontier_advanced", {"woken": woken}))


class KeepsGoingAfterFailure(Engine):
    """Only a cancelled node stops the plan; after a failed one, the engine keeps
    dispatching ("the derivation will sort it out")."""

    @staticmethod
    def stops(nodes: Mapping[str, Record]) -> bool:
        return any(n.state == "cancelled" for n in nodes.values())


class StopsFollowingAfterFailure(Engine):
    """Once the plan cannot finish, the engine stops asking the venue about work in
    flight ("a person will look at it anyway")."""

    def observe(self, request_id: str, name: str, seen: Record) -> None:
        with self.session(request_id) as s:
            mode = s.mode()
        if mode == "dispatch":
            super().observe(request_id, name, seen)


class NeverFollows(Engine):
    """Never asks the venue about work in flight ("the venue calls us back"): a request
    whose withdrawal the venue accepted stays in flight for good, its reservation held
    and nobody told (outsider batch 32, b 1)."""

    def observe(self, request_id: str, name: str, seen: Record) -> None:
        return None


class PassesABlockedGate(Engine):
    """An operator's pass of a manual gate is taken while the gate still waits for the
    nodes before it ("the operator knows best"): the deposit after it goes out while the
    quote is still observing (outsider batch 44, c B2)."""

    def complete_manual(self, request_id: str, *, node: str, by: str) -> None:
        with self.session(request_id) as s:
            gate = s.node(node)
            if node.startswith(GATE) and gate.state == "blocked" and s.mode() == "dispatch":
                s.move_node(node, gate, "wake", "planner")
        super().complete_manual(request_id, node=node, by=by)


class ForgetsReconciledWork(Engine):
    """A node a reconciler found "submitted" (the money on its way) is never asked about
    again ("the reconciler will say when it lands"): the request stays executing for good
    (outsider batch 44, c B3)."""

    def observe(self, request_id: str, name: str, seen: Record) -> None:
        if any(m.trigger == "reconcile_submitted" for m in seen.history):
            return
        super().observe(request_id, name, seen)


class PassesEveryReadyGate(Engine):
    """One operator's pass passes every gate that is ready, not only the one they passed
    (outsider batch 44, c B4: no plan of the suite had two gates)."""

    def complete_manual(self, request_id: str, *, node: str, by: str) -> None:
        with self.session(request_id) as s:
            ready = [n for n, r in s.nodes().items() if n.startswith(GATE) and r.state == "ready"]
            self.pass_gates(s, request_id, node, ready)


@dataclass(frozen=True)
class Bug:
    engine: type[Engine]
    rules: tuple[str, ...]
    """The rules of ``machines.testing.transfer.oracle.RULES`` the suite may name for it:
    a bug can break more than one promise, the first one listed is the one it is about."""


def bug(engine: type[Engine], *rules: str) -> Bug:
    return Bug(engine, rules)


MONEY, ONCE = "money-in-flight-held", "submit-once"
SENT, GATED, RESERVED = "sent-work-kept", "gate-waits-for-operator", "reservation-with-the-end"
BUGS: Mapping[str, Bug] = {
    "resends after a timeout": bug(ResendsAfterTimeout, ONCE),
    "retries a transient error after sending": bug(RetriesTransientErrors, ONCE),
    "marks a node sent after the call": bug(MarksSentAfterTheCall, ONCE, MONEY),
    "no compare-and-set between engines": bug(
        LastWriterWins, ONCE, "legal-history", "in-flight-followed", MONEY
    ),
    "fails the transfer when a sibling fails": bug(FailsOnSiblingFailure, MONEY),
    "abandons sent nodes": bug(AbandonsSentNodes, MONEY, SENT),
    "cancels with money in flight": bug(CancelsWithMoneyInFlight, MONEY),
    "completes before the observations": bug(CompletesWhenTheMoneyArrived, "completion-means-done"),
    "announces completion every time": bug(AnnouncesEveryTime, "callbacks-once"),
    "announces nothing": bug(AnnouncesNothing, RESERVED),
    "a refused approval still writes": bug(NotesBeforeChecking, "refusal-changes-nothing"),
    "skips the ready state": bug(ObservesStraightAway, "legal-history"),
    "dispatches the manual gate": bug(DispatchesTheGate, GATED),
    "abandons sent work that moves no money": bug(AbandonsSentWork, SENT, MONEY),
    "releases the reservation when a node fails": bug(ReleasesOnFailure, RESERVED, MONEY),
    "announces before the commit": bug(AnnouncesBeforeCommit, "callbacks-once", RESERVED),
    "wakes a node on any predecessor": bug(WakesOnAnyPredecessor, "after-predecessors"),
    "keeps dispatching after a failure": bug(KeepsGoingAfterFailure, "halt-after-failure", MONEY),
    "stops following after a failure": bug(
        StopsFollowingAfterFailure, "in-flight-followed", "in-flight-asked"
    ),
    "never follows": bug(NeverFollows, "in-flight-asked", "in-flight-followed"),
    "passes a gate before its turn": bug(PassesABlockedGate, "after-predecessors"),
    "forgets reconciled work": bug(ForgetsReconciledWork, "in-flight-asked", "in-flight-followed"),
    "passes every ready gate": bug(
        PassesEveryReadyGate, "after-predecessors", "completion-means-done"
    ),
}
"""The zoo: what each engine gets wrong, and the rules the suite may report for it."""


def adapter_for(engine: type[Engine]) -> type[ZooAdapter]:
    """The adapter class running two instances of ``engine``."""
    return type(f"{engine.__name__}Adapter", (ZooAdapter,), {"engine": engine})
