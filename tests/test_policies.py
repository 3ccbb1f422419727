"""Safety apart from policy (issue 28): each rule of a suite is a guarantee, kept by every
correct implementation, or a policy, this package's choice among safe designs; a user whose
executor safely chooses otherwise leaves the policy out, and the report says which kind
broke.

The exactly-once suite's policies are ``interrupted-parks`` (park a key at once when its
caller is interrupted) and ``failure-replayed`` (replay a failure that proved nothing was
sent, rather than free the key). ``KeepsLeaseOnCancel`` holds the interrupted caller's
lease until it expires instead: nothing runs twice, so it fails only on the policy, and
passes without it; the executors that lose the claim on an interrupt still fail without it,
on a guarantee."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import Phase, settings

from machines.spec.registry import GUARANTEE, INVARIANTS, POLICY, kind_of, policies_of
from machines.testing._harness.sizes import EXACTLY_ONCE
from machines.testing.contract import AdapterContractError
from machines.testing.exactly_once.oracle import RULES
from machines.testing.exactly_once.suite import POLICIES, ExactlyOnceAdapter, ExactlyOnceSuite
from machines.testing.profiles import run_suite
from machines.testing.verdict import RuleBroken
from tests.zoo.exactly_once import (
    CancelIsFailure,
    ForgetsOnCancel,
    FreesEveryOutcome,
    FreesFailures,
    KeepsLeaseOnCancel,
    Ledger,
    LedgerAdapter,
    Refused,
)

HUNT = settings(EXACTLY_ONCE.hunting(), phases=[Phase.generate])


def suite_for(kind: type[Ledger], **options: Any) -> type[ExactlyOnceSuite]:
    class OnThisLedger(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return LedgerAdapter(kind, history=False)

    for name, value in options.items():
        setattr(OnThisLedger, name, value)
    return type(f"On{kind.__name__}", (OnThisLedger,), {})


def broken(suite: type[ExactlyOnceSuite]) -> RuleBroken:
    """The suite's report on ``suite``, the tour first (its every short run is taken, so
    the report does not hang on which random runs a change of the suite's draws makes)."""
    with pytest.raises(RuleBroken) as caught:
        suite.run(HUNT)
    return caught.value


def test_every_rule_is_labelled_and_the_exactly_once_policy_is_named() -> None:
    assert {i.kind for i in INVARIANTS.values()} == {GUARANTEE, POLICY}
    assert policies_of("exactly-once suite") == POLICIES
    assert {"interrupted-parks", "failure-replayed"} == POLICIES
    assert kind_of("one-send-per-claim") == GUARANTEE
    assert set(POLICIES) < set(RULES)


def test_a_safe_executor_of_another_policy_fails_only_on_the_policy() -> None:
    report = broken(suite_for(KeepsLeaseOnCancel))
    assert report.rule == "interrupted-parks" and report.kind == POLICY
    assert "(a policy of this package; an implementation that chooses otherwise" in str(report)


def test_it_passes_when_the_policy_is_left_out() -> None:
    run_suite(suite_for(KeepsLeaseOnCancel, policies=frozenset()), HUNT)


def test_an_executor_that_frees_a_failed_key_fails_only_on_that_policy() -> None:
    """Outsider batch 29 (b 2): freeing a key whose failure proved nothing was sent (the
    next call runs the effect afresh, a new claim) broke replay-identical, a guarantee
    the user could not leave out, though nothing is ever sent twice. It is the policy
    failure-replayed; left out, such an executor passes, and freeing a succeeded key is
    still caught on the guarantee."""
    report = broken(suite_for(FreesFailures))
    assert report.rule == "failure-replayed" and report.kind == POLICY, str(report)
    run_suite(suite_for(FreesFailures, policies=frozenset({"interrupted-parks"})), HUNT)
    report = broken(suite_for(FreesEveryOutcome, policies=frozenset()))
    assert report.rule == "replay-identical" and report.kind == GUARANTEE, str(report)


@pytest.mark.parametrize(
    ("kind", "rule"),
    [
        (ForgetsOnCancel, {"one-send-per-claim", "expired-lease-parks"}),
        (CancelIsFailure, {"failed-means-not-sent"}),
    ],
    ids=["frees-the-claim", "says-failed"],
)
def test_an_unsafe_interrupt_is_caught_on_a_guarantee_without_the_policy(
    kind: type[Ledger], rule: set[str]
) -> None:
    """The claim freed with the send made (the next caller runs the effect again), or a
    send reported as a failure."""
    report = broken(suite_for(kind, policies=frozenset()))
    assert report.rule in rule and report.kind == GUARANTEE, str(report)
    assert "(a guarantee: " in str(report)


