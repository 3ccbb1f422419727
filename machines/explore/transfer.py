"""The transfer engine as an explorable model: one request and its plan, every interleaving.

A state is the request's state, every node's state and whether each node was ever sent
(entered ``submitting``), packed into one int. An action is anything the engine, its
venue or a person can do next, taken from the same definitions the engine runs on:

- node moves from ``machines.systems.transfer.policy`` (what the engine dispatches,
  abandons or follows in each request mode, and what signers, reconcilers and planners
  may do), kept only where ``spec/node.yaml`` allows them for the node's kind. The venue
  may give any answer, a call may be lost (a crash: a submitting node later times out to
  unknown), and two engines interleave freely, because every engine move is one fenced
  transaction on the current state;
- request calls (``REQUEST_CALLS``: approve, cancel, resume, confirm, ...) under the
  guard context the nodes imply, cancel with its node moves, and ``complete_manual``;
- after each, what the engine's transaction does before it commits: wake the successors
  of done nodes and apply the derived request state (``machines.derive``, the rule set
  in use) when it is a legal move.

Invariants checked on every move (ids as on the invariants page and in ``machines check``):

- ``no-auto-terminal-money-in-flight``: no automatic move releases the reservation while
  a side-effect node is in an effect-started state, and only a reconciler leaves unknown;
- ``derivation-consistency``: the derived state is always a legal move, so it is applied;
- ``completion-means-done``: nothing automatic completes a request with a node not done;
- ``exactly-once``: no node is ever sent (enters submitting) twice;
- ``terminal-final``: nothing moves out of a terminal state.

Nodes that are interchangeable (same kind, side effect, gate-ness, predecessors and
successors, e.g. two parallel withdrawals) are a symmetry: states that differ only by
swapping them are explored once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from machines.derive import DerivedMove, Deriver
from machines.errors import InvalidStateTransition, MachinesError
from machines.explore.transfer_moves import (
    _MODES,
    BLOCKED,
    MODES,
    READY,
    SKIPPED,
    CompiledMoves,
)
from machines.explore.transfer_plans import Step
from machines.spec import MachineSpec
from machines.spec.vocabulary import CONSUMES_RESERVATION as CONSUMES
from machines.spec.vocabulary import DONE, EFFECT_STARTED
from machines.spec.vocabulary import RELEASES_RESERVATION as RELEASES
from machines.systems.transfer.policy import (
    REQUEST_CALLS,
    STOPPED,
    Mode,
    request_mode,
)

EXECUTING, WAITING_MANUAL = "executing", "waiting_manual_action"

MONEY_CONTEXT = "side_effects"
"""The request's guard variable for "money may have moved"; its ``none`` value must mean
that no side-effect node started (``machines check``: context-matches-money)."""
WHAT = {
    "no-auto-terminal-money-in-flight": "an automatic move released the reservation while "
    "money may be moving, or something other than reconciliation left unknown",
    "derivation-consistency": "the nodes imply a request state the request cannot move to, "
    "so it stays executing with a decision left unapplied",
    "completion-means-done": "an automatic move completed the request with a node not done",
    "exactly-once": "a node was sent a second time",
    "terminal-final": "something moved out of a terminal state",
}


Context = tuple[tuple[str, str], ...]


class PlanInfo(NamedTuple):
    """What a plan's node states imply (memoised per node-state tuple)."""

    halted: bool  # a node stopped: the engine starts nothing new
    context: Context  # the request's guard context (side_effects=...)
    derived: DerivedMove | None  # what the derivation does to the request while it executes
    moving: bool  # a side-effect node is in an effect-started state
    all_done: bool  # every node is done
    wake: int  # the delta that wakes every blocked node whose predecessors are done


