"""The README's promises about itself: its example definition is complete and valid as
copied, and its Quick start tells a user how to install the package."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

import machines
from machines.checks.report import check
from machines.errors import DISTRIBUTION
from machines.spec.structure import check_structure

README = Path(__file__).resolve().parents[1] / "README.md"


def section(title: str) -> str:
    """The text of the README's ``## title`` section, up to the next ``## ``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_definition_format_example_loads_as_copied(tmp_path: Path) -> None:
    """The fenced ``yaml`` block of "The definition format", written to a file named after
    its machine, loads with ``machines.load`` and checks clean."""
    blocks = re.findall(r"```yaml\n(.*?)```", section("The definition format"), re.S)
    assert len(blocks) == 1, "one example definition in the section"
    name = yaml.safe_load(blocks[0])["machine"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(blocks[0], encoding="utf-8")
    spec = machines.load(path)
    assert spec.name == name and check_structure(spec) == []
    report = check(tmp_path)
    assert report.exit_code == 0 and [m.name for m in report.machines] == [name]
    assert spec.findings and spec.forbidden and spec.context, "the example shows every section"


def test_quick_start_installs_into_a_virtual_environment() -> None:
    """A user is told to create and activate a virtual environment and install the
    package from a clone (issue 29: ``pip install effect-machines`` cannot work until the
    distribution is published, and the README says so), before the clone's commands that
    CI runs."""
    text = section("Quick start")
    user = "python -m venv .venv && . .venv/bin/activate && pip install 'PATH[testing,site]'"
    assert user in text and "not on PyPI yet" in text
    assert f"pip install {DISTRIBUTION}\n" not in text
    ci_commands = (
        "pip install . && machines check",
        "pip install -e '.[dev]' && python -m pytest",
        "machines diagrams && machines docs && mkdocs build --strict",
    )
    for command in ci_commands:
        assert f"```sh\n{command}\n```" in text
        assert text.index(user) < text.index(command)


CI_RUN = README.parent / ".ci" / "run"


def test_ci_runs_the_quick_start_and_shows_where_its_time_goes() -> None:
    """``.ci/run`` is valid bash, runs each Quick start command (the first on the wheel it
    builds once, as ``pip install .`` would), hands the wheel and the site it built to the
    tests, and prints pytest's 20 slowest tests and its own total time."""
    syntax = subprocess.run(["bash", "-n", str(CI_RUN)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    script = CI_RUN.read_text(encoding="utf-8")
    for line in (
        "python -m build -q --outdir",
        "&& machines check",
        "pip install -q -e '.[dev]'",
        "machines diagrams --check && machines docs --check && mkdocs build --strict",
        "export MACHINES_TEST_DIST=",
        "export MACHINES_TEST_SITE=",
        "python -m pytest --durations=20",
        'echo "== CI took $((SECONDS - started)) s in all',
    ):
        assert line in script, line
    assert script.index("mkdocs build --strict") < script.index("python -m pytest")
