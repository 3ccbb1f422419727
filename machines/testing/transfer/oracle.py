"""The transfer suite's oracle: what the suite itself saw, and the rules judged from that.

An engine under test reports many things about itself (its request state, its
reservation, who made the last move); a buggy engine reports them wrongly as easily as it
behaves wrongly. So the suite keeps its own ledger of everything it can see from the
outside, and judges from that alone:

- every venue call and its answer, per node, with who made it (which engine, stepping
  which request, or which operation was under way), and every call to the gate desk;
- every callback the engine fired, with its payload, and every reservation it announced
  released or consumed;
- every operation the suite asked for and what it was told: done, refused (with the
  error's type) or interrupted (a store fault or a crash);
- what reconcilers read from the venue's records, and what operators and planners did.

From that, each node has a *word*: the last thing the venue, a reconciler, an operator or
a planner said about its outcome ("completed", "failed", "skipped", an exception's name,
...). A failure or an acceptance heard in a step or operation counts for the rules about
what the engine does next (halt, follow) only once that step ended normally: a failed
write or a crash may have kept the engine from recording it. Money may be moving for a
node with a side effect once its ``submit`` went out, until its word is "failed". The
rules (``RULES``) are judged when the engine announces something (a callback, a
reservation, a new move in the history it exposes), at each venue call and after every
step; a
breach is reported by one ``machines.testing.verdict.RuleBroken`` whose message starts
with the rule's name.

The histories an engine exposes are judged as they grow (``history``), by the
bundled definitions, never by the definitions the engine runs on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from machines.errors import message_of
from machines.spec.registry import judged_by, policies_of
from machines.testing.transfer.history import (
    EngineHistory as EngineHistory,  # docs/api.md names it here
)
from machines.testing.transfer.history import Histories
from machines.testing.transfer.watch import (
    DONE_WORDS,
    FAILED,
    IN_FLIGHT,
    SUBMIT_TIMEOUT,
    SUBMITTED,
    WORDS_OF,
    NodeWatch,
    Operation,
)
from machines.testing.verdict import Move, RuleBroken, promised

RULES: Mapping[str, str] = judged_by("transfer suite")
POLICIES: frozenset[str] = policies_of("transfer suite")
"""The rules that are this package's policies, judged unless a suite leaves them out
(``TransferSuite.policies``)."""
"""Every rule the transfer suite judges, by the name its failure message starts with (what
each promises: ``machines.spec.registry``)."""

RELEASES = "request_failed"
CONSUMES = "request_completed"
OPERATOR_CONFIRMS = {RELEASES: "confirm_failed", CONSUMES: "confirm_completed"}
"""The operator's act that may override each rule about an announcement."""
FOLLOW_WITHIN = SUBMIT_TIMEOUT
"""How long, on the suite's clock, work in flight may go unasked about before a step must
ask, unless a suite declares its engine's own bound (``TransferSuite.follow_within``): the
submit timeout."""
EXCERPT = 14
"""How many lines of what the suite saw a failure report quotes."""


