"""The stateful system suites against the reference systems (memory and SQLite), the
edge-coverage gate over every machine, and proof that each suite catches a broken system.

Sized by ``machines.testing._harness.sizes`` through the active profile: ``python -m pytest
--thorough`` runs the same tests with twenty times the examples."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

import machines
from machines.errors import EffectFailed, EffectIndeterminate
from machines.spec.loader import definition_paths, read_definition
from machines.systems import EffectLog, ExactlyOnce, TransferEngine
from machines.systems.reliance import standing_for_a_buggy_implementation
from machines.systems.transfer import executor
from machines.systems.transfer.plans import predecessors
from machines.systems.transfer.session import Session
from machines.testing import Coverage
from machines.testing._harness.sizes import (
    EFFECT_LOG,
    EFFECT_LOG_ON_DISK,
    EXACTLY_ONCE,
    EXACTLY_ONCE_ON_DISK,
    TRANSFER,
    TRANSFER_ON_DISK,
    TRANSFER_START,
)
from machines.testing.effectlog.suite import EffectLogAdapter, EffectLogSuite, ReferenceEffectLog
from machines.testing.exactly_once.suite import (
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    ReferenceAdapter,
)
from machines.testing.profiles import hunting
from machines.testing.transfer.suite import (
    SCENARIOS,
    STARTS,
    ReferenceTransfer,
    Start,
    TransferAdapter,
    TransferSuite,
    Venue,
)
from machines.testing.verdict import RuleBroken
from tests.conftest import Document, SpecCopy

COVERAGE = Coverage()
"""Every edge any suite below took, on any store; the gate test reads it last."""

FED: set[str] = set()
"""The tests that fed ``COVERAGE`` in this process: the gate judges only a whole run."""


@pytest.fixture(autouse=True)
def _feeds_the_gate(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    FED.add(request.function.__name__)


def sqlite_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'suite.db'}"


# -- exactly-once ---------------------------------------------------------------------------


class ExactlyOnceOnMemory(ExactlyOnceSuite):
    def make_adapter(self) -> ExactlyOnceAdapter:
        return ReferenceAdapter("memory://", coverage=COVERAGE)


def test_exactly_once_on_memory() -> None:
    run_state_machine_as_test(ExactlyOnceOnMemory, settings=EXACTLY_ONCE.scaled())


def test_exactly_once_on_sqlite(tmp_path_factory: pytest.TempPathFactory) -> None:
    class OnSQLite(ExactlyOnceSuite):
        def make_adapter(self) -> ExactlyOnceAdapter:
            return ReferenceAdapter(sqlite_url(tmp_path_factory.mktemp("eo")), coverage=COVERAGE)

    run_state_machine_as_test(OnSQLite, settings=EXACTLY_ONCE_ON_DISK.scaled())


# -- effect log -----------------------------------------------------------------------------


class EffectLogOnMemory(EffectLogSuite):
    def make_adapter(self) -> EffectLogAdapter:
        return ReferenceEffectLog("memory://", coverage=COVERAGE)


def test_effect_log_on_memory() -> None:
    run_state_machine_as_test(EffectLogOnMemory, settings=EFFECT_LOG.scaled())


def test_effect_log_on_sqlite(tmp_path_factory: pytest.TempPathFactory) -> None:
    class OnSQLite(EffectLogSuite):
        def make_adapter(self) -> EffectLogAdapter:
            url = sqlite_url(tmp_path_factory.mktemp("log"))
            return ReferenceEffectLog(url, coverage=COVERAGE)

    run_state_machine_as_test(OnSQLite, settings=EFFECT_LOG_ON_DISK.scaled())


# -- transfer engine ------------------------------------------------------------------------


class TransferOnMemory(TransferSuite):
    def make_adapter(self, venue: Venue) -> TransferAdapter:
        return ReferenceTransfer(venue, "memory://", coverage=COVERAGE)


def test_transfer_engine_on_memory() -> None:
    run_state_machine_as_test(TransferOnMemory, settings=TRANSFER.scaled())


@pytest.mark.parametrize("start", STARTS, ids=[f"{s} then {t[0] if t else '-'}" for s, t in STARTS])
def test_transfer_engine_from_each_start(start: Start) -> None:
    """Every scenario and every way out of it, each pinned for a few derandomized runs:
    the deep corners are covered whatever Hypothesis happens to draw in the big run."""

    class FromThisStart(TransferOnMemory):
        starts = (start,)

    run_state_machine_as_test(
        FromThisStart, settings=settings(TRANSFER_START.scaled(), derandomize=True)
    )


def test_transfer_engine_on_sqlite(tmp_path_factory: pytest.TempPathFactory) -> None:
    class OnSQLite(TransferSuite):
        def make_adapter(self, venue: Venue) -> TransferAdapter:
            url = sqlite_url(tmp_path_factory.mktemp("transfer"))
            return ReferenceTransfer(venue, url, coverage=COVERAGE)

    run_state_machine_as_test(OnSQLite, settings=TRANSFER_ON_DISK.scaled())


# -- the gate: every edge of every machine ----------------------------------------------------


def test_every_edge_is_exercised(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the suites above (pytest keeps file order). An edge no system can take
    is declared in its spec (``unreachable_in_systems``) with the finding that says why."""
    feeders = {
        name
        for name in globals()
        if re.fullmatch(r"test_(exactly_once|effect_log|transfer_engine)_.+", name)
    }
    if not_run := sorted(feeders - FED):
        pytest.skip(f"the suites {not_run} did not run in this process; run the whole file")
    specs = [machines.load(name) for name in ("effect", "outcome", "node", "request")]
    with capsys.disabled():
        print("\nedge coverage of the system suites:\n" + COVERAGE.table(specs))
    missing = {
        spec.name: [e for e in COVERAGE.missing(spec) if e not in spec.unreachable_in_systems]
        for spec in specs
    }
    assert not any(missing.values()), COVERAGE.table(specs)


