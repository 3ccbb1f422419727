"""``machines init NAME`` refuses a name a machine may not take (issue 27, outsider batch
19, b14): it wrote specs/findings.yaml and test_findings.py, which ``machines check`` then
refused and pytest could not collect, though init promises both are green."""

from __future__ import annotations

from pathlib import Path

import pytest

from machines.cli import main
from machines.spec.vocabulary import RESERVED_MACHINES


@pytest.mark.parametrize(
    "name", [*sorted(RESERVED_MACHINES), "sqlite_x", "machines_x", "pg_x", "sqlite", "pg"]
)  # batch 37: init wrote a machine whose tables no store could hold
def test_init_refuses_a_reserved_name_and_writes_nothing(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["init", name])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"'{name}' is reserved" in err and "choose another name" in err
    assert list(tmp_path.iterdir()) == []


def test_a_name_init_takes_checks_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The names next to the reserved ones still work (a name is refused for what it
    is, not for looking like one)."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", "findings_log"]) == 0
    assert main(["check", "--spec-dir", "specs"]) == 0


@pytest.mark.parametrize("name", ["yes", "no", "on", "off", "true", "false", "null"])
def test_a_name_a_yaml_reader_would_retype_is_written_as_text(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 20 (b13): init wrote ``machine: yes`` bare, which the loader reads as
    the boolean true and refuses, so check failed and the generated test did not collect.
    The name is written quoted: what init writes loads, whatever lower_snake name it is."""
    import machines

    monkeypatch.chdir(tmp_path)
    assert main(["init", name]) == 0
    assert machines.load(tmp_path / "specs" / f"{name}.yaml").name == name
    assert main(["check", "--spec-dir", "specs"]) == 0


def test_init_writes_into_the_projects_spec_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 21 (b08): in a project whose ``[tool.machines] spec_dir`` is
    ``defs``, init run from a subfolder wrote a second ``specs/`` there, which check did not
    see, and advised adding the table the project already has. It writes into the
    project's own folder, and the test it writes reads the definition from there."""
    import subprocess
    import sys

    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "shop"\n\n[tool.machines]\nspec_dir = "defs"\n', encoding="utf-8"
    )
    sub = tmp_path / "services"
    sub.mkdir()
    monkeypatch.chdir(sub)
    monkeypatch.delenv("MACHINES_SPEC_DIR", raising=False)
    assert main(["init", "ticket"]) == 0
    out = capsys.readouterr().out
    assert "add to your pyproject.toml" not in out and "spec_dir (../defs" in out, out
    assert (tmp_path / "defs" / "ticket.yaml").is_file() and not (sub / "specs").exists()
    assert main(["check"]) == 0
    assert "ticket" in capsys.readouterr().out
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "-o",
            "addopts=",
            "test_ticket.py",
        ],
        cwd=sub,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
