"""A user's own subscription service, in memory, written without the machines package: it
only has to agree with specs/subscription.yaml, which the conformance suite checks."""

from __future__ import annotations

from dataclasses import dataclass, field


class Refused(Exception):
    """The service refuses a move; nothing changed."""


MOVES: dict[tuple[str, str], tuple[str, frozenset[str]]] = {
    ("trialing", "convert"): ("active", frozenset({"billing"})),
    ("trialing", "lapse"): ("expired", frozenset({"billing"})),
    ("active", "charge_failed"): ("past_due", frozenset({"billing"})),
    ("past_due", "charge_ok"): ("active", frozenset({"billing"})),
    ("past_due", "give_up"): ("cancelled", frozenset({"billing"})),
    ("active", "pause"): ("paused", frozenset({"customer", "support"})),
    ("paused", "resume"): ("active", frozenset({"customer", "support"})),
    **{
        (state, "cancel"): ("cancelled", frozenset({"customer", "support"}))
        for state in ("trialing", "active", "past_due", "paused")
    },
}


@dataclass
class Subscription:
    plan: str
    state: str = "trialing"
    events: list[dict[str, object]] = field(default_factory=list)


class Subscriptions:
    moves = MOVES

    def __init__(self) -> None:
        self.rows: dict[int, Subscription] = {}

    def create(self, plan: str) -> int:
        if plan not in ("monthly", "annual"):
            raise Refused(f"no such plan: {plan}")
        number = len(self.rows) + 1
        self.rows[number] = Subscription(plan)
        return number

    def fire(self, number: int, trigger: str, actor: str) -> None:
        row = self.rows[number]
        move = self.moves.get((row.state, trigger))
        if move is None or actor not in move[1]:
            raise Refused(f"{trigger} by {actor} is refused in {row.state}")
        if trigger == "pause" and row.plan != "monthly":
            raise Refused("only a monthly plan can be paused")
        seq = len(row.events) + 1
        row.events.append(
            {"seq": seq, "source": row.state, "trigger": trigger, "dest": move[0], "actor": actor}
        )
        row.state = move[0]
