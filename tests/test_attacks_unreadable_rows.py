"""One row the store never writes stops nothing but itself (issue 27, outsider batch 20).

The application's role may update a live row's data. The outsider wrote one in_flight
row whose data gave ``lease_until`` twice, held ``1e200000``, or a ``\\ud800`` or
``\\u0000`` escape, and on SQLite created a key whose bytes are not UTF-8: every
PostgreSQL sweep (``park_expired``) then failed, so no other expired key was parked; every
write of the data back was refused, so the key was never parked either; and the audit said
"no breach", or stopped without judging anything. Now the PostgreSQL table refuses data
no JSON reader agrees on, every read refuses a value the store never writes (naming the
entity), the sweep leaves such a row out, and the audit names it and judges the rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from machines.cli import main
from machines.store.records import StoreError
from machines.systems import ExactlyOnce
from tests.raw_sql import DATABASES, Victims, attacked

OE = "outcome_entities"
DATA = {
    "a lease given twice": '{"owner": "w", "lease_until": 1.0, "lease_until": 4000000000.0}',
    "a number no float holds": '{"owner": "w", "lease_until": 1e200000}',
    "a lone surrogate": '{"owner": "w", "lease_until": 4000000000.0, "x": "\\ud800"}',
    "a NUL": '{"owner": "w", "lease_until": 4000000000.0, "x": "\\u0000"}',
    "an integer of 5000 digits": '{"owner": "w", "lease_until": 4000000000.0, "x": 1%s}'
    % ("0" * 4999),
}


@pytest.fixture(params=DATABASES)
def victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        found.store.insert("outcome", "gone", data={"owner": "w2", "lease_until": 1.0})
        yield found


def written(victims: Victims, sql: str, params: tuple[object, ...] = ()) -> bool:
    """Whether the database took ``sql`` (``{p}``: a placeholder), as any session that may
    update the table."""
    raw = victims.raw
    if raw.attempt([sql], params) is not None:
        return False
    if raw.kind == "sqlite":
        raw.lite.execute(sql.replace("{p}", "?"), params)
    else:
        raw.pg.execute(sql.replace("{p}", "%s"), params or None)
    return True


def judged(victims: Victims, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The sweep parks the other expired key, the row stops its own key only, and the
    audit names it with its place and judges the rest."""
    eo = ExactlyOnce(victims.store, worker="sweeper")
    assert eo.park_expired() == ["gone"]
    with pytest.raises(StoreError, match="outside"):
        eo.run(key, lambda: "charged again")
    capsys.readouterr()
    assert main(["audit", "--from-store", victims.store.url]) == 1
    out = capsys.readouterr().out
    assert "[append-only-history] outcome " in out and "cannot be read" in out, out
    assert "is not JSON" not in out, out  # each text names what it holds
    assert "FAILED: 1 breach(es)" in out, out


