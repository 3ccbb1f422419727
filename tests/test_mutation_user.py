"""Spec mutation of a user's own tests (issue 16): ``machines mutate --spec-dir DIR --
COMMAND`` mutates the user's definitions with generic operators, one change at a time, and
runs the user's own test command against each. A strong conformance check kills every
mutant, a weaker one leaves survivors (exit 1), a command that fails on the unmutated
definitions is refused (exit 2), and the user's directory is never touched.

The test commands are the user's kind: scripts that load ``refund.yaml`` from
``$MACHINES_SPEC_DIR`` through ``spec_dir_under_test`` and compare it with a hard-coded
table of their implementation's moves. Each run of one costs a Python start (~0.4 s), so
most tests select a few mutants with ``--only``."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from machines.cli import main
from machines.errors import SpecError
from machines.mutation.edits import OPERATORS
from machines.mutation.operators import mutants_of
from machines.mutation.user import plan
from machines.spec.files import MUTANT_VARIABLE, SPEC_DIR_VARIABLE
from machines.spec.loader import bundled_spec_dir

ROOT = Path(__file__).resolve().parent.parent
REFUND = ROOT / "tests" / "user_project" / "specs" / "refund.yaml"

LOAD = """\
import os, sys
import machines
from machines.spec.files import spec_dir_under_test

spec = machines.load(spec_dir_under_test("specs") / "refund.yaml")
"""

STRONG = (
    LOAD
    + """
MOVES = {
    ("requested", "send"): ("sending", {"service"}, {"size": {"small"}}),
    ("requested", "hold"): ("awaiting_approval", {"service"}, {"size": {"large"}}),
    ("awaiting_approval", "approve"): ("sending", {"approver"}, {}),
    ("awaiting_approval", "reject"): ("declined", {"approver"}, {}),
    ("sending", "confirm"): ("refunded", {"service"}, {}),
    ("sending", "decline"): ("declined", {"service"}, {}),
    ("sending", "time_out"): ("unknown", {"service"}, {}),
    ("unknown", "found_refunded"): ("refunded", {"approver"}, {}),
    ("unknown", "found_not_refunded"): ("declined", {"approver"}, {}),
}
TERMINAL = {"refunded", "declined"}
TAGS = {
    "awaiting_approval": {"needs-human"},
    "sending": {"effect-started"},
    "unknown": {"effect-started", "fail-closed", "needs-human"},
}
seen = {
    (t.source, t.trigger): (t.dest, set(t.actors), {k: set(v) for k, v in t.when.items()})
    for t in spec.transitions
}
problems = [k for k in set(seen) | set(MOVES) if seen.get(k) != MOVES.get(k)]
if {n for n, s in spec.states.items() if s.terminal} != TERMINAL:
    problems.append("terminal states")
if {n: set(s.tags) for n, s in spec.states.items() if s.tags} != TAGS:
    problems.append("tags")
print("refund conformance:", problems or "ok")
sys.exit(1 if problems else 0)
"""
)
"""Compares every move (destination, actors, guard), the terminal states and the tags."""

WEAK = (
    LOAD
    + """
DEST = {("requested", "send"): "sending", ("awaiting_approval", "approve"): "sending",
        ("sending", "confirm"): "refunded"}
seen = {(t.source, t.trigger): t.dest for t in spec.transitions}
sys.exit(0 if all(seen.get(k) == d for k, d in DEST.items()) else 1)
"""
)
"""Checks only where three of the moves lead: blind to actors, guards, tags, new moves."""

SPECS = ["--spec-dir", "specs"]

A_FEW = [
    "--only",
    "*:drop-transition:approve",
    "--only",
    "*:add-actor:send:approver",
    "--only",
    "*:drop-guard:*",
    "--only",
    "*:change-dest:reject:refunded",
    "--only",
    "*:make-terminal:sending",
    "--only",
    "*:drop-tag:unknown:fail-closed",
    "--only",
    "*:add-transition:requested:refunded",
]
"""One mutant or two of most operators, some of them caught by the definition's rules."""


@pytest.fixture
def spec_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's directory of definitions (a copy of tests/user_project/specs), with the
    commands run in ``tmp_path`` on this checkout's package."""
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REFUND, specs / "refund.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv(SPEC_DIR_VARIABLE, raising=False)
    monkeypatch.delenv(MUTANT_VARIABLE, raising=False)
    return specs


