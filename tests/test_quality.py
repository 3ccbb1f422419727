"""Lint and type checks run as part of the test command, so CI and developers run them alike."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("machines", "tests", "benchmarks", "mutants")


LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _run(
    *cmd: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_ruff_clean() -> None:
    lint = _run(sys.executable, "-m", "ruff", "check", *CHECKED)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", *CHECKED)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_clean() -> None:
    done = _run(sys.executable, "-m", "mypy")
    assert done.returncode == 0, done.stdout + done.stderr


def test_import_contracts_are_kept() -> None:
    """The import contracts of ``.importlinter`` (lazy imports included): rendering takes
    plain data, the stores and systems import nothing above them, nothing imports the CLI."""
    done = _run(LINT_IMPORTS, "--config", str(ROOT / ".importlinter"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_broken_import_contract_fails(tmp_path: Path) -> None:
    """The contracts can fail: a copy of the package whose renderer imports the CLI (as
    ``render/site.py`` did, lazily, before issue 15) breaks two of them, named."""
    shutil.copytree(ROOT / "machines", tmp_path / "machines")
    view = tmp_path / "machines" / "render" / "view.py"
    view.write_text(
        view.read_text(encoding="utf-8") + "\n\ndef _cli() -> None:\n    import machines.cli\n",
        encoding="utf-8",
    )
    done = _run(
        LINT_IMPORTS,
        "--config",
        str(ROOT / ".importlinter"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 broken" in done.stdout
    assert "machines.render.view -> machines.cli" in done.stdout
