"""Shared fixtures: editable copies of the bundled definitions."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from machines.spec.loader import bundled_spec_dir
from machines.store import Store, open_store
from machines.testing.profiles import ENV, load_profile

Document = dict[str, Any]


class SpecCopy:
    """A private copy of ``spec/`` that a test can break on purpose."""

    def __init__(self, root: Path) -> None:
        self.path = root / "spec"
        shutil.copytree(bundled_spec_dir(), self.path)

    def file(self, machine: str) -> Path:
        return self.path / f"{machine}.yaml"

    def read(self, machine: str) -> Document:
        data: Document = yaml.safe_load(self.file(machine).read_text())
        return data

    def write(self, machine: str, doc: Document) -> None:
        self.file(machine).write_text(yaml.safe_dump(doc, sort_keys=False, width=120))

    def edit(self, machine: str, change: Callable[[Document], None]) -> SpecCopy:
        doc = self.read(machine)
        change(doc)
        self.write(machine, doc)
        return self


def rename_everywhere(node: Any, old: str, new: str) -> Any:
    """``node`` with every key or value equal to ``old`` replaced by ``new``."""
    if node == old:
        return new
    if isinstance(node, dict):
        return {(new if k == old else k): rename_everywhere(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [rename_everywhere(v, old, new) for v in node]
    return node


class FakeClock:
    """An injectable clock a test moves by hand: ``clock.now += 31``."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def store_url(kind: str, tmp_path: Path, name: str = "store.db") -> str:
    return "memory://" if kind == "memory" else f"sqlite:///{tmp_path}/{name}"


POSTGRES = os.environ.get("MACHINES_TEST_POSTGRES")
"""A PostgreSQL server for the tests (``eval "$(.ci/postgres start)"`` sets it)."""


NOT_RUN = "NOT RUN: "
"""How the reason of every skip of ``unavailable`` starts (``pytest_runtest_makereport``
folds them by it)."""


def unavailable(what: str, fix: str) -> NoReturn:
    """A tool a test needs is missing: skip here, fail in CI (``.ci/run`` provides every
    one of them). The skips of one tool are folded into one line of the summary
    (``pytest_runtest_makereport``): "SKIPPED [67] tests/conftest.py: NOT RUN: a PostgreSQL
    server is not available here (...)", not one line per test."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing in CI, where .ci/run provides it")
    pytest.skip(f"{NOT_RUN}{what} is not available here ({fix}); CI runs these tests")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A skip of ``unavailable`` reported at this file rather than at each test, so that
    pytest's ``-ra`` summary (which folds skips of the same place and reason) gives one
    line per missing tool with the count of tests it kept from running."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and NOT_RUN in longrepr[2]:
        report.longrepr = (__file__, None, longrepr[2])
    return report


def require_postgres() -> str:
    """The test server's URL (skip without one, folded into one line; fail in CI)."""
    if POSTGRES:
        return POSTGRES
    unavailable("a PostgreSQL server", 'eval "$(.ci/postgres start)"')


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh schema on the test server, dropped afterwards; the URL selects it."""
    from machines.store.postgres import temporary_schema

    with temporary_schema(require_postgres()) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL where no store is yet, on SQLite and on PostgreSQL (a schema of its own,
    dropped afterwards): each test that takes it runs on both databases."""
    if request.param == "postgres":
        with postgres_schema() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'store.db'}"


@contextmanager
def opened_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """A fresh store of ``kind`` (memory, sqlite or postgres: a schema of its own on the
    test server), closed (and dropped) afterwards."""
    if kind == "postgres":
        with postgres_schema() as url:
            opened = open_store(url)
            yield opened
            opened.close()
        return
    opened = open_store(store_url(kind, tmp_path))
    yield opened
    opened.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each test that takes ``store`` runs on memory://, on SQLite and on PostgreSQL."""
    with opened_store(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture
def spec_copy(tmp_path: Path) -> SpecCopy:
    return SpecCopy(tmp_path)


def transition(doc: Document, source: str, dest: str) -> Document:
    """The single YAML transition entry from ``source`` to ``dest`` (fails if not one)."""
    found = [
        t
        for t in doc["transitions"]
        if t["dest"] == dest
        and source in ([t["source"]] if isinstance(t["source"], str) else t["source"])
    ]
    assert len(found) == 1, f"expected one {source} -> {dest} entry, found {len(found)}"
    return found[0]


load_profile()  # dev, ci or thorough, from HYPOTHESIS_PROFILE (machines.testing.profiles)

THOROUGH = "thorough"
"""The marker of the tests only ``python -m pytest --thorough`` runs, and the profile it
runs every property test under."""
THOROUGH_COMMAND = "python -m pytest --thorough"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        f"--{THOROUGH}",
        action="store_true",
        default=False,
        help=(
            f"the nightly run: every property test at the '{THOROUGH}' Hypothesis profile's "
            f"size, and the tests marked '{THOROUGH}' (the full mutation catalogs, the "
            "benchmarks, the explorer's largest scopes), which are not run otherwise"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    """``--thorough`` loads the thorough profile before any test module is imported (their
    module-level ``scaled`` sizes read it); another profile named with it is a usage error,
    not a silent choice of one of the two."""
    if not config.getoption(THOROUGH):
        return
    named = config.getoption("--hypothesis-profile") or os.environ.get(ENV)
    if named not in (None, "", THOROUGH):
        raise pytest.UsageError(
            f"--{THOROUGH} runs the '{THOROUGH}' profile, but '{named}' is chosen too "
            f"(--hypothesis-profile or {ENV}); drop one of them"
        )
    load_profile(THOROUGH)


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption(THOROUGH):
        return f"{THOROUGH}: every test, at the '{THOROUGH}' profile's size"
    return f"{THOROUGH}: the tests marked {THOROUGH} are not run ({THOROUGH_COMMAND} runs them)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--thorough``, the tests marked thorough are deselected (and counted in the
    summary): CI and a developer's default run keep the fast test of each promise."""
    if config.getoption(THOROUGH):
        return
    thorough = [item for item in items if item.get_closest_marker(THOROUGH)]
    if thorough:
        config.hook.pytest_deselected(items=thorough)
        items[:] = [item for item in items if not item.get_closest_marker(THOROUGH)]


collect_ignore = ["user_project", "subscription_project"]
"""tests/user_project and tests/subscription_project are users' own projects, each with its
own conftest.py and test: tests/test_conformance.py, tests/test_guide.py and
tests/test_tour.py run them the way their users do, from a copy of their directory, so this
repository's pytest does not collect them."""
