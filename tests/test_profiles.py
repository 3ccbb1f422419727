"""The suites' profiles are Hypothesis profiles: chosen the standard ways, they size a
suite's ``TestCase`` collected the guide's way (runs and steps), and ``scaled`` derives its
factors from the active profile's own settings (issue 14 item 5)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from machines.errors import InvalidArgument, UnknownName
from machines.testing import profiles
from machines.testing.profiles import load_profile, scaled
from tests.garbage import garbage

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = """\
from hypothesis import settings

from machines.testing.profiles import load_profile

settings.register_profile("mine", max_examples=7, stateful_step_count=3)
load_profile()  # the guide's line: HYPOTHESIS_PROFILE, or what --hypothesis-profile chose
"""

SUITE = """\
import json
import re
import os

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, rule

from machines.testing.profiles import scaled


class Tiny(RuleBasedStateMachine):
    \"\"\"Records, per run, the steps it took and the profile that was active.\"\"\"

    def __init__(self):
        super().__init__()
        self.steps = 0

    @rule()
    def step(self):
        self.steps += 1

    def teardown(self):
        with open(os.environ["TINY_LOG"], "a") as log:
            log.write(json.dumps([settings.get_current_profile_name(), self.steps]) + "\\n")


TestTiny = Tiny.TestCase  # the guide's way


def test_scaled():
    sized = scaled(10, 20)
    with open(os.environ["TINY_SCALED"], "w") as out:
        json.dump([sized.max_examples, sized.stateful_step_count], out)
"""


def run_tiny_suite(tmp_path: Path, *options: str, profile: str | None) -> dict[str, Any]:
    """A user's project (the guide's conftest and a suite's ``TestCase``) run by pytest in
    a fresh process: what the suite observed (runs, longest run, active profile) and what
    ``scaled(10, 20)`` gave there."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_tiny.py").write_text(SUITE)
    log, sized = tmp_path / "runs.jsonl", tmp_path / "scaled.json"
    env = {k: v for k, v in os.environ.items() if k != profiles.ENV}
    env |= {"PYTHONPATH": str(ROOT), "TINY_LOG": str(log), "TINY_SCALED": str(sized)}
    if profile is not None:
        env[profiles.ENV] = profile
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    return {
        "runs": len(runs),
        "longest": max(steps for _, steps in runs),
        "profiles": {name for name, _ in runs},
        "scaled": tuple(json.loads(sized.read_text())),
    }


SIZES = {"dev": (50, 50), "ci": (50, 50), "thorough": (2000, 100)}


def _thorough_only(profile: str, way: str) -> tuple[pytest.MarkDecorator, ...]:
    """2,000 runs of 100 steps take seconds: the thorough profile chosen by
    ``--hypothesis-profile`` runs only under ``--thorough`` (the other way of choosing it,
    and that way of choosing the others, run in every run)."""
    return (pytest.mark.thorough,) if (profile, way) == ("thorough", "--hypothesis-profile") else ()


OTHER = {"dev": "thorough", "ci": "dev", "thorough": "ci"}
"""A different profile in ``HYPOTHESIS_PROFILE`` while ``--hypothesis-profile`` names one."""


WAYS = [
    pytest.param(profile, way, id=f"{profile}-{way}", marks=_thorough_only(profile, way))
    for profile in sorted(SIZES)
    for way in ("HYPOTHESIS_PROFILE", "--hypothesis-profile")
]


