"""What the database's owner can still do, and what ``machines audit --from-store``
still sees afterwards (docs/guide/state-column.md): the guards bind every session that
writes rows, not whoever may change the schema. Also the one thing the database cannot
judge: a derived context value, which the audit derives again from the nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from machines.cli import main
from machines.store import open_store
from machines.store.integrity import StoreTampered
from machines.systems.transfer.plans import PLAN_DIGEST, plan_digest
from tests.raw_sql import COMPENSABLE, DATABASES, OE, OH, E, H, Raw, Victims, attacked, move


@pytest.fixture(params=DATABASES)
def owned(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Victims, str]]:
    """A fresh attacked store and its URL, for a test that changes the schema."""
    with attacked(request.param, tmp_path) as found:
        yield found, found.store.url


def audited(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit", "--from-store", url])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def disable(raw: Raw, table: str, trigger: str) -> None:
    """The owner's way to switch one guard off: SQLite drops it, PostgreSQL disables it."""
    if raw.kind == "sqlite":
        raw.query(f'DROP TRIGGER "{table[: -len("entities")]}{trigger}"')
    else:
        raw.pg.execute(
            f'ALTER TABLE "{table}" DISABLE TRIGGER "{table[: -len("entities")]}{trigger}"'.encode()
        )


def commit(raw: Raw, sql: str) -> None:
    if raw.kind == "sqlite":
        raw.lite.execute(sql)
    else:
        raw.pg.execute(sql.encode())


def test_a_guard_switched_off_lets_a_state_change_through_and_the_audit_sees_it(
    owned: tuple[Victims, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The owner may drop (SQLite) or disable (PostgreSQL) a trigger; a state written
    without its move then no longer matches the history, which the audit reports."""
    victims, url = owned
    assert audited(url, capsys)[0] == 0
    guard = "entities_still" if victims.raw.kind == "sqlite" else "entities_guard"
    disable(victims.raw, OE, guard)
    commit(
        victims.raw,
        f"UPDATE {OE} SET state = 'in_flight', version = version + 1 WHERE key = 'paid'",
    )
    code, out = audited(url, capsys)
    assert code == 1 and "history ends in 'succeeded' but the entity is 'in_flight'" in out, out


def test_replication_role_replica_skips_every_guard_and_the_audit_sees_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """On PostgreSQL a superuser's ``session_replication_role = replica`` fires no
    ordinary trigger: a deleted history is then accepted, and reported by the audit."""
    with attacked("postgres", tmp_path) as victims:
        commit(victims.raw, "SET session_replication_role = replica")
        commit(victims.raw, f"DELETE FROM {OH} WHERE entity = 'paid'")
        code, out = audited(victims.store.url, capsys)
    assert code == 1 and "history ends in 'in_flight' but the entity is 'succeeded'" in out, out


def test_a_forged_context_is_reported_by_the_audit(
    owned: tuple[Victims, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 13 item 5: an Irreversible effect moved to executing under a forged
    ``tier=compensable`` (however the database was made to take it) is a breach."""
    victims, url = owned
    raw = victims.raw
    forged_event = raw.attempt(
        [
            f"INSERT INTO {H} VALUES ('irr', 1, 'pending', 'executing', 'execute', 'proxy', "
            f"NULL, '{COMPENSABLE}', 0, 1)",
            f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'",
        ]
    )
    if forged_event is None:  # a schema that takes it: write it for real
        commit(raw, "BEGIN")
        commit(
            raw,
            f"INSERT INTO {H} VALUES ('irr', 1, 'pending', 'executing', 'execute', "
            f"'proxy', NULL, '{COMPENSABLE}', 0, 1)",
        )
        commit(raw, f"UPDATE {E} SET state = 'executing', moves = 1 WHERE key = 'irr'")
        commit(raw, "COMMIT")
    else:  # this schema refuses it: only its owner can, with the guard off
        disable(raw, E, "entities_legal_move" if raw.kind == "sqlite" else "entities_guard")
        commit(
            raw,
            move("irr", E, to="executing", trigger="execute", actor="proxy", context=COMPENSABLE),
        )
    code, out = audited(url, capsys)
    assert code == 1 and "tier='compensable', not 'irreversible'" in out, out


def test_a_forged_derived_value_is_taken_by_the_database_but_reported_by_the_audit(
    owned: tuple[Victims, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The limit of the database's guard: a request's ``side_effects`` is derived from its
    nodes at each move, which the database cannot re-run, so a request failed (its
    reservation released) under a forged ``none`` while a node with a side effect is
    submitting is accepted. The audit derives it from the nodes and reports it."""
    victims, url = owned
    store = victims.store
    none = {"side_effects": "none"}
    request, _ = store.insert("request", "r1")
    for trigger, actor in (
        ("validate", "system"),
        ("request_approval", "system"),
        ("approve", "operator"),
        ("start", "system"),
    ):
        started = {PLAN_DIGEST: plan_digest(None)} if trigger == "start" else None  # engine's
        request = store.move(request, trigger, actor=actor, context=none, detail=started)
    node, _ = store.insert(
        "node",
        "r1/send",
        scope="r1",
        context={"kind": "action"},
        data={"name": "send", "has_side_effect": True, "predecessors": []},
    )
    for trigger, actor in (("wake", "planner"), ("prepare", "executor"), ("submit", "executor")):
        node = store.move(node, trigger, actor=actor)
    assert audited(url, capsys)[0] == 0
    forged = move(
        "r1",
        "request_entities",
        to="failed",
        trigger="fail",
        actor="system",
        context='{"side_effects":"none"}',
    )
    assert victims.raw.attempt([forged]) is None  # the documented limit: the database takes it
    commit(victims.raw, forged)
    code, out = audited(url, capsys)
    assert code == 1 and "[no-auto-terminal-money-in-flight] request 'r1'" in out, out


def test_sqlite_refuses_to_open_with_a_dropped_guard_until_it_is_repaired(tmp_path: Path) -> None:
    """Anyone who can write the SQLite file can drop a trigger. The store used to run its
    schema (IF NOT EXISTS) on every open, putting the guard back silently and hiding what
    was written meanwhile; now it refuses to open, naming the trigger, until the owner runs
    ``machines repair`` (tests/test_attacks_tampering.py covers the whole path)."""
    with attacked("sqlite", tmp_path) as victims:
        victims.raw.query('DROP TRIGGER "outcome_entities_final_data"')
        assert (
            victims.raw.attempt(
                [f"UPDATE {OE} SET data = '{{}}', version = version + 1 WHERE key = 'paid'"]
            )
            is None
        )
        with pytest.raises(StoreTampered, match="trigger outcome_entities_final_data: missing"):
            open_store(victims.store.url)
