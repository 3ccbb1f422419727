"""The plans the transfer model explores: its scopes, each a small plan of nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One node of a scope's plan."""

    name: str
    kind: str  # action | observe
    side_effect: bool
    after: tuple[str, ...] = ()


def steps_of(plan: Sequence[Mapping[str, Any]]) -> tuple[Step, ...]:
    """A scope from a plan as ``TransferEngine.submit`` takes it."""
    return tuple(
        Step(n["name"], n["kind"], bool(n["has_side_effect"]), tuple(n.get("after", ())))
        for n in plan
    )


SCOPES: Mapping[str, tuple[Step, ...]] = {
    "withdraw": (
        Step("withdraw", "action", True),
        Step("withdraw_observe", "observe", False, ("withdraw",)),
    ),
    "parallel": (
        Step("quote", "observe", False),
        Step("withdraw_a", "action", True, ("quote",)),
        Step("withdraw_b", "action", True, ("quote",)),
        Step("check", "observe", False, ("withdraw_a", "withdraw_b")),
    ),
    "gated": (
        Step("fx_quote", "observe", False),
        Step("withdraw", "action", True),
        Step("manual_review", "action", False, ("fx_quote", "withdraw")),
        Step("deposit", "action", True, ("manual_review",)),
    ),
    "wide": (
        Step("quote", "observe", False),
        Step("convert", "action", False, ("quote",)),
        Step("withdraw", "action", True, ("quote",)),
        Step("manual_release", "action", False, ("convert", "withdraw")),
        Step("deposit", "action", True, ("manual_release",)),
    ),
    "broad": (
        Step("quote", "observe", False),
        Step("convert", "action", False, ("quote",)),
        Step("withdraw_a", "action", True, ("quote",)),
        Step("withdraw_b", "action", True, ("quote",)),
        Step("manual_release", "action", False, ("convert", "withdraw_a", "withdraw_b")),
        Step("deposit", "action", True, ("manual_release",)),
        Step("check", "observe", False, ("manual_release",)),
    ),
}
"""Plans explored by ``machines explore transfer``: a withdrawal and its observation; a
parallel branch of two withdrawals; parallel work joined at a manual gate; five nodes
with a conversion, two movements of money and a gate; and ``broad``, seven nodes with
three parallel branches (about 280,000 states: the benchmark's scope, explored by
``--scope all``)."""

DEFAULT_SCOPES = ("withdraw", "parallel", "gated", "wide")
