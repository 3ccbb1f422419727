"""What a system reads back from a row it keeps is checked (issue 27, outsider batch 19).

A live row's data, and a finished row's annotations, may be written by any session that
may update the table: the guards judge moves, not what a system keeps in its data. The
outsider set a committed effect's ``replay_count`` to ``"x"`` (every replay then raised a
raw ``TypeError``), a lease's expiry to a 400-digit integer (``ExactlyOnce.run`` raised
``OverflowError``), and on PostgreSQL one lease to ``1e400``, which made every sweep fail
(``park_expired`` cast it to a double). Now each is a typed error naming the key and the
field, nothing is written, and one such row does not stop the sweep of the others."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from machines.checks.audit import audit_store
from machines.store.records import StoreError
from machines.systems import EffectLog, ExactlyOnce
from tests.migration_stores import bundled_specs
from tests.raw_sql import DATABASES, Victims, attacked


@pytest.fixture(params=DATABASES)
def victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        yield found


def written(victims: Victims, sql: str) -> None:
    """``sql`` as any session that may update the table runs it (accepted: a data write)."""
    assert victims.raw.attempt([sql]) is None, sql
    if victims.raw.kind == "sqlite":
        victims.raw.lite.execute(sql)
    else:
        victims.raw.pg.execute(sql.encode())


def data_set(table: str, key: str, field: str, value: str) -> str:
    """An UPDATE of one field of a row's data, raising its version as a write does."""
    return (
        f"UPDATE {table} SET data = json_set(data, '$.{field}', json('{value}')), "
        f"version = version + 1 WHERE key = '{key}'"
    )


def pg_data_set(table: str, key: str, field: str, value: str) -> str:
    """The same on PostgreSQL, on the text as stored (a field the row has), so that the
    rest of a finished row's data stays as it was."""
    return (
        f"UPDATE {table} SET data = regexp_replace(data::text, '\"{field}\": *[^,}}]+', "
        f"'\"{field}\": {value}')::json, version = version + 1 WHERE key = '{key}'"
    )


def set_field(victims: Victims, table: str, key: str, field: str, value: str) -> None:
    make = data_set if victims.raw.kind == "sqlite" else pg_data_set
    written(victims, make(table, key, field, value))


def version_of(victims: Victims, machine: str, key: str) -> int:
    with victims.store.transaction() as tx:
        row = tx.get(machine, key)
    assert row is not None and row.version is not None
    return row.version


@pytest.mark.parametrize(
    ("field", "value"),
    [("replay_count", v) for v in ('"x"', "-1", "1.5", "true", "1e308", "null")]
    + [("last_replayed_at", v) for v in ('"yesterday"', "false")],
)
def test_a_replay_annotation_written_outside_serves_the_result_and_is_named(
    victims: Victims, field: str, value: str
) -> None:
    """Outsider batch 29 (a 1): a committed effect's replay_count set to "abc", -1, 1.5,
    1e308, true or null by one raw write, which the guards take (each is a text, a number,
    true, false or null), made every later call of its signature fail with StoreError, and
    the audit said OK. The result, which no write can change, is served; the annotations
    are left as written, and the audit names them. (A list, ``[1]``, the database refuses:
    test_a_finished_effect_cannot_be_made_unreadable.)"""
    set_field(victims, "effect_entities", "done", field, value)
    before = version_of(victims, "effect", "done")
    log = EffectLog(victims.store, worker="w")
    if field == "replay_count":
        assert log.call("done", lambda: 1, tool="charge") == {"v": 1}
        assert version_of(victims, "effect", "done") == before
    breaches = [b for b in audit_store(victims.store.url, bundled_specs()) if b.key == "done"]
    assert [b.invariant for b in breaches] == ["exactly-once"], breaches
    assert f"its {field} is" in breaches[0].message, breaches


