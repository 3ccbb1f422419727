"""``EffectLogSuite`` itself: its adapter contract, the rules the zoo does not break first,
its judge (the bundled definition), and garbage from an adapter (issue 14 items 1 and 6).

The suite is driven by hand here (a rule method, then the ``judged`` invariant), so each
test shows the few steps that break one rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given

from machines.spec.loader import read_definition
from machines.testing.contract import AdapterContractError, required
from machines.testing.effectlog.suite import (
    CALLS,
    RULES,
    Behaviour,
    Call,
    EffectLogAdapter,
    EffectLogSuite,
    Move,
    ReferenceEffectLog,
    RuleBroken,
    Saga,
)
from tests.conftest import Document, SpecCopy
from tests.garbage import garbage
from tests.zoo.effectlog import BUGS, Bug, CarefulLog, UserAdapter, adapter_for

METHODS = {
    "call",
    "approve",
    "reject",
    "compensate",
    "history",
    "fail_next_write",
    "restart",
    "check",
}


def suite_on(adapter: Callable[[], EffectLogAdapter]) -> EffectLogSuite:
    class OnThisLog(EffectLogSuite):
        def make_adapter(self) -> EffectLogAdapter:
            return adapter()

    return OnThisLog()


def broken(suite: EffectLogSuite) -> RuleBroken:
    with pytest.raises(RuleBroken) as failure:
        suite.judged()
    return failure.value


# -- the contract ------------------------------------------------------------------------


def test_every_method_of_the_contract_is_required_and_says_its_duty() -> None:
    """issue 14 item 6: each method is abstract, with its duty as its docstring."""
    duties = required(EffectLogAdapter)
    assert set(duties) == METHODS
    assert all(len(duty) > 40 for duty in duties.values()), duties


def test_an_adapter_missing_a_method_fails_at_its_class_statement() -> None:
    """issue 14 item 6: the class statement itself fails, naming the method and its duty."""
    with pytest.raises(AdapterContractError) as refused:

        class Forgetful(EffectLogAdapter):
            def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
                return fn()

            def approve(self, signature: str) -> None: ...
            def reject(self, signature: str) -> None: ...
            def compensate(self, session: str, compensations: Mapping[str, Any]) -> None: ...
            def history(self, signature: str) -> Sequence[Move] | None: ...
            def fail_next_write(self, how: Any) -> None: ...
            def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]: ...

    message = str(refused.value)
    assert "Forgetful" in message and "EffectLogAdapter" in message
    assert "restart: The process restarts" in message


def test_a_duck_typed_adapter_is_checked_when_the_suite_builds_it() -> None:
    """issue 14 item 6: an adapter that does not subclass the contract is checked too."""

    class Duck:
        def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
            return fn()

    with pytest.raises(AdapterContractError, match=r"(?s)7 method.*approve.*reject.*restart"):
        suite_on(Duck)  # type: ignore[arg-type]


def test_the_reference_adapter_keeps_the_contract() -> None:
    """issue 14 item 6: the reference adapter is a full EffectLogAdapter."""
    assert isinstance(ReferenceEffectLog(), EffectLogAdapter)
    suite = suite_on(ReferenceEffectLog)
    suite.call("charge-1", Behaviour.RETURN)
    suite.judged()
    assert [m.trigger for m in suite.adapter.history("charge-1") or []] == ["execute", "commit"]


# -- rules the zoo does not break first ----------------------------------------------------


class UndoesOnlyTheNewest(CarefulLog):
    def _undo_order(self, session: str) -> list[str]:
        newest = [
            key
            for key, r in reversed(self.disk.records.items())
            if r["session"] == session and r["status"] == "executing"
        ]
        return newest[:1]


def test_a_saga_that_returns_with_an_unknown_effect_left_breaks_saga_completes() -> None:
    """issue 14 item 1: the saga undoes every unknown effect of its session."""
    suite = suite_on(adapter_for(Bug(UndoesOnlyTheNewest, ("saga-completes",))))
    suite.call("charge-1", Behaviour.TIMEOUT)
    suite.call("book-1", Behaviour.TIMEOUT)
    suite.compensate("s1", Saga.WORKS)
    failure = broken(suite)
    assert failure.rule == "saga-completes" and "charge-1" in str(failure)


class LaggingHistory(UserAdapter):
    """Exposes a history one move behind: legal, but not where the log is."""

    def history(self, signature: str) -> Sequence[Move] | None:
        moves = super().history(signature) or []
        return moves[:-1]


def test_a_history_that_disagrees_with_what_was_seen_breaks_history_agrees() -> None:
    """issue 14 item 1: the state the history ends in is judged against the observation."""
    suite = suite_on(LaggingHistory)
    suite.call("charge-1", Behaviour.RETURN)
    failure = broken(suite)
    assert failure.rule == "history-agrees"
    assert "ends in executing" in str(failure) and "committed" in str(failure)


class SelfCritical(UserAdapter):
    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        return ["the ledger is off by one"]


def test_a_problem_the_adapter_reports_breaks_adapter_check() -> None:
    """issue 14 item 1: check() is an extra check: what it reports fails the run."""
    failure = broken(suite_on(SelfCritical))
    assert failure.rule == "adapter-check" and "off by one" in str(failure)


class Untranslated(UserAdapter):
    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        return self.log.call(signature, fn, call)  # the log's own Busy, Waiting, ...


def test_an_error_the_contract_does_not_allow_breaks_contract() -> None:
    """issue 14 item 6: the adapter translates its log's errors, or the run says so."""
    suite = suite_on(Untranslated)
    suite.call("wire-1", Behaviour.RETURN)  # the log raises its own Waiting
    failure = broken(suite)
    assert failure.rule == "contract" and "Waiting" in str(failure)