@pytest.mark.parametrize(("profile", "way"), WAYS)
def test_each_profile_sizes_a_suite_testcase_written_the_guides_way(
    tmp_path: Path, profile: str, way: str
) -> None:
    """issue 14 item 5: a profile chosen either standard way (``HYPOTHESIS_PROFILE`` read by
    ``load_profile()`` in the guide's conftest, or pytest's ``--hypothesis-profile``, which
    wins over the environment) sizes the suite's ``TestCase``: the suite counts the
    profile's runs, each up to the profile's steps; ``scaled`` multiplies by the same
    factors."""
    runs, steps = SIZES[profile]
    if way == "HYPOTHESIS_PROFILE":
        seen = run_tiny_suite(tmp_path, profile=profile)
    else:
        seen = run_tiny_suite(tmp_path, "--hypothesis-profile", profile, profile=OTHER[profile])
    assert seen["profiles"] == {profile}
    assert runs <= seen["runs"] <= runs * 1.02  # Hypothesis may replay a handful
    assert seen["longest"] == steps
    assert seen["scaled"] == (10 * runs // 100, 20 * steps // 50)


def test_a_users_own_profile_sizes_the_testcase_and_scales_the_same_way(tmp_path: Path) -> None:
    """issue 14 item 5: ``scaled`` reads the factors from the profile's settings, not its
    name: a profile of 7 runs of 3 steps gives the suite 7 runs of 3 steps, and
    ``scaled(10, 20)`` 10 * 7/100 runs of 20 * 3/50 steps (at least one of each)."""
    seen = run_tiny_suite(tmp_path, "--hypothesis-profile", "mine", profile=None)
    assert seen["profiles"] == {"mine"}
    assert 7 <= seen["runs"] <= 8 and seen["longest"] == 3
    assert seen["scaled"] == (1, 1)


@pytest.fixture
def restore_profile() -> Iterator[None]:
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


@pytest.mark.usefixtures("restore_profile")
def test_the_profiles_are_registered_with_hypothesis_and_report_one_bug() -> None:
    """issue 14 item 5: the three names are Hypothesis profiles with their sizes; one
    report per bug in each (a suite's rule and invariant both trip on one defect)."""
    for name, (runs, steps) in SIZES.items():
        profile = settings.get_profile(name)
        assert (profile.max_examples, profile.stateful_step_count) == (runs, steps)
        assert profile.report_multiple_bugs is False and profile.deadline is None
    assert settings.get_profile("ci").derandomize is True
    assert settings.get_profile("dev").derandomize is False


@pytest.mark.usefixtures("restore_profile")
def test_scaled_follows_the_active_profiles_settings() -> None:
    """issue 14 item 5: a registered profile of any name scales by its own sizes."""
    settings.register_profile("issue14-big", max_examples=300, stateful_step_count=150)
    for name, expected in (("dev", (5, 20)), ("thorough", (200, 40)), ("issue14-big", (30, 60))):
        assert load_profile(name) == name
        sized = scaled(10, 20)
        assert (sized.max_examples, sized.stateful_step_count) == expected
        assert sized.deadline is None


@pytest.mark.usefixtures("restore_profile")
def test_load_profile_chooses_name_then_environment_then_the_active_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 14 item 5: an explicit name wins, then ``HYPOTHESIS_PROFILE``, then the
    profile already active (``--hypothesis-profile``, Hypothesis's CI detection)."""
    monkeypatch.setenv(profiles.ENV, "thorough")
    assert load_profile("ci") == "ci"
    assert load_profile() == "thorough"
    monkeypatch.delenv(profiles.ENV)
    assert load_profile() == "thorough"  # kept: someone chose it before the conftest ran
    settings.load_profile("default")
    assert load_profile() == "dev"


@pytest.mark.usefixtures("restore_profile")
def test_under_machines_mutate_the_profile_does_not_shrink(monkeypatch: pytest.MonkeyPatch) -> None:
    """``machines mutate`` asks only whether the tests fail on a mutant: with
    ``$MACHINES_MUTANT`` set, the chosen profile loads without the shrink phase and without
    the example database, and nothing else of it changes."""
    from hypothesis import Phase

    from machines.spec.files import MUTANT_VARIABLE

    monkeypatch.delenv(profiles.ENV, raising=False)
    monkeypatch.setenv(MUTANT_VARIABLE, "refund.yaml:48:drop-transition:approve")
    assert load_profile("ci") == "ci+mutant"
    active = settings.get_profile("ci+mutant")
    assert Phase.shrink not in active.phases and Phase.generate in active.phases
    assert active.database is None
    ci = settings.get_profile("ci")
    assert (active.derandomize, active.max_examples) == (ci.derandomize, ci.max_examples)
    assert load_profile() == "ci+mutant"  # the active one, not mutated twice
    monkeypatch.delenv(MUTANT_VARIABLE)
    assert load_profile("ci") == "ci"
    assert Phase.shrink in settings.get_profile("ci").phases


@pytest.mark.usefixtures("restore_profile")
def test_an_unknown_profile_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 14 item 5: a typo must not silently run another budget."""
    monkeypatch.setenv(profiles.ENV, "thorogh")
    active = settings.get_current_profile_name()
    with pytest.raises(UnknownName, match=r"HYPOTHESIS_PROFILE='thorogh'.*dev, ci, thorough"):
        load_profile()
    with pytest.raises(UnknownName, match=r"\.\.\.'"):
        load_profile("x" * 10_000)
    with pytest.raises(UnknownName):
        load_profile("")
    assert settings.get_current_profile_name() == active


@given(value=garbage(extra=(1, 10, "dev")))
def test_garbage_sizes_and_names_are_refused_with_typed_errors(value: Any) -> None:
    """issue 14 item 5: ``scaled`` and ``load_profile`` take positive ints and profile
    names; anything else is an ``InvalidArgument`` or ``UnknownName``, never a raw error."""
    active = settings.get_current_profile_name()
    try:
        sized = scaled(value)
    except InvalidArgument:
        pass
    else:
        assert isinstance(value, int) and value >= 1 and sized.max_examples >= 1
    if value is not None and not isinstance(value, str):  # None: the default, from the env
        with pytest.raises(InvalidArgument):
            load_profile(value)
    assert settings.get_current_profile_name() == active


SIZED_ELSEWHERE = {
    "machines/testing/profiles.py": "the profiles themselves",
    "machines/mutation/catalog.py": "machines mutate --examples N: a count the user gives",
    "benchmarks/suite_bench.py": "a benchmark's unit of work: steps per second of a fixed run",
    "tests/test_conformance.py": "TOO_SHORT: a run too short to cover, what its test is about",
    "tests/test_profiles.py": "profiles of a user's own, what these tests are about",
    "tests/test_tour.py": "random runs kept tiny on purpose: what the tour finds without them",
    "tests/test_recorded.py": "run()'s machinery at a tiny size; the suites' own sizes run apart",
}
"""The only files that may name a number of runs or steps; each says why."""


def test_no_run_names_its_own_number_of_examples() -> None:
    """Every property run is sized by the active profile (``scaled``, ``hunting``, the
    sizes of ``machines.testing._harness.sizes``): a hard-coded ``max_examples`` or
    ``stateful_step_count`` is one no profile reaches, which is what made CI as large as
    a nightly run."""
    found = []
    for folder in ("machines", "tests", "code_mutants", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            text = path.read_text(encoding="utf-8")
            if re.search(r"\b(max_examples|stateful_step_count)\s*=", text):
                found.append(relative)
    assert sorted(found) == sorted(SIZED_ELSEWHERE), found