class CancelledIsFailed(Ledger):
    """Outsider, fifth batch: a cancelled call is "the caller gave up", recorded failed,
    even when the request went out before the cancellation; an interrupt keeps the lease."""

    def give_up(self, key: str, version: int, error: BaseException) -> None:
        if isinstance(error, asyncio.CancelledError):
            refused = Refused("CancelledError", "the caller cancelled")
            self.settle(key, version, "fail", None, refused)
            raise refused
        if isinstance(error, Exception):
            self.park(key, version)


def test_a_cancellation_after_sending_recorded_as_failed_is_caught_on_a_guarantee() -> None:
    """Without the policy, only a cancellation *after* the send tells the unsafe executor
    from a safe one: the suite cancels there too (``CANCELLED_AFTER_SENDING``)."""
    report = broken(suite_for(CancelledIsFailed, policies=frozenset()))
    assert report.rule == "failed-means-not-sent" and report.kind == GUARANTEE, str(report)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"one-send-per-claim"}, "'one-send-per-claim', a guarantee, not a policy"),
        ({"interupted-parks"}, "did you mean 'interrupted-parks'"),
        ("interrupted-parks", "not a set of rule names"),
        ({1}, "not a set of rule names"),
    ],
)
def test_garbage_policies_fail_where_the_suite_is_defined(value: object, says: str) -> None:
    with pytest.raises(AdapterContractError, match=says):
        type("Bad", (ExactlyOnceSuite,), {"policies": value})


# -- the effect-log and transfer suites' policies -------------------------------------------


def other_suites() -> list[tuple[str, type[Any], str]]:
    """(name, suite on the zoo's implementation of another policy, the policy)."""
    from tests.test_zoo_effectlog import suite_for as on_log
    from tests.test_zoo_transfer import suite_for as on_engine
    from tests.zoo import effectlog, transfer

    oldest_first = next(b for b in effectlog.BUGS if b.log is effectlog.UndoesOldestFirst)
    going_on = transfer.BUGS["keeps dispatching after a failure"]
    return [
        ("effect-log", on_log(effectlog.adapter_for(oldest_first)), "saga-newest-first"),
        ("transfer", on_engine(transfer.adapter_for(going_on.engine)), "halt-after-failure"),
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["effect-log", "transfer"])
def test_the_other_suites_name_a_policy_and_let_it_be_left_out(which: int) -> None:
    from machines.testing._harness.sizes import EFFECT_LOG_HUNT, TRANSFER_HUNT

    name, suite, policy = other_suites()[which]
    hunt = (EFFECT_LOG_HUNT if name == "effect-log" else TRANSFER_HUNT).hunting()
    assert policy in policies_of(f"{name} suite")  # type: ignore[arg-type]
    with pytest.raises(RuleBroken) as caught:
        run_suite(suite, hunt)
    assert caught.value.rule == policy and caught.value.kind == POLICY, str(caught.value)
    assert "(a policy of this package;" in str(caught.value)
    without = type(f"{suite.__name__}WithoutPolicy", (suite,), {"policies": frozenset()})
    try:
        run_suite(without, hunt)
    except RuleBroken as other:  # the same design may break a guarantee too: named so
        assert other.kind == GUARANTEE and other.rule != policy, str(other)


def test_a_log_that_keeps_a_proven_failure_fails_only_on_that_policy() -> None:
    """Outsider batch 31 (b 2): a log that closes a call whose tool proved nothing was
    sent (every later caller told so, the tool never run again) failed told-truth, a
    guarantee, though nothing can take effect twice. It is the policy not-sent-runs-again;
    left out, the log passes."""
    from machines.testing._harness.sizes import EFFECT_LOG_HUNT
    from tests.test_zoo_effectlog import suite_for as on_log
    from tests.zoo import effectlog

    keeps = next(b for b in effectlog.BUGS if b.log is effectlog.KeepsNotSentFailures)
    suite = on_log(effectlog.adapter_for(keeps))
    with pytest.raises(RuleBroken) as caught:
        run_suite(suite, EFFECT_LOG_HUNT.hunting())
    assert caught.value.rule == "not-sent-runs-again" and caught.value.kind == POLICY
    kept = frozenset({"saga-newest-first"})
    run_suite(type("KeepsItsPolicy", (suite,), {"policies": kept}), EFFECT_LOG_HUNT.hunting())


