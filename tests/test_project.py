"""A user's project is theirs (issue 29): every command finds the project's definitions
without --spec-dir (``[tool.machines]`` in its pyproject.toml, or ``$MACHINES_SPEC_DIR``),
checks single files of any definition suffix, and never draws or documents this package's
machines into the user's folders."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from machines.cli import main
from machines.errors import InvalidArgument
from machines.spec.files import SPEC_DIR_VARIABLE
from machines.spec.loader import bundled_spec_dir
from machines.spec.project import definitions_dir, project_settings

REFUND = Path(__file__).parent / "user_project" / "specs" / "refund.yaml"


def project(root: Path, table: str | None = 'spec_dir = "specs"') -> Path:
    """A user's project at ``root``: its definition in specs/, and a pyproject.toml with
    ``table`` as its [tool.machines] (None: no such table)."""
    (root / "specs").mkdir(parents=True)
    shutil.copy(REFUND, root / "specs" / "refund.yaml")
    text = '[project]\nname = "refunds"\n'
    if table is not None:
        text += f"\n[tool.machines]\n{table}\n"
    (root / "pyproject.toml").write_text(text)
    return root


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPEC_DIR_VARIABLE, raising=False)


def test_the_definitions_are_chosen_flag_then_variable_then_project_then_bundled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path / "shop")
    inside = root / "src" / "deep"
    inside.mkdir(parents=True)
    monkeypatch.chdir(inside)  # the nearest pyproject.toml above the working folder
    found = definitions_dir()
    assert found.spec_dir == root / "specs" and not found.bundled
    assert str(root / "pyproject.toml") in found.source
    monkeypatch.setenv(SPEC_DIR_VARIABLE, str(tmp_path / "mutant"))
    assert definitions_dir().spec_dir == tmp_path / "mutant"
    assert definitions_dir(tmp_path / "given").spec_dir == tmp_path / "given"
    monkeypatch.delenv(SPEC_DIR_VARIABLE)
    monkeypatch.chdir(tmp_path)
    assert definitions_dir().bundled and definitions_dir().spec_dir == bundled_spec_dir()


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('spec-dir = "specs"', "has no key 'spec-dir' (it knows spec_dir"),
        ("spec_dir = 7", "spec_dir must be a folder, as a non-empty string, not 7"),
        ('spec_dir = "  "', "spec_dir must be a folder"),
        ("spec_dir = [", "not TOML"),
    ],
)
def test_a_table_that_cannot_be_meant_is_refused_naming_the_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, said: str
) -> None:
    root = project(tmp_path, table)
    monkeypatch.chdir(root)
    with pytest.raises(InvalidArgument, match=r"pyproject\.toml") as refused:
        project_settings()
    assert said in str(refused.value)
    assert main(["check"]) == 2


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfe[tool.machines]\n", "not UTF-8 text"),
        (b"x = " + b"[" * 50_000 + b"]" * 50_000 + b"\n", "nested too deep"),
    ],
    ids=["not-utf8", "deep"],
)
def test_a_pyproject_toml_that_cannot_be_read_is_refused_without_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    said: str,
) -> None:
    """Outsider batch 14: a pyproject.toml not in UTF-8, or nested 50,000 deep, ended
    check, docs, diagrams and audit in a traceback."""
    (tmp_path / "pyproject.toml").write_bytes(content)
    monkeypatch.chdir(tmp_path)
    for command in (["check"], ["docs"], ["diagrams"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "pyproject.toml" in err and said in err and "Traceback" not in err


def test_check_in_a_project_checks_its_definitions_and_single_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path)
    monkeypatch.chdir(root)
    assert main(["check"]) == 0
    said = capsys.readouterr().out
    assert f"machines check: {root / 'specs'} (1 definition)" in said and "refund" in said
    yml = root / "specs" / "refund.yml"
    (root / "specs" / "refund.yaml").rename(yml)
    assert main(["check"]) == 0  # a folder's *.yml definitions are definitions too
    assert main(["check", str(yml)]) == 0
    shutil.copy(yml, root / "specs" / "refund.yaml")
    assert main(["check"]) == 2  # one machine, two files
    assert "refund.yaml and refund.yml both define machine 'refund'" in capsys.readouterr().out
    monkeypatch.setenv(SPEC_DIR_VARIABLE, str(bundled_spec_dir()))
    assert main(["check", "--max-nodes", "2"]) == 0
    assert "(4 definitions)" in capsys.readouterr().out


def test_check_takes_files_together_and_refuses_one_machine_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node, request = bundled_spec_dir() / "node.yaml", bundled_spec_dir() / "request.yaml"
    assert main(["check", "--max-nodes", "2", str(request), str(node)]) == 0
    assert "derivation" in capsys.readouterr().out  # judged: both machines were given
    twice = tmp_path / "node.yaml"  # the same machine, from another folder
    shutil.copy(node, twice)
    assert main(["check", str(node), str(twice)]) == 2
    assert "a second definition of machine 'node'" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        main(["check", str(node), "--spec-dir", str(tmp_path)])
    assert usage.value.code == 2 and "not both" in capsys.readouterr().err


def test_diagrams_and_docs_never_write_the_bundled_machines_into_a_users_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = project(tmp_path / "bare", table=None)
    monkeypatch.chdir(bare)
    for command in ("diagrams", "docs"):
        assert main([command]) == 2
        assert "[tool.machines]" in capsys.readouterr().err
    assert sorted(p.name for p in bare.iterdir()) == ["pyproject.toml", "specs"]
    root = project(tmp_path / "shop", 'spec_dir = "specs"\ndiagrams_dir = "pictures"')
    monkeypatch.chdir(root / "specs")
    assert main(["diagrams"]) == 0
    drawn = sorted(p.stem for p in (root / "pictures").iterdir())
    assert drawn and set(drawn) == {"refund"}
    assert main(["docs"]) == 0  # the pages about the user's machines, nothing of ours
    written = sorted(str(p.relative_to(root / "docs")) for p in (root / "docs").rglob("*.*"))
    assert written == [
        "machines/diagrams/refund.dot",
        "machines/diagrams/refund.mmd",
        "machines/diagrams/refund.svg",
        "machines/findings.md",
        "machines/refund.md",
        "machines/rules.md",
    ]
    page = (root / "docs" / "machines" / "refund.md").read_text(encoding="utf-8")
    assert "](diagrams/refund.svg)" in page and "awaiting_approval" in page
    assert main(["docs", "--check"]) == 0


def test_another_folders_definitions_never_replace_the_projects_own_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 45 (b 21): run in a project (this package's checkout) on another
    folder's definitions, ``diagrams`` wrote theirs into the project's folder and removed
    the project's own twelve. A ``--spec-dir`` other than the project's own needs ``--out``;
    the project's own, named, still writes where the project says."""
    root = project(tmp_path / "shop", 'spec_dir = "specs"')
    monkeypatch.chdir(root)
    assert main(["diagrams"]) == 0
    before = sorted((root / "diagrams").iterdir())
    other = tmp_path / "elsewhere"
    shutil.copytree(root / "specs", other)
    (other / "refund.yaml").rename(other / "refund2.yaml")
    text = (other / "refund2.yaml").read_text().replace("machine: refund", "machine: refund2")
    (other / "refund2.yaml").write_text(text)
    capsys.readouterr()
    for command in ("diagrams", "docs"):
        assert main([command, "--spec-dir", str(other)]) == 2
        said = capsys.readouterr().err
        assert "names other definitions than this project's" in said and "--out" in said
        monkeypatch.setenv("MACHINES_SPEC_DIR", str(other))  # batch 46 (b 48): the same
        assert main([command]) == 2
        assert "MACHINES_SPEC_DIR=" in capsys.readouterr().err
        assert main([command, "--check"]) == 1  # a check writes nothing: it compares
        monkeypatch.delenv("MACHINES_SPEC_DIR")
    assert sorted((root / "diagrams").iterdir()) == before
    assert not (root / "docs").exists()
    assert main(["diagrams", "--spec-dir", str(other), "--out", str(tmp_path / "theirs")]) == 0
    assert main(["diagrams", "--spec-dir", str(root / "specs")]) == 0
    assert sorted((root / "diagrams").iterdir()) == before


