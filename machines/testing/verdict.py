"""What every suite's verdict is made of: a broken rule, a recorded move, and the judgement
of a history an implementation exposes against a definition.

Each suite has its own rules (``RULES`` in its module) but reports them the same way: a
``RuleBroken`` whose message starts with the rule's short stable name, so a user's CI can
tell one broken promise from another. A history is judged against the definition the suite
was given (the bundled one, ``bundled``), never against the one the implementation runs on,
by one chain judge (``chain_break``) that every suite and the walker share.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from machines.errors import MachinesError, message_of
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.loader import load
from machines.spec.registry import GUARANTEE, INVARIANTS, Kind


@functools.cache
def bundled(name: str) -> MachineSpec:
    """The bundled definition ``name``, the published promise a suite judges by: loaded at
    first use, never when a module of ``machines.testing`` is imported, then kept."""
    return load(name)


class RuleBroken(AssertionError):
    """The implementation under test broke ``rule``; the message starts with the rule's
    name, then says what happened, step by step. ``kind`` says whether the rule is a
    guarantee (a bug in any design) or one of this package's policies
    (``machines.spec.registry.Kind``)."""

    def __init__(self, rule: str, message: str) -> None:
        rule = rule if type(rule) is str else describe(rule)  # shown as given, never a crash
        message = message if type(message) is str else describe(message)
        self.rule = rule
        found = INVARIANTS.get(rule)
        self.kind: Kind = GUARANTEE if found is None else found.kind
        super().__init__(message if message.startswith(f"{rule}:") else f"{rule}: {message}")


def promised(rule: str, statement: str) -> str:
    """The line of a report that says what ``rule`` promises and which kind it is."""
    found = INVARIANTS.get(rule)
    if found is not None and found.kind != GUARANTEE:
        return (
            f"(a policy of this package; an implementation that chooses otherwise, safely, "
            f"leaves it out of its suite's policies: {statement})"
        )
    return f"(a guarantee: {statement})"


class Move(NamedTuple):
    """One recorded state change, in the names of the suite's definition."""

    source: str
    trigger: str
    dest: str
    actor: str

    def __str__(self) -> str:
        return f"{self.source} --{self.trigger} ({self.actor})--> {self.dest}"


def moves_of(moves: object) -> tuple[Move, ...] | None:
    """A history an adapter returned, as ``Move``s; None when it is not a sequence of moves
    with four ``str`` attributes ``source``, ``trigger``, ``dest`` and ``actor`` (a ``str``
    subclass, such as a generated ``StrEnum``, counts as its text)."""
    if not isinstance(moves, Sequence) or isinstance(moves, str | bytes):
        return None
    out = []
    try:
        for move in moves:
            parts = (move.source, move.trigger, move.dest, move.actor)
            if not all(isinstance(part, str) for part in parts):
                return None
            out.append(Move(*(str.__str__(part) for part in parts)))  # a StrEnum: its text
    except Exception:  # a hostile sequence or move: user code
        return None
    return tuple(out)


class ChainBreak(NamedTuple):
    """Where a history stops being a legal chain of a definition, and how: the move
    (``number``, from 1) does not start where the chain had reached (``at``) ("disconnected"),
    leaves a terminal state ("terminal"), is refused ("refused", with the definition's
    ``refusal`` when it names one) or leads elsewhere ("elsewhere": to ``legal``)."""

    number: int
    move: Move
    at: str
    how: Literal["disconnected", "terminal", "refused", "elsewhere"]
    legal: str | None = None
    refusal: MachinesError | None = None


