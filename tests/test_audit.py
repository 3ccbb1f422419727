"""``machines audit``: recorded histories judged against the definitions and invariants."""

from __future__ import annotations

import io
import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from machines.audit import AuditInputError, audit_events, read_events
from machines.cli import main
from machines.errors import EffectIndeterminate
from machines.loader import load
from machines.store import open_store
from machines.systems import ExactlyOnce
from tests.conftest import postgres_schema

SPECS = {name: load(name) for name in ("effect", "outcome", "node", "request")}


def history_of(*moves: tuple[str, str], machine: str = "outcome", key: str = "k1") -> str:
    """JSON Lines of an entity taking ``moves`` ((trigger, actor) each) from its initial
    state, written by the runtime itself, each move saying who and why."""
    m = load(machine).machine(entity_id=key)
    for trigger, actor in moves:
        m.trigger(trigger, actor=actor, detail={"by": "ops-1", "reason": "a test"})
    out = io.StringIO()
    m.history.write_jsonl(out)
    return out.getvalue()


def test_a_legal_history_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "history.jsonl"
    log.write_text(
        history_of(("park", "worker"), ("reclaim", "caller"), ("succeed", "worker"))
        + history_of(("fail", "worker"), key="k2")
    )
    assert main(["audit", str(log)]) == 0
    assert "4 events of 2 entities: OK" in capsys.readouterr().out


def test_an_illegal_move_is_reported_with_the_specs_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker that 'retries' a parked key on its own: the log says indeterminate ->
    in_flight by the worker, which the outcome definition refuses."""
    lines = history_of(("park", "worker")).splitlines()
    forged = json.loads(lines[0]) | {"seq": 2, "source": "indeterminate", "dest": "in_flight"}
    forged |= {"trigger": "reclaim", "actor": "worker"}
    log = tmp_path / "history.jsonl"
    log.write_text("\n".join([lines[0], json.dumps(forged)]) + "\n")
    assert main(["audit", str(log)]) == 1
    out = capsys.readouterr().out
    assert "[append-only-history] outcome 'k1': an event the spec does not allow" in out
    assert "#2 indeterminate --reclaim (worker)--> in_flight" in out
    assert "[fail-closed-indeterminate] outcome 'k1'" in out
    assert "FAILED: 2 breach(es)" in out


def test_gaps_reordering_and_unknown_machines() -> None:
    events = read_events(history_of(("park", "worker"), ("reclaim", "caller")).splitlines())
    assert audit_events(list(reversed(events)), SPECS) == []  # order in the file is free
    assert [b.invariant for b in audit_events(events[1:], SPECS)] == ["append-only-history"]
    alien = events[0]._replace(machine="payments")
    (breach,) = audit_events([alien], SPECS)
    assert (
        breach.invariant == "known-machine" and "no definition named 'payments'" in breach.message
    )


def test_an_exit_from_indeterminate_must_say_who_and_why() -> None:
    lines = history_of(("park", "worker"), ("reclaim", "caller")).splitlines()
    silent = json.loads(lines[1]) | {"detail": None}
    (breach,) = audit_events(read_events([lines[0], json.dumps(silent)]), SPECS)
    assert breach.invariant == "fail-closed-indeterminate" and "who and why" in breach.message


def test_a_terminal_state_left_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    events = read_events(history_of(("succeed", "worker")).splitlines())
    left = events[0]._replace(seq=2, source="succeeded", dest="in_flight", trigger="reclaim")
    found = {b.invariant for b in audit_events([events[0], left], SPECS)}
    assert {"terminal-final", "append-only-history"} <= found


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"machine": "outcome"}', "missing entity"),
        (
            '{"machine": "o", "entity": "k", "seq": "1", "source": "a", "dest": "b", '
            '"trigger": "t", "actor": "w", "context": {}, "at": 0}',
            "seq must be an integer",
        ),
    ],
)
def test_unreadable_lines_are_refused_with_their_line_number(line: str, says: str) -> None:
    with pytest.raises(AuditInputError, match=rf"log:2: .*{says}"):
        read_events(["", line], "log")


def test_the_command_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text("{oops\n")
    assert main(["audit", str(log)]) == 2
    assert "bad.jsonl:1: not JSON" in capsys.readouterr().err
    assert main(["audit", str(tmp_path / "missing.jsonl")]) == 2
    with pytest.raises(SystemExit):
        main(["audit"])


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_a_store_is_audited_with_its_data(
    database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ExitStack() as cleanup:
        if database == "postgres":
            url = cleanup.enter_context(postgres_schema())
        else:
            url = f"sqlite:///{tmp_path / 'effects.db'}"
        store = open_store(url)
        eo = ExactlyOnce(store)
        eo.run("charge-1", lambda: "ok")
        with pytest.raises(EffectIndeterminate):
            eo.run("charge-2", lambda: _raise(TimeoutError("sent, no answer")))
        eo.decide("charge-2", landed=True, by="ops", reason="the bank confirmed it")
        store.close()
        assert main(["audit", "--from-store", url]) == 0
        assert f"the store {url}: OK" in capsys.readouterr().out


def _raise(error: Exception) -> None:
    raise error