def test_docs_writes_this_packages_pages_only_in_its_own_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the bundled machines in a project of one's own is one's own: its pages,
    never this package's command line or format reference."""
    copy = tmp_path / "spec"
    shutil.copytree(bundled_spec_dir(), copy)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "payments"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["docs", "--spec-dir", str(copy), "--out", str(tmp_path / "yours")]) == 0
    written = {str(p.relative_to(tmp_path / "yours")) for p in (tmp_path / "yours").rglob("*.md")}
    assert written == {
        f"machines/{name}.md" for name in ("effect", "node", "outcome", "request")
    } | {
        "machines/findings.md",
        "machines/rules.md",
    }
    monkeypatch.chdir(Path(__file__).parents[1])
    assert main(["docs", "--spec-dir", str(copy), "--out", str(tmp_path / "ours")]) == 0
    assert {p.name for p in (tmp_path / "ours").iterdir()} == {
        "cli.md",
        "invariants.md",
        "format.md",
    }


def test_migrate_and_repair_never_fall_back_to_the_bundled_definitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    for command in ("migrate", "repair"):
        assert main([command, url, "--dry-run"]) == 2
        assert "Give --spec-dir DIR, set MACHINES_SPEC_DIR" in capsys.readouterr().out
    assert not (tmp_path / "store.db").exists()


