"""``machines mutate -- COMMAND`` ends what the command started in a session of its own
(issue 27, outsider batch 19, b15): a ``setsid`` grandchild is in no process group of the
command's, so killing the group left it running after mutate. Mutate is a child subreaper
now (Linux): such a process is ended with the command, or at the latest with the run."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFUND = ROOT / "tests" / "user_project" / "specs" / "refund.yaml"

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's"),
    pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)"),
]


def _with_marker(marker: str) -> list[int]:
    """The processes whose argv holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if entry.isdigit() and marker.encode() in argv.split(b"\0"):
            found.append(int(entry))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A word unique to this test, in the argv of the process the command leaves; any
    such process left is killed, by its pid, when the test ends."""
    word = f"machines-reaping-{uuid.uuid4().hex}"
    yield word
    for pid in _with_marker(word):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _mutate(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REFUND, specs / "refund.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("MACHINES_SPEC_DIR", None)
    command = [sys.executable, "-m", "machines", "mutate", "--spec-dir", "specs", *argv]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def _sleeper(marker: str) -> str:
    """A shell command that starts, in a session of its own, a process sleeping 300 s
    with ``marker`` in its argv."""
    return f"setsid {sys.executable} -c 'import time; time.sleep(300)' {marker} &"


@pytest.mark.parametrize(
    ("what", "then", "more"),
    [
        ("the command times out", "sleep 300", ["--timeout", "2"]),
        ("the command fails at once", "exit 1", []),
        ("the command passes at once", "exit 0", []),
        ("with --jobs", "sleep 300", ["--timeout", "2", "--jobs", "2"]),
    ],
)
def test_a_setsid_grandchild_does_not_outlive_mutate(
    tmp_path: Path, marker: str, what: str, then: str, more: list[str]
) -> None:
    script = f"{_sleeper(marker)} sleep 0.5; {then}"
    done = _mutate(
        tmp_path,
        "--no-baseline",
        "--only",
        "*:drop-transition:*",
        *more,
        "--",
        "sh",
        "-c",
        script,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1), done.stdout + done.stderr
    time.sleep(0.2)
    left = _with_marker(marker)
    assert not left, f"{len(left)} process(es) started with setsid outlived mutate ({what})"


def test_sigterm_to_mutate_ends_a_setsid_grandchild(tmp_path: Path, marker: str) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REFUND, specs / "refund.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("MACHINES_SPEC_DIR", None)
    script = f"{_sleeper(marker)} sleep 300"
    argv = [sys.executable, "-m", "machines", "mutate", "--spec-dir", "specs", "--no-baseline"]
    argv += ["--only", "*:drop-transition:*", "--", "sh", "-c", script]
    process = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not _with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _with_marker(marker), "the command never started"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert b"Traceback" not in err, err.decode()[-2000:]
    time.sleep(0.2)
    assert not _with_marker(marker), "a process started with setsid outlived mutate"


def test_no_copy_is_left_by_a_process_that_writes_into_it(tmp_path: Path, marker: str) -> None:
    """Outsider batch 21 (b09): a detached grandchild with its environment cleared (so it
    carries no mark of its command) that kept writing into its copy of the definitions
    outlived its command while another command ran (``--jobs``), and re-made the copy after
    it was removed: it was left in $TMPDIR. Each copy is removed again once the run has
    ended every orphan. (CI found one left even so: removing the copy as its command's
    block ended failed while the orphan wrote into it, and the removal was never asked
    for; this writer writes without pause, so that it does.)"""
    writer = (
        "import os, sys, time\n"
        "folder = sys.argv[1]\n"
        "while True:\n"
        "    os.makedirs(folder, exist_ok=True)\n"
        "    [open(os.path.join(folder, 'left%d' % i), 'w').close() for i in range(50)]\n"
    )
    (tmp_path / "writer.py").write_text(writer, encoding="utf-8")
    script = (
        f'setsid env -i {sys.executable} {tmp_path / "writer.py"} "$MACHINES_SPEC_DIR" '
        f"{marker} & sleep 0.5; exit 1"
    )
    done = _mutate(
        tmp_path,
        "--no-baseline",
        "--only",
        "*:drop-transition:*",
        "--jobs",
        "2",
        "--",
        "sh",
        "-c",
        script,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    time.sleep(0.3)
    assert not _with_marker(marker)
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("machines-mutant-")]
    assert left == [], left


def test_an_action_asked_for_while_the_orphans_are_ended_waits_for_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI found the copy left once: the last block had counted itself out and was still
    ending the orphans when another command's thread asked for its copy to be removed;
    that ran at once, and the orphan, not yet killed, wrote it again."""
    from machines.mutation import reaping

    ending = threading.Event()
    order: list[str] = []
    real = reaping._end_all

    def slow_end_all(doomed: object) -> None:
        ending.set()
        time.sleep(0.3)
        order.append("orphans ended")
        real(doomed)  # type: ignore[arg-type]

    monkeypatch.setattr(reaping, "_end_all", slow_end_all)

    def last_block() -> None:
        with reaping.reaping():
            pass

    thread = threading.Thread(target=last_block)
    thread.start()
    assert ending.wait(10)
    reaping.when_ended(lambda: order.append("copy removed"))
    thread.join(10)
    assert order == ["orphans ended", "copy removed"]


def test_sigterm_to_the_catalogs_mutate_removes_its_copy(tmp_path: Path) -> None:
    """Outsider batch 38 (c U3): ``machines mutate`` with the bundled catalog handled
    Ctrl-C but not SIGTERM (what a cancelled CI job sends): it ended at once and left the
    mutant's temporary copy of the definitions in $TMPDIR. SIGTERM now ends it as Ctrl-C."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temporary)}
    env.pop("MACHINES_SPEC_DIR", None)
    ids = ["outcome-auto-exit-indeterminate", "outcome-reclaim-by-worker", "outcome-terminal-exit"]
    process = subprocess.Popen(
        [sys.executable, "-m", "machines", "mutate", *ids],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not list(temporary.glob("mutant-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(temporary.glob("mutant-*")), "no mutant's copy was made"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, (process.returncode, err.decode()[-2000:])
    assert list(temporary.iterdir()) == [], "the mutant's copy was left behind"
    assert b"Traceback" not in err, err.decode()[-2000:]