def test_the_history_is_judged_by_the_bundled_definition(spec_copy: SpecCopy) -> None:
    """issue 14 item 1: a log whose own copy of the definitions allows its history is
    judged by the bundled one all the same."""

    def allow_execute_after_approval(doc: Document) -> None:
        doc["transitions"].append(
            {
                "trigger": "execute",
                "source": "approved",
                "dest": "executing",
                "actor": "proxy",
                "description": "The log's own shortcut: an approved call runs as 'execute'.",
            }
        )

    spec_copy.edit("effect", allow_execute_after_approval)
    own = read_definition(spec_copy.file("effect"))
    assert own.step("approved", "execute", actor="proxy", tier="irreversible") == "executing"
    bug = next(b for b in BUGS if b.name == "ResumesWithExecute")
    suite = suite_on(adapter_for(bug))
    suite.call("wire-1", Behaviour.RETURN)
    suite.human_decides("wire-1", True)
    suite.call("wire-1", Behaviour.RETURN)
    failure = broken(suite)
    assert failure.rule == "history-chain" and "approved" in str(failure)


def test_every_rule_has_a_test_or_a_bug_that_breaks_it() -> None:
    """A check that cannot fail is a defect: each rule is broken by a zoo bug or above."""
    by_zoo = {rule for bug in BUGS for rule in bug.rules}
    here = {"saga-completes", "history-agrees", "adapter-check", "contract"}
    assert set(RULES) == by_zoo | here


# -- garbage from the adapter --------------------------------------------------------------


class Garbage(UserAdapter):
    """Answers every call with ``value``, exposes it as history and reports it as its
    check, or raises an error carrying it."""

    value: Any = None
    where = "call"

    def call(self, signature: str, fn: Callable[[], Any], call: Call) -> Any:
        if self.where == "call":
            return self.value
        if self.where == "raise":
            raise RuntimeError(self.value)
        return super().call(signature, fn, call)

    def history(self, signature: str) -> Sequence[Move] | None:
        return self.value if self.where == "history" else super().history(signature)  # type: ignore[no-any-return]

    def check(self, runs: Mapping[tuple[str, str], int]) -> list[str]:
        return self.value if self.where == "check" else []  # type: ignore[no-any-return]


@pytest.mark.parametrize("where", ["call", "raise", "history", "check"])
@given(value=garbage(extra=tuple(CALLS)))
def test_garbage_from_an_adapter_is_a_named_breach_never_a_crash(where: str, value: Any) -> None:
    """issue 14 item 1: whatever an adapter returns or raises, the suite answers with a
    RuleBroken naming a rule and a short message, or passes: never its own traceback."""

    class ThisGarbage(Garbage):
        pass

    ThisGarbage.value, ThisGarbage.where = value, where
    suite = suite_on(ThisGarbage)
    try:
        suite.call("charge-1", Behaviour.RETURN)
        suite.judged()
        suite.call("charge-1", Behaviour.RETURN)
        suite.judged()
    except RuleBroken as failure:
        assert failure.rule in RULES
        assert len(str(failure)) < 4000
        assert str(failure).startswith(failure.rule + ": ")
    else:
        assert where in ("history", "check")  # an empty history or check may be right
