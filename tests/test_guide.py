"""The guide's code runs as the guide says (issue 14 item 7): docs/guide/suites-in-ci.md
shows a user's executor that passes ExactlyOnceSuite and the same executor with one bug,
with the output that bug produces. Both are taken from the page, written to a fresh
directory and run with pytest, so the page cannot drift from what the suite does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide" / "suites-in-ci.md"
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def blocks() -> dict[str, str]:
    """The page's titled code blocks, by title."""
    found = {title: body for _, title, body in BLOCK.findall(GUIDE.read_text(encoding="utf-8"))}
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
    """issue 14 item 7: the same executor without its fence fails, and every line of the
    output the page shows is in what pytest printed (the rule first)."""
    done = run_guide(tmp_path, "test_unfenced.py")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    printed = {line.removeprefix("E").strip() for line in done.stdout.splitlines()}
    shown = [line.strip() for line in blocks()["output"].splitlines() if line.strip()]
    assert shown, "the page shows no output"
    missing = [line for line in shown if line not in printed]
    assert not missing, f"the page shows lines pytest did not print: {missing}\n{done.stdout}"
    assert shown[0].startswith("machines.testing.verdict.RuleBroken: indeterminate-stays:")


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

CONFORMANCE = ROOT / "docs" / "guide" / "conformance.md"
USER_PROJECT = ROOT / "tests" / "user_project"


def conformance_blocks() -> dict[str, str]:
    """The conformance page's titled code blocks, by title."""
    text = CONFORMANCE.read_text(encoding="utf-8")
    found = {title: body for _, title, body in BLOCK.findall(text)}
    assert {"test_refunds.py", "conftest.py", "test_lenient.py", "output"} <= set(found)
    return found


def test_the_conformance_page_shows_the_users_project_as_it_is() -> None:
    """The page's test and conftest are tests/user_project's, character for character: the
    page cannot drift from the project the end-to-end test runs."""
    found = conformance_blocks()
    for title in ("test_refunds.py", "conftest.py"):
        assert found[title] == (USER_PROJECT / title).read_text(encoding="utf-8"), title


def run_conformance_guide(tmp_path: Path, test_file: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "user_project"
    shutil.copytree(USER_PROJECT, project)
    for title, body in conformance_blocks().items():
        if title.endswith(".py"):
            (project / title).write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "MACHINES_SPEC_DIR"}
    env |= {"HYPOTHESIS_PROFILE": "ci", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_conformance_pages_service_passes(tmp_path: Path) -> None:
    done = run_conformance_guide(tmp_path, "test_refunds.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def test_the_conformance_pages_lenient_service_fails_as_the_page_shows(tmp_path: Path) -> None:
    done = run_conformance_guide(tmp_path, "test_lenient.py")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    printed = {line.removeprefix("E").strip() for line in done.stdout.splitlines()}
    shown = [line.strip() for line in conformance_blocks()["output"].splitlines() if line.strip()]
    missing = [line for line in shown if line not in printed]
    assert not missing, f"the page shows lines pytest did not print: {missing}\n{done.stdout}"
    assert shown[0].startswith("machines.testing.verdict.RuleBroken: illegal-move-refused:")


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
