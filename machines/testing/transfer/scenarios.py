"""What the transfer suite does to an engine: the plans it submits, what people and other
systems do to a request or a node in each state, and scripted starts.

Random runs rarely reach a signature awaited, a send lost or one that raised, money in
flight or moved when another node fails, a doomed plan still signing, or a plan refused
at validation, and a corner reached once is left only one way. So a run starts with one
``Start``: a ``Scenario`` played on its first request, then one of the ways out of that
corner. The suite draws the start; tests/test_suites.py also pins each one, so the
corners are covered whatever Hypothesis draws.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from machines.testing.faults import SimulatedCrash


def plan_node(
    name: str, kind: str, side_effect: bool, *after: str, executor: str = "venue"
) -> dict[str, Any]:
    """One plan entry: ``plan_node("deposit", "action", True, "withdraw")``."""
    return {
        "name": name,
        "kind": kind,
        "has_side_effect": side_effect,
        "executor": executor,
        "after": list(after),
    }


LIVE = 2
"""Requests in progress at once in a run; a new one is submitted when one ends."""

PLANS: Mapping[str, Sequence[Mapping[str, Any]]] = {
    "withdraw": [
        plan_node("withdraw", "action", True),
        plan_node("withdraw_observe", "observe", False, "withdraw"),
    ],
    "parallel": [
        plan_node("quote", "observe", False),
        plan_node("convert", "action", False, "quote"),
        plan_node("withdraw", "action", True),
        plan_node("check", "observe", False),
    ],
    "branching": [  # a person reviews the quote while the withdrawal runs
        plan_node("fx_quote", "observe", False),
        plan_node("withdraw", "action", True),
        plan_node("manual_review", "action", False, "fx_quote", executor="gate"),
        plan_node("deposit", "action", True, "manual_review", "withdraw"),
    ],
    "two gates": [  # two people each pass their own gate (batch 44 c B4)
        plan_node("manual_compliance", "action", False, executor="gate"),
        plan_node("manual_treasury", "action", False, executor="gate"),
        plan_node("pay", "action", True, "manual_compliance", "manual_treasury"),
    ],
    "checked": [  # listed deposit first: a step reaches it before the withdrawal's answer
        plan_node("deposit", "action", True, "recheck"),
        plan_node("recheck", "observe", False, "review"),
        plan_node("review", "observe", False, "withdraw"),
        plan_node("withdraw", "action", True),
    ],
}
NODES = sorted({n["name"] for plan in PLANS.values() for n in plan})

OPERATIONS: Mapping[str, Callable[[st.DataObject, str], dict[str, Any]]] = {
    "validate": lambda d, n: {"problems": d.draw(st.sampled_from([(), ("bad iban",)]))},
    "request_approval": lambda d, n: {},
    "approve": lambda d, n: {"by": "olivia"},
    "reject": lambda d, n: {"by": "olivia"},
    "expire": lambda d, n: {},
    "start": lambda d, n: {},
    "fail_before_start": lambda d, n: {"reason": "limits changed"},
    "cancel": lambda d, n: {"by": "olivia"},
    "resume": lambda d, n: {"by": "olivia"},
    "confirm_failed": lambda d, n: {"by": "olivia", "evidence": "venue statement"},
    "confirm_completed": lambda d, n: {"by": "olivia", "evidence": "venue statement"},
    "complete_manual": lambda d, n: {"node": n, "by": "olivia"},
    "sign": lambda d, n: {"node": n, "by": "hsm"},
    "refuse_signature": lambda d, n: {"node": n, "by": "hsm", "reason": "limit"},
    "retry": lambda d, n: {"node": n, "reason": "signature expired"},
    "skip": lambda d, n: {"node": n, "by": "planner", "reason": "not needed"},
    "reconcile": lambda d, n: {
        "node": n,
        "by": "recon",
        "evidence": d.draw(st.sampled_from(["submitted", "completed", "failed"])),
    },
}
"""Every operation the suite may ask for by name, with its arguments drawn (``n``: a node)."""
# What people and other systems plausibly do to a request in each state, and to a node.
BY_REQUEST_STATE: Mapping[str, Sequence[str]] = {
    "pending_approval": ("reject", "expire"),
    "approved": ("fail_before_start",),
    "executing": ("cancel",),  # refused once money may be moving: so it must stay
    "waiting_manual_action": ("cancel", "resume", "complete_manual"),
    "manual_intervention": ("resume", "confirm_failed", "confirm_completed"),
}
BY_NODE_STATE: Mapping[str, Sequence[str]] = {
    "blocked": ("skip", "complete_manual"),  # a gate not reached yet: an operator too early
    "ready": ("skip",),
    "awaiting_signature": ("sign", "refuse_signature", "retry"),
    "preparing": ("retry",),
    "unknown": ("reconcile",),
}
NODES_ACTED_ON_IN = frozenset({"executing", "waiting_manual_action", "manual_intervention"})

# The way to execution: what ``advance`` does in each request state, so random runs get
# there (four specific operations in a row are rare among all of them).
LIFECYCLE = {
    "received": "validate",
    "validated": "request_approval",
    "pending_approval": "approve",
    "approved": "start",
}


@dataclass(frozen=True)
class Scenario:
    """A scripted start for one run's first request: approve it as far as ``until``, then
    ``steps`` engine steps with the venue answering from ``answers`` ((node, call) ->
    answers in order; anything else moves on); ``expect`` is where that lands on the
    reference engine, after the planner skipped the nodes ``skipped``, in order. Then one
    of ``then`` ((operation, node, fixed arguments)) is done at once, so every way out of
    the corner is taken early and often (``step`` is an engine step; ``step after the
    timeout`` moves the clock first)."""

    plan: str
    until: str
    steps: int
    answers: Mapping[tuple[str, str], Sequence[str | type[BaseException]]]
    expect: tuple[str, Mapping[str, str]]
    then: Sequence[tuple[str, str, Mapping[str, Any]]] = ()
    skipped: Sequence[str] = ()


_UNTOUCHED = {"withdraw": "blocked", "withdraw_observe": "blocked"}
SCENARIOS: Mapping[str, Scenario | None] = {
    "a fresh start": None,
    "a plan just received": Scenario(
        "withdraw",
        "received",
        0,
        {},
        ("received", _UNTOUCHED),
        then=[("validate", "", {"problems": ("bad iban",)}), ("validate", "", {"problems": ()})],
    ),
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
        then=[
            ("complete_manual", "manual_review", {}),
            ("resume", "", {}),
            ("cancel", "", {}),
        ],
    ),
    "two gates ready": Scenario(  # batch 44 c B4: one operator's pass is one gate's
        "two gates",
        "executing",
        1,
        {},
        (
            "waiting_manual_action",
            {"manual_compliance": "ready", "manual_treasury": "ready", "pay": "blocked"},
        ),
        then=[
            ("complete_manual", "manual_compliance", {}),
            ("complete_manual", "manual_treasury", {}),
        ],
    ),
    "a check skipped, money in flight": Scenario(
        "checked",
        "executing",
        2,
        {("withdraw", "submit"): ["accepted"]},
        (
            "executing",
            {
                "deposit": "blocked",
                "recheck": "blocked",
                "review": "blocked",
                "withdraw": "submitted",
            },
        ),
        then=[("skip", "review", {}), ("skip", "recheck", {})],
    ),
    "two checks skipped, money in flight": Scenario(  # batch 41 b S1: a skip one deep
        "checked",
        "executing",
        2,
        {("withdraw", "submit"): ["accepted"]},
        (
            "executing",
            {
                "deposit": "blocked",
                "recheck": "blocked",
                "review": "skipped",
                "withdraw": "submitted",
            },
        ),
        then=[("skip", "recheck", {})],
        skipped=("review",),
    ),
    "a gate not yet reached": Scenario(
        "branching",
        "executing",
        2,
        {("fx_quote", "observe"): ["pending", "pending"]},
        (
            "executing",
            {
                "fx_quote": "observing",
                "withdraw": "submitted",
                "manual_review": "blocked",
                "deposit": "blocked",
            },
        ),
        then=[("skip", "manual_review", {}), ("complete_manual", "manual_review", {})],
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