def test_a_reclaim_count_that_is_no_count_is_refused_naming_it(victims: Victims) -> None:
    eo = ExactlyOnce(victims.store, worker="w")
    with pytest.raises(StoreError, match="its reclaims is"):
        # 'busy' parked by an expired lease, then its count of reclaims made a list
        written(
            victims,
            'UPDATE outcome_entities SET data = \'{"owner": "elsewhere", '
            '"lease_until": 1.0, "reclaims": [1]}\', version = version + 1 '
            "WHERE key = 'busy'",
        )
        assert eo.park_expired() == ["busy"]
        row_version = version_of(victims, "outcome", "busy")
        try:
            eo.reclaim("busy", by="ops", reason="checked upstream")
        finally:
            assert version_of(victims, "outcome", "busy") == row_version


@pytest.mark.parametrize("until", ["1" + "0" * 400, "1e400"])
def test_a_lease_no_float_holds_is_reported_not_a_crash(victims: Victims, until: str) -> None:
    """A 400-digit integer is a lease no claim takes (the key is parked, its lease shown as
    written, batch 24); ``1e400``, which Python reads as infinity and the store never
    writes, makes the row unreadable (batch 20)."""
    from machines.errors import EffectIndeterminate

    set_field(victims, "outcome_entities", "busy", "lease_until", until)
    expected: type[Exception] = EffectIndeterminate if "e" not in until else StoreError
    with pytest.raises(expected, match=r"later than any lease can|holds the number 1e400"):
        ExactlyOnce(victims.store, worker="w").run("busy", lambda: 1)


def test_one_lease_no_float_holds_does_not_stop_the_sweep(victims: Victims) -> None:
    """The sweep parks every expired key, whatever another row's lease holds."""
    victims.store.insert("outcome", "gone", data={"owner": "w2", "lease_until": 1.0})
    set_field(victims, "outcome_entities", "busy", "lease_until", "1e400")
    assert ExactlyOnce(victims.store, worker="w").park_expired() == ["gone"]


def test_a_lease_rewritten_while_the_effect_runs_parks_the_key(victims: Victims) -> None:
    """Outsider batch 20 (a09): while the effect ran, another session gave the claim to
    'ghost' until 1e300 (a data write, no move). The worker's settle failed and its caller
    was told "indeterminate", but the key stayed in_flight under the forged lease: every
    later caller was told "in progress" forever, and reclaim and decide refused it. A claim
    rewritten with no move since it was taken is now parked as it stands."""
    from machines.errors import EffectIndeterminate

    eo = ExactlyOnce(victims.store, worker="w")
    ran: list[str] = []

    def charge() -> str:
        ran.append("charge")
        set_field(victims, "outcome_entities", "new", "owner", '"ghost"')
        return "charged"

    with pytest.raises(EffectIndeterminate, match="rewritten outside machines"):
        eo.run("new", charge)
    row = eo.outcome("new")
    assert row is not None and row.state == "indeterminate"
    eo.reclaim("new", by="ops", reason="the bank shows no charge", seen=row.version)
    assert ran == ["charge"]


@pytest.mark.parametrize("sent", ['"x"', '{"by": "e1"}', '{"at": "soon"}', "[1]", '{"at": 1e308}'])
def test_a_send_mark_rewritten_sends_the_node_to_unknown(victims: Victims, sent: str) -> None:
    """Outsider batch 22 (a B1): a submitting node whose ``sent`` mark was rewritten (a
    text, no time, a time far ahead) made every step raise a raw TypeError or KeyError, or
    (1e308) wait for ever, with money perhaps moved and nothing for a person to see. A mark
    the engine cannot read is no mark: the node goes unknown, for a person to reconcile."""
    from machines.testing.transfer.suite import plan_node
    from tests.test_transfer import FakeVenue, engine_for, executing

    engine = engine_for(victims.store, FakeVenue({"withdraw": {"submit": [KeyboardInterrupt()]}}))
    executing(engine, "t", [plan_node("withdraw", "action", True)])
    with pytest.raises(KeyboardInterrupt):
        engine.run("t")
    assert engine.nodes("t")["withdraw"].state == "submitting"
    with victims.store.transaction() as tx:
        row = tx.get("node", "t/withdraw")
        assert row is not None
        tx.update(row, {**row.data, "sent": json.loads(sent)})
    engine.step("t")
    assert engine.nodes("t")["withdraw"].state == "unknown"


