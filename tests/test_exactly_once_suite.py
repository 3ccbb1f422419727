"""``ExactlyOnceSuite`` itself (issue 14 items 1, 3 and 6 for the exactly-once suite): its
adapter contract, its oracle's robustness, its extra checks, and bugs of the reference
executor that only the suite's own observation catches."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from machines.spec.loader import definition_paths, load, read_definition
from machines.systems.exactly_once import ExactlyOnce, Verdict, verdict_of
from machines.systems.reliance import standing_for_a_buggy_implementation
from machines.testing.contract import AdapterContractError, required
from machines.testing.exactly_once.oracle import Oracle, Told
from machines.testing.exactly_once.suite import (
    LEASE,
    RULES,
    Action,
    Behaviour,
    Call,
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    Move,
    Reclaim,
    ReferenceAdapter,
    Restart,
    RuleBroken,
    Wait,
)
from machines.testing.faults import Fault
from machines.testing.profiles import run_suite, scaled
from tests.conftest import Document, SpecCopy, transition
from tests.garbage import garbage
from tests.test_zoo_exactly_once import ZOO
from tests.zoo.exactly_once import BUGS, CancelIsFailure, Ledger, LedgerAdapter, TimeoutIsFailure

HUNT = ZOO
"""The zoo's settings (``tests/test_zoo_exactly_once.py``) for the hunts below."""


