"""The command line fails closed: bad arguments, unwritable places, a closed pipe and
Ctrl-C end with a one-line message and a documented exit code, never a traceback."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import machines
from machines import cli
from machines.cli import check as check_command
from machines.cli import main
from machines.spec.loader import bundled_spec_dir

ROOT = Path(machines.__file__).resolve().parent.parent
"""Where the package under test lives: each subprocess imports the same one."""


def exit_code(argv: list[str]) -> int:
    """``main(argv)``'s exit code, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as stop:
        assert isinstance(stop.code, int)
        return stop.code


@pytest.mark.parametrize(
    "argv",
    [
        ["explore", "exactly-once", "--max-states", "-1"],
        ["explore", "exactly-once", "--max-states", "0"],
        ["mutate", "outcome-terminal-exit", "--examples", "0"],
        ["mutate", "outcome-terminal-exit", "--examples", "-1"],
        ["mutate", "outcome-terminal-exit", "--examples", "10000000"],
    ],
    ids=lambda argv: " ".join(a[:12] for a in argv),
)
def test_numeric_options_are_validated_and_bounded(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 21: a number out of its range is refused at once with exit 2 (on
    main, ``explore --max-states -1`` printed "OK", ``check --max-nodes 8`` ran for
    minutes and ``100000`` ended in ``MemoryError``)."""
    started = time.perf_counter()
    assert exit_code(argv) == 2
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err
    assert "must be a whole number" in err
    assert "Traceback" not in err and len(err) < 2000


@pytest.mark.parametrize("nodes", ["7", "8", "100000"])
def test_exponential_work_is_bounded(nodes: str) -> None:
    """issue 13 item 21: ``check --max-nodes 8`` ran for minutes and ``100000`` ended in
    ``MemoryError``. Run apart, with a memory cap and a deadline, so that a regression
    fails here instead of taking the machine."""

    def cap_memory() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        done = subprocess.run(
            [sys.executable, "-m", "machines", "check", "--max-nodes", nodes],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=cap_memory,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"check --max-nodes {nodes} still ran after 30 s")
    assert done.returncode == 2, done.stderr[-500:]
    assert "must be a whole number from 1 to 6" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_bounds_are_in_the_help() -> None:
    """issue 13 item 21: the bound of the exponential work is documented where it is used."""
    _, commands = cli.build_parser()
    assert "1 to 6" in commands["check"].format_help()
    assert "N >= 1" in commands["explore"].format_help()


@pytest.mark.parametrize("command", ["docs", "diagrams"])
def test_writing_to_an_unwritable_place_exits_2_naming_it(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 21: ``docs --out`` where nothing can be written ended in a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "site"
    assert exit_code([command, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "Traceback" not in err
    assert exit_code([command, "--out", str(blocker)]) == 2  # --out names a file
    assert exit_code([command, "--check", "--out", str(blocker)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert blocker.read_text() == "not a directory"


def test_a_stale_page_that_is_not_text_is_stale_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 21: a generated file replaced by bytes that are not UTF-8."""
    assert main(["docs", "--out", str(tmp_path)]) == 0
    (tmp_path / "cli.md").write_bytes(b"\xff\xfe not text")
    assert main(["docs", "--check", "--out", str(tmp_path)]) == 1
    assert main(["docs", "--out", str(tmp_path)]) == 2  # not ours (no marker): refused
    assert main(["docs", "--force", "--out", str(tmp_path)]) == 0
    assert main(["docs", "--check", "--out", str(tmp_path)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", "x" * 10_000 + "\x00"])
def test_arguments_no_shell_can_pass_are_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 21: a NUL or a lone surrogate in an argument (main(argv) is public)
    raised a raw ``ValueError`` / ``UnicodeEncodeError`` from the file system."""
    for argv in (["audit", bad], ["audit", "--from-store", f"sqlite:///{bad}"]):
        assert exit_code(argv) == 2
    for argv in (["check", "--spec-dir", bad], ["export", bad]):
        assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err) < 4000


def test_an_undecodable_file_name_is_echoed_without_a_crash(tmp_path: Path) -> None:
    """issue 13 item 21: a file name of bytes that are not UTF-8, printed back on a
    strict UTF-8 stdout (a UTF-8 locale), raised ``UnicodeEncodeError`` mid-report."""
    name = os.fsencode(tmp_path) + b"/not-\xff-utf8"
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"machines", b"check", b"--spec-dir", name],
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert b"Traceback" not in done.stderr
    assert b"not-\\udcff-utf8" in done.stdout


def test_a_bounded_exploration_suggests_the_run_to_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suggested command repeats the options given (quoted for a shell), but the bound."""
    spec_dir = tmp_path / "my spec"
    shutil.copytree(bundled_spec_dir(), spec_dir)
    argv = ["explore", "transfer", "--scope", "gated", "--rules", "qtg-v3", "--max-states", "3"]
    assert main([*argv, "--spec-dir", str(spec_dir), "--no-symmetry"]) == 0
    out = capsys.readouterr().out
    again = shlex.join(
        [
            *("machines", "explore", "transfer", "--rules", "qtg-v3"),
            *("--spec-dir", str(spec_dir), "--no-symmetry", "--scope", "gated"),
        ]
    )
    assert "1 scope(s) stopped at --max-states 3: the verdict covers the states seen only" in out
    assert f"{again} searches to the end" in out
    assert "'" in again  # the space in the directory is quoted


def _history(tmp_path: Path) -> str:
    """A recorded history of one outcome entity, for ``audit``."""
    m = machines.load("outcome").machine(entity_id="k1")
    m.trigger("park", actor="worker", detail={"by": "ops-1", "reason": "a test"})
    log = tmp_path / "history.jsonl"
    with log.open("w") as out:
        m.history.write_jsonl(out)
    return str(log)


PIPED = [
    ["check", "--max-nodes", "2"],
    ["check", "--max-nodes", "2", "--findings"],
    ["check", "--max-nodes", "2", "--format", "json"],
    ["audit", "HISTORY"],
    ["audit", "HISTORY", "--format", "json"],
    ["audit", "/nonexistent/history.jsonl", "--format", "json"],  # the error document
    ["explore", "exactly-once", "--scope", "small", "--format", "json"],
    ["export", "request", "--format", "postgresql"],
    ["--help"],
    ["--version"],
    ["check", "--help"],
]
"""A command line of every command and format that writes to stdout."""


@pytest.mark.parametrize("argv", PIPED, ids=[" ".join(a) for a in PIPED])
def test_a_closed_output_pipe_ends_quietly(argv: list[str], tmp_path: Path) -> None:
    """issue 13 item 24: ``machines check | head`` ended in a ``BrokenPipeError``
    traceback. The reader is gone before the first write, as with ``head`` that exits,
    so every write fails, the first and the last flush alike: exit 141 and not a word."""
    argv = [_history(tmp_path) if a == "HISTORY" else a for a in argv]
    proc = subprocess.Popen(
        [sys.executable, "-m", "machines", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert code == 141, err  # 128 + SIGPIPE, as other tools end
    if len(argv) > 1 and "nonexistent" in argv[1]:
        assert err.startswith("machines audit: ") and "Traceback" not in err
    else:
        assert err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--max-nodes", "2", "--findings"],
        ["check", "--max-nodes", "2", "--format", "json"],
        ["audit", "HISTORY", "--format", "json"],
        ["export", "request", "--format", "postgresql"],
    ],
)
def test_a_shell_pipeline_into_head_has_no_traceback(argv: list[str], tmp_path: Path) -> None:
    """issue 13 item 24: the real pipeline, ``machines check | head -1``: ``head`` reads a
    line and exits while the rest is written (or already in the pipe's buffer)."""
    argv = [_history(tmp_path) if a == "HISTORY" else a for a in argv]
    done = subprocess.run(
        f"{shlex.join([sys.executable, '-m', 'machines', *argv])} | head -1; "
        'echo "exit ${PIPESTATUS[0]}" >&2',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert len(done.stdout.splitlines()) == 1
    assert done.stderr in ("exit 0\n", "exit 141\n"), done.stderr


def test_ctrl_c_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 24: ``KeyboardInterrupt`` ends the command with exit 130."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(check_command, "check", interrupted)
    try:
        code = main(["check", "--max-nodes", "2"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main (a traceback)")
    assert code == 130  # 128 + SIGINT
    assert capsys.readouterr().err == "machines check: interrupted\n"


def test_a_closed_error_pipe_ends_quietly_too() -> None:
    """issue 13 item 24: the message about a failure goes to a closed pipe as well
    (``machines audit missing 2>&1 | head -0``)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "machines", "audit", "/nonexistent/history.jsonl"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stderr is not None
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141


def test_a_missing_postgres_driver_is_a_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 20: ``audit --from-store postgresql://...`` without psycopg."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    monkeypatch.delitem(sys.modules, "machines.store.postgres", raising=False)
    assert main(["audit", "--from-store", "postgresql://nobody@localhost/none"]) == 2
    assert "pip install 'effect-machines[postgres]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["check"], ["export", "outcome"], ["diff", "outcome", "outcome"], ["--help"]]
)
def test_a_closed_standard_output_is_exit_2_with_a_message(argv: list[str]) -> None:
    """issue 27 item 11: ``machines check >&-`` ended in an ``AttributeError`` traceback
    (Python sets ``sys.stdout`` to None when file descriptor 1 is closed)."""
    done = subprocess.run(
        f"{shlex.join([sys.executable, '-m', 'machines', *argv])} >&-",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "standard output is closed" in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["check", "--help"],
        ["check"],
        ["check", "--format", "json"],
        ["explore", "exactly-once", "--format", "json"],
    ],
)
def test_text_lost_to_a_full_disk_is_exit_2_with_a_message(argv: list[str]) -> None:
    """Outsider batch 14: ``machines --version > /dev/full`` exited 0, saying nothing
    (argparse drops an error writing its help or version). Batch 17 (b07): a JSON report
    to a full disk ended in a traceback (its error document failed to write too)."""
    done = subprocess.run(
        f"{shlex.join([sys.executable, '-m', 'machines', *argv])} > /dev/full",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "No space left on device" in done.stderr


@pytest.mark.parametrize("read_only", [True, False], ids=["audit", "open"])
def test_a_directory_is_named_as_one(tmp_path: Path, read_only: bool) -> None:
    """issue 27 item 11: ``audit --from-store sqlite:///DIR`` blamed a failing or full
    disk."""
    from machines.store import open_store
    from machines.store.records import StoreError

    with pytest.raises(StoreError, match="that path is a directory, not a database file"):
        open_store(f"sqlite:///{tmp_path}", read_only=read_only)


@pytest.mark.parametrize(
    "argv",
    [
        ["pending", "postgresql+psycopg://app:S3CRETPW@db/x"],
        ["audit", "--from-store", "postgresql+psycopg://app:S3CRETPW@db/x"],
        ["pending", "postgresql://u:S3CRETPW@[::1/x"],
        ["repair", "--by", "me", "--reason", "r", "postgresql://u:S3CRETPW@h/x"],
        ["desk", "mysql://u:S3CRETPW@h/x?password=S3CRETPW", "--accounts", "none.json"],
        ["pending", "postgresql://u:S3CRETPW%@127.0.0.1:1/x"],  # libpq quotes the token
        ["pending", "postgresql://u@127.0.0.1:1/x?password=S3CRETPW%"],
    ],
)
def test_a_store_urls_password_is_never_printed(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (b04): an unsupported or malformed store URL, or one argparse
    echoed back, printed its password."""
    with contextlib.suppress(SystemExit):
        assert main(argv) == 2
    said = capsys.readouterr()
    assert "S3CRETPW" not in said.out + said.err, said
