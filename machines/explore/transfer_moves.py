"""What the transfer model compiles once from the definitions and the engine's policy: for
each node of the plan and each of its states, the moves the engine, the venue or a person
may make (with the flags they raise), the gate and cancel moves, which nodes can wake, and
the nodes that are interchangeable. The search then only adds ints."""

from __future__ import annotations

from itertools import groupby

from machines.errors import InvalidStateTransition
from machines.explore.transfer_plans import Step
from machines.spec import MachineSpec
from machines.systems.transfer.policy import NODE_MOVES, Mode, NodeMove, Via

SUBMITTING, UNKNOWN, BLOCKED, READY = "submitting", "unknown", "blocked", "ready"
SKIPPED = "skipped"
_MODES = tuple(Mode)
MODES = len(_MODES)


class CompiledMoves:
    """The tables of a ``TransferModel``, built from the attributes it sets first."""

    plan: tuple[Step, ...]
    node_spec: MachineSpec
    n_names: tuple[str, ...]
    n_index: dict[str, int]
    r_index: dict[str, int]
    shift: tuple[int, ...]
    sent: tuple[int, ...]
    gates: tuple[bool, ...]
    preds: tuple[tuple[int, ...], ...]
    flag: dict[str, int]
    n_terminal: frozenset[int]
    ready: int

    def _legal(self, step: Step, move: NodeMove) -> str | None:
        if move.kind is not None and move.kind != step.kind:
            return None
        try:
            return self.node_spec.step(move.source, move.trigger, actor=move.actor, kind=step.kind)
        except InvalidStateTransition:
            return None

    def _node_table(self) -> tuple[tuple[tuple[tuple[int, int, int, str], ...], ...], ...]:
        """[node][node state * MODES + mode] -> (delta, sent bit when it enters submitting
        else 0, flags, label) of every move a step or a person may make on that node."""
        table = []
        submitting = self.n_index.get(SUBMITTING)
        for i, step in enumerate(self.plan):
            flat: list[list[tuple[int, int, int, str]]] = [
                [] for _ in range(len(self.n_names) * MODES)
            ]
            for ns, source in enumerate(self.n_names):
                for move in NODE_MOVES:
                    if move.source != source or move.via not in (Via.STEP, Via.PERSON):
                        continue
                    if self.gates[i] and not move.gates:
                        continue
                    dest = self._legal(step, move)
                    if dest is None:
                        continue
                    d = self.n_index[dest]
                    sent = self.sent[i] if d == submitting else 0
                    label = f"{step.name}: {source} --{move.trigger} ({move.actor})--> {dest}"
                    entry = (
                        (d - ns) << self.shift[i],
                        sent,
                        self._node_flags(ns, move.actor),
                        label,
                    )
                    for m, mode in enumerate(_MODES):
                        if mode in move.modes and entry not in flat[ns * MODES + m]:
                            flat[ns * MODES + m].append(entry)
            table.append(tuple(tuple(entries) for entries in flat))
        return tuple(table)

    def _node_flags(self, ns: int, actor: str) -> int:
        flags = self.flag["terminal-final"] if ns in self.n_terminal else 0
        if self.n_names[ns] == UNKNOWN and actor != "reconciler":
            flags |= self.flag["no-auto-terminal-money-in-flight"]
        return flags

    def _manual_moves(self) -> tuple[tuple[int, int, str] | None, ...]:
        """Per node: (delta, flags, label) of ``complete_manual``'s first gate move."""
        out: list[tuple[int, int, str] | None] = []
        for i, step in enumerate(self.plan):
            found = None
            if self.gates[i]:
                for move in NODE_MOVES:
                    if move.via is not Via.MANUAL or move.source != READY:
                        continue
                    dest = self._legal(step, move)
                    if dest is not None:
                        d = self.n_index[dest]
                        label = f"{step.name}: ready --{move.trigger} ({move.actor})--> {dest}"
                        found = ((d - self.ready) << self.shift[i], 0, label)
                        break
            out.append(found)
        return tuple(out)

    def _cancel_moves(self) -> tuple[dict[int, int], ...]:
        """Per node: node state -> the state cancelling the request leaves it in."""
        out = []
        for step in self.plan:
            moves: dict[int, int] = {}
            for move in NODE_MOVES:
                if move.via is Via.CANCEL and Mode.IDLE in move.modes:
                    dest = self._legal(step, move)
                    if dest is not None:
                        moves.setdefault(self.n_index[move.source], self.n_index[dest])
            out.append(moves)
        return tuple(out)

    def _can_wake(self) -> tuple[bool, ...]:
        wake = [m for m in NODE_MOVES if m.via is Via.SETTLE and m.source == BLOCKED]
        return tuple(
            any(Mode.DISPATCH in m.modes and self._legal(step, m) == READY for m in wake)
            for step in self.plan
        )

    def _orbits(self) -> tuple[tuple[int, ...], ...]:
        """Groups of interchangeable nodes (same class, same predecessors and successors)."""

        def signature(i: int) -> tuple[object, ...]:
            step = self.plan[i]
            succs = frozenset(j for j, p in enumerate(self.preds) if i in p)
            return (step.kind, step.side_effect, self.gates[i], frozenset(self.preds[i]), succs)

        ordered = sorted(range(len(self.plan)), key=lambda i: repr(signature(i)))
        groups = (tuple(g) for _, g in groupby(ordered, key=lambda i: repr(signature(i))))
        return tuple(tuple(sorted(g)) for g in groups if len(g) > 1)

    def _node_states(self, spec: MachineSpec, tag: str) -> frozenset[int]:
        return frozenset(self.n_index[s] for s in spec.states_tagged(tag))

    def _request_states(self, spec: MachineSpec, tag: str) -> frozenset[int]:
        return frozenset(self.r_index[s] for s in spec.states_tagged(tag))