def test_a_log_that_keeps_every_proven_failure_passes_with_that_policy_left_out() -> None:
    """Outsider batch 46 (a 14): a log that keeps a not-sent failure of an irreversible
    call too (and so refuses a later approval of it) failed ``decisions``, a guarantee,
    with ``not-sent-runs-again`` left out. Refusing a decision on a call the log closed
    is that policy's choice."""
    from machines.testing._harness.sizes import EFFECT_LOG_HUNT
    from tests.test_zoo_effectlog import suite_for as on_log
    from tests.zoo import effectlog

    keeps = effectlog.Bug(effectlog.KeepsEveryNotSentFailure, ("not-sent-runs-again",))
    suite = on_log(effectlog.adapter_for(keeps))
    kept = type("KeepsEveryFailure", (suite,), {"policies": frozenset({"saga-newest-first"})})
    kept.run(EFFECT_LOG_HUNT.hunting())


def backs_off(seconds: float) -> type[Any]:
    """The reference engine, asking the venue about a request at most once every
    ``seconds`` on the suite's clock (a step inside the window does nothing)."""
    from collections import defaultdict

    from machines.testing.transfer import ReferenceTransfer, TransferSuite

    class BacksOff(ReferenceTransfer):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.last: dict[str, float] = defaultdict(lambda: -1e9)

        def step(self, request_id: str, engine: str) -> None:
            if self.now - self.last[request_id] < seconds:
                return
            self.last[request_id] = self.now
            super().step(request_id, engine)

    class OnBacksOff(TransferSuite):
        def make_adapter(self, venue: Any) -> BacksOff:
            return BacksOff(venue)

    return OnBacksOff


def test_an_engine_that_backs_off_fails_only_on_that_policy() -> None:
    """Outsider batch 31 (b 1): an engine that asks the venue about a request at most once
    every 5 s (a step inside the window does nothing) failed in-flight-followed, a
    guarantee, though it gives up no work in flight. It is a policy; left out, it passes."""
    from machines.testing._harness.sizes import TRANSFER_HUNT
    from machines.testing.profiles import hunting

    on_backs_off = backs_off(5.0)
    with pytest.raises(RuleBroken) as caught:
        run_suite(on_backs_off, TRANSFER_HUNT.hunting())
    assert caught.value.rule == "in-flight-followed" and caught.value.kind == POLICY
    kept = frozenset({"halt-after-failure"})
    short = hunting(25, 30)  # a pass, not a hunt: the full one takes minutes
    run_suite(type("BacksOffByChoice", (on_backs_off,), {"policies": kept}), short)


def test_an_engine_that_backs_off_longer_than_the_timeout_declares_its_bound() -> None:
    """Outsider batch 44 (c B5): an engine polling every 120 s never stops asking, but
    in-flight-asked held it to the suite's submit timeout (60 s) as a guarantee. The bound
    is the engine's to declare (``follow_within``); the rule holds it to what it declares."""
    from machines.testing.profiles import hunting

    slow = type("PollsEvery120s", (backs_off(120.0),), {"policies": frozenset()})
    with pytest.raises(RuleBroken) as caught:
        run_suite(slow, hunting(300, 60))
    assert caught.value.rule == "in-flight-asked" and caught.value.kind == GUARANTEE
    assert "over 60 s" in str(caught.value)
    declared = type("DeclaresItsBound", (slow,), {"follow_within": 121})
    run_suite(declared, hunting(25, 30))
    too_slow = type("PollsEvery300s", (backs_off(300.0),), {"policies": frozenset()})
    understated = type("UnderstatesItsBound", (too_slow,), {"follow_within": 121.0})
    with pytest.raises(RuleBroken) as caught:
        run_suite(understated, hunting(300, 60))
    assert caught.value.rule == "in-flight-asked" and "over 121 s" in str(caught.value)


