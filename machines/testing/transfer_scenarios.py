"""Scripted starts for the transfer suite: deep corners reached at the start of a run.

Random runs rarely reach a signature awaited, a send lost or one that raised, money in
flight or moved when another node fails, or a doomed plan still signing, and a corner
reached once is left only one way. So a run
starts with one ``Start``: a ``Scenario`` played on its first request, then one of the
ways out of that corner. The suite draws the start; tests/test_suites.py also pins each
one, so the corners are covered whatever Hypothesis draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from machines.testing.faults import SimulatedCrash


@dataclass(frozen=True)
class Scenario:
    """A scripted start for one run's first request: approve it as far as ``until``, then
    ``steps`` engine steps with the venue answering from ``answers`` ((node, call) ->
    answers in order; anything else moves on); ``expect`` is where that lands on the
    reference engine. Then one of ``then`` ((operation, node, fixed arguments)) is done at
    once, so every way out of the corner is taken early and often (``step`` is an engine
    step; ``step after the timeout`` moves the clock first)."""

    plan: str
    until: str
    steps: int
    answers: Mapping[tuple[str, str], Sequence[str | type[BaseException]]]
    expect: tuple[str, Mapping[str, str]]
    then: Sequence[tuple[str, str, Mapping[str, Any]]] = ()


_UNTOUCHED = {"withdraw": "blocked", "withdraw_observe": "blocked"}
SCENARIOS: Mapping[str, Scenario | None] = {
    "a fresh start": None,
    "awaiting approval": Scenario(
        "withdraw",
        "pending_approval",
        0,
        {},
        ("pending_approval", _UNTOUCHED),
        then=[("approve", "", {}), ("reject", "", {}), ("expire", "", {})],
    ),
    "approved, not started": Scenario(
        "withdraw",
        "approved",
        0,
        {},
        ("approved", _UNTOUCHED),
        then=[("start", "", {}), ("fail_before_start", "", {})],
    ),
    "a signature awaited": Scenario(
        "withdraw",
        "executing",
        2,
        {("withdraw", "prepare"): ["sign"]},
        ("executing", {"withdraw": "awaiting_signature", "withdraw_observe": "blocked"}),
        then=[
            ("sign", "withdraw", {}),
            ("refuse_signature", "withdraw", {}),
            ("retry", "withdraw", {}),
        ],
    ),
    "a send that never reported back": Scenario(
        "withdraw",
        "executing",
        2,
        {("withdraw", "submit"): [SimulatedCrash]},
        ("executing", {"withdraw": "submitting", "withdraw_observe": "blocked"}),
        then=[("step after the timeout", "", {}), ("cancel", "", {})],
    ),
    "a send refused": Scenario(
        "withdraw",
        "executing",
        2,
        {("withdraw", "submit"): ["failed"]},
        ("failed", {"withdraw": "failed", "withdraw_observe": "blocked"}),
    ),
    "a send lost": Scenario(
        "withdraw",
        "executing",
        2,
        {("withdraw", "submit"): ["unknown"]},
        ("executing", {"withdraw": "unknown", "withdraw_observe": "blocked"}),
        then=[
            ("reconcile", "withdraw", {"evidence": evidence})
            for evidence in ("submitted", "completed", "failed")
        ],
    ),
    "a send that raised": Scenario(
        "withdraw",
        "executing",
        2,
        {("withdraw", "submit"): [ConnectionError]},
        ("executing", {"withdraw": "unknown", "withdraw_observe": "blocked"}),
        then=[("step", "", {}), ("reconcile", "withdraw", {"evidence": "failed"})],
    ),
    "money in flight, then a failure": Scenario(
        "parallel",
        "executing",
        2,
        {("withdraw", "submit"): ["accepted"], ("check", "observe"): ["failed"]},
        (
            "manual_intervention",
            {"quote": "completed", "convert": "ready", "withdraw": "submitted", "check": "failed"},
        ),
        then=[("step", "", {}), ("resume", "", {}), ("confirm_failed", "", {})],
    ),
    "money moved, then a failure": Scenario(
        "withdraw",
        "executing",
        4,
        {("withdraw", "submit"): ["completed"], ("withdraw_observe", "observe"): ["failed"]},
        ("manual_intervention", {"withdraw": "completed", "withdraw_observe": "failed"}),
        then=[("resume", "", {}), ("confirm_failed", "", {}), ("confirm_completed", "", {})],
    ),
    "at the manual gate": Scenario(
        "branching",
        "executing",
        3,
        {},
        (
            "waiting_manual_action",
            {
                "fx_quote": "completed",
                "withdraw": "completed",
                "manual_review": "ready",
                "deposit": "blocked",
            },
        ),
        then=[("complete_manual", "manual_review", {}), ("resume", "", {}), ("cancel", "", {})],
    ),
    "sent work, then a failure": Scenario(
        "parallel",
        "executing",
        5,
        {
            ("withdraw", "prepare"): ["sign"],
            ("check", "observe"): ["pending", "pending", "failed"],
            ("convert", "submit"): [SimulatedCrash],
        },
        (
            "executing",
            {
                "quote": "completed",
                "convert": "submitting",
                "withdraw": "awaiting_signature",
                "check": "failed",
            },
        ),
        then=[("step", "", {}), ("sign", "withdraw", {})],
    ),
    "a doomed plan, still signing": Scenario(
        "parallel",
        "executing",
        2,
        {("withdraw", "prepare"): ["sign"], ("check", "observe"): ["failed"]},
        (
            "executing",
            {
                "quote": "completed",
                "convert": "ready",
                "withdraw": "awaiting_signature",
                "check": "failed",
            },
        ),
        then=[("step", "", {}), ("sign", "withdraw", {})],
    ),
}
"""How runs start; Hypothesis draws one per run, so every deep corner is visited early."""

Then = tuple[str, str, Mapping[str, Any]]
Start = tuple[str, Then | None]
STARTS: Sequence[Start] = [
    (name, then)
    for name, setup in sorted(SCENARIOS.items())
    for then in (list(setup.then) if setup is not None and setup.then else [None])
]
"""Every (scenario, what is done next) pair: a run starts with one of them."""