def test_a_long_machine_name_keeps_every_table_in_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29 item 7: names over 10 characters shifted the columns of ``check`` and of
    the coverage table (``{name:<10}``); counts say their plural; a definition that did
    not load is counted in the header."""
    from machines import load
    from machines.testing.coverage import Coverage

    doc = REFUND.read_text().replace("machine: refund", "machine: refund_with_a_long_name")
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "refund_with_a_long_name.yaml").write_text(doc)
    assert main(["check", "--spec-dir", str(specs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["machine", "states"])
    row = next(line for line in lines if "refund_with_a_long_name" in line)
    for column in ("states", "transitions", "findings"):
        end = header.index(column) + len(column)  # numbers right-aligned under the header
        assert row[end - 1].isdigit() and row[end] == " ", (header, row)
    assert lines[0].endswith("(1 definition)")
    (specs / "broken.yaml").write_text("machine: broken\n")
    assert main(["check", "--spec-dir", str(specs)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "(2 definitions, 1 did not load)" in lines[0]
    assert lines[-1].startswith("FAILED: ") and "(1 definition did not load)" in lines[-1]
    spec = load(specs / "refund_with_a_long_name.yaml")
    short = load(REFUND)
    table = Coverage().table([spec, short]).splitlines()
    rows = [line for line in table if not line.startswith(" ")]
    assert len({line.index("/") for line in rows}) == 1, table


def test_the_command_line_page_fits_the_sites_code_blocks() -> None:
    """Issue 29 item 7: help was wrapped at 100 columns and clipped on the site; every line
    of the generated command-line page's code blocks now fits in 80."""
    page = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    blocks = page.split("```")[1::2]
    assert blocks
    wide = [line for block in blocks for line in block.splitlines() if len(line) > 80]
    assert wide == []


