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
