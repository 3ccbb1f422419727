"""The detectors a code mutant meets, by name: this repository's property suites on the
reference systems, sized as ``tests/test_suites.py`` sizes them (``machines.testing._harness.
sizes``, in the ``ci`` profile, derandomized), or a pytest selection (``pytest:ARGS``) for
what no suite can reach.

A detector returns when it sees nothing wrong and raises what it saw otherwise. The suites
run their generate phase only: a catch is reported at the first failing run, unshrunk
(the first line of the failure names the broken rule).

These run inside the mutated copy (``code_mutants.hunt``), importing ``machines`` from there.
The table below is the one place that says how each suite is built; when a suite's
adapter changes, change it here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from contextlib import ExitStack

from hypothesis.stateful import RuleBasedStateMachine

from machines.testing._harness.sizes import (
    EFFECT_LOG,
    EFFECT_LOG_ON_DISK,
    EXACTLY_ONCE,
    EXACTLY_ONCE_ON_DISK,
    TRANSFER,
    TRANSFER_ON_DISK,
    TRANSFER_START,
    Size,
)
from machines.testing.effectlog.suite import EffectLogAdapter, EffectLogSuite, ReferenceEffectLog
from machines.testing.exactly_once.suite import (
    ExactlyOnceAdapter,
    ExactlyOnceSuite,
    ReferenceAdapter,
)
from machines.testing.profiles import run_suite
from machines.testing.transfer.scenarios import SCENARIOS, STARTS, Start
from machines.testing.transfer.suite import ReferenceTransfer, TransferAdapter, TransferSuite, Venue

POSTGRES = "MACHINES_TEST_POSTGRES"
"""The PostgreSQL server the ``/postgres`` detectors use (as for the test suite)."""

Detector = Callable[[], None]


class Unavailable(Exception):
    """The detector cannot run here (no PostgreSQL server): reported, not a catch."""


def hunt(suite: type[RuleBasedStateMachine], size: Size) -> None:
    """One suite run of ``size``, stopping at the first failing example."""
    run_suite(suite, size.hunting())


class Stores:
    """Where each run of a suite keeps its store: one fresh database per run."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.scratch = tempfile.mkdtemp(prefix="mutant-stores-")
        self.server = os.environ.get(POSTGRES, "")
        if kind == "postgres" and not self.server:
            raise Unavailable(f"no PostgreSQL server (set {POSTGRES})")

    def url(self, cleanup: ExitStack) -> str:
        if self.kind == "memory":
            return "memory://"
        if self.kind == "sqlite":
            return f"sqlite:///{tempfile.mkdtemp(dir=self.scratch)}/suite.db"
        from machines.store.postgres import temporary_schema

        return cleanup.enter_context(temporary_schema(self.server, prefix="mutant"))


def exactly_once(kind: str, size: Size) -> Detector:
    def detect() -> None:
        stores = Stores(kind)

        class OnStore(ExactlyOnceSuite):
            def make_adapter(self) -> ExactlyOnceAdapter:
                self.cleanup = ExitStack()
                adapter = ReferenceAdapter(stores.url(self.cleanup))
                self.cleanup.callback(adapter.store.close)
                return adapter

            def teardown(self) -> None:
                self.cleanup.close()

        hunt(OnStore, size)

    return detect


def effect_log(kind: str, size: Size) -> Detector:
    def detect() -> None:
        stores = Stores(kind)

        class OnStore(EffectLogSuite):
            def make_adapter(self) -> EffectLogAdapter:
                self.cleanup = ExitStack()
                adapter = ReferenceEffectLog(stores.url(self.cleanup))
                self.cleanup.callback(adapter.store.close)
                return adapter

            def teardown(self) -> None:
                self.cleanup.close()

        hunt(OnStore, size)

    return detect


def transfer(kind: str, size: Size) -> Detector:
    def detect() -> None:
        stores = Stores(kind)

        class OnStore(TransferSuite):
            def make_adapter(self, venue: Venue) -> TransferAdapter:
                self.cleanup = ExitStack()
                adapter = ReferenceTransfer(venue, stores.url(self.cleanup))
                self.cleanup.callback(adapter.store.close)
                return adapter

            def teardown(self) -> None:
                self.cleanup.close()

        hunt(OnStore, size)

    return detect


def transfer_scenarios() -> None:
    """Each scripted scenario of the transfer suite reaches its corner on the reference
    engine (as ``tests/test_suites.py`` requires): an engine that behaves otherwise there
    fails CI, though the suite itself carries on from wherever it is."""
    for scenario in sorted(SCENARIOS):
        suite = TransferSuite()
        assert suite.set_up(scenario), f"scenario {scenario!r} no longer reaches its corner"


def transfer_starts() -> None:
    """Every scripted start of the transfer suite, a few runs each (its deep corners)."""

    def pinned(start: Start) -> type[RuleBasedStateMachine]:
        class FromThisStart(TransferSuite):
            starts = (start,)

            def make_adapter(self, venue: Venue) -> TransferAdapter:
                return ReferenceTransfer(venue)

        return FromThisStart

    for start in STARTS:
        hunt(pinned(start), TRANSFER_START)


def pytest_selection(args: str) -> Detector:
    """``python -m pytest -x -n 0 ARGS`` in the copy: a failure is a catch (in one process,
    so that ``-x`` stops at the first)."""

    def detect() -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-n",
                "0",
                "-q",
                "-rf",
                "-p",
                "no:cacheprovider",
                *args.split(),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return
        failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        raise AssertionError(failed[0] if failed else done.stdout[-500:] + done.stderr[-500:])

    return detect


DETECTORS: Mapping[str, Detector] = {
    "exactly-once/memory": exactly_once("memory", EXACTLY_ONCE),
    "exactly-once/sqlite": exactly_once("sqlite", EXACTLY_ONCE_ON_DISK),
    "exactly-once/postgres": exactly_once("postgres", EXACTLY_ONCE_ON_DISK),
    "effect-log/memory": effect_log("memory", EFFECT_LOG),
    "effect-log/sqlite": effect_log("sqlite", EFFECT_LOG_ON_DISK),
    "transfer/scenarios": transfer_scenarios,
    "transfer/starts": transfer_starts,
    "transfer/memory": transfer("memory", TRANSFER),
    "transfer/sqlite": transfer("sqlite", TRANSFER_ON_DISK),
}
"""Every suite detector; ``pytest:ARGS`` names a pytest selection instead."""


def detector(name: str) -> Detector:
    if name.startswith("pytest:"):
        return pytest_selection(name.removeprefix("pytest:"))
    return DETECTORS[name]


def known(name: str) -> bool:
    return name.startswith("pytest:") or name in DETECTORS
