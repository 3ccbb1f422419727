"""The guide "Changing a definition with live data" runs as it says (issue 17 item 5):
docs/guide/changing-definitions.md walks a refund store through a changed definition with
commands in titled blocks (``sh title="step N"``) and what each prints (``text
title="step N output"``). Here a real store is made under version 1 of the refund
definition, the definition is changed as the page says, and every step's command runs in
that directory: it must exit as the page says and print every line the page shows."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import machines
from machines.store import open_store

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide" / "changing-definitions.md"
REFUND = ROOT / "tests" / "user_project" / "specs" / "refund.yaml"
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
EXITS = {"step 1": 1, "step 2": 1, "step 3": 0, "step 4": 0, "step 5": 0, "step 6": 0}
"""How each step's command ends, as the page says around it."""

WITHDRAW = """  - {trigger: withdraw, source: with_approver, dest: declined, actor: approver,
     description: The customer withdrew the request while it waited for a person.}
"""


def blocks() -> dict[str, str]:
    found = {title: body for _, title, body in BLOCK.findall(GUIDE.read_text(encoding="utf-8"))}
    assert set(EXITS) | {f"{step} output" for step in EXITS} <= set(found), sorted(found)
    return found


def version_2(text: str) -> str:
    """The change the page describes: ``awaiting_approval`` renamed ``with_approver``,
    and a withdrawal a person records from there (a needs-human state: no program
    leaves it)."""
    renamed = text.replace("awaiting_approval", "with_approver")
    anchor = "     description: A person rejects the refund.}\n"
    assert anchor in renamed
    return renamed.replace(anchor, anchor + WITHDRAW)


def live_store(url: str, spec_dir: Path) -> None:
    """Refunds in every state of version 1, three of them waiting for a person."""
    store = open_store(url, [machines.load(spec_dir / "refund.yaml")])
    paths = {
        "requested": [],
        "awaiting_approval": [("hold", "service")],
        "sending": [("send", "service")],
        "unknown": [("send", "service"), ("time_out", "service")],
        "refunded": [("send", "service"), ("confirm", "service")],
        "declined": [("send", "service"), ("decline", "service")],
    }
    try:
        with store.transaction() as tx:
            for state, moves in paths.items():
                for n in range(3 if state == "awaiting_approval" else 1):
                    size = "large" if state == "awaiting_approval" else "small"
                    row, _ = tx.insert("refund", f"{state}-{n}", context={"size": size})
                    for trigger, actor in moves:
                        row = tx.move(row, trigger, actor=actor)
                    assert row.state == state
    finally:
        store.close()


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    assert argv[0] == "machines", command
    return subprocess.run(
        [sys.executable, "-m", "machines", *argv[1:]],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_guide_runs_as_it_says(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REFUND, specs / "refund.yaml")
    git = ["git", "-c", "user.email=guide@example.com", "-c", "user.name=guide"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "specs"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "version 1"], cwd=tmp_path, check=True)
    live_store(f"sqlite:///{tmp_path / 'refunds.db'}", specs)
    (specs / "refund.yaml").write_text(version_2(REFUND.read_text()))
    found = blocks()
    for step, code in EXITS.items():
        done = run(found[step].strip(), tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == code, f"{step}: exit {done.returncode}\n{said}"
        missing = [
            line.strip()
            for line in found[f"{step} output"].splitlines()
            if line.strip() and line.strip() not in said
        ]
        assert not missing, f"{step}: the page shows lines not printed: {missing}\n{said}"
