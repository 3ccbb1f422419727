"""Lint and type checks run as part of the test command, so CI and developers run them alike."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("machines", "tests", "benchmarks", "code_mutants")


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
    """The import contracts of ``.importlinter`` (lazy imports included): the layers one way
    down, no import cycles anywhere, rendering takes plain data."""
    done = _run(LINT_IMPORTS, "--config", str(ROOT / ".importlinter"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


LAYERS = "The layers, one way down"
ACYCLIC = "No import cycles"
RENDER = "Rendering takes plain data"
COMMANDS = "The commands are independent"
HARNESS = "The suites' private harnesses"
CONTRACTS = (LAYERS, ACYCLIC, RENDER, COMMANDS, HARNESS)


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        # a renderer that imports the CLI, as render/site.py did (lazily) before issue 15;
        # through it every command now reaches every other
        ("render/view.py", "machines.cli", {LAYERS, ACYCLIC, RENDER, COMMANDS}),
        # the definition layer building entities itself, as spec.py did before issue 15
        ("spec/records.py", "machines.runtime.entity", {LAYERS, ACYCLIC}),
        # a store that reads a system's constant
        ("store/memory.py", "machines.systems.exactly_once", {LAYERS, ACYCLIC}),
        # a cycle inside one layer: the compiled table asking the loader
        ("spec/routing.py", "machines.spec.loader", {ACYCLIC}),
        # a new top-level module that no layer names
        ("stray.py", "machines.errors", {LAYERS}),
        # one command reaching into another
        ("cli/check.py", "machines.cli.explore", {COMMANDS}),
        # a command using the suites' private crash harness
        ("cli/mutate.py", "machines.testing._harness.crashpoints", {HARNESS}),
    ],
)
def test_a_broken_import_contract_fails(
    tmp_path: Path, module: str, imported: str, broken: set[str]
) -> None:
    """The contracts can fail: a copy of the package with one lazy import added (inside a
    function) breaks exactly the contracts named, and the report names the import."""
    shutil.copytree(ROOT / "machines", tmp_path / "machines")
    target = tmp_path / "machines" / module
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    target.write_text(
        before + f"\n\ndef _lazy() -> None:\n    import {imported}\n", encoding="utf-8"
    )
    done = _run(
        LINT_IMPORTS,
        "--config",
        str(ROOT / ".importlinter"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    summary = done.stdout.split("Broken contracts")[0].replace("\n", " ")
    verdicts = re.findall(r"(KEPT|BROKEN)", summary)
    names = [name for name in CONTRACTS if name in summary]
    assert len(verdicts) == len(names) == len(CONTRACTS), done.stdout
    got = {name for name, verdict in zip(names, verdicts, strict=True) if verdict == "BROKEN"}
    assert got == broken, done.stdout
    assert f"{len(broken)} broken" in done.stdout