class Ledger:
    """Everything the suite saw, in order, and the first rule it saw broken."""

    def __init__(
        self, policies: frozenset[str] = POLICIES, follow_within: float = FOLLOW_WITHIN
    ) -> None:
        self.left_out = POLICIES - policies
        self.follow_within = follow_within
        self.histories = Histories()
        self.nodes: dict[tuple[str, str], NodeWatch] = {}
        self.plans: dict[str, tuple[str, ...]] = {}
        self.fired: Counter[tuple[str, str]] = Counter()
        self.confirmed: dict[str, set[str]] = {}
        self.operation: Operation | None = None
        self.doing = "setting up"
        self.activity = 0  # venue calls and callbacks so far
        self.log: list[tuple[str, str]] = []
        self.passed: set[tuple[str, str]] = set()  # gates an operator passed (or is passing)
        self.reserved: Counter[tuple[str, str]] = Counter()  # (what, request) announced
        self.heard: list[tuple[str, str, str]] = []  # (request, node, fact) not yet confirmed
        self.halted: set[str] = set()  # requests a node of which surely failed
        self.started: set[str] = set()
        self.interruptions = 0  # steps and operations ended by a crash or a failed write
        self.breach: RuleBroken | None = None
        self.now = 0.0  # the suite's clock: how far it has advanced the engine's

    # -- what happens ---------------------------------------------------------------------

    def planned(self, request: str, plan: Sequence[Mapping[str, Any]]) -> None:
        """The suite submitted ``request`` with ``plan``."""
        self.plans[request] = tuple(n["name"] for n in plan)
        for n in plan:
            self.nodes[(request, n["name"])] = NodeWatch(
                bool(n["has_side_effect"]),
                n["kind"],
                n["executor"] != "venue",
                tuple(n["after"]),
            )

    def venue_call(self, request: str, node: str, call: str, desk: bool = False) -> NodeWatch:
        """The engine called the venue (``desk``: the gate desk); for ``submit``, the
        operation went out. A new submit or observe call voids the last word: what the
        venue says now counts."""
        self.activity += 1
        watch = self._node(request, node)
        self._in_order(request, node, call)
        if desk or watch.gate:
            self._gate_called(request, node, watch, call, desk)
            return watch
        if call in ("prepare", "submit") and request in self.halted:
            self.broken(
                "halt-after-failure",
                request,
                f"{node}.{call}() was called after a node of {request} failed",
            )
        if call == "observe":
            watch.observed += 1
            watch.asked_at = self.now
        if call != "prepare":
            watch.word = None
        if call == "submit":
            watch.sends.append(self.doing)
            if len(watch.sends) > 1:
                sends = "; ".join(f"#{i} {who}" for i, who in enumerate(watch.sends, 1))
                self.broken("submit-once", request, f"{node}: submit() called again: {sends}")
        return watch

    def _gate_called(
        self, request: str, node: str, watch: NodeWatch, call: str, desk: bool
    ) -> None:
        where = "the gate desk" if desk else "the venue"
        self.note(request, f"{where}: {node}.{call}()   [{self.doing}]")
        if not watch.gate:
            self.broken(
                "gate-waits-for-operator",
                request,
                f"{node} is not a manual gate, yet {where} got it",
            )
        elif not desk:
            self.broken(
                "gate-waits-for-operator",
                request,
                f"the manual gate {node} was handed to the venue ({call})",
            )
        elif (request, node) not in self.passed:
            self.broken(
                "gate-waits-for-operator",
                request,
                f"the manual gate {node} was handed to the gate desk ({call}) although no "
                "operator passed it (no accepted complete_manual)",
            )

    def _in_order(self, request: str, node: str, call: str) -> None:
        """Every node ``node`` comes after is done, however far back: a skipped node or a
        gate an operator passed says nothing of the nodes before it (a skip leaves the
        plan, not its order; outsider batch 44, c B2: a gate passed while its predecessor
        was still observing let the deposit go out unnoticed)."""
        undone, seen, stack = {}, set(), list(self._node(request, node).after)
        while stack:
            n = stack.pop()
            if n in seen or (request, n) not in self.nodes:
                continue
            seen.add(n)
            if not self._done(request, n):
                undone[n] = self.nodes[(request, n)].said()
            stack.extend(self._node(request, n).after)
        if undone:
            self.broken(
                "after-predecessors",
                request,
                f"{node}.{call}() was called while nodes it comes after are not done: {undone}",
            )

    def _done(self, request: str, node: str) -> bool:
        """The node's last word is done; a manual gate's only when an operator passed it
        (a skip passes a gate with nobody's action)."""
        watch = self.nodes[(request, node)]
        if watch.gate and watch.word == "skipped":
            return False
        return watch.word in DONE_WORDS

    def gate_passed(self, request: str, node: str) -> bool:
        """Whether an operator's complete_manual for gate ``node`` was asked and not refused."""
        return (request, node) in self.passed

    def venue_answer(self, request: str, node: str, call: str, answer: str) -> None:
        """What the venue answered (or the exception it raised, by name)."""
        watch = self._node(request, node)
        if call != "prepare" and answer != "pending" and not watch.gate:
            watch.word = answer
        if call != "prepare" and not watch.gate:
            going = answer == ("accepted" if call == "submit" else "pending")
            if going:
                self.heard.append((request, node, IN_FLIGHT))
            else:
                watch.following = False
            if answer == FAILED:
                self.heard.append((request, node, FAILED))
        self.note(request, f"venue: {node}.{call}() -> {answer}   [{self.doing}]")

    def venue_escaped(self, request: str, node: str, call: str, error: BaseException) -> None:
        """The call ended in ``error``, which escaped from another engine's step run while
        it was out (not the venue's word): the caller was told nothing the venue said, so
        the node is no longer followed, and its last word stays void."""
        self._node(request, node).following = False
        self.note(
            request, f"venue: {node}.{call}() -> {type(error).__name__} escaped   [{self.doing}]"
        )

    def interrupted(self) -> None:
        """A step or operation ended by a failed write or a crash: what was heard in it
        may never have been recorded, so it confirms nothing."""
        self.interruptions += 1
        self.heard.clear()

    def confirm(self) -> None:
        """What was heard in the step or operation that just ended normally holds (the
        engine went on after it, so it recorded it): a failure halts the request, an
        acceptance is followed."""
        for request, node, fact in self.heard:
            watch = self.nodes.get((request, node))
            if fact == FAILED:
                self.halted.add(request)
            elif watch is not None and watch.word in (None, "accepted", SUBMITTED):
                if not watch.following:
                    watch.asked_at = self.now
                watch.following = True
        self.heard.clear()

    def following(self, request: str) -> dict[str, int]:
        """The nodes of ``request`` a step must ask about (node -> observe calls so far):
        none once the request ended or if it never started."""
        ended = any(self.fired[(name, request)] for name in OPERATOR_CONFIRMS)
        if request not in self.started or ended:
            return {}
        return {
            name: self.nodes[(request, name)].observed
            for name in self.plans.get(request, ())
            if self.nodes[(request, name)].following
        }

    def waited(self, seconds: float) -> None:
        """The suite advanced the engine's clock by ``seconds``."""
        self.now += seconds

    def stepped(self, request: str, before: Mapping[str, int]) -> None:
        """A step of ``request`` ended normally: each node it had to follow was asked about
        (a policy), and surely each the venue was last asked about more than
        ``follow_within`` seconds ago (a guarantee: an engine may back off, not stop)."""
        skipped = [n for n, calls in before.items() if self.nodes[(request, n)].observed == calls]
        late = [
            n for n in skipped if self.now - self.nodes[(request, n)].asked_at > self.follow_within
        ]
        if late and self.following(request):
            self.broken(
                "in-flight-asked",
                request,
                f"a step of {request} ended without asking the venue about {', '.join(late)}, "
                "in flight with no final word and not asked about for over "
                f"{self.follow_within:g} s",
            )
        if skipped and self.following(request):  # not if the request ended meanwhile
            self.broken(
                "in-flight-followed",
                request,
                f"a step of {request} ended without asking the venue about {', '.join(skipped)}, "
                "in flight (accepted or pending) with no final word",
            )

    def reservation(self, request: object, what: object) -> None:
        """The engine announced that it released or consumed ``request``'s reservation."""
        self.activity += 1
        key = request if isinstance(request, str) else f"<{type(request).__name__}>"
        shown = what if what in ("released", "consumed") else f"<{type(what).__name__}>"
        self.note(key, f"reservation({key}) -> {shown}")
        if key not in self.plans or shown not in ("released", "consumed"):
            whose = key if key in self.plans else "a request never submitted"
            self.broken(
                "reservation-with-the-end", key, f"venue.reservation() got {shown} for {whose}"
            )
            return
        self.reserved[(shown, key)] += 1
        if shown == "released":
            self._announced(key, RELEASES, "the release of the reservation")

    def paired(self) -> None:
        """Between steps: each release or consumption announced comes with its callback."""
        for request in self.plans:
            for what, callback in (("released", RELEASES), ("consumed", CONSUMES)):
                said, fired = self.reserved[(what, request)], self.fired[(callback, request)]
                if said > 1 or said != fired:
                    self.broken(
                        "reservation-with-the-end",
                        request,
                        f"the reservation was announced {what} {said}x, {callback} fired {fired}x",
                    )
                    return

    def ended(self, request: str, state: str) -> None:
        """Between steps, ``request`` is in ``state`` (as the engine says, or its history
        shows): a request that ended in a state that releases or consumes its reservation
        was announced so, callback and reservation both, once the run has had no crash or
        failed write that could have lost them (outsider batch 25: an engine that
        announced nothing passed, since none of zero announcements was unpaired)."""
        if self.interruptions or request in self.confirmed:
            return
        for states, what, callback in (
            (self.histories.releases, "released", RELEASES),
            (self.histories.consumes, "consumed", CONSUMES),
        ):
            if state in states and not (
                self.reserved[(what, request)] and self.fired[(callback, request)]
            ):
                self.broken(
                    "reservation-with-the-end",
                    request,
                    f"it reads {state} (ended, as the adapter says), yet the reservation was "
                    f"announced {what} "
                    f"{self.reserved[(what, request)]}x and {callback} fired "
                    f"{self.fired[(callback, request)]}x",
                )

    def callback(self, name: str, request: object, payload: object) -> None:
        """The engine fired callback ``name`` for ``request``."""
        self.activity += 1
        key = request if isinstance(request, str) else f"<{type(request).__name__}>"
        self.note(key, f"callback {name}({key})")
        if name not in OPERATOR_CONFIRMS:
            return
        if key not in self.plans:
            self.broken("callbacks-once", key, f"{name} fired for a request never submitted")
            return
        self.fired[(name, key)] += 1
        counts = {n: self.fired[(n, key)] for n in OPERATOR_CONFIRMS}
        if counts[name] > 1:
            self.broken("callbacks-once", key, f"{name} fired {counts[name]} times")
        elif all(counts.values()):
            self.broken("callbacks-once", key, "both request_completed and request_failed fired")
        self._announced(key, name, f"callback {name}")

    def begin(self, request: str, name: str, arguments: Mapping[str, Any]) -> None:
        """The suite asks for operation ``name``; its word (a reconciler's reading, a skip,
        a gate passed) and an operator's confirmation count from now, undone if refused."""
        node = arguments.get("node") if isinstance(arguments.get("node"), str) else None
        op = Operation(request, name, node, self.activity)
        word = arguments.get("evidence") if name == "reconcile" else WORDS_OF.get(name)
        if node is not None and isinstance(word, str) and (request, node) in self.nodes:
            watch = self.nodes[(request, node)]
            op.undo = (node, watch.word)
            watch.word = word
        if name in OPERATOR_CONFIRMS.values():
            self.confirmed.setdefault(request, set()).add(name)
        if name == "complete_manual" and node is not None:
            op.passes = (request, node) not in self.passed
            self.passed.add((request, node))
        self.confirm()
        self.paired()
        if name == "reconcile" and node is not None and word in (FAILED, SUBMITTED):
            self.heard.append((request, node, FAILED if word == FAILED else IN_FLIGHT))
        self.operation = op
        self.doing = f"{name}({request}{', ' + node if node else ''})"
        shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items() if isinstance(v, str))
        self.note(request, f"asks {self.doing}{': ' + shown if shown else ''}")

    def end(self, told: str, error: BaseException | None = None, wrote: bool = False) -> None:
        """What the operation under way was told: "done", "refused" (``error``, and
        whether it ``wrote`` anyway) or "interrupted"."""
        op, self.operation = self.operation, None
        if told != "done":
            self.interrupted()
        if op is None:
            return
        op.told = told
        detail = f" ({type(error).__name__}: {message_of(error, 200)})" if error else ""
        self.note(op.request, f"  -> {told}{detail}")
        self.doing = "between steps"
        if told == "done":
            self.confirm()
            if op.name == "start":
                self.started.add(op.request)
            if op.name == "complete_manual" and op.node is not None and op.passes:
                self._in_order(op.request, op.node, "complete_manual")  # a gate has its turn
        if told != "refused":
            return
        if op.undo is not None:
            node, word = op.undo
            self.nodes[(op.request, node)].word = word
        if op.name in OPERATOR_CONFIRMS.values():
            self.confirmed.get(op.request, set()).discard(op.name)
        if op.passes and op.node is not None:
            self.passed.discard((op.request, op.node))
        what = []
        if self.activity != op.activity:
            what.append("called the venue or fired a callback")
        if wrote:
            what.append("wrote something (the adapter's fingerprint changed)")
        if what:
            self.broken(
                "refusal-changes-nothing",
                op.request,
                f"{op.name} was refused{detail} but {' and '.join(what)}",
            )

    def stepping(self, engine: str, request: str) -> None:
        self.confirm()
        self.paired()
        self.doing = f"{engine} steps {request}"
        self.note(request, self.doing)

    # -- judging --------------------------------------------------------------------------

    def recorded(self, request: str, history: object) -> None:
        """The history the engine exposes for ``request`` (an ``EngineHistory``, anything
        else a breach): judge what is new in it."""
        nodes = history.nodes if isinstance(history, EngineHistory) else None
        if not isinstance(nodes, Mapping) or not all(isinstance(n, str) for n in nodes):
            self.broken(
                "legal-history",
                request,
                f"history() returned a {type(history).__name__}, not an EngineHistory of "
                "moves with a mapping of node names",
            )
            return
        assert isinstance(history, EngineHistory)
        plan = self.plans.get(request, ())
        kinds = {n: w.kind for n in nodes if (w := self.nodes.get((request, n))) is not None}
        moves, why = self.histories.grown(request, history, kinds)
        for name, move in moves:
            if not name:
                self._request_moved(request, move)
            elif name in plan:
                self._node_moved(request, name, move)
        if why is not None:
            self.broken("legal-history", request, why)

    def _request_moved(self, request: str, move: Move) -> None:
        self.ended(request, move.dest)
        if move.dest in self.histories.releases:
            self._announced(request, RELEASES, f"the move {move}")
        if move.dest in self.histories.consumes:
            self._announced(request, CONSUMES, f"the move {move}")

    def _node_moved(self, request: str, node: str, move: Move) -> None:
        watch = self.nodes[(request, node)]
        if move.dest in self.histories.gives_up and watch.sends and watch.word != FAILED:
            self.broken(
                "money-in-flight-held" if watch.side_effect else "sent-work-kept",
                request,
                f"{node} was given up ({move}) although its submit went out and neither "
                f"the venue nor a reconciler said it failed ({watch.said()})",
            )

    def _announced(self, request: str, what: str, how: str) -> None:
        """The engine announced the end of ``request`` (``what``: releasing or consuming
        its reservation) by ``how``; judge it from what the suite saw so far."""
        if OPERATOR_CONFIRMS[what] in self.confirmed.get(request, ()):
            return
        nodes = {name: self.nodes[(request, name)] for name in self.plans.get(request, ())}
        if what == RELEASES:
            moving = {n: w.said() for n, w in nodes.items() if w.may_move_money}
            if moving:
                self.broken(
                    "money-in-flight-held",
                    request,
                    f"{how} released the reservation while money may be moving: {moving}",
                )
        else:
            undone = {n: w.said() for n, w in nodes.items() if w.word not in DONE_WORDS}
            if undone:
                self.broken(
                    "completion-means-done",
                    request,
                    f"{how} completed the request with nodes not done: {undone}",
                )

    def broken(self, rule: str, request: str, message: str) -> None:
        """Record a breach of ``rule``; the first one is what the run reports."""
        if self.breach is not None or rule in self.left_out:
            return  # the first breach is the report; a policy left out is not judged
        assert rule in RULES, rule
        seen = [line for key, line in self.log if key == request][-EXCERPT:]
        excerpt = "\n".join(f"    {line}" for line in seen) or "    (nothing)"
        self.breach = RuleBroken(
            rule,
            f"{rule}: {request}: {message}\n  {promised(rule, RULES[rule])}\n"
            f"  what the suite saw of {request} (latest last):\n{excerpt}",
        )

    def verdict(self) -> None:
        """Raise the first breach seen, if any: the one place a ``RuleBroken`` is raised."""
        if self.breach is not None:
            raise self.breach

    # -- helpers --------------------------------------------------------------------------

    def note(self, request: str, line: str) -> None:
        self.log.append((request, line))

    def _node(self, request: str, node: str) -> NodeWatch:
        """The node's watch; one the suite never planned is watched as if it moved money."""
        watch = self.nodes.get((request, node))
        if watch is None:
            watch = self.nodes[(request, node)] = NodeWatch(True, "action")
        return watch