@pytest.mark.parametrize("data", list(DATA))
def test_data_no_reader_agrees_on_stops_nothing_else(
    victims: Victims, data: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = f"UPDATE {OE} SET data = {{p}}, version = version + 1 WHERE key = 'busy'"
    if not written(victims, sql, (DATA[data],)):
        assert victims.raw.kind == "postgres" and data != "a lease given twice"
        return  # the table refuses it: nothing to judge
    judged(victims, "busy", capsys)


def test_sqlite_a_key_that_is_not_utf8_stops_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite takes any bytes as text (its ``typeof(key) = 'text'`` check cannot tell), and
    one key of invalid UTF-8 made every read of the table fail: the audit judged nothing
    and the sweep failed on every call."""
    with attacked("sqlite", tmp_path) as victims:
        victims.store.insert("outcome", "gone", data={"owner": "w2", "lease_until": 1.0})
        assert written(
            victims,
            f"INSERT INTO {OE} (key, state, data, created_at, updated_at) VALUES "
            f"(CAST(X'6bff' AS TEXT), 'in_flight', '{{\"owner\": \"w\", \"lease_until\": 1.0}}',"
            " 1.0, 1.0)",
        )
        eo = ExactlyOnce(victims.store, worker="sweeper")
        assert eo.park_expired() == ["gone"]
        capsys.readouterr()
        assert main(["audit", "--from-store", victims.store.url]) == 1
        out = capsys.readouterr().out
        assert "cannot be read" in out and "FAILED: 1 breach(es)" in out, out


def test_rows_that_cannot_be_read_take_no_place_in_a_sweep(victims: Victims) -> None:
    """Outsider batch 21 (a01, a03): the sweep's LIMIT counted the row it then left out, so
    with ``limit=1`` an unreadable row ahead of a real expired key hid it on every call (N
    such rows hid it from any sweep of ``limit <= N``)."""
    twice = '{"owner": "w", "lease_until": 1.0, "lease_until": 1.0}'
    assert written(
        victims, f"UPDATE {OE} SET data = {{p}}, version = version + 1 WHERE key = 'busy'", (twice,)
    )
    assert ExactlyOnce(victims.store, worker="sweeper").park_expired(limit=1) == ["gone"]


def test_an_unreadable_row_leaves_the_rest_of_the_queue_listed(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 21 (a04): one parked row that cannot be read made ``machines pending``
    (and the desk's list) fail for the whole store, so every other parked key disappeared
    from the people's queue. It is left out; the audit names it."""
    from machines.errors import EffectIndeterminate

    eo = ExactlyOnce(victims.store, worker="w")
    for key in ("parked-1", "parked-2"):
        with pytest.raises(EffectIndeterminate):
            eo.run(key, lambda: (_ for _ in ()).throw(TimeoutError("sent")))
    twice = '{"reason": "a", "reason": "b"}'
    assert written(
        victims,
        f"UPDATE {OE} SET data = {{p}}, version = version + 1 WHERE key = 'parked-1'",
        (twice,),
    )
    capsys.readouterr()
    assert main(["pending", victims.store.url]) == 0
    out = capsys.readouterr().out
    assert "parked-2" in out and "parked-1" not in out, out


def test_kept_heads_say_an_unreadable_entity_cannot_be_checked(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 21 (a06): ``--check-heads`` said an entity that cannot be read "is
    gone: deleted outside machines", though its row is there."""
    heads = tmp_path / "heads.json"
    assert main(["audit", "--from-store", victims.store.url, "--save-heads", str(heads)]) == 0
    twice = '{"owner": "w", "owner": "x"}'
    assert written(
        victims, f"UPDATE {OE} SET data = {{p}}, version = version + 1 WHERE key = 'busy'", (twice,)
    )
    capsys.readouterr()
    assert main(["audit", "--from-store", victims.store.url, "--check-heads", str(heads)]) == 1
    out = capsys.readouterr().out
    assert "outcome 'busy': was kept with 0 moves and cannot be read now" in out, out
    assert "is gone" not in out


@pytest.mark.parametrize("value", ["X'7b7d'", "42"], ids=["a-blob", "a-number"])
def test_sqlite_a_detail_that_is_no_text_is_named_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """Outsider batch 36 (a C, a D): with ``PRAGMA ignore_check_constraints``, a legal
    move written with a BLOB detail read as the JSON text it held, and the audit said OK;
    a number there ended the audit in a raw ``TypeError``. Every read now refuses JSON that
    is not text, and the audit names the event as one it cannot read."""
    import sqlite3

    from machines.store import open_store

    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        store.insert("outcome", "k")
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA ignore_check_constraints=1")
    raw.execute(
        "UPDATE outcome_entities SET moves = moves + 1, version = version + 1, "
        "state = 'indeterminate', last_trigger = 'park', last_actor = 'worker', "
        f"last_detail = {value}, last_context = '{{}}', updated_at = 1.5 WHERE key = 'k'"
    )
    raw.close()
    capsys.readouterr()
    assert main(["audit", "--from-store", f"sqlite:///{path}"]) == 1
    out = capsys.readouterr().out
    assert "outcome 'k': cannot be read" in out and "where " in out, out
