"""The code-mutant command (issue 14 item 3): its catalog stays in step with the code, a
fast subset of it is killed by the suites in every CI run, and its verdicts (killed,
survived, equivalent, error) each happen when they should. ``python -m code_mutants`` runs the
whole catalog (minutes); see ``code_mutants/__init__.py``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from code_mutants import detectors
from code_mutants.__main__ import main
from code_mutants.catalog import CATALOG, CodeMutant
from code_mutants.run import ROOT, StaleMutant, baseline, kill, patched, select, table

FAST = (
    "eo-no-lease-fence",
    "log-compensation-off-by-one",
    "tr-lost-submit-fails",
    "sql-stale-move-ignored",
)
"""Mutants the suites kill within seconds, one per system and one of a store: CI runs
them (``test_the_command_runs_as_documented`` runs one more, through the command)."""
BY_COMMAND = "memory-insert-overwrites"

CHEAP = "pytest:tests/test_walker.py::test_coverage_reports_the_edges_a_run_took"
"""A detector that takes a second and passes whatever ``machines/systems`` does."""


def test_the_catalog_has_25_mutants_over_every_system_and_store() -> None:
    """issue 14 item 3: 25+ curated bugs, each naming the promise it breaks, covering the
    three systems and the stores, each with detectors that exist."""
    assert len(CATALOG) >= 25
    assert len({m.id for m in CATALOG}) == len(CATALOG)
    files = {Path(m.path).name for m in CATALOG}
    for needed in ("exactly_once.py", "effectlog.py", "memory.py", "sqlite.py"):
        assert needed in files
    assert any(m.path.startswith("machines/systems/transfer/") for m in CATALOG)
    for m in CATALOG:
        assert m.path.startswith(("machines/systems/", "machines/store/")), m.id
        assert m.bug and m.breaks and m.detectors, m.id
        assert all(detectors.known(d) for d in m.detectors), m.id


@pytest.mark.parametrize("mutant", CATALOG, ids=[m.id for m in CATALOG])
def test_every_mutant_still_applies_and_compiles(mutant: CodeMutant) -> None:
    """issue 14 item 3: a mutant whose snippet drifted from the code would test nothing;
    each must apply exactly once and compile."""
    source = (ROOT / mutant.path).read_text()
    assert patched(mutant, source) != source


def test_a_mutant_that_no_longer_applies_is_an_error_not_a_survivor() -> None:
    """issue 14 item 3: the catalog drifting from the code is reported as such."""
    stale = replace(CATALOG[0], id="stale", old="this text is nowhere in the file")
    with pytest.raises(StaleMutant, match="occurs 0 times"):
        patched(stale, (ROOT / stale.path).read_text())
    result = kill(stale)
    assert result.outcome == "error" and "occurs 0 times" in result.evidence


@pytest.mark.parametrize("mutant_id", FAST)
def test_a_fast_subset_of_the_mutants_is_killed(mutant_id: str) -> None:
    """issue 14 item 3 (the CI subset): each mutant, in its own copy of the tree, is
    caught by a suite, which names what it saw."""
    (mutant,) = select([mutant_id])
    result = kill(mutant)
    assert result.outcome == "killed", table([result])
    assert result.detector in mutant.detectors and result.evidence


def test_a_mutant_no_detector_catches_survives_or_is_justified() -> None:
    """issue 14 item 3: a check that cannot fail is a defect, so the command's own
    verdicts are attacked too: a harmless change meets a detector that cannot see it."""
    harmless = CodeMutant(
        "harmless",
        "machines/systems/exactly_once.py",
        "a comment changed",
        "nothing",
        old='MACHINE = "outcome"',
        new='MACHINE = "outcome"  # changed',
        detectors=(CHEAP,),
    )
    survived = kill(harmless)
    assert survived.outcome == "survived" and "no detector checks: nothing" in survived.evidence
    justified = kill(replace(harmless, equivalent="a comment changes nothing"))
    assert justified.outcome == "equivalent"
    assert "SURVIVED: harmless" in table([survived, justified])


def test_a_detector_that_cannot_run_here_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 14 item 3: without a PostgreSQL server a PostgreSQL detector is reported as
    not run, never as a pass that looks like a verdict."""
    monkeypatch.delenv(detectors.POSTGRES, raising=False)
    unseen = CodeMutant(
        "unseen",
        "machines/store/memory.py",
        "a comment changed",
        "nothing",
        old='self.url = "memory://"',
        new='self.url = "memory://"  # changed',
        detectors=("exactly-once/postgres",),
    )
    result = kill(unseen)
    assert result.outcome == "survived" and "not run: exactly-once/postgres" in result.evidence


def test_the_baseline_refuses_suites_that_fail_unmutated() -> None:
    """issue 14 item 3: a detector that fails on the unmutated tree would 'kill' every
    mutant; the command checks that first."""
    broken = replace(CATALOG[0], detectors=("pytest:tests/test_walker.py::no_such_test",))
    said = baseline([broken])
    assert said is not None and "fails on the unmutated tree" in said


def test_the_command_lists_and_refuses_unknown_ids(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 14 item 3: ``python -m code_mutants --list`` shows the catalog, with the reason
    each equivalent mutant is one; an unknown id is a usage error (exit 2) naming it."""
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(m.id in listed for m in CATALOG)
    assert all(m.equivalent in listed for m in CATALOG if m.equivalent is not None)
    assert main(["no-such-mutant"]) == 2
    assert "no-such-mutant" in capsys.readouterr().err


def test_the_command_runs_as_documented() -> None:
    """issue 14 item 3: ``python -m code_mutants ID`` from the checkout prints the kill table
    and exits 0 when the mutant is killed."""
    done = subprocess.run(
        [sys.executable, "-m", "code_mutants", "--no-baseline", BY_COMMAND],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert BY_COMMAND in done.stdout and "killed 1/1" in done.stdout


def test_the_list_piped_into_head_ends_quietly() -> None:
    """``python -m code_mutants --list | head -1`` ends without a traceback."""
    done = subprocess.run(
        f"{sys.executable} -m code_mutants --list | head -1",
        shell=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.startswith(CATALOG[0].id)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


@pytest.mark.thorough
def test_every_code_mutant_is_killed_or_justified() -> None:
    """The whole catalog through the command, as its docs run it (the baseline first),
    every mutant's detectors at the ``ci`` profile's size: each is killed or justified as
    equivalent. CI runs the fast subset above; ``python -m pytest --thorough`` runs this."""
    done = subprocess.run(
        [sys.executable, "-m", "code_mutants"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=4 * 3600,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    summary = re.search(r"killed (\d+)/(\d+), equivalent (\d+), survived 0, errors 0", done.stdout)
    assert summary is not None, done.stdout
    killed, total, equivalent = map(int, summary.groups())
    assert total == len(CATALOG) and killed + equivalent == total, done.stdout
