"""An effect whose run ended unknown cannot be reopened by a raw move (issue 27, outsider
batch 23, A1).

The application's role moved an effect whose run had ended with an unknown outcome
(``executing``, with its ``unknown_outcome`` note) back to ``pending`` by EffectLog's own
``fail`` move, by the proxy: the database takes it (a legal move), the next call ran the
charge a second time, and the audit said OK. The log reopens an effect only by that move
made on the very row its claim wrote, while a run that ended unknown writes its note
outside a move, which leaves a gap between the row's version and its move count that no
write can close. A ``pending`` or ``approved`` effect with such a gap never runs again
(``EffectRewritten``), a person cannot approve it, and the audit names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from machines.cli import main
from machines.store import open_store
from machines.systems import EffectLog, EffectRewritten
from machines.systems.effectlog import (
    EffectAwaitingApproval,
    EffectNotRecorded,
    EffectOutcomeUnknown,
)
from tests.raw_sql import COMPENSABLE, DATABASES, IRREVERSIBLE, Victims, attacked


@pytest.fixture(params=DATABASES)
def victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        yield found


def raw(victims: Victims, sql: str) -> None:
    if victims.raw.kind == "sqlite":
        victims.raw.lite.execute(sql)
    else:
        victims.raw.pg.execute(sql.encode())


def reopened(kind: str, key: str, context: str, *, clear_note: bool) -> str:
    """The log's own ``fail`` move (executing -> pending by the proxy), by raw SQL."""
    cleared = (
        "json_set(data, '$.unknown_outcome', json('null'))"
        if kind == "sqlite"
        else "(data::jsonb || '{\"unknown_outcome\": null}')::json"
    )
    data = f", data = {cleared}" if clear_note else ""
    return (
        "UPDATE effect_entities SET state = 'pending', moves = moves + 1, "
        f"version = version + 1, last_trigger = 'fail', last_actor = 'proxy', "
        'last_detail = \'{"worker": "w", "reason": "the call provably did not take '
        f"effect\"}}', last_context = '{context}'{data} WHERE key = '{key}'"
    )


def timed_out() -> None:
    raise TimeoutError("sent; no answer")


@pytest.mark.parametrize("clear_note", [False, True], ids=["note kept", "note cleared"])
def test_a_raw_fail_after_an_unknown_outcome_never_runs_the_effect_again(
    victims: Victims, clear_note: bool
) -> None:
    log = EffectLog(victims.store, worker="w")
    with pytest.raises(EffectOutcomeUnknown):
        log.call("charge-1", timed_out, tool="charge")
    raw(victims, reopened(victims.raw.kind, "charge-1", COMPENSABLE, clear_note=clear_note))
    ran: list[str] = []
    with pytest.raises(EffectRewritten, match="written outside a move"):
        log.call("charge-1", lambda: ran.append("charge"), tool="charge")
    assert ran == []
    assert main(["audit", "--from-store", victims.store.url]) == 1


def test_a_raw_fail_of_an_irreversible_call_cannot_be_approved(victims: Victims) -> None:
    log = EffectLog(victims.store, worker="w")
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire-1", timed_out, tier="irreversible", tool="wire")
    log.approve("wire-1", by="ann", reason="checked")
    with pytest.raises(EffectOutcomeUnknown):
        log.call("wire-1", timed_out, tier="irreversible", tool="wire")
    raw(victims, reopened(victims.raw.kind, "wire-1", IRREVERSIBLE, clear_note=False))
    with pytest.raises(EffectRewritten):
        log.approve("wire-1", by="ann", reason="retry")
    assert log.reject("wire-1", by="ann", reason="it may have been sent").state == "rejected"