# -- each suite catches a broken system -----------------------------------------------------

HUNT = hunting(300, 30)
"""Hunting a known bug: derandomized, so a catch never depends on luck; sized by the
profile like every run."""


def rule_broken(suite: type[RuleBasedStateMachine], run: settings = HUNT) -> str:
    """The rule a suite run names when it fails: it must fail with a ``RuleBroken`` whose
    message starts with that rule (any other assertion error is not a catch)."""
    with pytest.raises(RuleBroken) as failure:
        run_state_machine_as_test(suite, settings=run)
    assert str(failure.value).startswith(f"{failure.value.rule}: "), str(failure.value)
    return failure.value.rule


def test_the_exactly_once_suite_catches_an_executor_that_retries_parked_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A classic bug: treat indeterminate as 'try again'."""
    original = ExactlyOnce._claim

    def optimistic(self, key):  # type: ignore[no-untyped-def]
        row = self.outcome(key)
        if row is not None and row.state == "indeterminate":
            self.reclaim(key, by="bug", reason="retrying on a guess")
        return original(self, key)

    monkeypatch.setattr(ExactlyOnce, "_claim", optimistic)
    assert rule_broken(ExactlyOnceOnMemory) in {"indeterminate-stays", "interrupted-parks"}


class FailedOfOurOwn(EffectFailed):
    """A user's failure type that forgets ``super().__init__``: no error_type, no message."""

    def __init__(self, key: str) -> None:
        Exception.__init__(self, f"{key} failed")


