"""What a user does, from the built wheel, in a project of their own outside this checkout.

The package is built as a release is (``python -m build``: the sdist, then the wheel from
the sdist), once per run: ``.ci/run`` builds it for its first Quick start and hands it here
in ``$MACHINES_TEST_DIST``; without it, this module builds its own. The wheel is installed
into a fresh virtual environment with what a user adds themselves (pytest). The user's
project is ``tests/user_project``, copied to a temporary folder: a refund lifecycle of their
own (``specs/refund.yaml``, with a person's approval and an unknown-outcome state), their
own service for it on a SQLite table (``refunds.py``), its conformance test
(``test_refunds.py``) and an mkdocs site (``mkdocs.yml`` with the ``machines`` plugin).
From that folder the test runs what the user runs: ``machines check`` (and ``--format
json``), ``mkdocs build --strict``, pytest on the conformance test (passing, then the
conformance guide's ``test_lenient.py`` failing with the report the guide shows), and
``machines mutate --spec-dir specs -- python -m pytest ...`` with its kill table. Nothing of
this checkout is on the path: the user's Python must import ``machines`` from the virtual
environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.guide_output import CONFORMANCE_GUIDE, assert_shows, guide_blocks

ROOT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).resolve().parent / "user_project"
TIMEOUT = 900

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Run:
    """One command's exit code and output."""

    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> Run:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=TIMEOUT
    )
    return Run(done.returncode, done.stdout, done.stderr)


def _users_environment() -> dict[str, str]:
    """The environment of a user's shell: nothing that points at this checkout or at a
    mutant, and the suites' derandomized ``ci`` profile, so a failure replays."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "MACHINES_SPEC_DIR", "MACHINES_MUTANT", "VIRTUAL_ENV")
    }
    env["HYPOTHESIS_PROFILE"] = "ci"
    return env


@dataclass(frozen=True)
class User:
    """A user's project and the virtual environment it runs in."""

    project: Path
    bin: Path
    env: dict[str, str]

    def run(self, program: str, *args: str) -> Run:
        return _run([str(self.bin / program), *args], self.project, self.env)


DIST_VARIABLE = "MACHINES_TEST_DIST"
"""A folder holding the sdist and the wheel ``.ci/run`` built from this checkout."""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(DIST_VARIABLE)
    if given:
        return built_from_this_checkout(Path(given))
    out = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], out)
    assert built.code == 0, built
    return out


def built_from_this_checkout(folder: Path) -> Path:
    """``folder``, once its wheel is known to hold this checkout's package: every module
    and definition byte for byte (a stale wheel would test another version)."""
    wheels = sorted(folder.glob("effect_machines-*.whl"))
    assert len(wheels) == 1, f"${DIST_VARIABLE}={folder} must hold one wheel, not {wheels}"
    with zipfile.ZipFile(wheels[0]) as archive:
        packed = {name: archive.read(name) for name in archive.namelist()}
    sources = [*(ROOT / "machines").rglob("*.py"), *(ROOT / "spec").glob("*")]
    for source in sources:
        relative = source.relative_to(ROOT).as_posix()
        name = "machines/_spec/" + source.name if relative.startswith("spec/") else relative
        assert packed.get(name) == source.read_bytes(), (
            f"${DIST_VARIABLE}: {name} in {wheels[0].name} is not this checkout's; rebuild it"
        )
    return folder


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("effect_machines-*.whl")
    return found


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> User:
    home = tmp_path_factory.mktemp("user")
    env_dir = home / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    env = _users_environment()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    installed = _run(
        [str(bin_dir / "pip"), "install", "-q", f"{wheel}[testing,site]", "pytest"], home, env
    )
    assert installed.code == 0, installed
    project = home / "refund-service"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "site"))
    found = _run(
        [str(bin_dir / "python"), "-c", "import machines; print(machines.__file__)"],
        project,
        env,
    )
    assert found.code == 0, found
    assert Path(found.out.strip()).is_relative_to(env_dir), found.out
    return User(project, bin_dir, env)