def test_an_approval_error_rewritten_is_refused_typed(victims: Victims) -> None:
    """Outsider batch 22 (a B2): a pending Irreversible call whose stored ``error`` was
    rewritten to a text made every call raise a raw AttributeError."""
    from machines.systems import EffectRewritten
    from machines.systems.effectlog import EffectAwaitingApproval

    log = EffectLog(victims.store, worker="w")
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire", lambda: 1, tier="irreversible", tool="wire")
    with victims.store.transaction() as tx:
        row = tx.get("effect", "wire")
        assert row is not None
        row = tx.move(row, "approve", actor="human", detail={"by": "ann", "reason": "ok"})
        row = tx.move(row, "resume", actor="proxy")
        tx.move(row, "fail", actor="proxy", data={**row.data, "error": "x"})  # by moves alone
    with pytest.raises(StoreError, match="its error is 'x', not an object"):
        log.call("wire", lambda: 1, tier="irreversible", tool="wire")
    with victims.store.transaction() as tx:  # outside a move: never run, whatever it says
        row = tx.get("effect", "wire")
        assert row is not None
        tx.update(row, {**row.data, "error": None})
    with pytest.raises(EffectRewritten):
        log.call("wire", lambda: 1, tier="irreversible", tool="wire")


def test_the_saga_undoes_by_the_tool_the_run_was_started_with(victims: Victims) -> None:
    """Outsider batch 22 (a B3): an executing card_charge whose stored tool was rewritten
    to wire_refund had the wire_refund undo run (a refund of something never made) and
    ended compensated, the audit saying OK. The tool a run starts with is in its history,
    which no write changes; an effect whose tool differs is left for a person."""
    from machines.systems.effectlog import EffectOutcomeUnknown

    log = EffectLog(victims.store, worker="w")

    def charge() -> None:
        raise TimeoutError("sent, no answer")

    with pytest.raises(EffectOutcomeUnknown):
        log.call("c1", charge, tool="card_charge", session="s")
    with victims.store.transaction() as tx:
        row = tx.get("effect", "c1")
        assert row is not None
        tx.update(row, {**row.data, "tool": "wire_refund"})
    ran: list[str] = []
    (step,) = log.compensate(
        "s",
        {
            "wire_refund": lambda r: ran.append("wire_refund"),
            "card_charge": lambda r: ran.append("card"),
        },
    )
    assert ran == [] and step.state == "executing" and "started as 'card_charge'" in step.reason


@pytest.mark.parametrize("until", ["1e300", "99999999999"])
def test_a_lease_pushed_past_any_lease_parks_the_key(victims: Victims, until: str) -> None:
    """Outsider batch 24 (a 2): one raw write set a dead holder's lease to ``1e300``; every
    later call was told "in progress" and the key never reached a person. A lease ends at
    most ``MAX_LEASE_SECONDS`` (7 days) after now: a later end is no lease, and the next
    caller parks the key."""
    from machines.errors import EffectIndeterminate

    set_field(victims, "outcome_entities", "busy", "lease_until", until)
    ran: list[str] = []
    with pytest.raises(EffectIndeterminate, match="later than any lease can") as parked:
        ExactlyOnce(victims.store, worker="w").run("busy", lambda: ran.append("again"))
    assert ran == []
    assert "or this process's clock is behind the one that wrote it" in str(parked.value)
    with victims.store.transaction() as tx:
        row = tx.get("outcome", "busy")
    assert row is not None and row.state == "indeterminate"


def test_a_lease_longer_than_any_lease_is_refused(victims: Victims) -> None:
    from machines.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="at most"):
        ExactlyOnce(victims.store, lease_seconds=8 * 24 * 3600)
    ExactlyOnce(victims.store, lease_seconds=7 * 24 * 3600)