def test_the_audit_names_the_reopened_effect(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    log = EffectLog(victims.store, worker="w")
    with pytest.raises(EffectOutcomeUnknown):
        log.call("charge-2", timed_out, tool="charge")
    assert main(["audit", "--from-store", victims.store.url]) == 0
    capsys.readouterr()
    raw(victims, reopened(victims.raw.kind, "charge-2", COMPENSABLE, clear_note=False))
    assert main(["audit", "--from-store", victims.store.url]) == 1
    said = capsys.readouterr().out
    assert "exactly-once" in said and "charge-2" in said and "written outside a move" in said


def test_a_call_that_provably_failed_runs_again(victims: Victims) -> None:
    """The log's own reopening is untouched: a run the classifier says was not sent."""
    from machines.systems import not_sent

    log = EffectLog(victims.store, worker="w", classify=not_sent(ConnectionRefusedError))

    def refused() -> None:
        raise ConnectionRefusedError("no route")

    with pytest.raises(ConnectionRefusedError):
        log.call("charge-3", refused, tool="charge")
    assert log.call("charge-3", lambda: "paid", tool="charge") == "paid"


WORKER = """
import os, sys
from machines.store import open_store
from machines.systems import EffectLog
log = EffectLog(open_store(sys.argv[1]), worker="w1")
def charge():
    os._exit(9)  # the runner dies mid-run: no note says how the run ended
log.call("charge-9", charge, tool="charge")
"""


@pytest.mark.parametrize("secret", [None, "the proof itself"])
def test_a_raw_fail_after_the_runner_died_without_a_note_never_runs_it_again(
    tmp_path: Path, secret: str | None
) -> None:
    """The case batch 23 left documented: the runner died after sending, writing nothing,
    and the application's role made the log's own ``fail`` move with the detail it writes.
    Only the runner knows the secret whose digest the run's start carries; a ``fail``
    that does not reveal it reopens nothing, and the audit names it."""
    import json
    import os
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "died.db"
    url = f"sqlite:///{db}"
    root = Path(__file__).resolve().parents[1]
    ran = subprocess.run(
        [sys.executable, "-c", WORKER, url],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        timeout=60,
    )
    assert ran.returncode == 9, ran.stderr.decode()
    with sqlite3.connect(db) as raw:
        (started,) = raw.execute(
            "SELECT detail FROM effect_history WHERE entity = 'charge-9' ORDER BY seq DESC"
        ).fetchone()
        detail = {"worker": "w1", "reason": "the call provably did not take effect"}
        if secret is not None:
            detail["secret"] = json.loads(started)["proof"]
        raw.execute(
            "UPDATE effect_entities SET state = 'pending', moves = moves + 1, "
            "version = version + 1, last_trigger = 'fail', last_actor = 'proxy', "
            "last_detail = ?, last_context = ? WHERE key = 'charge-9'",
            (json.dumps(detail), COMPENSABLE),
        )
    log = EffectLog(open_store(url), worker="w2")
    again: list[str] = []
    with pytest.raises(EffectRewritten, match="not made by the run's runner"):
        log.call("charge-9", lambda: again.append("charge"), tool="charge")
    assert again == []
    assert main(["audit", "--from-store", url]) == 1


def test_a_commit_forged_with_the_notes_secret_is_named_by_the_audit(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 26 (a 2): the note of an unknown outcome revealed the very secret
    that proves the run's end, on the row, where the application's role read it and forged
    a commit with a made-up result (the saga could not undo it, the audit said OK). The
    note reveals a secret of its own; a commit that reveals it proves nothing."""
    import json

    log = EffectLog(victims.store, worker="w")
    with pytest.raises(EffectOutcomeUnknown):
        log.call("charge-7", timed_out, tool="charge")
    row = log.effect("charge-7")
    assert row is not None
    note_secret = row.data["unknown_outcome"]["secret"]
    detail = json.dumps(
        {"worker": "w", "reason": "the tool returned a result", "secret": note_secret}
    )
    data = json.dumps({**row.data, "result": {"charged": False}})
    raw(
        victims,
        "UPDATE effect_entities SET state = 'committed', moves = moves + 1, "
        f"version = version + 1, last_trigger = 'commit', last_actor = 'proxy', "
        f"last_detail = '{detail}', last_context = '{COMPENSABLE}', data = '{data}' "
        "WHERE key = 'charge-7'",
    )
    capsys.readouterr()
    assert main(["audit", "--from-store", victims.store.url]) == 1
    assert "its 'commit' (move #2) out of executing was not made by the run's runner" in (
        capsys.readouterr().out
    )


def test_a_commit_forged_while_the_call_runs_is_never_replayed(victims: Victims) -> None:
    """Outsider batch 27 (a 1): the application's role wrote the log's own commit move, with
    a result of its choosing, while the charge ran: every later caller was served that
    result (the audit named it). A committed effect whose commit does not reveal the run's
    secret is refused, not replayed."""
    import json

    log = EffectLog(victims.store, worker="w")
    served: list[object] = []

    def charge() -> str:
        data = json.dumps({"result": {"paid_to": "attacker"}})
        detail = json.dumps({"worker": "w", "reason": "the tool returned a result"})
        column = "data" if victims.raw.kind == "sqlite" else "data::text"
        (old,) = victims.raw.query(f"SELECT {column} FROM effect_entities WHERE key = 'c-8'")[0]
        merged = json.dumps({**json.loads(old), **json.loads(data)})
        raw(
            victims,
            "UPDATE effect_entities SET state = 'committed', moves = moves + 1, "
            "version = version + 1, last_trigger = 'commit', last_actor = 'proxy', "
            f"last_detail = '{detail}', last_context = '{COMPENSABLE}', data = '{merged}' "
            "WHERE key = 'c-8'",
        )
        return "charged"

    with pytest.raises(EffectNotRecorded):  # the runner's own commit is fenced off
        log.call("c-8", charge, tool="charge")
    with pytest.raises(EffectRewritten, match="result is no run's"):
        served.append(log.call("c-8", lambda: "again", tool="charge"))
    assert served == []