def test_the_exactly_once_suite_reports_a_bug_told_with_a_failure_of_the_users_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 22 (B1): an implementation that told a caller "failed" for a charge
    that timed out after it was sent, with an EffectFailed subclass of its own that never
    set error_type, made the suite crash with a raw AttributeError instead of naming the
    bug. What the caller was told is read without trusting the object."""
    original = ExactlyOnce.run

    def says_failed(self, key, fn):  # type: ignore[no-untyped-def]
        try:
            return original(self, key, fn)
        except EffectIndeterminate:
            raise FailedOfOurOwn(key) from None

    monkeypatch.setattr(ExactlyOnce, "run", says_failed)
    with pytest.raises(RuleBroken) as failure:  # the tour first: its one-step run shows it
        ExactlyOnceOnMemory.run(HUNT)
    assert failure.value.rule == "failed-means-not-sent", str(failure.value)


def test_the_effect_log_suite_catches_a_log_that_says_failed_after_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 25 (b 1): a log that told a caller ``EffectFailed`` ("provably did
    not happen") for a call that timed out after it was sent passed: the suite took any
    MachinesError after a troubled send for a storage failure. Only a write the suite made
    fail excuses one."""
    from machines.systems.effectlog import EffectOutcomeUnknown

    original = EffectLog.call

    def says_failed(self, signature, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return original(self, signature, fn, *args, **kwargs)
        except EffectOutcomeUnknown as unknown:
            raise EffectFailed(signature, unknown.error_type, unknown.error_message) from None

    monkeypatch.setattr(EffectLog, "call", says_failed)
    assert rule_broken(EffectLogOnMemory) == "told-truth"


def test_the_effect_log_suite_catches_a_saga_that_stops_with_nothing_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 25 (b 2): a saga that raised a MachinesError and undid nothing passed:
    saga-completes was judged only for a saga that returned."""

    def gives_up(self, session, compensations, retries=0):  # type: ignore[no-untyped-def]
        raise machines.MachinesError(f"the saga of {session} is not written yet")

    monkeypatch.setattr(EffectLog, "compensate", gives_up)
    assert rule_broken(EffectLogOnMemory) == "saga-completes"


def test_the_effect_log_suite_catches_a_log_that_reruns_unknown_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The classic bug: a call whose outcome is unknown is 'retried' by the next caller."""
    original = EffectLog._claim_or_refuse

    def rerun_unknown(self, tx, row):  # type: ignore[no-untyped-def]
        if row.state == "executing":
            row = tx.move(row, "fail", actor="proxy", detail={"reason": "retry on a guess"})
        return original(self, tx, row)

    monkeypatch.setattr(EffectLog, "_claim_or_refuse", rerun_unknown)
    # a log of its own has no fence against a reopened effect (ours refuses one)
    monkeypatch.setattr(EffectLog, "_reopened", staticmethod(lambda tx, row: None))
    unknown_reran = {"unknown-stays-unknown", "cancelled-stays-unknown"}
    assert rule_broken(EffectLogOnMemory) in unknown_reran


def test_the_effect_log_suite_catches_an_irreversible_call_run_without_approval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = EffectLog._claim_or_refuse

    def no_human(self, tx, row):  # type: ignore[no-untyped-def]
        if row.state == "pending" and row.context["tier"] == "irreversible":
            row = tx.move(row, "approve", actor="human", detail={"by": "the proxy itself"})
        return original(self, tx, row)

    monkeypatch.setattr(EffectLog, "_claim_or_refuse", no_human)
    assert rule_broken(EffectLogOnMemory) in {"approval", "decisions"}


def test_the_transfer_suite_catches_an_engine_that_resends_after_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A submit that never reported back is sent again instead of declared unknown."""

    def resend(self, request_id, row):  # type: ignore[no-untyped-def]
        reply = self._ask(request_id, row, "submit")
        return self._report(request_id, row, "accept", "executor", reply)

    monkeypatch.setattr(TransferEngine, "_recover_send", resend)
    assert rule_broken(TransferOnMemory, hunting(400, 30)) == "submit-once"


def test_the_transfer_suite_catches_an_engine_that_fails_money_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine that treats a lost submit as failed releases money that may be moving."""
    monkeypatch.setitem(executor.ON_SUBMIT, "unknown", "fail")
    assert rule_broken(TransferOnMemory, hunting(400, 30)) == "money-in-flight-held"


def oracle_alone(monkeypatch: pytest.MonkeyPatch, scenario: str) -> type[TransferOnMemory]:
    """The transfer suite on memory from ``scenario``'s starts alone, with the reference
    adapter's own checks off (a user's engine has none), hunting derandomized: what it
    catches, its oracle caught."""

    class WithoutItsOwnChecks(TransferOnMemory):
        starts = tuple(s for s in STARTS if s[0] == scenario)

        def make_adapter(self, venue: Venue) -> TransferAdapter:
            adapter = super().make_adapter(venue)
            monkeypatch.setattr(adapter, "check", list)
            return adapter

    return WithoutItsOwnChecks


def test_the_transfer_suite_catches_an_engine_that_lets_a_skip_stand_for_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 37 (a N1): an engine that counts a skipped node as done though the
    nodes it waited for are not sends the deposit while the withdrawal is in flight. The
    suite's oracle names it, with no help from the engine's own checks (a user's engine
    has none)."""

    def skip_stands_for_itself(self, name, memo):  # type: ignore[no-untyped-def]
        row = self.nodes.get(name)
        if row is not None and row.state == "skipped":
            return True
        return original(self, name, memo)

    original = Session._settled
    monkeypatch.setattr(Session, "_settled", skip_stands_for_itself)

    suite = oracle_alone(monkeypatch, "a check skipped, money in flight")
    assert rule_broken(suite, hunting(20, 10)) == "after-predecessors"


def test_the_transfer_suite_catches_an_engine_that_looks_one_skip_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 41 (b S1): an engine that counts a skipped node as done when the
    nodes right before it are done, without looking further back, sent the deposit while
    the withdrawal was out after two checks in a row were skipped; no plan of the suite
    had two, and it passed. The checked plan has two, and a start skips both."""

    def one_skip_back(self, name, memo):  # type: ignore[no-untyped-def]
        row = self.nodes.get(name)
        if row is None or row.state not in self.engine.done_states:
            return False
        if row.state != "skipped":
            return True
        before = predecessors(row.data, self.planned.get(name, {}))
        return all(self.nodes[str(p)].state in self.engine.done_states for p in before)

    monkeypatch.setattr(Session, "_settled", one_skip_back)
    suite = oracle_alone(monkeypatch, "two checks skipped, money in flight")
    assert rule_broken(suite, hunting(20, 10)) == "after-predecessors"


def test_the_transfer_suite_catches_an_engine_that_lets_a_planner_skip_a_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 38 (b A5): a planner's skip passed a manual gate, and the deposit
    was sent with nobody's action recorded. The suite's oracle names the deposit handed
    to the venue after a gate that no operator passed."""
    from machines.systems.transfer.policy import PLANNER
    from machines.systems.transfer.session import said

    def skips_anything(self, request_id, node, *, by, reason):  # type: ignore[no-untyped-def]
        with self._session(request_id) as s:
            s.move_node(s.node(node), "skip", PLANNER, said(by, reason=reason))

    monkeypatch.setattr(TransferEngine, "skip", skips_anything)

    suite = oracle_alone(monkeypatch, "a gate not yet reached")
    assert rule_broken(suite, hunting(20, 10)) == "after-predecessors"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_transfer_scenario_reaches_its_corner_on_the_reference_engine(scenario: str) -> None:
    """The scenarios are how the transfer suite reaches deep corners every run; if the
    engine changes so one no longer gets there, say so here rather than lose coverage."""
    suite = TransferSuite()
    assert suite.set_up(scenario)


def test_the_transfer_suite_finds_the_seeds_own_hazard_under_qtg_v3(
    spec_copy: SpecCopy,
) -> None:
    """With the seed's rule set as the default, the engine leaves a request executing with
    money in flight and nothing to escalate it (finding qtg-fails-with-money-in-flight)."""

    def seed_rules(doc: Document) -> None:
        doc["derivation"]["default"] = "qtg-v3"

    spec_copy.edit("request", seed_rules)
    specs = {s.name: s for s in map(read_definition, definition_paths(spec_copy.path))}

    class OnSeedRules(TransferSuite):
        def make_adapter(self, venue: Venue) -> TransferAdapter:
            return ReferenceTransfer(venue, specs=specs)

    with (
        standing_for_a_buggy_implementation(),  # the seed's rule set, on purpose
        pytest.raises(AssertionError, match=r"derivation-consistency|money may be moving"),
    ):
        run_state_machine_as_test(OnSeedRules, settings=hunting(600, 30))


# -- importing the suites ---------------------------------------------------------------------

IMPORT_EVERY_SUITE = """
import importlib, pkgutil, sys

opened = []
sys.addaudithook(
    lambda event, args: opened.append(str(args[0]))
    if event == "open" and str(args[0]).endswith((".yaml", ".yml"))
    else None
)
import machines.testing

for module in pkgutil.walk_packages(machines.testing.__path__, "machines.testing."):
    importlib.import_module(module.name)
print(len(opened), opened)
from machines.testing.verdict import bundled

bundled("outcome")  # the hook sees a definition read (so a silent hook cannot pass)
print(len(opened))
"""


def test_importing_the_suites_reads_no_definition() -> None:
    """issue 15: importing ``machines.testing`` and every module below it reads no
    definition file (a suite judges by the bundled definitions, loaded at first use)."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_SUITE],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(machines.__file__).parent.parent)},
    )
    lines = done.stdout.splitlines()
    assert lines[:1] == ["0 []"], done.stdout + done.stderr
    assert done.returncode == 0, done.stderr
    assert int(lines[1]) > 0