def test_mutate_with_a_test_command_mutates_the_projects_definitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: ``machines mutate -- COMMAND`` needed --spec-dir in a user's project."""
    root = project(tmp_path / "shop")
    monkeypatch.chdir(root)
    assert main(["mutate", "--list", "--", "true"]) == 0
    listed = capsys.readouterr().out
    assert "refund.yaml:" in listed and "mutants of 1 definition" in listed
    monkeypatch.chdir(tmp_path)  # no project: the words are taken for catalog ids
    assert main(["mutate", "--", "true"]) == 2
    assert "unknown mutation(s) true" in capsys.readouterr().err
    monkeypatch.chdir(root)  # batch 42 (c 5b): a command not on the PATH, in a project
    assert main(["mutate", "--", "nosuchcommand_xyz", "-q"]) == 2
    said = capsys.readouterr().err
    assert "the command 'nosuchcommand_xyz' is not found" in said and "unknown" not in said
    # outsider batch 30 (b 4): listing and choosing, no command
    assert main(["mutate", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "refund.yaml:" in listed and "outcome-auto-exit-indeterminate" not in listed
    assert main(["mutate", "--list", "--only", "refund.yaml:*:drop-transition:*"]) == 0
    chosen = capsys.readouterr().out.splitlines()
    assert chosen[:-1] and all(":drop-transition:" in line for line in chosen[:-1]), chosen
    # outsider batch 38 (c U3 note): a bare mutate in a project ran the bundled catalog
    assert main(["mutate"]) == 2
    said = capsys.readouterr().err
    assert "their mutants are judged by your own tests" in said, said
    assert "outcome-auto-exit-indeterminate" not in said


def test_init_writes_a_machine_that_checks_clean_and_a_test_that_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: ``machines init NAME`` starts a user from green."""
    import os
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    assert main(["init", "ticket"]) == 0
    assert "[tool.machines]" in capsys.readouterr().out
    assert main(["check", "--spec-dir", "specs"]) == 0
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}
    env.pop(SPEC_DIR_VARIABLE, None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
    ran = subprocess.run(
        [*command, "test_ticket.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    before = (tmp_path / "specs" / "ticket.yaml").read_text()
    (tmp_path / "specs" / "ticket.yaml").write_text(before + "# mine\n")
    assert main(["init", "ticket"]) == 2  # nothing written over what is there
    assert "already there; nothing written" in capsys.readouterr().err
    assert (tmp_path / "specs" / "ticket.yaml").read_text().endswith("# mine\n")
    with pytest.raises(SystemExit):
        main(["init", "Ticket!"])


@pytest.mark.parametrize("folder", ["specs", "spec"])
def test_definitions_nothing_names_are_never_taken_for_the_bundled_ones(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    folder: str,
) -> None:
    """Outsider batch 28 (b 4): after ``machines init`` without the pyproject setting it
    advises, ``machines check`` checked the bundled definitions and said OK, a broken
    definition of the user's unread: a CI job stays green for good. A working folder that
    keeps definitions nothing names is refused, saying how to name them."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", "ticket"]) == 0
    if folder != "specs":
        (tmp_path / "specs").rename(tmp_path / folder)
    (tmp_path / folder / "ticket.yaml").write_text("garbage: [\n")
    capsys.readouterr()
    for command in (["check"], ["audit", "--from-store", "memory://"], ["export", "effect"]):
        assert main(command) == 2, command
        said = capsys.readouterr().err
        assert "holds definitions, but nothing names them" in said, said
        assert f'spec_dir = "{folder}"' in said and f"--spec-dir {folder}" in said, said
    assert main(["check", "--spec-dir", folder]) != 0  # named, the broken one is read
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "tickets"\n')
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path / "tests")  # batch 33 (b 2): from a subfolder of the project
    capsys.readouterr()
    assert main(["check"]) == 2
    said = capsys.readouterr().err
    assert f"--spec-dir ../{folder}" in said and f'spec_dir = "{folder}"' in said, said
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument, match="nothing names them"):
        definitions_dir()
    assert definitions_dir(strict=False).bundled


def test_a_file_or_folder_in_the_working_folder_never_stands_in_for_a_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 15: a file called ``outcome`` in the working folder replaced the
    bundled definition (and ExactlyOnce ran on a weaker one); a folder called like a
    project's machine hid it from ``machines export``."""
    import machines
    from machines.spec.loader import resolve

    monkeypatch.chdir(tmp_path)
    weaker = (bundled_spec_dir() / "outcome.yaml").read_text()
    (tmp_path / "outcome").write_text(weaker.replace("dest: indeterminate", "dest: failed"))
    (tmp_path / "request").mkdir()
    assert resolve("outcome") == bundled_spec_dir() / "outcome.yaml"
    assert machines.load("outcome").step("in_flight", "park", actor="worker") == "indeterminate"
    assert resolve("./outcome") == Path("outcome")  # said as a path, it is one
    root = project(tmp_path / "shop")
    (root / "refund").mkdir()  # a folder named like the project's machine
    monkeypatch.chdir(root)
    assert main(["export", "refund", "--format", "yaml"]) == 0
    assert "machine: refund" in capsys.readouterr().out


