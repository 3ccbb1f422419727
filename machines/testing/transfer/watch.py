"""What the transfer suite knows of a node and of an operation, from the outside.

A node's watch holds its plan entry (side effect, kind, manual gate, predecessors), every
submit that went out for it and its *word*: the last thing the venue, a reconciler, an
operator or a planner said about its outcome ("completed", "failed", "skipped", an
exception's name, ...). An operation is one the suite asked for, with what it changed
tentatively (a word, a gate passed) until the engine accepts or refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FAILED = "failed"
SUBMITTED = "submitted"
"""A reconciler's reading that the money is on its way, not yet settled: in flight."""
IN_FLIGHT = "in flight"
"""What a step or operation heard of a node whose work is out with no final word (the
venue accepted it or said pending, or a reconciler read ``SUBMITTED``): it is followed."""
DONE_WORDS = frozenset({"completed", "skipped"})
WORDS_OF: Mapping[str, str] = {"skip": "skipped", "complete_manual": "completed"}
"""Operations whose acceptance is a word about their node (``reconcile``: its evidence)."""


SUBMIT_TIMEOUT = 60.0
"""Seconds after which a submit that never reported back must be declared unknown (the
engines the suite runs are given it)."""


@dataclass
class NodeWatch:
    """What the suite knows of one node, from the outside: its plan entry (side effect,
    kind, manual gate, predecessors), every submit and the last word about it."""

    side_effect: bool
    kind: str
    gate: bool = False
    after: tuple[str, ...] = ()
    following: bool = False  # accepted or pending, no final word since (once confirmed)
    observed: int = 0
    asked_at: float = 0.0  # the suite's clock when it was last asked about, or went in flight
    sends: list[str] = field(default_factory=list)
    word: str | None = None

    @property
    def may_move_money(self) -> bool:
        return self.side_effect and bool(self.sends) and self.word != FAILED

    def said(self) -> str:
        sent = f"sent {len(self.sends)}x" if self.sends else "never sent"
        return f"{sent}, last word: {self.word or 'none'}"


@dataclass
class Operation:
    """One operation the suite asked for, while it is under way and after."""

    request: str
    name: str
    node: str | None
    activity: int
    undo: tuple[str, str | None] | None = None  # (node, word before) for a tentative word
    passes: bool = False  # a complete_manual that is the first pass of its gate
    told: str = "under way"