@pytest.mark.parametrize("garbage", [None, 1, "effect", b"x", [1], {"a": 1}, object()])
def test_the_suites_helpers_refuse_garbage_typed(garbage: object) -> None:
    """Outsider batch 22 (b B4): spec_walker, Coverage's methods, check_adapter,
    RuntimeAdapter, Venue, ReferenceTransfer and RuleBroken let raw AttributeError or
    TypeError out on garbage, or took it and failed later. Each refuses it typed (and a
    RuleBroken made of garbage still shows it)."""
    from machines.errors import MachinesError
    from machines.testing import RuntimeAdapter, spec_walker
    from machines.testing.contract import check_adapter
    from machines.testing.transfer.adapter import ReferenceTransfer
    from machines.testing.transfer.venue import Venue
    from machines.testing.verdict import RuleBroken

    coverage = Coverage()
    for call in (
        lambda: spec_walker(garbage),  # type: ignore[arg-type]
        lambda: coverage.missing(garbage),  # type: ignore[arg-type]
        lambda: coverage.require(garbage),  # type: ignore[arg-type]
        lambda: coverage.require_probes(garbage),  # type: ignore[arg-type]
        lambda: coverage.table([garbage]),  # type: ignore[list-item]
        lambda: coverage.record("effect", garbage if garbage != "effect" else 1, "t", "d"),  # type: ignore[arg-type]
        lambda: coverage.record_probe("effect", "s", "t", "a", garbage),  # type: ignore[arg-type]
        lambda: check_adapter(object(), garbage),  # type: ignore[arg-type]
        lambda: RuntimeAdapter(garbage),  # type: ignore[arg-type]
        lambda: ReferenceTransfer(garbage),  # type: ignore[arg-type]
    ):
        with pytest.raises(MachinesError):
            call()
    if not callable(garbage):
        with pytest.raises(MachinesError):
            Venue(garbage)  # type: ignore[arg-type]
    assert RuleBroken(garbage, garbage).rule  # type: ignore[arg-type]