@pytest.mark.parametrize(
    ("field", "value"), [("lease_until", "1e300"), ("lease_until", '"soon"'), ("owner", "null")]
)
def test_the_sweep_parks_a_key_whose_lease_is_none(
    victims: Victims, field: str, value: str
) -> None:
    """Outsider batch 27 (a 2): a dead holder's lease set to ``1e300`` or a text, or its
    holder removed, by one raw write: only a caller asking for the key again parked it, and
    a key nobody asked for again stayed in flight for good, never reaching a person. The
    sweep parks such a key too."""
    set_field(victims, "outcome_entities", "busy", field, value)
    assert ExactlyOnce(victims.store, worker="w").park_expired() == ["busy"]
    with victims.store.transaction() as tx:
        row = tx.get("outcome", "busy")
    assert row is not None and row.state == "indeterminate"


@pytest.mark.parametrize("value", ['"soon"', "true", "null", '{"at": 1}'])
def test_the_audit_names_a_lease_with_no_time(victims: Victims, value: str) -> None:
    """Outsider batch 27 (a 2, the audit's half): a holder's lease given an expiry that is
    no time, by one raw write, was parked by the sweep and by callers, and the audit said
    nothing. It names the key now. (A lease later than any lease can run is parked too,
    but the audit has no clock it may judge it by: the executor's may not be the store's.)"""
    set_field(victims, "outcome_entities", "busy", "lease_until", value)
    breaches = [b for b in audit_store(victims.store.url, bundled_specs()) if b.key == "busy"]
    assert [b.invariant for b in breaches] == ["exactly-once"], breaches
    assert "under a lease whose expiry is" in breaches[0].message, breaches


COUNT, AT = '"replay_count":0', '"last_replayed_at":null'
"""A committed effect's annotations, as the store wrote them."""
FINISHED_GARBAGE = {
    "an annotation given twice": (COUNT, '"replay_count":1,"replay_count":2'),
    "a key given twice inside an annotation": (COUNT, '"replay_count":{"a":1,"a":2}'),
    "an annotation no float holds": (COUNT, '"replay_count":1e400'),
    "an integer of 5000 digits": (COUNT, '"replay_count":' + "9" * 5000),
    "a NUL in an annotation": (AT, '"last_replayed_at":"x\\u0000y"'),
    "a lone surrogate in an annotation": (AT, '"last_replayed_at":"\\ud800"'),
}


def _rewritten(victims: Victims, key: str, old: str, new: str) -> str:
    """An UPDATE that replaces ``old`` by ``new`` in a row's data as stored, raising its
    version as a write does."""
    text = "data" if victims.raw.kind == "sqlite" else "data::text"
    data = f"replace({text}, '{old}', '{new}')"
    data = data if victims.raw.kind == "sqlite" else f"{data}::json"
    return f"UPDATE effect_entities SET data = {data}, version = version + 1 WHERE key = '{key}'"


@pytest.mark.parametrize("change", list(FINISHED_GARBAGE.values()), ids=list(FINISHED_GARBAGE))
def test_a_finished_effect_cannot_be_made_unreadable(
    victims: Victims, change: tuple[str, str]
) -> None:
    """Outsider batch 28 (a): on PostgreSQL the application's role wrote a committed
    effect's annotation twice; the guard dropped every copy before comparing, so the write
    passed, and every later replay (and the saga of its session) failed for good. A
    finished entity's annotations are now a text, a number, true, false or null, and no key
    is given twice, on both databases; its replay works after the refusal."""
    refused = victims.raw.attempt([_rewritten(victims, "done", *change)])
    assert refused is not None, "accepted"
    for honest in ('"replay_count":3', '"replay_count":4.5e300', '"replay_count":"a\\\\u0000"'):
        assert victims.raw.attempt([_rewritten(victims, "done", COUNT, honest)]) is None, honest
    log = EffectLog(victims.store, worker="w")
    assert log.call("done", lambda: 2, tool="charge") == {"v": 1}


def test_an_annotation_that_could_hold_a_key_twice_is_not_written(victims: Victims) -> None:
    """The store refuses, on every database, to write what its guard refuses."""
    with victims.store.transaction() as tx:
        row = tx.get("effect", "done")
        assert row is not None
        with pytest.raises(StoreError, match="annotation 'replay_count' may hold a text, a"):
            tx.update(row, {**row.data, "replay_count": {"a": 1}})
