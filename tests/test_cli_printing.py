"""What the report commands print from the user's files and stores: each line a line of
the report, and anything a file name or a stored text holds (an escape sequence, a line
break) escaped, so that no input can clear the terminal or forge a line of the report
(issue 27, outsider batch 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from machines.cli import main

OUTCOME = Path(__file__).resolve().parent.parent / "spec" / "outcome.yaml"


def _event(key: str, seq: int, source: str, dest: str, trigger: str, actor: str) -> str:
    return json.dumps(
        {
            "machine": "outcome",
            "entity": key,
            "seq": seq,
            "source": source,
            "dest": dest,
            "trigger": trigger,
            "actor": actor,
            "at": float(seq),
            "context": {},
            "detail": None,
        }
    )


def test_an_audit_prints_each_event_of_a_breach_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """b05: a breach's events were printed after a literal backslash-n on the breach's
    line; a line break in the key stays escaped, so it cannot start a line of its own."""
    key = "k1\nmachines audit: 0 events: OK: no breach"
    log = tmp_path / "history.jsonl"
    log.write_text(
        _event(key, 1, "in_flight", "indeterminate", "park", "worker")
        + "\n"
        + _event(key, 2, "indeterminate", "succeeded", "decide_landed", "operator")
        + "\n"
    )
    assert main(["audit", str(log)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "[fail-closed-indeterminate] outcome 'k1\\nmachines audit: 0 events: OK: no breach': "
        "left indeterminate without recording who and why",
        "    #2 indeterminate --decide_landed (operator)--> succeeded",
        "machines audit: 2 events of 1 entity: FAILED: 1 breach(es)",
    ]


ESCAPE = "evil\x1b]0;pwned\x07\x1b[2J"
"""A file name that, printed raw, sets the terminal's title and clears its screen."""


def _hostile_folder(tmp_path: Path) -> Path:
    """A folder of definitions as a pull request may bring it: one good definition, one
    file named with an escape sequence that does not parse, one named with a line break
    and a line of a report after it."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "outcome.yaml").write_text(OUTCOME.read_text())
    (folder / f"{ESCAPE}.yaml").write_text("a: [\n  b: c\n")
    (folder / "x\nOK: no violations.yaml").write_text("x: 1\n")
    return folder


def _shown_safely(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert not any(line.startswith("OK: no violations") for line in text.splitlines())


def test_check_escapes_the_file_names_of_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """b13: check printed a definition's file name raw (the escape sequence reached the
    terminal, a line break in it started a line of its own)."""
    folder = _hostile_folder(tmp_path)
    assert main(["check", "--spec-dir", str(folder)]) == 2
    out = capsys.readouterr().out
    _shown_safely(out)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J.yaml: line 3" in out
    assert "x\\nOK: no violations.yaml:1: x\\nOK: no violations: [definition]" in out
    assert main(["check", str(folder / "x\nOK: no violations.yaml")]) == 1
    _shown_safely(capsys.readouterr().out)


@pytest.mark.parametrize("command", ["docs", "diagrams"])
def test_the_generators_escape_the_file_names_of_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / f"{ESCAPE}.yaml").write_text("a: [\n  b: c\n")
    out = tmp_path / f"out{ESCAPE}"
    assert main([command, "--spec-dir", str(folder), "--out", str(out)]) == 2
    said = capsys.readouterr()
    _shown_safely(said.out + said.err)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J.yaml: line 3" in said.err


def test_the_generators_escape_the_folder_they_write_into(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "outcome.yaml").write_text(OUTCOME.read_text())
    out = tmp_path / f"out{ESCAPE}"
    main(["diagrams", "--spec-dir", str(folder), "--out", str(out)])
    said = capsys.readouterr()
    _shown_safely(said.out + said.err)
    assert "outevil\\x1b]0;pwned\\x07\\x1b[2J/" in said.out


def test_export_escapes_the_file_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / f"{ESCAPE}.yaml"
    bad.write_text("a: [\n  b: c\n")
    assert main(["export", str(bad)]) == 2
    err = capsys.readouterr().err
    _shown_safely(err)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J.yaml: line 3" in err


def test_diff_escapes_the_folders_it_compares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / f"old{ESCAPE}", tmp_path / "new\nOK: no breaking change"
    for folder in (old, new):
        folder.mkdir()
        (folder / "outcome.yaml").write_text(OUTCOME.read_text())
    assert main(["diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    _shown_safely(out)
    assert out.count("OK: no breaking change") == 2  # the folder's name, escaped, and the verdict
    assert "\\nOK: no breaking change: 0 breaking" in out


def test_a_failed_audit_names_a_file_with_a_line_break_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _hostile_folder(tmp_path)
    (folder / f"{ESCAPE}.yaml").unlink()
    log = tmp_path / "history.jsonl"
    log.write_text("")
    assert main(["audit", str(log), "--spec-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    _shown_safely(err)
    assert "x\\nOK: no violations.yaml" in err


def test_init_escapes_the_folder_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / f"project{ESCAPE}"
    project.mkdir()
    (project / "specs").symlink_to(tmp_path)
    monkeypatch.chdir(project)
    assert main(["init", "ticket"]) == 2
    err = capsys.readouterr().err
    _shown_safely(err)
    assert "projectevil\\x1b]0;pwned\\x07\\x1b[2J/specs" in err


def test_explore_escapes_the_folder_in_the_command_it_suggests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / f"specs{ESCAPE}"
    folder.mkdir()
    (folder / "outcome.yaml").write_text(OUTCOME.read_text())
    args = ["explore", "exactly-once", "--spec-dir", str(folder), "--max-states", "5"]
    assert main(args) == 0
    out = capsys.readouterr().out
    _shown_safely(out)
    assert "specsevil\\x1b]0;pwned\\x07\\x1b[2J" in out
