"""``TransferSuite`` itself: its adapter contract, the rules no zoo bug is about, the
oracle's judgement of what it saw, and garbage from an adapter (issue 14 items 1 and 6).

The suite and its ``Ledger`` are driven by hand here, so each test shows the few events
that break (or, with an operator's word, do not break) one rule."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from machines.testing.contract import AdapterContractError, required
from machines.testing.transfer import (
    PLANS,
    RULES,
    EngineHistory,
    Move,
    RuleBroken,
    TransferAdapter,
    TransferSuite,
    Venue,
)
from machines.testing.transfer_oracle import Ledger
from tests.garbage import garbage
from tests.zoo.transfer import ZooAdapter

METHODS = {
    "operate",
    "step",
    "request_state",
    "node_states",
    "history",
    "fingerprint",
    "advance_clock",
    "fail_next_write",
    "check",
}


def suite_on(adapter: type[Any]) -> TransferSuite:
    class OnThisEngine(TransferSuite):
        def make_adapter(self, venue: Venue) -> TransferAdapter:
            return adapter(venue)  # type: ignore[no-any-return]

    return OnThisEngine()


def judged(suite: TransferSuite) -> RuleBroken:
    with pytest.raises(RuleBroken) as failure:
        suite.judge()
    return failure.value


def sent(request: str = "r1", plan: str = "withdraw") -> Ledger:
    """A ledger that saw ``plan`` submitted as ``request`` and its withdrawal sent."""
    ledger = Ledger()
    ledger.planned(request, PLANS[plan])
    ledger.venue_call(request, "withdraw", "submit")
    return ledger


# -- the contract ------------------------------------------------------------------------


def test_every_method_of_the_contract_is_required_and_says_its_duty() -> None:
    """issue 14 item 6: each method is abstract, with its duty as its docstring."""
    duties = required(TransferAdapter)
    assert set(duties) == METHODS
    assert all(len(duty) > 40 for duty in duties.values()), duties


def test_an_adapter_missing_a_method_fails_at_its_class_statement() -> None:
    """issue 14 item 6: the class statement itself fails, naming the method and its duty."""
    with pytest.raises(AdapterContractError) as refused:

        class Forgetful(TransferAdapter):
            def operate(self, request_id: str, operation: str, **arguments: Any) -> None: ...
            def step(self, request_id: str, engine: str) -> None: ...
            def request_state(self, request_id: str) -> str | None: ...
            def node_states(self, request_id: str) -> dict[str, str]: ...
            def fingerprint(self) -> object: ...
            def advance_clock(self, seconds: float) -> None: ...
            def fail_next_write(self, how: Any) -> None: ...
            def check(self) -> list[str]: ...

    message = str(refused.value)
    assert "Forgetful" in message and "history" in message
    assert "legal chains of the bundled" in message


def test_a_duck_typed_adapter_is_checked_when_the_suite_builds_it() -> None:
    """issue 14 item 6: ``make_adapter``'s result is checked before the run starts."""

    class Partial:
        def __init__(self, venue: Venue) -> None:
            self.venue = venue

        def operate(self, request_id: str, operation: str, **arguments: Any) -> None: ...

    with pytest.raises(AdapterContractError, match="step"):
        suite_on(Partial)


# -- the rules no zoo bug is about ---------------------------------------------------------


def test_a_request_the_engine_forgets_breaks_request_kept() -> None:
    """issue 14 item 1: a request the engine accepted must stay known to it."""

    class Forgets(ZooAdapter):
        def request_state(self, request_id: str) -> str | None:
            return None

    suite = suite_on(Forgets)
    suite._submit("withdraw")
    suite._live()
    assert judged(suite).rule == "request-kept"


def test_the_adapters_own_checks_are_an_extra_rule() -> None:
    """issue 14 item 1: ``adapter.check()`` is judged too, under its own name, after
    the suite's rules (never instead of them)."""

    class Complains(ZooAdapter):
        def check(self) -> list[str]:
            return ["the ledger does not balance"]

    suite = suite_on(Complains)
    suite._submit("withdraw")
    broken = judged(suite)
    assert broken.rule == "adapter-check"
    assert "the ledger does not balance" in str(broken)