class TransferModel(CompiledMoves):
    """``machines.explore.Model`` of the transfer engine for one plan and one rule set."""

    name = "transfer"

    def __init__(
        self,
        request_spec: MachineSpec,
        node_spec: MachineSpec,
        plan: Sequence[Step],
        *,
        scope: str = "custom",
        rules: str | None = None,
        symmetry: bool = True,
        judge: tuple[MachineSpec, MachineSpec] | None = None,
    ) -> None:
        self.deriver = Deriver.build(request_spec, node_spec, rules)
        derivation = self.deriver.derivation
        self.scope = scope if rules is None else f"{scope} (rules {rules})"
        self.request_spec, self.node_spec, self.plan = request_spec, node_spec, tuple(plan)
        self.r_names = tuple(request_spec.states)
        self.n_names = tuple(node_spec.states)
        self.r_index = {s: i for i, s in enumerate(self.r_names)}
        self.n_index = {s: i for i, s in enumerate(self.n_names)}
        self.r_bits = max(1, (len(self.r_names) - 1).bit_length())
        self.n_bits = max(1, (len(self.n_names) - 1).bit_length())
        self.n_mask = (1 << self.n_bits) - 1
        self.r_mask = (1 << self.r_bits) - 1
        size = len(self.plan)
        self.shift = tuple(self.r_bits + self.n_bits * i for i in range(size))
        sent_base = self.r_bits + self.n_bits * size
        self.sent_at = tuple(sent_base + i for i in range(size))
        self.sent = tuple(1 << at for at in self.sent_at)
        self.nodes_mask = (1 << (self.n_bits * size)) - 1
        judge_request, judge_node = judge or (request_spec, node_spec)
        money_rules = [
            rule
            for rule in judge_request.invariants
            if rule.kind == "only_reachable_when"
            and rule.when == {MONEY_CONTEXT: frozenset({"none"})}
        ]
        self.what = {**WHAT, **{rule.id: rule.description for rule in money_rules}}
        flag_base = sent_base + size
        self.flag = {inv: 1 << (flag_base + i) for i, inv in enumerate(self.what)}
        self.flag_floor = 1 << flag_base
        self.names = tuple(step.name for step in self.plan)
        self.gates = tuple(s.name.startswith(derivation.manual_prefix) for s in self.plan)
        names = set(self.names)
        for step in self.plan:
            unknown = [p for p in step.after if p not in names]
            if unknown:
                raise MachinesError(f"scope {scope}: node '{step.name}' waits for {unknown}")
        self.preds = tuple(tuple(self.names.index(p) for p in s.after) for s in self.plan)
        self.done = self._node_states(node_spec, DONE)  # what wakes successors
        # The invariants are judged by ``judge`` (request and node definitions), by default
        # the ones the model runs on; a mutated copy is judged by the bundled originals.
        self.started = self._node_states(judge_node, EFFECT_STARTED)
        self.judged_done = self._node_states(judge_node, DONE)
        self.n_terminal = frozenset(
            self.n_index[s] for s in judge_node.states if judge_node.is_terminal(s)
        )
        self.releases = self._request_states(judge_request, RELEASES)
        self.consumes = self._request_states(judge_request, CONSUMES)
        self.r_terminal = frozenset(
            self.r_index[s] for s in judge_request.states if judge_request.is_terminal(s)
        )
        self.before_money: dict[int, int] = {}
        for rule in money_rules:
            for name in rule.states:
                index = self.r_index[name]
                self.before_money[index] = self.before_money.get(index, 0) | self.flag[rule.id]
        self.derivation_actor = derivation.actor
        self.executing = self.r_index[EXECUTING]
        self.blocked, self.ready = self.n_index[BLOCKED], self.n_index[READY]
        self.skipped = self.n_index.get(SKIPPED, -1)
        orbits = [
            tuple((self.shift[i], self.sent_at[i]) for i in orbit)
            for orbit in (self._orbits() if symmetry else ())
        ]
        self.pairs = tuple((*a, *b) for a, b in (o for o in orbits if len(o) == 2))
        self.groups = tuple(o for o in orbits if len(o) > 2)
        self.mode_of = tuple(
            (_MODES.index(request_mode(r, [])), _MODES.index(request_mode(r, ["failed"])))
            for r in self.r_names
        )
        self.per_node = tuple(
            zip(range(size), self.shift, self._node_table(), self.gates, strict=True)
        )
        self.manual = self._manual_moves()
        self._cancel = self._cancel_moves()
        self._wakes = self._can_wake()
        self.pred_mask = tuple(sum(1 << p for p in preds) for preds in self.preds)
        self.stopped = frozenset(self.n_index[s] for s in STOPPED)
        alphabet = self.deriver.alphabet
        self.node_facts = tuple(
            tuple(
                (
                    alphabet.mask[(name, step.side_effect, gate)],
                    (1 << i) if ns in self.done else 0,
                    (1 << i) if ns in self.judged_done else 0,
                    ns in self.stopped,
                    step.side_effect and ns in self.started,
                )
                for ns, name in enumerate(self.n_names)
            )
            for i, (step, gate) in enumerate(zip(self.plan, self.gates, strict=True))
        )
        """Per node and node state: (derivation predicate mask, done bit, judged-done
        bit, stops the plan, money may have moved), so a plan is summed up in one pass."""
        self._plan_memo: dict[int, PlanInfo] = {}
        self._context_memo: dict[tuple[int, int], Context] = {}
        self._calls_memo: dict[
            tuple[int, tuple[tuple[str, str], ...]], list[tuple[str, int, int, bool, int, int]]
        ] = {}
        self._settled: dict[int, int] = {}
        self.resent = self.flag["exactly-once"]

    # -- the Model protocol -----------------------------------------------------------------

    def initial(self) -> list[int]:
        return [
            self.r_index[self.request_spec.initial]
            | self._pack_nodes([self.n_index[self.node_spec.initial]] * len(self.plan))
        ]

    def successors(self, state: int) -> list[int]:
        pres = self._pre_states(state, None)
        settled = self._settled
        out = [settled.get(pre) for pre in pres]
        if None in out:
            settle, canonical = self._settle, self.canonical
            for k, post in enumerate(out):
                if post is None:
                    pre = pres[k]
                    out[k] = settled[pre] = canonical(settle(pre))
        return out  # type: ignore[return-value]  # every None was replaced above

    def moves(self, state: int) -> list[tuple[str, int]]:
        labels: list[str] = []
        pres = self._pre_states(state, labels)
        out = []
        for label, pre in zip(labels, pres, strict=True):
            post = self._settle(pre)
            follow = self._settle_labels(pre, post)
            out.append((label + follow, post))
        return out

    def canonical(self, state: int) -> int:
        """Sort the (state, sent) fields of each group of interchangeable nodes (pairs,
        the common case, by one comparison)."""
        n_mask = self.n_mask
        for sh_a, at_a, sh_b, at_b in self.pairs:
            a = ((state >> sh_a) & n_mask) << 1 | (state >> at_a) & 1
            b = ((state >> sh_b) & n_mask) << 1 | (state >> at_b) & 1
            if a > b:
                state &= ~((n_mask << sh_a) | (1 << at_a) | (n_mask << sh_b) | (1 << at_b))
                state |= (b >> 1) << sh_a | (b & 1) << at_a | (a >> 1) << sh_b | (a & 1) << at_b
        for positions in self.groups:
            fields = [((state >> sh) & n_mask, (state >> at) & 1) for sh, at in positions]
            ordered = sorted(fields)
            if ordered != fields:
                for (sh, at), (node, sent) in zip(positions, ordered, strict=True):
                    state = state & ~((n_mask << sh) | (1 << at)) | (node << sh) | (sent << at)
        return state

    def breaches(self, state: int) -> list[tuple[str, str]]:
        return [(inv, self.what[inv]) for inv, bit in self.flag.items() if state & bit]

    def encode(
        self, request_state: str, node_states: Mapping[str, str], sent: Iterable[str] = ()
    ) -> int:
        """The packed state of a request and its nodes as a store holds them (``sent``:
        the nodes whose data records a send), e.g. to ask whether the explorer saw it."""
        state = self.r_index[request_state]
        for name, sh in zip(self.names, self.shift, strict=True):
            state |= self.n_index[node_states[name]] << sh
        for name in sent:
            state |= self.sent[self.names.index(name)]
        return state

    def describe(self, state: int) -> str:
        nodes = ", ".join(
            f"{name}={self.n_names[(state >> sh) & self.n_mask]}"
            + (" (sent)" if state & bit else "")
            for name, sh, bit in zip(self.names, self.shift, self.sent, strict=True)
        )
        return f"request {self.r_names[state & self.r_mask]}; {nodes}"

    # -- actions ------------------------------------------------------------------------------

    def _pre_states(self, state: int, labels: list[str] | None) -> list[int]:
        """Every state one action leads to before the engine settles it."""
        out: list[int] = []
        r = state & self.r_mask
        info = self._plan_memo.get((state >> self.r_bits) & self.nodes_mask)
        if info is None:
            info = self._plan_info(state)
        mode = self.mode_of[r][info.halted]
        n_mask, ready, resent = self.n_mask, self.ready, self.resent
        append = out.append
        for i, sh, entries_of, gate in self.per_node:
            ns = (state >> sh) & n_mask
            entries = entries_of[ns * MODES + mode]
            if entries:
                for delta, sent, flags, label in entries:
                    nxt = state + delta | flags
                    if sent:
                        nxt |= resent if nxt & sent else sent
                    append(nxt)
                    if labels is not None:
                        labels.append(label)
            if gate and ns == ready:
                self._pass_gate(state, i, r, info.context, out, labels)
        calls = self._calls_memo.get((r, info.context))
        if calls is None:
            calls = self._calls(r, info.context)
        for label, dest, flags, cancels, money_flags, done_flags in calls:
            nxt = (state & ~self.r_mask) | dest | flags
            if info.moving:
                nxt |= money_flags
            if not info.all_done:
                nxt |= done_flags
            if cancels:
                nxt = self._cancel_nodes(nxt)
            append(nxt)
            if labels is not None:
                labels.append(label)
        return out

    def _pass_gate(
        self,
        state: int,
        i: int,
        r: int,
        context: tuple[tuple[str, str], ...],
        out: list[int],
        labels: list[str] | None,
    ) -> None:
        """``complete_manual``: resume a waiting request, then (only in dispatch mode) the
        gate's first move, in one transaction; anything else is refused and writes nothing."""
        said = "complete_manual"
        if r == self.r_index.get(WAITING_MANUAL):
            try:
                dest = self.request_spec.step(
                    WAITING_MANUAL, "resume", actor=REQUEST_CALLS["resume"], **dict(context)
                )
            except InvalidStateTransition:
                return
            r = self.r_index[dest]
            said += f" (request {WAITING_MANUAL} --resume--> {dest})"
        if self.mode_of[r][self._plan_info(state).halted] != _MODES.index(Mode.DISPATCH):
            return
        move = self.manual[i]
        if move is None:
            return
        delta, flags, label = move
        out.append((state & ~self.r_mask) + delta | r | flags)
        if labels is not None:
            labels.append(f"{said}: {label}")

    def _cancel_nodes(self, state: int) -> int:
        for i, sh in enumerate(self.shift):
            ns = (state >> sh) & self.n_mask
            dest = self._cancel[i].get(ns)
            if dest is not None:
                state += (dest - ns) << sh
        return state

    # -- what a transaction does before it commits --------------------------------------------

    def _settle(self, pre: int) -> int:
        """Wake (while executing), then apply the derived state if it is a legal move."""
        r = pre & self.r_mask
        if r != self.executing:
            return pre
        info = self._plan_info(pre)
        state = pre
        if info.wake:
            state += info.wake
            info = self._plan_info(state)
        move = info.derived
        if move is None:
            return state
        if move.dest is None:
            return state | self.flag["derivation-consistency"]
        d = self.r_index[move.dest]
        flags = self._money_flags(d, self.derivation_actor) if info.moving else 0
        if d in self.consumes and not info.all_done:
            flags |= self.flag["completion-means-done"]
        return (state & ~self.r_mask) | d | flags

    def _settle_labels(self, pre: int, post: int) -> str:
        said = []
        for name, sh in zip(self.names, self.shift, strict=True):
            if (pre >> sh) & self.n_mask == self.blocked and (
                post >> sh
            ) & self.n_mask == self.ready:
                said.append(f"{name} wakes")
        before, after = pre & self.r_mask, post & self.r_mask
        if before != after:
            said.append(f"derived: request {self.r_names[before]} -> {self.r_names[after]}")
        elif post & self.flag["derivation-consistency"]:
            move = self._plan_info(post).derived
            result = move.decision.result if move is not None else None
            said.append(f"derived {result}, which the request cannot move to from here")
        return "; then " + ", ".join(said) if said else ""

    def _plan_info(self, state: int) -> PlanInfo:
        """What the node states imply, memoised on the node states alone."""
        key = (state >> self.r_bits) & self.nodes_mask
        info = self._plan_memo.get(key)
        if info is None:
            info = self._plan_memo[key] = self._compute_plan_info(key)
        return info

    def _compute_plan_info(self, key: int) -> PlanInfo:
        some, every, done, judged, wake = 0, self.deriver.alphabet.full, 0, 0, 0
        halted = moving = False
        n_bits, n_mask = self.n_bits, self.n_mask
        states = []
        for i, facts in enumerate(self.node_facts):
            ns = (key >> (n_bits * i)) & n_mask
            states.append(ns)
            mask, done_bit, judged_bit, stops, moves_money = facts[ns]
            some |= mask
            every &= mask
            done |= done_bit
            judged |= judged_bit
            halted = halted or stops
            moving = moving or moves_money
        settled = self._settled_nodes(states, done)
        for i, ns in enumerate(states):
            pred_mask = self.pred_mask[i]
            if ns == self.blocked and self._wakes[i] and settled & pred_mask == pred_mask:
                wake += (self.ready - self.blocked) << self.shift[i]
        sig = (some, every)
        context = self._context_memo.get(sig)
        if context is None:
            context = self._context_memo[sig] = tuple(sorted(self.deriver.context(sig).items()))
        all_done = judged == (1 << len(self.plan)) - 1
        derived = self.deriver.derived_move(EXECUTING, sig)
        return PlanInfo(halted, context, derived, moving, all_done, wake)

    def _settled_nodes(self, states: list[int], done: int) -> int:
        """The nodes done for their successors: done and not skipped, or skipped with every
        node before it settled (a skip leaves the plan, not its order), as the engine's
        session counts them."""
        skipped = [i for i, ns in enumerate(states) if ns == self.skipped]
        settled = done & ~sum(1 << i for i in skipped)
        grew = True
        while grew:
            grew = False
            for i in skipped:
                bit = 1 << i
                if not settled & bit and settled & self.pred_mask[i] == self.pred_mask[i]:
                    settled |= bit
                    grew = True
        return settled

    def _calls(
        self, r: int, context: tuple[tuple[str, str], ...]
    ) -> list[tuple[str, int, int, bool, int, int]]:
        """(label, destination, flags, cancels the nodes, flags if money is moving, flags
        if a node is not done) of every request call the spec allows from ``r`` under
        ``context``."""
        key = (r, context)
        calls = self._calls_memo.get(key)
        if calls is None:
            calls = []
            source = self.r_names[r]
            for trigger, actor in REQUEST_CALLS.items():
                try:
                    dest = self.request_spec.step(source, trigger, actor=actor, **dict(context))
                except InvalidStateTransition:
                    continue
                d = self.r_index[dest]
                flags = self.flag["terminal-final"] if r in self.r_terminal else 0
                automatic = self.request_spec.actors[actor].automatic
                done_flags = (
                    self.flag["completion-means-done"] if automatic and d in self.consumes else 0
                )
                label = f"{trigger} ({actor}): request {source} -> {dest}"
                money_flags = self._money_flags(d, actor)
                calls.append((label, d, flags, trigger == "cancel", money_flags, done_flags))
            self._calls_memo[key] = calls
        return calls

    def _money_flags(self, dest: int, actor: str) -> int:
        """The breaches of entering request state ``dest`` as ``actor`` while a side-effect
        node may have moved money: an automatic release of the reservation, and entering
        a state the judge's rules reserve for before money moves."""
        flags = self.before_money.get(dest, 0)
        if dest in self.releases and self.request_spec.actors[actor].automatic:
            flags |= self.flag["no-auto-terminal-money-in-flight"]
        return flags

    # -- tables built once ----------------------------------------------------------------------

    def _pack_nodes(self, states: Iterable[int]) -> int:
        return sum(s << sh for s, sh in zip(states, self.shift, strict=True))
