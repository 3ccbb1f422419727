"""Every command finds a project's definitions the same way (issue 27, outsider batch 24,
b 4): in a project whose ``[tool.machines] spec_dir`` is ``specs``, ``machines diff --base
HEAD`` looked for this package's folder name ``spec`` and exited 2, and ``machines explore``
explored the bundled definitions and said OK about a weakened ``outcome.yaml`` in the
project's folder, without saying which definitions it used."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from machines.cli import main

ROOT = Path(__file__).resolve().parents[1]


def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "shop"\nversion = "0"\n\n[tool.machines]\nspec_dir = "specs"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINES_SPEC_DIR", raising=False)
    assert main(["init", "ticket"]) == 0
    return tmp_path


def git(folder: Path, *argv: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=a", *argv],
        cwd=folder,
        check=True,
        capture_output=True,
    )


def weakened_outcome(specs: Path) -> None:
    text = (ROOT / "spec" / "outcome.yaml").read_text(encoding="utf-8")
    weak = text.replace(
        "    dest: indeterminate\n    actor: worker", "    dest: failed\n    actor: worker", 1
    )
    assert weak != text
    (specs / "outcome.yaml").write_text(weak, encoding="utf-8")


def test_diff_base_compares_the_projects_definitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path, monkeypatch)
    git(root, "init", "-q", ".")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    capsys.readouterr()
    assert main(["diff", "--base", "HEAD"]) == 0
    assert "OK: no breaking change" in capsys.readouterr().out
    ticket = root / "specs" / "ticket.yaml"
    text = ticket.read_text(encoding="utf-8")
    assert "Just created; waiting for work." in text
    ticket.write_text(text.replace("Just created; waiting for work.", "Just made."), "utf-8")
    assert main(["diff", "--base", "HEAD"]) == 0
    out = capsys.readouterr().out
    assert "HEAD:specs" in out and "0 breaking, 0 widening, 1 wording" in out, out


def test_explore_explores_the_projects_definitions_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["explore", "exactly-once", "--scope", "small"]) == 0
    said = capsys.readouterr().out
    assert "the bundled definitions" in said and "holds no outcome machine" in said, said
    weakened_outcome(root / "specs")
    assert main(["explore", "exactly-once", "--scope", "small"]) == 2
    assert "outcome.yaml" in capsys.readouterr().err
    shutil.copy(ROOT / "spec" / "outcome.yaml", root / "specs" / "outcome.yaml")
    assert main(["explore", "exactly-once", "--scope", "small", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["definitions"].startswith(str(root / "specs"))
        and "[tool.machines]" in doc["definitions"]
    )


@pytest.mark.parametrize("command", ["docs", "diagrams"])
def test_the_pages_of_a_removed_machine_are_left_over_and_removed(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Outsider batch 24 (b 3): after ``specs/refund.yaml`` was deleted, its page and
    diagrams stayed, ``--check`` said current and the site kept publishing the machine.
    A file we generated beside the others that no machine makes any more is named by
    ``--check`` (exit 1) and removed by the next run; a file of the user's is left."""
    root = project(tmp_path, monkeypatch)
    ticket = (root / "specs" / "ticket.yaml").read_text(encoding="utf-8")
    refund = ticket.replace("machine: 'ticket'", "machine: 'refund'", 1)
    assert refund != ticket
    (root / "specs" / "refund.yaml").write_text(refund, encoding="utf-8")
    assert main([command]) == 0
    made = {p for p in root.rglob("*refund*") if p.is_file() and "specs" not in p.parts}
    assert made, "nothing was generated for refund"
    mine = next(iter(made)).with_name("refund-notes" + next(iter(made)).suffix)
    mine.write_text("my own notes\n", encoding="utf-8")
    (root / "specs" / "refund.yaml").unlink()
    capsys.readouterr()
    assert main([command, "--check"]) == 1
    said = capsys.readouterr().out
    assert "no longer defined" in said and "refund" in said, said
    assert main([command]) == 0
    said = capsys.readouterr().out
    assert "removed: " in said and all(str(p) in said for p in made), said  # batch 46 (b 50)
    assert not any(p.exists() for p in made) and mine.exists()
    assert main([command, "--check"]) == 0