def test_every_rule_has_a_name_the_message_starts_with() -> None:
    """issue 14 item 1: a breach is one ``RuleBroken``, its rule's name first."""
    ledger = sent()
    ledger.venue_call("r1", "withdraw", "submit")
    with pytest.raises(RuleBroken) as failure:
        ledger.verdict()
    assert failure.value.rule == "submit-once" and "submit-once" in RULES
    assert str(failure.value).startswith("submit-once: r1: withdraw: submit() called again")


# -- the oracle: what the suite saw, and what an operator may override ---------------------


def test_releasing_money_in_flight_is_a_breach_unless_an_operator_confirmed() -> None:
    """issue 14 item 1: ``request_failed`` while a sent withdrawal has no word of failure
    breaks money-in-flight-held; after an operator's ``confirm_failed`` it does not."""
    ledger = sent()
    ledger.callback("request_failed", "r1", {})
    assert ledger.breach is not None and ledger.breach.rule == "money-in-flight-held"

    ledger = sent()
    ledger.begin("r1", "confirm_failed", {"by": "olivia"})
    ledger.end("done")
    ledger.callback("request_failed", "r1", {})
    assert ledger.breach is None


def test_a_refused_confirmation_overrides_nothing() -> None:
    """issue 14 item 1: an operator's act counts only if the engine accepted it."""
    ledger = sent()
    ledger.begin("r1", "confirm_failed", {"by": "olivia"})
    ledger.end("refused", RuntimeError("not now"))
    ledger.callback("request_failed", "r1", {})
    assert ledger.breach is not None and ledger.breach.rule == "money-in-flight-held"


def test_a_venue_failure_ends_the_money_in_flight() -> None:
    """issue 14 item 1: once the venue said the withdrawal failed, releasing is fine."""
    ledger = sent()
    ledger.venue_answer("r1", "withdraw", "submit", "failed")
    ledger.callback("request_failed", "r1", {})
    assert ledger.breach is None


def test_callbacks_for_unknown_requests_or_both_ways_break_callbacks_once() -> None:
    """issue 14 item 1: no callback for a request never submitted, never both."""
    ledger = Ledger()
    ledger.callback("request_completed", "r9", {})
    assert ledger.breach is not None and ledger.breach.rule == "callbacks-once"

    ledger = Ledger()
    ledger.planned("r1", PLANS["withdraw"])
    ledger.begin("r1", "confirm_failed", {})
    ledger.end("done")
    ledger.begin("r1", "confirm_completed", {})
    ledger.end("done")
    ledger.callback("request_failed", "r1", {})
    ledger.callback("request_completed", "r1", {})
    assert ledger.breach is not None and ledger.breach.rule == "callbacks-once"


def test_a_rewritten_history_breaks_legal_history() -> None:
    """issue 14 item 1: recorded moves never change once the suite saw them."""
    ledger = Ledger()
    ledger.planned("r1", PLANS["withdraw"])
    first = Move("received", "validate", "validated", "system")
    ledger.recorded("r1", EngineHistory([first], {}))
    assert ledger.breach is None
    other = Move("received", "fail_validation", "failed", "system")
    ledger.recorded("r1", EngineHistory([other], {}))
    assert ledger.breach is not None and "rewritten" in str(ledger.breach)


def test_a_history_is_judged_by_the_bundled_definitions() -> None:
    """issue 14 item 1: a move the bundled ``request`` definition does not have is a
    breach, whatever the engine runs on."""
    ledger = Ledger()
    ledger.planned("r1", PLANS["withdraw"])
    ledger.recorded("r1", EngineHistory([Move("received", "start", "executing", "system")], {}))
    assert ledger.breach is not None and ledger.breach.rule == "legal-history"


@given(garbage(extra=(Move("received", "validate", "validated", "system"),)))
def test_garbage_from_history_is_a_breach_never_a_crash(junk: object) -> None:
    """issue 14 item 1: whatever ``history()`` returns, the suite judges it (a breach of
    legal-history, or legal), and never fails with an error of its own."""
    for history in (junk, EngineHistory(junk, {}), EngineHistory([], {"withdraw": junk})):  # type: ignore[arg-type]
        ledger = Ledger()
        ledger.planned("r1", PLANS["withdraw"])
        ledger.recorded("r1", history)
        assert ledger.breach is None or ledger.breach.rule == "legal-history"
