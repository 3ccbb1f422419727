"""The guides' code runs as the guides say (issue 14 item 7): docs/guide/suites-in-ci.md
shows a user's executor that passes ExactlyOnceSuite and the same executor with one bug,
with the output that bug produces. Both are taken from the page, written to a fresh
directory and run with pytest, so the page cannot drift from what the suite does.

docs/guide/conformance.md shows the user project's own test and conftest (held here to
``tests/user_project`` character for character) and the same service with one bug: that
one runs from the built wheel in ``tests/test_end_to_end.py``, the one shrunk failing
conformance run of a test run, and the project's own test passes in
``tests/test_conformance.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.guide_output import CONFORMANCE_GUIDE, SUITES_GUIDE, assert_shows, guide_blocks

ROOT = Path(__file__).resolve().parent.parent


def blocks() -> Mapping[str, str]:
    """The suites guide's titled code blocks, by title."""
    found = guide_blocks(SUITES_GUIDE)
    assert {"my_executor.py", "test_my_executor.py", "conftest.py", "output"} <= set(found)
    return found


def run_guide(tmp_path: Path, test_file: str) -> subprocess.CompletedProcess[str]:
    for title, body in blocks().items():
        if title.endswith(".py"):
            (tmp_path / title).write_text(body, encoding="utf-8")
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_guides_executor_passes_the_suite(tmp_path: Path) -> None:
    """issue 14 item 7: the complete implementation on the page passes, as the page says."""
    done = run_guide(tmp_path, "test_my_executor.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def test_the_guides_buggy_executor_fails_as_the_page_shows(tmp_path: Path) -> None:
    """issue 14 item 7: the same executor without its fence fails with the rule the page
    names, and every line of the output the page shows is a line pytest printed (numbers
    apart: which key and call the derandomized draw picks is not the page's point)."""
    done = run_guide(tmp_path, "test_unfenced.py")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert_shows(blocks()["output"], done.stdout, rule="indeterminate-stays")


@pytest.mark.parametrize("title", ["my_executor.py", "test_my_executor.py", "test_unfenced.py"])
def test_the_guides_code_is_clean(title: str, tmp_path: Path) -> None:
    """What a reader copies passes the project's own lint."""
    path = tmp_path / title
    path.write_text(blocks()[title], encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--config",
            str(ROOT / "pyproject.toml"),
            "--ignore",
            "I",
            path,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout


# -- docs/guide/conformance.md: a user's own definition and service -----------------------

USER_PROJECT = ROOT / "tests" / "user_project"


def conformance_blocks() -> Mapping[str, str]:
    """The conformance page's titled code blocks, by title."""
    found = guide_blocks(CONFORMANCE_GUIDE)
    assert {"test_refunds.py", "conftest.py", "test_lenient.py", "output"} <= set(found)
    return found


def test_the_conformance_page_shows_the_users_project_as_it_is() -> None:
    """The page's test and conftest are tests/user_project's, character for character: the
    page cannot drift from the project the end-to-end test runs."""
    found = conformance_blocks()
    for title in ("test_refunds.py", "conftest.py"):
        assert found[title] == (USER_PROJECT / title).read_text(encoding="utf-8"), title


def test_the_conformance_pages_output_is_the_rule_its_bug_breaks() -> None:
    """The page's output is the failure of the rule its lenient service breaks, with that
    rule's promise word for word (the run that prints it is the end-to-end test's)."""
    shown = conformance_blocks()["output"]
    assert_shows(shown, shown, rule="illegal-move-refused")
    assert "approve by service in 'awaiting_approval'" in shown.splitlines()[0]


@pytest.mark.parametrize("title", ["test_refunds.py", "test_lenient.py"])
def test_the_conformance_pages_code_is_clean(title: str, tmp_path: Path) -> None:
    path = tmp_path / title
    path.write_text(conformance_blocks()[title], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"), path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