def test_output_folders_stay_inside_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 15: ``docs_dir = "../../../escaped"`` wrote pages outside the
    project. The folders a command writes into stay inside it; where definitions are read
    from may be anywhere."""
    for key in ("docs_dir", "diagrams_dir"):
        for value in ("../escaped", "/tmp/escaped"):
            root = project(tmp_path / f"{key}-{value.count('/')}", f'{key} = "{value}"')
            with pytest.raises(InvalidArgument, match="outside the project's folder"):
                project_settings(root)
    shared = project(tmp_path / "mono" / "app", 'spec_dir = "../shared-specs"')
    settings = project_settings(shared)
    assert settings is not None and settings.folders["spec_dir"].name == "shared-specs"


@pytest.mark.parametrize(
    "thing", ["dangling-link", "fifo", "folder", "link-to-folder", "hard-link"]
)
def test_docs_never_writes_through_a_link_or_into_a_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], thing: str
) -> None:
    """Outsider batch 15: ``machines docs`` followed a dangling symbolic link in
    ``docs/machines/`` and made a file outside the project, and hung on a FIFO."""
    import os

    root = project(tmp_path / "shop")
    monkeypatch.chdir(root)
    pages = root / "docs" / "machines"
    pages.mkdir(parents=True)
    outside = tmp_path / "outside"
    if thing == "dangling-link":
        (pages / "refund.md").symlink_to(outside / "planted.md")
        outside.mkdir()
    elif thing == "fifo":
        os.mkfifo(pages / "refund.md")
    elif thing == "folder":
        (pages / "refund.md").mkdir()
    elif thing == "hard-link":  # batch 36 (c 5): written in place, through the other name
        outside.mkdir()
        planted = outside / "planted.md"
        planted.write_text("<!-- generated by effect-machines from the definitions -->\nmine\n")
        os.link(planted, pages / "refund.md")
    else:
        outside.mkdir()
        (pages / "diagrams").symlink_to(outside, target_is_directory=True)
    assert main(["docs"]) == 2
    said = capsys.readouterr().err
    assert "machines docs:" in said and (
        "symbolic link" in said or "not a regular file" in said or "hard link" in said
    )
    if thing == "hard-link":
        assert (outside / "planted.md").read_text().endswith("mine\n")
    else:
        assert not outside.exists() or list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "folder"),
    [
        (["diagrams"], "diagrams"),
        (["docs"], "docs"),
        (["diagrams"], "configured"),
        (["init", "refund_two"], "defs"),  # init writes into the project's spec_dir
    ],
)
def test_no_command_writes_through_a_linked_folder_out_of_the_project(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    folder: str,
) -> None:
    """Outsider batch 16, 08: ``machines diagrams`` (its default diagrams/ folder) and
    ``machines init`` (specs/) wrote through a folder that is a symbolic link out of the
    project. Every folder a command writes into by default or by the project's setting
    resolves inside the project, or the command writes nothing."""
    table = 'spec_dir = "defs"' + (
        '\ndiagrams_dir = "out/pictures"' if folder == "configured" else ""
    )
    root = project(tmp_path / "shop", table)
    (root / "specs").rename(root / "defs")
    outside = tmp_path / "outside"
    outside.mkdir()
    if folder == "configured":
        (root / "out").symlink_to(outside, target_is_directory=True)
    else:
        if (root / folder).is_dir():
            shutil.rmtree(root / folder)
        (root / folder).symlink_to(outside, target_is_directory=True)
    monkeypatch.chdir(root)
    assert main(command) == 2
    said = capsys.readouterr().err
    assert re.search("(leads out of|is outside) the project's folder", said), said
    assert list(outside.iterdir()) == []
    link = root / ("out" if folder == "configured" else folder)
    link.unlink()
    (root / "elsewhere").mkdir()
    link.symlink_to(root / "elsewhere", target_is_directory=True)
    assert main(command) == 0  # a link that stays inside the project is the user's own