def chain_break(
    chain: Sequence[Move],
    spec: MachineSpec,
    context: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None,
    *,
    start: str | None = None,
    judged: int = 0,
    observed: bool = False,
    terminal: bool = False,
) -> ChainBreak | None:
    """The first move that makes ``chain`` not a legal history of ``spec``, or None: the one
    chain judge of every suite and the walker.

    The chain starts in ``start`` (default: the initial state) and each move continues from
    the last. Guards are judged by ``context``, one valuation for every move or one per
    move. ``judged``: the first ``judged`` moves are known legal (a judge that resumes where
    it left off). ``observed``: ``context`` holds only the variables the judge can observe,
    and a guard on any other counts as met (some edge with this actor must admit the move).
    ``terminal``: leaving a terminal state is its own break, found before the definition is
    asked."""
    at = chain[judged - 1].dest if judged else (spec.initial if start is None else start)
    for number, move in enumerate(chain[judged:], judged + 1):
        if move.source != at:
            return ChainBreak(number, move, at, "disconnected")
        if terminal and spec.is_terminal(at):
            return ChainBreak(number, move, at, "terminal")
        valuation = context[number - 1] if isinstance(context, Sequence) else context or {}
        if observed:
            if not any(
                (t.source, t.trigger, t.dest) == (move.source, move.trigger, move.dest)
                and move.actor in t.actors
                and t.admits(valuation)
                for t in spec.transitions
            ):
                return ChainBreak(number, move, at, "refused")
        else:
            try:
                legal = spec.step(move.source, move.trigger, actor=move.actor, **valuation)
            except MachinesError as refusal:
                return ChainBreak(number, move, at, "refused", refusal=refusal)
            if legal != move.dest:
                return ChainBreak(number, move, at, "elsewhere", legal=legal)
        at = move.dest
    return None


def chain_problem(
    chain: Sequence[Move], spec: MachineSpec, context: Mapping[str, str] | None = None
) -> str | None:
    """What makes ``chain`` not a legal history of ``spec`` (its guards judged against
    ``context``): the first move that does not continue from the last, or that the
    definition refuses, or that leads elsewhere. None when the chain is legal."""
    found = chain_break(chain, spec, context)
    if found is None:
        return None
    number, move, at, how, legal, refusal = found
    if how == "disconnected":
        return f"move {number} starts from {move.source}, not from {at}"
    if refusal is not None:
        return f"move {number} is not allowed ({message_of(refusal, 160)})"
    return f"move {number} ({move.trigger}) leads to {legal}, not {move.dest}"


def show_chain(chain: Sequence[Move]) -> str:
    """A history as one line, each move with its actor:
    ``pending --execute (proxy)--> executing --commit (proxy)--> committed``."""
    if not chain:
        return "(empty)"
    return chain[0].source + "".join(f" --{m.trigger} ({m.actor})--> {m.dest}" for m in chain)


def first_difference(shown: Sequence[Move], seen: Sequence[Move]) -> str:
    """Where ``shown`` (a history an implementation exposed) first differs from ``seen``
    (the moves the suite saw), as "event N is X; the suite saw Y": a report names the
    event and the field, not only two long chains."""
    for number, (one, other) in enumerate(zip(shown, seen, strict=False), 1):
        if one != other:
            fields = [f for f in Move._fields if getattr(one, f) != getattr(other, f)]
            differ = "differs" if len(fields) == 1 else "differ"
            return (
                f"event {number} is {one}; the suite saw {other} (the {' and '.join(fields)} "
                f"{differ})"
            )
    if len(shown) > len(seen):
        return f"event {len(seen) + 1}, {shown[len(seen)]}, is a move the suite never saw"
    if len(shown) < len(seen):
        return f"the suite saw a move #{len(shown) + 1}, {seen[len(shown)]}, the history lacks"
    return "they are the same"


def as_told(value: object) -> object:
    """``value`` as it is now: what an oracle keeps of what a caller was told, or of what
    the upstream returned. An implementation under test may hand out one object and change
    it later (a replay counter written into a cached result); comparing that object with
    itself would pass every later caller, so the oracle keeps a copy. A value that cannot be
    copied is kept as it is (then its ``repr`` at the time is the best record there is)."""
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def same_value(told: object, recorded: object) -> bool:
    """Whether a caller was told ``recorded``: the same value, of the same JSON shape all the
    way down (every oracle compares by this, so none trusts a value's own ``__eq__`` to
    say a float is the int it replaced) (``1.0`` is not ``1``,
    ``True`` is not ``1``, a tuple is not the list it was); a value whose comparison raises
    or nests too deep is not the same."""
    try:
        return _exact(told, recorded)
    except Exception:  # a hostile __eq__ or __iter__, a RecursionError: user values
        return False


def _exact(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_exact(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_exact(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
