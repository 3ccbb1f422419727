"""The getting-started page is run as written (issue 29): each file it shows is written
into an empty project, and each ``sh`` block's commands run there, in order, and must
succeed; the install block (``console``) is what this environment already did."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[1] / "docs" / "getting-started.md"
FILE = re.compile(r"^`([^`]+)`:\n\n```[a-z]*\n(.*?)\n```", re.M | re.S)
COMMANDS = re.compile(r"^```sh\n(.*?)\n```", re.M | re.S)


def test_the_page_shows_files_and_commands() -> None:
    text = PAGE.read_text(encoding="utf-8")
    files = dict(FILE.findall(text))
    assert {"pyproject.toml", "specs/ticket.yaml", "tickets.py", "test_tickets.py"} <= set(files)
    commands = [line for block in COMMANDS.findall(text) for line in block.splitlines()]
    assert commands[:2] == ["machines check", "machines diagrams"]
    assert any(line.startswith("machines mutate") for line in commands)


def test_the_install_line_installs_what_the_page_runs() -> None:
    """Outsider batch 38 (c G1): the page ran ``python -m pytest`` after an install of
    ``[testing,site]``, neither of which brings pytest in: a user following it got "No
    module named pytest". Each module the page runs with ``python -m`` (but machines) comes
    from the install line: an extra that requires it, or its own name there."""
    import tomllib

    text = PAGE.read_text(encoding="utf-8")
    (install,) = re.findall(r"^\$ (pip install .*)$", text, re.M)
    words = shlex.split(install)[2:]
    extras = re.findall(r"\[([a-z,]+)\]", words[0])[0].split(",")
    project = tomllib.loads((PAGE.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    optional = project["project"]["optional-dependencies"]
    installed = {re.split(r"[<>=\[ ]", d)[0] for extra in extras for d in optional[extra]}
    installed |= {re.split(r"[<>=\[ ]", w)[0] for w in words[1:]}
    commands = [line for block in COMMANDS.findall(text) for line in block.splitlines()]
    ran = {shlex.split(line)[2] for line in commands if line.startswith("python -m ")}
    assert ran - {"machines"} <= installed, (ran, installed)


@pytest.mark.slow
def test_the_getting_started_page_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    text = PAGE.read_text(encoding="utf-8")
    project = tmp_path / "tickets"
    for name, body in FILE.findall(text):
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body + "\n", encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MACHINES_SPEC_DIR", None)
    env["HYPOTHESIS_PROFILE"] = env.get("HYPOTHESIS_PROFILE", "ci")
    env["PYTHONPATH"] = str(project)
    for block in COMMANDS.findall(text):
        for line in block.splitlines():
            argv = shlex.split(line)
            if argv[0] == "python":
                argv[0] = sys.executable
            done = subprocess.run(
                argv, cwd=project, env=env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (project / "diagrams" / "ticket.dot").is_file()
    assert (project / "site" / "machines" / "ticket" / "index.html").is_file() or any(
        (project / "site").rglob("ticket*")
    )
