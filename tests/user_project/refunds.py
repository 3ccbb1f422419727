"""A user's own refund service: refunds in a SQLite table they own, with a state column and
an event table, written without the machines package (it only has to agree with
specs/refund.yaml, which the conformance suite checks)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import ClassVar


class RefundRefused(Exception):
    """The service refuses a move; nothing changed."""


@dataclass(frozen=True)
class Move:
    dest: str
    actors: frozenset[str]
    size: str | None = None  # the only size the move is for; None: any size


MOVES: dict[tuple[str, str], Move] = {
    ("requested", "send"): Move("sending", frozenset({"service"}), "small"),
    ("requested", "hold"): Move("awaiting_approval", frozenset({"service"}), "large"),
    ("awaiting_approval", "approve"): Move("sending", frozenset({"approver"})),
    ("awaiting_approval", "reject"): Move("declined", frozenset({"approver"})),
    ("sending", "confirm"): Move("refunded", frozenset({"service"})),
    ("sending", "decline"): Move("declined", frozenset({"service"})),
    ("sending", "time_out"): Move("unknown", frozenset({"service"})),
    ("unknown", "found_refunded"): Move("refunded", frozenset({"approver"})),
    ("unknown", "found_not_refunded"): Move("declined", frozenset({"approver"})),
}


NEEDS_A_PERSON = frozenset({"awaiting_approval", "unknown"})
"""The states the payments team's queue lists: someone has to act on these."""

MONEY_MAY_HAVE_MOVED = frozenset({"sending", "unknown"})
"""The states in which the refund may have reached the card network: never send it again."""

NOBODY_CAN_TELL = frozenset({"unknown"})
"""The states in which the service must not guess the outcome: only a person decides."""


class Refunds:
    """Refunds and their events in one SQLite database; every move is one transaction."""

    moves: ClassVar[dict[tuple[str, str], Move]] = MOVES

    def __init__(self, path: str = ":memory:") -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS refunds (
                id INTEGER PRIMARY KEY, size TEXT NOT NULL, state TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS refund_events (
                refund_id INTEGER NOT NULL, seq INTEGER NOT NULL, source TEXT NOT NULL,
                trigger TEXT NOT NULL, dest TEXT NOT NULL, actor TEXT NOT NULL,
                PRIMARY KEY (refund_id, seq));
            """
        )

    def create(self, size: str) -> int:
        if size not in ("small", "large"):
            raise RefundRefused(f"no such size: {size}")
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO refunds (size, state) VALUES (?, 'requested')", (size,)
            )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def fire(self, refund_id: int, trigger: str, actor: str) -> str:
        size, state = self.db.execute(
            "SELECT size, state FROM refunds WHERE id = ?", (refund_id,)
        ).fetchone()
        move = self.moves.get((state, trigger))
        if move is None or actor not in move.actors or move.size not in (None, size):
            raise RefundRefused(f"{trigger} by {actor} is refused in {state}")
        with self.db:
            (seq,) = self.db.execute(
                "SELECT COUNT(*) + 1 FROM refund_events WHERE refund_id = ?", (refund_id,)
            ).fetchone()
            self.db.execute(
                "INSERT INTO refund_events VALUES (?, ?, ?, ?, ?, ?)",
                (refund_id, seq, state, trigger, move.dest, actor),
            )
            self.db.execute("UPDATE refunds SET state = ? WHERE id = ?", (move.dest, refund_id))
        return move.dest

    def waiting_for_a_person(self) -> list[int]:
        """The refunds on the payments team's queue, oldest first."""
        marks = ", ".join("?" for _ in NEEDS_A_PERSON)
        rows = self.db.execute(
            f"SELECT id FROM refunds WHERE state IN ({marks}) ORDER BY id",
            sorted(NEEDS_A_PERSON),
        ).fetchall()
        return [refund_id for (refund_id,) in rows]

    def state(self, refund_id: int) -> str:
        (state,) = self.db.execute(
            "SELECT state FROM refunds WHERE id = ?", (refund_id,)
        ).fetchone()
        return str(state)

    def events(self, refund_id: int) -> list[dict[str, object]]:
        rows = self.db.execute(
            "SELECT seq, source, trigger, dest, actor FROM refund_events "
            "WHERE refund_id = ? ORDER BY seq",
            (refund_id,),
        ).fetchall()
        keys = ("seq", "source", "trigger", "dest", "actor")
        return [dict(zip(keys, row, strict=True)) for row in rows]


class LenientRefunds(Refunds):
    """The same service with one bug: the service itself may approve a large refund."""

    moves: ClassVar[dict[tuple[str, str], Move]] = {
        **MOVES,
        ("awaiting_approval", "approve"): Move("sending", frozenset({"approver", "service"})),
    }