def test_the_sdist_and_the_wheel_hold_what_a_user_needs(dist: Path, wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for machine in ("effect", "outcome", "node", "request"):
        assert f"machines/_spec/{machine}.yaml" in names
    assert "machines/_spec/machine.schema.json" in names
    assert "machines/py.typed" in names
    for report in ("check", "diff", "audit", "explore"):
        assert f"machines/cli/schemas/{report}.schema.json" in names
    assert not any(n.startswith(("code_mutants/", "tests/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[mkdocs.plugins]" in text and "machines.render.mkdocs_plugin" in text
    assert "[console_scripts]" in text
    (sdist,) = dist.glob("effect_machines-*.tar.gz")
    assert sdist.stat().st_size > 0


def test_the_bundled_definitions_check_from_the_wheel(user: User) -> None:
    """In a project whose specs/ nothing names, check refuses to take the bundled
    definitions for the user's (outsider batch 28, b 4: a broken definition of the user's
    passed CI); named by MACHINES_SPEC_DIR, the wheel's own copy checks clean."""
    refused = user.run("machines", "check")
    assert refused.code == 2 and "holds definitions, but nothing names them" in refused.err
    found = user.run(
        "python", "-c", "from machines.spec.loader import *; print(bundled_spec_dir())"
    )
    named = User(user.project, user.bin, {**user.env, "MACHINES_SPEC_DIR": found.out.strip()})
    checked = named.run("machines", "check")
    assert checked.code == 0, checked
    assert "OK: no violations" in checked.out
    assert "_spec" in checked.out  # the wheel's own copy, not this checkout's spec/
    as_module = named.run("python", "-m", "machines", "check", "--max-nodes", "2")
    assert as_module.code == 0, as_module
    version = user.run("machines", "--version")
    assert version.code == 0 and version.out.strip() == "machines 0.1.0", version


def test_the_users_definition_checks(user: User) -> None:
    checked = user.run("machines", "check", "--spec-dir", "specs")
    assert checked.code == 0, checked
    assert "refund" in checked.out and "OK: no violations" in checked.out
    as_json = user.run("machines", "check", "--spec-dir", "specs", "--format", "json")
    assert as_json.code == 0, as_json
    report = json.loads(as_json.out)
    assert [m["name"] for m in report["machines"]] == ["refund"]
    assert report["violations"] == [] and report["exit_code"] == 0


def test_a_broken_definition_fails_check_naming_file_and_line(user: User, tmp_path: Path) -> None:
    broken = tmp_path / "specs"
    shutil.copytree(user.project / "specs", broken)
    path = broken / "refund.yaml"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    (number,) = [n for n, line in enumerate(lines, 1) if "trigger: found_refunded" in line]
    lines[number - 1] = lines[number - 1].replace("actor: approver", "actor: service")
    path.write_text("".join(lines), encoding="utf-8")
    checked = user.run("machines", "check", "--spec-dir", str(broken))
    assert checked.code == 1, checked
    assert f"refund.yaml:{number}: refund: [people-settle-unknown]" in checked.out, checked
    as_json = user.run("machines", "check", "--spec-dir", str(broken), "--format", "json")
    assert as_json.code == 1, as_json
    violation, also, human = json.loads(as_json.out)["violations"]
    assert (violation["rule"], violation["line"]) == ("people-settle-unknown", number)
    assert (also["rule"], also["line"]) == ("fail-closed-exits", number)
    assert (human["rule"], human["line"]) == ("needs-human-exits", number)
    assert violation["file"].endswith("refund.yaml")


def test_the_users_site_builds_with_the_plugin(user: User) -> None:
    built = user.run("mkdocs", "build", "--strict", "--site-dir", "site")
    assert built.code == 0, built
    site = user.project / "site"
    page = next(site.glob("machines/refund*/index.html"), None) or next(
        site.glob("machines/refund*.html")
    )
    html = page.read_text(encoding="utf-8")
    assert "Customer refund" in html and "awaiting_approval" in html
    assert list(site.glob("**/refund.svg")), "the diagram is drawn"
    rules = next(site.glob("machines/rules*/index.html"), None) or next(
        site.glob("machines/rules*.html")
    )
    assert "people-settle-unknown" in rules.read_text(encoding="utf-8")
    assert not (user.project / "docs" / "machines").exists(), "nothing is written into docs/"


def test_the_conformance_suite_passes_and_fails_as_the_guide_shows(user: User) -> None:
    """The user's conformance test passes; the conformance guide's ``test_lenient.py`` (the
    same service with one bug) fails with the report the guide shows, shrunk: this is the
    one shrunk failing conformance run of a test run (``tests/guide_output.py``)."""
    passed = user.run("python", *PYTEST, "test_refunds.py")
    assert passed.code == 0, passed
    blocks = guide_blocks(CONFORMANCE_GUIDE)
    (user.project / "test_lenient.py").write_text(blocks["test_lenient.py"], encoding="utf-8")
    failed = user.run("python", *PYTEST, "test_lenient.py")
    assert failed.code == 1, failed
    assert_shows(blocks["output"], failed.out, rule="illegal-move-refused")


SAMPLE = (
    "*:drop-transition:approve",
    "*:add-actor:approve:service",
    "*:drop-guard:hold",
    "*:drop-tag:awaiting_approval:needs-human",
    "*:make-terminal:sending",
    "*:make-non-terminal:refunded",
    "*:change-dest:confirm:declined",
    "*:add-transition:requested:refunded",
)
"""One mutant of every operator (the whole table, 86 mutants, is
``test_every_mutant_of_the_users_definition_is_killed``, under ``--thorough``)."""

PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider")


def test_spec_mutation_prints_a_kill_table_and_finds_the_hole(user: User) -> None:
    """One ``machines mutate`` run over a mutant of every operator, with the user's
    conformance test but not the test of their queues: every mutant is killed (by the
    definition's own rules before any test, or by the test) except those that drop a tag
    the service reads, which nothing but the queue test notices: they survive, listed as
    holes, and the command exits 1."""
    listed = user.run("machines", "mutate", "--spec-dir", "specs", "--list")
    assert listed.code == 0, listed
    assert len(listed.out.splitlines()) > 50, listed
    only = [flag for glob in SAMPLE for flag in ("--only", glob)]
    tests = ["python", *PYTEST, "-x", "test_refunds.py"]
    mutated = user.run("machines", "mutate", "--spec-dir", "specs", *only, "--", *tests)
    assert mutated.code == 1, mutated
    assert "baseline: the tests pass on the unmutated definitions" in mutated.out
    rows = [line for line in mutated.out.splitlines() if line.startswith("refund.yaml:")]
    assert len(rows) == len(SAMPLE), mutated
    holes = [row for row in rows if " SURVIVED " in row]
    assert len(holes) == 1 and ":drop-tag:" in holes[0], mutated
    assert all(" killed " in row for row in rows if ":drop-tag:" not in row), mutated
    assert any("the definition's rules" in row for row in rows)  # caught before any test ran
    assert any("exit 1" in row for row in rows)  # caught by the user's tests
    assert "SURVIVED" in mutated.out.split("killed ")[-1], mutated  # the summary lists them
    assert (user.project / "specs" / "refund.yaml").read_text(encoding="utf-8") == (
        PROJECT / "specs" / "refund.yaml"
    ).read_text(encoding="utf-8"), "the user's definitions are never touched"


@pytest.mark.thorough
def test_every_mutant_of_the_users_definition_is_killed(user: User) -> None:
    """The guide's whole table: with the conformance test and the queue test, every one
    of ``refund.yaml``'s mutants is killed, and the command exits 0."""
    tests = ["python", *PYTEST, "-x", "test_refunds.py", "test_queues.py"]
    mutated = user.run("machines", "mutate", "--spec-dir", "specs", "--", *tests)
    print(mutated.out)
    assert mutated.code == 0, mutated
    rows = [line for line in mutated.out.splitlines() if line.startswith("refund.yaml:")]
    assert len(rows) >= 80 and all(" killed " in row for row in rows), mutated


def test_a_trigger_typo_in_the_users_code_fails_mypy_with_the_typed_names(user: User) -> None:
    """Issue 29: triggers are found by name at run time; the typed names the wheel's
    ``machines export --format python`` writes make a typo a mypy error in the user's own
    project and environment."""
    installed = user.run("pip", "install", "-q", "mypy")
    assert installed.code == 0, installed
    names = user.run("machines", "export", "specs/refund.yaml", "--format", "python")
    assert names.code == 0, names
    (user.project / "refund_names.py").write_text(names.out, encoding="utf-8")
    code = (
        "import machines\n"
        "from refund_names import Refund, RefundActor\n"
        "refund = Refund(machines.load('specs/refund.yaml').machine(size='small'))\n"
        "refund.send(actor=RefundActor.SERVICE)\n"
    )
    (user.project / "uses_names.py").write_text(code, encoding="utf-8")
    (user.project / "typo.py").write_text(code.replace(".send(", ".sned("), encoding="utf-8")
    clean = user.run("mypy", "--strict", "--no-incremental", "uses_names.py", "refund_names.py")
    assert clean.code == 0, clean
    typo = user.run("mypy", "--strict", "--no-incremental", "typo.py", "refund_names.py")
    assert typo.code == 1 and '"Refund" has no attribute "sned"' in typo.out, typo
