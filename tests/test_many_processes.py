"""Many worker processes on one database: 4 on SQLite, 8 on PostgreSQL, racing on the same
keys with crashes, lease expiries, timeouts after sending, reclaims and sweeps; the recorded
history (invoke / ok / fail / info per call) is checked against the final store."""

from __future__ import annotations

from pathlib import Path

import pytest

from machines.testing._harness.races import check, race
from tests.conftest import postgres_schema


@pytest.mark.parametrize(("backend", "processes"), [("sqlite", 4), ("postgres", 8)])
def test_workers_racing_on_the_same_keys_keep_every_promise(
    backend: str, processes: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()

    def run(url: str) -> None:
        crashes = race(url, work, processes=processes, calls=40, keys=40)
        report = check(url, work, processes, crashes)
        assert report.problems == [], report.problems
        assert report.calls["ok"] > 0 and report.calls["info"] > 0 and crashes > 0, report
        assert report.runs > 0 and report.sweeps > 0
        with capsys.disabled():
            print(
                f"\n{backend}: {processes} worker slots, {crashes} processes crashed and were "
                f"replaced; calls {dict(report.calls)}; {report.runs} upstream runs, "
                f"{report.reclaims} reclaims, {report.sweeps} sweeps parked {report.swept} "
                "keys; no key ran twice without a reclaim, nothing "
                "acknowledged was lost"
            )

    if backend == "sqlite":
        run(f"sqlite:///{tmp_path / 'race.db'}")
    else:
        with postgres_schema() as url:
            run(url)