def hunt(adapter: Callable[[], ExactlyOnceAdapter]) -> RuleBroken:
    """Run the suite on ``adapter`` and return the rule it reports broken."""

    class Hunt(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return adapter()

    with pytest.raises(RuleBroken) as caught:
        run_suite(Hunt, HUNT)
    return caught.value


# -- the adapter contract (item 6) ---------------------------------------------------------


def test_every_adapter_method_is_required_and_says_its_duty() -> None:
    """issue 14 item 6: every method the suite calls is abstract, with its duty."""
    duties = required(ExactlyOnceAdapter)
    assert set(duties) == {
        "run",
        "reclaim",
        "decide",
        "advance_clock",
        "fail_next_write",
        "restart",
        "history",
        "check",
    }
    assert all(len(duty) > 40 for duty in duties.values()), duties


def test_an_adapter_class_missing_a_method_fails_when_it_is_defined() -> None:
    """issue 14 item 6: a missing method fails at the class statement, naming it and what
    it must do, instead of being a silent no-op halfway through a run."""
    with pytest.raises(AdapterContractError) as refused:

        class NoRestart(ExactlyOnceAdapter):
            def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any: ...
            def reclaim(self, key: str) -> None: ...
            def decide(self, key: str, landed: bool, result: Any) -> None: ...
            def advance_clock(self, seconds: float) -> None: ...
            def fail_next_write(self, how: Any) -> None: ...
            def history(self, key: str) -> None: ...
            def check(self) -> list[str]:
                return []

    message = str(refused.value)
    assert "NoRestart" in message and "ExactlyOnceAdapter" in message
    assert "- restart: The process died" in message


def test_a_duck_typed_adapter_missing_a_method_is_refused_when_the_suite_builds_it() -> None:
    """issue 14 item 6: ``make_adapter``'s result is checked against the contract."""

    class Duck:
        def __getattr__(self, name: str) -> Any:
            if name == "history":
                raise AttributeError(name)
            return getattr(ReferenceAdapter(), name)

    class DuckSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return Duck()  # type: ignore[return-value]

    with pytest.raises(AdapterContractError, match=r"(?s)adapter \S*Duck does not .*- history: "):
        DuckSuite()


# -- one place of failure, and the extra checks (items 1 and 3) ----------------------------


class Complains(ReferenceAdapter):
    def check(self) -> list[str]:
        return ["the ledger does not balance"] if self.now > 1_000 else []


def test_the_adapters_own_check_is_an_extra_rule() -> None:
    """issue 14 item 1: ``check()`` still counts, after the suite's own judgement."""
    broken = hunt(Complains)
    assert broken.rule == "adapter-check" and "the ledger does not balance" in str(broken)


class HistoryRaises(ReferenceAdapter):
    def history(self, key: str) -> list[Move]:
        raise KeyError(key)


def test_a_history_that_raises_is_reported_as_the_history_rule() -> None:
    """issue 14 item 1: an adapter's failing history is a finding, not a crash."""
    broken = hunt(HistoryRaises)
    assert broken.rule == "legal-history" and "history('k1') raised KeyError" in str(broken)


def test_a_copy_of_the_definitions_is_judged_by_the_bundled_one(spec_copy: SpecCopy) -> None:
    """issue 14 item 1: an executor run on a mutated copy of ``outcome`` (parking ends in
    failed) takes moves its copy allows; the suite judges the history by the bundled
    definition and names the move."""

    def park_to_failed(doc: Document) -> None:
        transition(doc, "in_flight", "indeterminate")["dest"] = "failed"

    spec_copy.edit("outcome", park_to_failed)
    specs = {s.name: s for s in map(read_definition, definition_paths(spec_copy.path))}
    with standing_for_a_buggy_implementation():  # else ExactlyOnce refuses the copy itself
        broken = hunt(lambda: ReferenceAdapter(specs=specs))
    assert broken.rule == "legal-history"
    assert "not a chain of the bundled 'outcome' definition: move 1 (park) leads to " in str(broken)


@pytest.mark.parametrize("bug", [TimeoutIsFailure, CancelIsFailure], ids=lambda b: b.__name__)
def test_one_bug_gives_one_report_shrunk_to_its_steps(bug: type[Ledger]) -> None:
    """issue 14 items 3 and 6: run the guide's way (``Suite.TestCase`` under the loaded
    profile, Hypothesis's default of reporting every distinct failure), a bug that then
    breaks several rules (a failed key that also replays wrongly, and whose history is
    wrong) gives ONE failure, whose message starts with the first broken rule, and whose
    counterexample has only the steps that matter (no leading ``time_passes``)."""

    class BugSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return LedgerAdapter(bug, history=True)

    outcome = unittest.TestResult()
    BugSuite.TestCase("runTest").run(outcome)
    assert len(outcome.failures) == 1 and not outcome.errors, outcome.errors
    report = outcome.failures[0][1]
    assert "distinct failures" not in report and report.count("RuleBroken: ") == 1
    rule = BUGS[bug].rule
    assert f"RuleBroken: {rule}: " in report
    assert 1 <= report.count("state.step(") <= BUGS[bug].steps  # a history may show it sooner
    assert "Wait(" not in report


# -- bugs of the reference executor that only observation catches (item 1) ---------------


def test_the_suite_catches_the_reference_retrying_an_error_sent_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 14 item 1: the double charge: under one claim, retry an error that does not
    prove the call was not sent. Today's suite runs the reference without retries, so a
    bug in the retry decision went unseen."""
    original = ExactlyOnce._after_error

    def retry_unless_failed(self: ExactlyOnce, claim: Any, attempt: int, error: Any) -> None:
        if verdict_of(self.classify, error) is not Verdict.FAILED and attempt <= self.retries:
            return
        original(self, claim, attempt, error)

    monkeypatch.setattr(ExactlyOnce, "_after_error", retry_unless_failed)
    assert hunt(ReferenceAdapter).rule == "no-retry-after-send"


def test_the_suite_catches_the_reference_leaving_a_cancelled_key_unparked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 14 item 1: a caller cancelled inside the effect must leave the key parked;
    re-raising the cancellation before parking leaves it in flight until its lease runs
    out, and the next caller hears "in progress"."""
    original = ExactlyOnce._after_error

    def reraise_first(self: ExactlyOnce, claim: Any, attempt: int, error: BaseException) -> None:
        if not isinstance(error, Exception):
            raise error
        original(self, claim, attempt, error)

    monkeypatch.setattr(ExactlyOnce, "_after_error", reraise_first)
    assert hunt(ReferenceAdapter).rule == "interrupted-parks"


class RetriesEverything(ReferenceAdapter):
    """Retries the effect on any error, for ever: the suite must still stop it."""

    def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any:
        def again() -> Any:
            while True:
                try:
                    return effect()
                except Exception:
                    continue

        return super().run(key, again, worker)


def test_a_retry_loop_that_never_ends_is_stopped_and_reported() -> None:
    """issue 14 item 1: a call that starts its effect ``ATTEMPTS`` times, or once a rule is
    broken inside an effect, is stopped (the effect raises so the implementation unwinds),
    and the report names the first broken rule: the suite never hangs on an executor."""
    assert hunt(RetriesEverything).rule == "bounded-retries"


# -- the oracle on hostile answers (item 1) -----------------------------------------------


@settings(scaled(300), suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(["result", "failed", "untyped", "interrupted"]),
    value=garbage(),
    moves=garbage(),
)
def test_the_oracle_judges_any_answer_and_history_without_raising(
    kind: Any, value: Any, moves: Any
) -> None:
    """issue 14 item 1: whatever an implementation answers or exposes as its history
    (hostile objects, 10**5000, NaN, deep nesting), the oracle records a verdict whose
    message it can build; it never raises on its own."""
    for settled_first in (False, True):
        oracle = Oracle(("k1",), 30.0)
        if settled_first:
            first = oracle.begin("k1", "worker", "returns a value")
            oracle.invoked(first)
            oracle.answered(first, Told("result", oracle.sent(first)))
        later = oracle.begin("k1", "worker", "returns a value")
        oracle.answered(later, Told(kind, value))
        oracle.history("k1", moves, load("outcome"))
        if oracle.broken is not None:
            assert oracle.broken.rule in RULES
            assert str(oracle.broken).startswith(f"{oracle.broken.rule}: ")


# -- garbage from the adapter (items 1 and 6) ----------------------------------------------


class Garbage(ReferenceAdapter):
    """Answers, exposes or raises ``value`` in the method ``where``; otherwise the
    reference."""

    value: Any = None
    where = "run"

    def run(self, key: str, effect: Callable[[], Any], worker: str) -> Any:
        if self.where == "run":
            return self.value
        if self.where == "run raises":
            raise RuntimeError(self.value)
        return super().run(key, effect, worker)

    def reclaim(self, key: str) -> None:
        if self.where == "reclaim raises":
            raise RuntimeError(self.value)
        super().reclaim(key)

    def advance_clock(self, seconds: float) -> None:
        if self.where == "advance_clock raises":
            raise ValueError(self.value)
        super().advance_clock(seconds)

    def fail_next_write(self, how: Fault | None) -> None:
        if self.where == "fail_next_write raises" and how is not None:
            raise ValueError(self.value)
        super().fail_next_write(how)

    def restart(self) -> None:
        if self.where == "restart raises":
            raise OSError(self.value)
        super().restart()

    def history(self, key: str) -> list[Move]:
        return self.value if self.where == "history" else super().history(key)

    def check(self) -> list[str]:
        return self.value if self.where == "check" else super().check()


GARBAGE_STEPS: tuple[Action, ...] = (
    Call("k1", Behaviour.TIMEOUT),
    Wait(LEASE + 1),
    Call("k2", Behaviour.STORE_FAILS_AFTER),
    Reclaim("k1"),
    Restart(),
    Call("k1", Behaviour.RETURN),
    Call("k1", Behaviour.RETURN),
)
"""A short run that calls every adapter method the garbage can come from."""


@pytest.mark.parametrize(
    "where",
    [
        "run",
        "run raises",
        "reclaim raises",
        "advance_clock raises",
        "fail_next_write raises",
        "restart raises",
        "history",
        "check",
    ],
)
@settings(scaled(40), suppress_health_check=list(HealthCheck))
@given(value=garbage(extra=({"value": 1.0}, {"value": True}, [("value", 1)])))
def test_garbage_from_an_adapter_is_a_named_rule_never_a_traceback(where: str, value: Any) -> None:
    """issue 14 items 1 and 6: whatever an adapter method returns or raises (hostile
    objects, 10**5000, NaN, deep nesting, a result nearly the upstream's), the suite
    answers with a RuleBroken naming a rule in a short message, or passes: never a
    traceback of its own."""

    class ThisGarbage(Garbage):
        pass

    ThisGarbage.value, ThisGarbage.where = value, where

    class GarbageSuite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return ThisGarbage()

    suite = GarbageSuite()
    try:
        for action in GARBAGE_STEPS:
            suite.step(action)
            suite.promises_kept()
    except RuleBroken as failure:
        assert failure.rule in RULES
        assert str(failure).startswith(f"{failure.rule}: ")
        assert len(str(failure)) < 4000
    else:
        assert where in ("history", "check")  # an empty history or check may be right


def test_a_decision_on_a_key_whose_dead_holder_still_holds_its_lease_is_named() -> None:
    """Outsider batch 26 (b 1): an executor whose ``decide`` also took keys in flight passed
    the suite: a decision on a key whose holder had died after sending, its lease still
    live, was taken as one on a parked key. Until the lease runs out nothing tells that
    key from one whose holder still runs; only a parked key is left by a person."""
    from machines.testing.exactly_once.oracle import Oracle, Told

    oracle = Oracle(["k1"], 30.0)
    call = oracle.begin("k1", "worker", "dies after sending")
    oracle.invoked(call)
    oracle.sent(call)
    oracle.answered(call, Told("crashed", None))
    oracle.decided("k1", False, None, None)
    assert oracle.broken is not None and oracle.broken.rule == "explicit-exit"
    assert "lease was live" in str(oracle.broken)
    late = Oracle(["k1"], 30.0)
    call = late.begin("k1", "worker", "dies after sending")
    late.invoked(call)
    late.sent(call)
    late.answered(call, Told("crashed", None))
    late.clock = 31.0
    late.decided("k1", False, None, None)
    assert late.broken is None
