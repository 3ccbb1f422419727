"""Without a PostgreSQL server the test run says so in one line, not one per test (issue
16: 67 "SKIPPED LOUDLY" lines), and in CI those tests fail instead of being skipped
(``tests/conftest.py``: ``unavailable`` and ``pytest_runtest_makereport``). Runs pytest on
``tests/test_postgres.py`` in a subprocess, with no server named."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_TESTS = "tests/test_postgres.py"


def _pytest(ci: bool, *options: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MACHINES_TEST_POSTGRES", "CI")}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, POSTGRES_TESTS],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_the_tests_a_missing_server_keeps_from_running_are_one_line() -> None:
    """As a developer runs the tests: in parallel, the default (the workers' skips fold
    into one line too)."""
    done = _pytest(ci=False)
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, done.stdout
    (line,) = skipped
    count = re.search(r"(\d+) skipped", done.stdout)
    assert count is not None and int(count.group(1)) > 1
    assert line.startswith(f"SKIPPED [{count.group(1)}] tests/conftest.py: NOT RUN: ")
    assert "a PostgreSQL server is not available here" in line and "CI runs these" in line


def test_in_ci_they_fail_rather_than_skip() -> None:
    done = _pytest(True, "-n", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a PostgreSQL server is missing in CI" in done.stdout
    assert "skipped" not in done.stdout.splitlines()[-1]