def script(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return [sys.executable, str(path)]


def mutate(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(["mutate", *argv])
    except SystemExit as stop:  # argparse refusing the command line
        assert isinstance(stop.code, int)
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# -- the mutants ------------------------------------------------------------------------------


def test_the_mutants_of_a_users_definition() -> None:
    """Every operator that applies to refund.yaml makes mutants, each with a unique id
    naming the file and line, each a valid definition document that differs from the
    original."""
    mutants = mutants_of(REFUND)
    original = yaml.safe_load(REFUND.read_text(encoding="utf-8"))
    assert len(mutants) == 86
    assert len({m.id for m in mutants}) == len(mutants)
    assert set(Counter(m.operator for m in mutants)) == set(OPERATORS) - {
        "drop-source",
        "drop-actor",
        "drop-guard-variable",
        "narrow-guard",
        "widen-guard",  # refund's guards name one of two sizes: widening is dropping
    }
    lines = REFUND.read_text(encoding="utf-8").splitlines()
    for m in mutants:
        file, line, operator, _ = m.id.split(":", 3)
        assert (file, int(line), operator) == (m.file, m.line, m.operator)
        assert yaml.safe_load(m.text()) != original, m.id
    approve = next(m for m in mutants if m.id.endswith(":drop-transition:approve"))
    assert "trigger: approve" in lines[approve.line - 1]


def test_guard_operators_on_a_guard_of_two_variables(tmp_path: Path) -> None:
    """Widening, narrowing and dropping one variable of a guard: each changes what the
    definition allows; widening a variable to every value it takes is dropping it, so it
    is left out as the same mutant (size takes two values)."""
    doc = yaml.safe_load(REFUND.read_text(encoding="utf-8"))
    doc["context"]["channel"] = {
        "values": ["card", "bank", "wallet", "cash"],
        "description": "How.",
    }
    send = doc["transitions"][0]
    send["when"] = {"size": ["small"], "channel": ["card", "bank"]}
    path = tmp_path / "refund.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    by_id = {m.id.split(":", 2)[2]: m for m in mutants_of(path)}
    guards = {i for i in by_id if "guard" in i and ":send" in i}
    assert guards == {
        "drop-guard:send",
        "drop-guard-variable:send:size",
        "drop-guard-variable:send:channel",
        "widen-guard:send:channel=wallet",
        "widen-guard:send:channel=cash",
        "narrow-guard:send:channel=card",
        "narrow-guard:send:channel=bank",
    }  # widen-guard:send:size=large is drop-guard-variable:send:size
    when = yaml.safe_load(by_id["narrow-guard:send:channel=card"].text())["transitions"][0]
    assert when["when"] == {"size": ["small"], "channel": ["bank"]}


def test_the_operators_work_on_any_definition() -> None:
    """The bundled definitions (a derivation, many-source and many-actor transitions)
    mutate too, with unique ids."""
    mutants = plan(bundled_spec_dir())
    assert len({m.id for m in mutants}) == len(mutants) > 500
    assert {"drop-source", "drop-actor", "add-actor"} <= {m.operator for m in mutants}


def test_a_definition_that_does_not_load_is_not_mutated(tmp_path: Path) -> None:
    broken = REFUND.read_text(encoding="utf-8").replace("dest: refunded", "dest: nowhere", 1)
    (tmp_path / "refund.yaml").write_text(broken, encoding="utf-8")
    with pytest.raises(SpecError, match="must load before they are mutated"):
        plan(tmp_path)


# -- the command ------------------------------------------------------------------------------


def test_a_strong_conformance_check_kills_every_mutant(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(spec_dir)
    command = script(tmp_path, "check_refunds.py", STRONG)
    code, out, _ = mutate(["--spec-dir", "specs", *A_FEW, "--", *command], capsys)
    assert code == 0, out
    assert "baseline: the tests pass on the unmutated definitions" in out
    assert "SURVIVED" not in out
    assert "refund.yaml:48:drop-transition:approve" in out
    rows = [line for line in out.splitlines() if line.startswith("refund.yaml:")]
    assert len(rows) == 8 and all("  killed  " in r for r in rows)
    assert "caught by the definition's own rules: refund: [terminal-final]" in out
    assert "caught by the definition's own rules: refund: [large-needs-approval]" in out
    assert "killed 8/8 mutants: 6 by the tests, 2 by the definitions' own rules" in out
    assert snapshot(spec_dir) == before


def test_a_weak_check_leaves_survivors(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = script(tmp_path, "check_some.py", WEAK)
    code, out, _ = mutate(["--spec-dir", "specs", *A_FEW, "--", *command], capsys)
    assert code == 1
    survivors = out.split("SURVIVED 5:", 1)[1]
    for mutant in (
        "refund.yaml:44:add-actor:send:approver: send (requested -> sending) "
        "may also be fired by approver",
        "refund.yaml:47:drop-guard:hold",
        "refund.yaml:50:change-dest:reject:refunded",
        "refund.yaml:35:drop-tag:unknown:fail-closed",
        "refund.yaml:25:add-transition:requested:refunded",
    ):
        assert mutant in survivors
    assert "killed 3/8 mutants: 1 by the tests, 2 by the definitions' own rules" in out


def test_a_command_that_fails_unmutated_is_refused(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline: a command that fails on the unmutated definitions would kill every
    mutant, so nothing is judged (exit 2) unless --no-baseline says to go on."""
    failing = script(tmp_path, "fails.py", "print('my tests fail'); raise SystemExit(3)")
    code, out, err = mutate(["--spec-dir", "specs", "--", *failing], capsys)
    assert code == 2 and "refund.yaml:" not in out
    assert "the tests must pass on the unmutated definitions first" in err
    assert "failed (exit 3)" in err and "my tests fail" in err
    code, out, _ = mutate(
        [*SPECS, "--no-baseline", "--only", "*:drop-transition:approve", "--", *failing],
        capsys,
    )
    assert code == 0 and "baseline" not in out and "exit 3" in out


def test_the_command_sees_the_mutant(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run has MACHINES_SPEC_DIR at a copy holding the mutated file, and
    MACHINES_MUTANT naming it; the baseline has the unmutated copy and no mutant."""
    log = tmp_path / "seen.log"
    spy = script(
        tmp_path,
        "spy.py",
        "import os, pathlib, yaml\n"
        f"d = pathlib.Path(os.environ[{SPEC_DIR_VARIABLE!r}])\n"
        f"m = os.environ.get({MUTANT_VARIABLE!r}, '-')\n"
        "h = pathlib.Path(os.environ['HYPOTHESIS_STORAGE_DIRECTORY'])\n"
        "assert h.parent == d.parent, (h, d)  # each run's own example database\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    doc = yaml.safe_load((d / 'refund.yaml').read_text())\n"
        "    t = [x['trigger'] for x in doc['transitions']]\n"
        "    f.write(f\"{d}|{m}|{'approve' in t}\\n\")\n",
    )
    code, out, _ = mutate(
        ["--spec-dir", "specs", "--only", "*:drop-transition:approve", "--", *spy], capsys
    )
    assert code == 1  # the spy passes everything: the mutant survives
    baseline, mutant = (line.split("|") for line in log.read_text().splitlines())
    assert baseline[1:] == ["-", "True"]
    assert mutant[1:] == [
        "refund.yaml:48:drop-transition:approve: the transition approve "
        "(awaiting_approval -> sending) removed",
        "False",
    ]
    for directory in (baseline[0], mutant[0]):
        assert Path(directory).name == "specs" and Path(directory) != spec_dir
        assert not Path(directory).exists()  # the temporary copy is gone
    assert "the tests killed no mutant: do they load the definitions from" in out


def test_a_hang_counts_as_killed(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hang = script(
        tmp_path,
        "hang.py",
        f"import os, time\nif os.environ.get({MUTANT_VARIABLE!r}):\n    time.sleep(60)\n",
    )
    started = time.perf_counter()
    code, out, _ = mutate(
        [*SPECS, "--timeout", "1", "--only", "*:drop-tag:sending:*", "--", *hang],
        capsys,
    )
    assert time.perf_counter() - started < 20
    assert code == 0
    assert "timeout (1 s)" in out and "1 of them hung past the timeout" in out


def test_list_shows_the_mutants_without_running(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    command = script(tmp_path, "mark.py", f"open({str(marker)!r}, 'w')")
    code, out, _ = mutate(["--spec-dir", "specs", "--list", "--", *command], capsys)
    assert code == 0 and not marker.exists()
    lines = out.splitlines()
    assert lines[-1] == "86 mutants of 1 definition" and len(lines) == 87
    assert any(line.startswith("refund.yaml:48:drop-transition:approve  ") for line in lines)
    code, out, _ = mutate(["--spec-dir", "specs", "--list", "--only", "*:drop-tag:*"], capsys)
    assert code == 0 and out.splitlines()[-1] == "5 mutants of 1 definition"
    code, out, _ = mutate([*SPECS, "--list", "--skip", "*:change-dest:*"], capsys)
    assert code == 0 and out.splitlines()[-1] == "41 mutants of 1 definition"
    assert ":change-dest:" not in out
    code, out, _ = mutate(
        [*SPECS, "--list", "--only", "*:drop-tag:*", "--skip", "*:unknown:*"], capsys
    )
    assert code == 0 and out.splitlines()[-1] == "2 mutants of 1 definition"


def test_pytest_as_the_command(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's own pytest run is a command like any other; one that collects no test
    (pytest's exit 5) is refused at the baseline: it would pass every mutant."""
    body = STRONG.replace("sys.exit(1 if problems else 0)", "assert not problems")
    test = "def test_refund_conformance():\n" + "".join(
        f"    {line}\n" for line in body.splitlines()
    )
    (tmp_path / "test_refunds.py").write_text(test, encoding="utf-8")
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    code, out, _ = mutate(
        [*SPECS, "--only", "*:add-actor:send:*", "--", *pytest_command, "test_refunds.py"],
        capsys,
    )
    assert code == 0 and "exit 1" in out, out
    (tmp_path / "test_nothing.py").write_text("", encoding="utf-8")
    code, _, err = mutate(["--spec-dir", "specs", "--", *pytest_command, "test_nothing.py"], capsys)
    assert code == 2 and "pytest's code for 'no tests ran'" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--spec-dir", "nowhere", "--", "true"], "not a directory of definitions"),
        (["--spec-dir", "specs/refund.yaml", "--", "true"], "not a directory of definitions"),
        (["--spec-dir", "empty", "--", "true"], "no *.yaml or *.yml definitions"),
        (["--spec-dir", "broken", "--", "true"], "must load before they are mutated"),
        (["--spec-dir", "specs"], "give the test command after --"),
        (["--spec-dir", "specs", "--", "no-such-command-xyz"], "is not found"),
        (["--spec-dir", "specs", "--only", "nope", "--", "true"], "matches no mutant"),
        (["--spec-dir", "specs", "--skip", "nope", "--", "true"], "--skip 'nope' matches no"),
        ([*SPECS, "--only", "*:drop-tag:*", "--skip", "*tag*", "--", "true"], "leave no mutant"),
        (["--spec-dir", "specs", "--examples", "5", "--", "true"], "--examples is for"),
        (["--spec-dir", "specs", "--timeout", "0", "--", "true"], "must be a whole number"),
        (["--timeout", "5"], "--timeout is for your own definitions"),
        (["--only", "*"], "specs holds definitions, but nothing names them"),  # batch 30
        (["--no-baseline"], "--no-baseline is for your own definitions"),
        (["--skip", "*"], "specs holds definitions, but nothing names them"),
        (["--jobs", "2"], "--jobs is for your own definitions"),
        (["--spec-dir", "specs", "--jobs", "0", "--", "true"], "must be a whole number"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_usage_errors(
    argv: list[str], said: str, spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (spec_dir.parent / "empty").mkdir()
    broken = spec_dir.parent / "broken"
    broken.mkdir()
    (broken / "refund.yaml").write_text("machine: [", encoding="utf-8")
    code, out, err = mutate(argv, capsys)
    assert code == 2 and said in err and "Traceback" not in err
    assert "refund.yaml:" not in out


def test_the_mutant_is_the_original_with_one_change(spec_dir: Path) -> None:
    """The dumped mutant keeps everything but its change (what the user's tests compare)."""
    original = yaml.safe_load(REFUND.read_text(encoding="utf-8"))
    mutant = next(m for m in plan(spec_dir) if m.operator == "add-actor")
    expected = copy.deepcopy(original)
    expected["transitions"][0]["actor"] = ["service", "approver"]
    assert yaml.safe_load(mutant.text()) == expected
    assert os.listdir(spec_dir) == ["refund.yaml"]


def test_the_guide_lists_every_operator() -> None:
    """docs/guide/mutate-your-tests.md shows each operator as OPERATORS says it."""
    guide = (ROOT / "docs" / "guide" / "mutate-your-tests.md").read_text(encoding="utf-8")
    rows = {line for line in guide.splitlines() if line.startswith("| `")}
    assert rows == {f"| `{name}` | {said} |" for name, said in OPERATORS.items()}


@pytest.mark.parametrize("kind", ["a link to /dev/zero", "a link to a file", "a FIFO"])
def test_a_special_file_in_the_directory_is_refused_before_copying(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """issue 27 item 10: a link to ``/dev/zero`` in the directory of definitions was copied
    without end ("cannot copy the directory of definitions: Error")."""
    odd = spec_dir / "notes" / "odd"
    odd.parent.mkdir()
    if kind == "a FIFO":
        os.mkfifo(odd)
    else:
        os.symlink("/dev/zero" if "zero" in kind else spec_dir / "refund.yaml", odd)
    command = script(tmp_path, "passes.py", "pass")
    started = time.perf_counter()
    code, out, err = mutate(["--spec-dir", "specs", *A_FEW, "--", *command], capsys)
    assert code == 2 and "refund.yaml:" not in out
    assert "specs/notes/odd is a " in err and ("symbolic link" in err or "special file" in err)
    assert time.perf_counter() - started < 30


LEAVES_A_SLEEPER = """
import os, subprocess, sys
marker = sys.argv[1]
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
if os.environ.get("HANG"):
    import time
    time.sleep(300)
"""


def sleepers(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid.isdigit() and marker.encode() in cmdline and b"time.sleep" in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("jobs", ["1", "3"])
@pytest.mark.parametrize("ending", ["the command ends", "SIGTERM to mutate", "SIGHUP to mutate"])
def test_nothing_the_command_started_outlives_mutate(
    spec_dir: Path, tmp_path: Path, ending: str, jobs: str
) -> None:
    """issue 27 item 9: processes the command left in the background outlived mutate, and
    SIGTERM (a CI timeout) left the command running and the temporary copy behind; with
    --jobs, every command running at once is ended. Batch 17 (b13): so did SIGHUP (a
    closed terminal or SSH session)."""
    marker = f"machines-sleeper-{os.getpid()}-{len(ending)}-{jobs}"
    command = [*script(tmp_path, "leaves.py", LEAVES_A_SLEEPER), marker]
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": str(ROOT)}
    if ending != "the command ends":
        env["HANG"] = "1"
    argv = [
        sys.executable,
        "-m",
        "machines",
        "mutate",
        *SPECS,
        *A_FEW,
        "--jobs",
        jobs,
        "--",
        *command,
    ]
    process = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    if ending != "the command ends":
        deadline = time.monotonic() + 60
        while not sleepers(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sleepers(marker), "the command never started"
        process.send_signal(signal.SIGTERM if ending.startswith("SIGTERM") else signal.SIGHUP)
    _, err = process.communicate(timeout=120)
    time.sleep(0.2)
    left = sleepers(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} background processes outlived mutate"
    assert list(temporary.iterdir()) == [], "the temporary copy was left behind"
    assert b"Traceback" not in err, err.decode()[-2000:]


def _verdicts(out: str) -> list[tuple[str, str, str]]:
    """Each row's mutant, verdict and what killed it (not its seconds), sorted."""
    rows = [line.split() for line in out.splitlines() if line.startswith("refund.yaml:")]
    return sorted((r[0], r[1], r[2]) for r in rows)


@pytest.mark.parametrize("check", ["STRONG", "WEAK"])
def test_jobs_give_the_verdicts_of_a_serial_run(
    check: str, spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = script(tmp_path, "check.py", STRONG if check == "STRONG" else WEAK)
    code, out, err = mutate([*SPECS, *A_FEW, "--", *command], capsys)
    parallel_code, parallel, parallel_err = mutate(
        [*SPECS, *A_FEW, "--jobs", "4", "--", *command], capsys
    )
    assert (parallel_code, _verdicts(parallel)) == (code, _verdicts(out))
    assert parallel.split("\n\nkilled ", 1)[1] == out.split("\n\nkilled ", 1)[1]
    for said in (err, parallel_err):
        lines = [line for line in said.splitlines() if line.startswith("mutate: ")]
        assert (
            len(lines) == 8
            and "left" in lines[0]
            and lines[-1].startswith("mutate: 8/8 mutants in")
        ), said


def test_run_refuses_a_count_of_jobs_that_is_not_one(spec_dir: Path) -> None:
    from machines.errors import InvalidArgument
    from machines.mutation.user import run

    for jobs in (0, "2", 1.5, True):
        with pytest.raises(InvalidArgument, match="jobs must be a whole number"):
            run([], spec_dir, ["true"], jobs=jobs)  # type: ignore[arg-type]


def test_a_test_command_not_on_the_path_is_named_as_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 35 (c, noted): ``mutate -- pytset -q`` said only "unknown
    mutation(s) pytset, -q": a misspelt command read as catalog ids. The message now says
    the command is not on the PATH."""
    monkeypatch.chdir(tmp_path)
    assert main(["mutate", "--", "pytset-not-a-program", "-q"]) == 2
    err = capsys.readouterr().err
    assert "'pytset-not-a-program' is your test command, it is not a program on the PATH" in err