@pytest.mark.parametrize(
    "bound", [0, -1.0, float("inf"), float("nan"), 10**400, True, "60", None, [60]]
)
def test_a_bound_that_is_not_a_duration_is_refused_where_the_suite_is_defined(
    bound: object,
) -> None:
    """``follow_within`` is a finite number of seconds above zero; anything else (an
    infinite bound would make in-flight-asked a rule that cannot fail) is refused where
    the class is defined, naming the class and the value."""
    from machines.testing.transfer import TransferSuite

    with pytest.raises(AdapterContractError, match="WaitsForever sets follow_within"):
        type("WaitsForever", (TransferSuite,), {"follow_within": bound})


def test_an_engine_that_never_follows_is_caught_with_the_policy_left_out() -> None:
    """Outsider batch 32 (b 1): with in-flight-followed left out (as a team whose engine
    backs off is told to), an engine that never asks about work in flight passed: its
    requests stayed in flight for good. A node in flight unasked about for longer than
    the submit timeout breaks in-flight-asked, a guarantee."""
    from machines.testing._harness.sizes import TRANSFER_HUNT
    from tests.test_zoo_transfer import suite_for as on_engine
    from tests.zoo import transfer

    suite = on_engine(transfer.adapter_for(transfer.NeverFollows))
    left_out = type("NeverFollowsByChoice", (suite,), {"policies": frozenset()})
    with pytest.raises(RuleBroken) as caught:
        run_suite(left_out, TRANSFER_HUNT.hunting())
    assert caught.value.rule == "in-flight-asked" and caught.value.kind == GUARANTEE
    # outsider batch 46 (a 17): a bound of an hour was never reached by the suite's waits,
    # and the engine that never asks passed whatever its suite class was called
    for bound in (300.0, 3600.0):
        declared = type("PaymentsEngineSuite", (left_out,), {"follow_within": bound})
        with pytest.raises(RuleBroken) as caught:
            run_suite(declared, TRANSFER_HUNT.hunting())
        assert caught.value.rule == "in-flight-asked", str(caught.value)
        assert f"over {bound:g} s" in str(caught.value)


def test_suite_settings_are_checked_wherever_they_are_set() -> None:
    """Outsider batch 46 (a 19): a float's subclass (numpy's float64) was refused as "not
    a finite number"; ``minimise_seconds`` on the effect-log and transfer suites was not
    checked (a text there replaced a report with a raw ``TypeError``); a setting assigned
    after the class was defined was used unchecked."""
    from machines.testing.contract import AdapterContractError
    from machines.testing.effectlog.suite import EffectLogSuite
    from machines.testing.transfer import TransferSuite

    class Seconds(float):
        pass

    kept = type("Numpy", (TransferSuite,), {"follow_within": Seconds(90.0)})
    assert kept.follow_within == 90.0
    for base in (EffectLogSuite, TransferSuite):
        with pytest.raises(AdapterContractError, match="sets minimise_seconds to 'x'"):
            type("Bad", (base,), {"minimise_seconds": "x"})
        assert type("Quick", (base,), {"minimise_seconds": 0}).minimise_seconds == 0.0
    late = type("Late", (ExactlyOnceSuite,), {})
    late.lease_seconds = 500.0
    with pytest.raises(AdapterContractError, match="Late sets lease_seconds to 500"):
        late()


@pytest.mark.parametrize(
    ("base", "name", "says"),
    [
        ("ExactlyOnceSuite", "lease_second", "did you mean 'lease_seconds'"),
        ("ExactlyOnceSuite", "follow_within", "another suite's setting"),
        ("TransferSuite", "follow_with", "did you mean 'follow_within'"),
        ("TransferSuite", "policy", "did you mean 'policies'"),
        ("EffectLogSuite", "lease_seconds", "another suite's setting"),
    ],
)
def test_a_setting_the_suite_does_not_read_is_refused_not_ignored(
    base: str, name: str, says: str
) -> None:
    """Outsider batch 46 (a 19b): a misspelt setting, or another suite's, was accepted and
    silently ignored (a parameter accepted and ignored is a bug)."""
    from machines.testing import EffectLogSuite, TransferSuite

    suites = {
        "ExactlyOnceSuite": ExactlyOnceSuite,
        "TransferSuite": TransferSuite,
        "EffectLogSuite": EffectLogSuite,
    }
    with pytest.raises(AdapterContractError, match=f"Mine sets {name}, which {base} .*{says}"):
        type("Mine", (suites[base],), {name: 60.0})
    type("Mine", (suites[base],), {"our_own_constant": 60.0})  # the user's own names
