"""Kept heads (issue 27, tamper-evident history): a rewrite by the database's owner, with
the guards switched off and put back exactly as installed, leaves a store the guard check
and the audit accept; the heads kept before it name every such rewrite, with its place,
on SQLite and PostgreSQL, and later legal moves are no alarm."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from machines.checks import heads
from machines.checks.audit import judge_store
from machines.cli import main
from machines.spec.loader import bundled_spec_dir, load
from machines.store import BUNDLED, open_store
from machines.systems.exactly_once import ExactlyOnce
from tests.raw_sql import DATABASES, OE, Victims, attacked

OH = '"outcome_history"'
SPECS = {m: load(m) for m in BUNDLED}


@pytest.fixture(params=DATABASES)
def victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        yield found


def audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def owner(
    victims: Victims,
    guards: dict[str, Sequence[str]],
    statement: str,
    params: tuple[Any, ...] = (),
) -> None:
    """``statement`` run by the database's owner with the guards named (per dialect) off,
    then put back exactly as they were installed: the store's guard check finds nothing."""
    raw = victims.raw
    if raw.kind == "sqlite":
        saved = [
            raw.lite.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,)
            ).fetchone()[0]
            for name in guards["sqlite"]
        ]
        for name in guards["sqlite"]:
            raw.lite.execute(f'DROP TRIGGER "{name}"')
        raw.lite.execute(statement.replace("%s", "?"), params)
        for sql in saved:
            raw.lite.execute(sql)
    else:
        pairs = [g.split(" ON ") for g in guards["postgres"]]
        for name, table in pairs:
            raw.pg.execute(f'ALTER TABLE {table} DISABLE TRIGGER "{name}"'.encode())
        raw.pg.execute(statement.encode(), params)
        for name, table in pairs:
            raw.pg.execute(f'ALTER TABLE {table} ENABLE TRIGGER "{name}"'.encode())


HISTORY_UPDATE = {
    "sqlite": ["outcome_history_no_update"],
    "postgres": [f"outcome_history_append_only ON {OH}"],
}
DELETES = {
    "sqlite": ["outcome_history_no_delete", "outcome_entities_no_delete"],
    "postgres": [f"outcome_history_append_only ON {OH}", f"outcome_entities_no_delete ON {OE}"],
}
FINAL_DATA = {
    "sqlite": ["outcome_entities_final_data"],
    "postgres": [f"outcome_entities_guard ON {OE}"],
}


def kept(victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The heads of the settled store, kept; then a legal move, which is no alarm."""
    file = tmp_path / "heads.json"
    code, out = audit(capsys, "--from-store", victims.store.url, "--save-heads", str(file))
    assert (
        code == 0
        and "kept the heads of 7 entities, the registry and the record of repairs in" in out
    )
    assert "sha256 " in out, out
    ExactlyOnce(victims.store, worker="later").run("later", lambda: 1)
    code, out = audit(capsys, "--from-store", victims.store.url, "--check-heads", str(file))
    assert code == 0 and "checked against the heads of 7 entities kept in" in out, out
    assert hashlib.sha256(file.read_bytes()).hexdigest() in out
    return file


def rewritten(victims: Victims, file: Path, capsys: pytest.CaptureFixture[str], *says: str) -> None:
    """The plain audit accepts the rewritten store; against the kept heads it is named."""
    code, out = audit(capsys, "--from-store", victims.store.url)
    assert code == 0, out
    code, out = audit(capsys, "--from-store", victims.store.url, "--check-heads", str(file))
    assert code == 1, out
    for text in says:
        assert text in out, out


def test_an_event_edited_by_the_owner_is_named(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = kept(victims, tmp_path, capsys)
    owner(
        victims,
        HISTORY_UPDATE,
        f"UPDATE {OH} SET at = at + 1 WHERE entity = 'paid' AND seq = 1",
    )
    rewritten(
        victims,
        file,
        capsys,
        "[history-kept] outcome 'paid': its first 1 events are not the ones kept: an event "
        "at or before #1 was edited",
    )


def test_an_entity_deleted_with_its_history_is_named(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = kept(victims, tmp_path, capsys)
    owner(victims, DELETES, f"DELETE FROM {OH} WHERE entity = 'refused'")
    owner(victims, DELETES, f"DELETE FROM {OE} WHERE key = 'refused'")
    rewritten(
        victims,
        file,
        capsys,
        "[history-kept] outcome 'refused': was kept with 1 moves and is gone: deleted "
        "outside machines",
    )


def test_finished_data_changed_by_the_owner_is_named(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = kept(victims, tmp_path, capsys)
    with victims.store.transaction() as tx:
        row = tx.get("outcome", "paid")
    assert row is not None
    forged = json.dumps({**row.data, "result": {"amount": 500}})
    owner(
        victims,
        FINAL_DATA,
        f"UPDATE {OE} SET data = %s, version = version + 1 WHERE key = 'paid'",
        (forged,),
    )
    rewritten(
        victims,
        file,
        capsys,
        "[history-kept] outcome 'paid': its data changed since it was kept finished in succeeded",
    )


def test_the_chain_names_each_kind_of_rewrite() -> None:
    """Edit, insertion, deletion and reordering of events each change the head; the same
    history gives the same head."""
    from machines.checks.snapshots import Entity
    from machines.runtime.history import TransitionEvent

    def event(seq: int, dest: str, at: float) -> TransitionEvent:
        return TransitionEvent("outcome", "k", seq, "in_flight", dest, "t", "worker", None, {}, at)

    base = (event(1, "a", 1.0), event(2, "b", 2.0), event(3, "c", 3.0))
    entity = Entity("outcome", "k", "c", {}, {}, None, base)

    def link(history: tuple[TransitionEvent, ...]) -> str:
        return heads.chain(Entity("outcome", "k", "c", {}, {}, None, history), (1, 1, 1), 3)

    assert link(base) == heads.chain(entity, (1, 1, 1), 3)
    changed = [
        (base[0], base[1]._replace(at=2.5), base[2]),
        (base[0], event(2, "x", 2.0), base[1], base[2]),
        (base[0], base[2], base[1]),
        (base[1], base[0], base[2]),
    ]
    assert len({link(base), *(link(h) for h in changed)}) == 1 + len(changed)
    assert heads.chain(entity, (1, 1, 2), 3) != heads.chain(entity, (1, 1, 1), 3)
    other = Entity("outcome", "other", "c", {}, {}, None, base)
    assert heads.chain(other, (1, 1, 1)) != heads.chain(entity, (1, 1, 1))


BAD_FILES = {
    "not JSON": (b"{", "not a heads file (not JSON"),
    "another format": (b'{"format": "x", "heads": []}', "not a heads file of this release"),
    "a head of the wrong shape": (
        b'{"format": "machines-heads/1", "heads": [{"machine": "outcome"}]}',
        "head 1 is not one machines writes",
    ),
    "a head twice": (
        b'{"format": "machines-heads/1", "heads": ['
        + (
            b'{"machine": "outcome", "key": "k", "moves": 0, "link": "l", "state": "s",'
            b' "finished": null, "annotations": []},'
        )
        * 2
        + b"{}]}",
        "head 2 names outcome 'k' again",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_heads_file_that_cannot_be_trusted_is_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, says = BAD_FILES[case]
    file = tmp_path / "heads.json"
    file.write_bytes(text)
    url = f"sqlite:///{tmp_path / 'store.db'}"

    open_store(url).close()
    code, out = audit(capsys, "--from-store", url, "--check-heads", str(file))
    assert code == 2 and says in out and "Traceback" not in out, out


def test_heads_options_need_a_store_and_a_writable_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    open_store(url).close()
    log = tmp_path / "log.jsonl"
    log.write_text("")
    with pytest.raises(SystemExit) as caught:
        main(["audit", str(log), "--save-heads", str(tmp_path / "h.json")])
    assert caught.value.code == 2
    code, out = audit(capsys, "--from-store", url, "--save-heads", str(tmp_path / "no" / "h"))
    assert code == 2 and "cannot write the kept heads" in out, out
    code, out = audit(capsys, "--from-store", url, "--check-heads", str(tmp_path / "none"))
    assert code == 2 and "cannot read the kept heads" in out, out
    assert not list(tmp_path.glob(".*.tmp"))


def one_key_store(tmp_path: Path) -> str:
    """A SQLite store holding one settled outcome, ``k``: its URL."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    try:
        ExactlyOnce(store, worker="w").run("k", lambda: 1)
    finally:
        store.close()
    return url


def test_judge_store_checks_heads_given_in_python(tmp_path: Path) -> None:
    url = one_key_store(tmp_path)
    assert judge_store(url, SPECS).heads == {}
    found = judge_store(url, SPECS, keep_heads=True)
    assert set(found.heads) == {
        ("outcome", "k"),
        heads.RECORD_OF_REPAIRS,
        *((heads.DEFINITIONS, f"definitions {m}") for m in SPECS),
    }
    forged = {("outcome", "k"): heads.Head(1, "0" * 64, "succeeded")}
    assert [b.invariant for b in judge_store(url, SPECS, forged).breaches] == ["history-kept"]


VERSION = {
    "sqlite": ["request_entities_version"],
    "postgres": ['request_entities_guard ON "request_entities"'],
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ('data = \'{"note": "forged"}\'', "its data changed without a write (its version is still"),
        ("version = version - 1", "its version went back from"),
    ],
)
def test_a_live_row_rewritten_without_a_write_is_named(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, says: str
) -> None:
    file = kept(victims, tmp_path, capsys)
    owner(victims, VERSION, f"UPDATE \"request_entities\" SET {change} WHERE key = 'req'")
    rewritten(victims, file, capsys, f"[history-kept] request 'req': {says}")


def test_heads_of_a_machine_not_judged_are_named_not_taken_for_deleted(tmp_path: Path) -> None:
    url = one_key_store(tmp_path)
    found = judge_store(url, SPECS, keep_heads=True).heads
    kept = {**found, ("retired", "r-1"): heads.Head(0, "0" * 64, "idle")}
    breaches = judge_store(url, SPECS, kept).breaches
    assert [(b.machine, b.key) for b in breaches] == [("retired", "*")]
    assert "whose definition was not given" in breaches[0].message


def test_a_row_count_of_moves_rewritten_is_named_by_the_plain_audit(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider: ``moves`` rewritten with the guards off (which makes a reclaim fail for
    ever) was seen by neither the audit nor the kept heads."""
    owner(victims, VERSION_OUTCOME, f"UPDATE {OE} SET moves = 0 WHERE key = 'refused'")
    code, out = audit(capsys, "--from-store", victims.store.url)
    assert code == 1 and "the row counts 0 moves and its history holds 1 events" in out, out


VERSION_OUTCOME = {
    "sqlite": [
        "outcome_entities_version",
        "outcome_entities_still",
        "outcome_entities_legal_move",
        "outcome_entities_record",
        "outcome_entities_fixed",
    ],
    "postgres": [f"outcome_entities_guard ON {OE}", f"outcome_entities_record ON {OE}"],
}


def test_creation_order_rewritten_and_the_record_of_repairs_dropped_are_named(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, spec_dir = victims.store.url, str(bundled_spec_dir())
    if victims.raw.kind == "sqlite":
        victims.raw.lite.execute('DROP TRIGGER "outcome_entities_still"')
    else:
        victims.raw.pg.execute(
            f'ALTER TABLE {OE} DISABLE TRIGGER "outcome_entities_guard"'.encode()
        )
    assert main(["repair", url, "--spec-dir", spec_dir, "--by", "ops"]) == 0
    file = kept(victims, tmp_path, capsys)
    owner(
        victims, VERSION_OUTCOME, f"UPDATE {OE} SET created_at = created_at - 5 WHERE key = 'paid'"
    )
    victims.raw.attempt([])  # nothing: the raw connection stays usable
    if victims.raw.kind == "sqlite":
        victims.raw.lite.execute("DROP TABLE machines_repairs")
    else:
        victims.raw.pg.execute(b"DROP TABLE machines_repairs")
    code, out = audit(capsys, "--from-store", url, "--check-heads", str(file))
    assert code == 1, out
    assert "[history-kept] outcome 'paid': its creation order or time changed" in out
    assert (
        "[history-kept] store 'repairs': the record of repairs held 1 when kept and now "
        "holds 0" in out
    )


def test_a_key_given_twice_in_stored_json_is_refused_naming_it(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider: a finished entity's data rewritten to give ``result`` twice read as the old
    result in Python and as the forged one in SQLite's own json_extract; neither the audit
    nor the heads saw it. A stored object that gives a key twice is now refused on read,
    and the audit names the entity as one it cannot read (and judges the rest)."""
    with victims.store.transaction() as tx:
        row = tx.get("outcome", "paid")
    assert row is not None
    text = json.dumps(dict(row.data))[:-1] + ', "result": {"amount": 500}}'
    owner(
        victims,
        FINAL_DATA,
        f"UPDATE {OE} SET data = %s, version = version + 1 WHERE key = 'paid'",
        (text,),
    )
    code, out = audit(capsys, "--from-store", victims.store.url)
    assert (
        code == 1
        and "[append-only-history] outcome 'paid': cannot be read (outcome 'paid': the "
        "database holds a text that gives the key 'result' twice"
        in out
    ), out


def test_heads_of_data_no_float_can_hold_are_kept(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider: a number like 1e400 in a live row's data, which an application session may
    write, made --save-heads crash with a traceback."""
    sql = (
        f'UPDATE {OE} SET data = \'{{"owner": "w", "x": 1e400}}\', '
        "version = version + 1 WHERE key = 'busy'"
    )
    assert victims.raw.attempt([sql]) is None
    if victims.raw.kind == "sqlite":
        victims.raw.lite.execute(sql)
    else:
        victims.raw.pg.execute(sql.encode())
    file = tmp_path / "heads.json"
    _, out = audit(capsys, "--from-store", victims.store.url, "--save-heads", str(file))
    assert "Traceback" not in out and "kept the heads of" in out, out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_fifo_given_as_the_heads_file_is_refused_not_waited_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    fifo = tmp_path / "heads.fifo"
    os.mkfifo(fifo)
    code, out = audit(capsys, "--from-store", url, "--check-heads", str(fifo))
    assert code == 2 and "not a regular file" in out, out
    # outsider batch 14: saving to it waited for a reader forever
    code, out = audit(capsys, "--from-store", url, "--save-heads", str(fifo))
    assert code == 2 and "not a regular file" in out, out


def test_a_definition_rewritten_in_the_registry_is_named(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider, second batch: an old version's text rewritten in the registry, its digest
    and fingerprint recomputed, let a forged reclaim judged by it pass both the audit and
    the kept heads. The heads now keep every registry row."""
    file = kept(victims, tmp_path, capsys)
    registry_off = {
        "sqlite": ["machines_definitions_frozen_update"],
        "postgres": ["machines_definitions_frozen ON machines_definitions"],
    }
    owner(
        victims,
        registry_off,
        "UPDATE machines_definitions SET installed_at = installed_at + 1 WHERE machine = 'outcome'",
    )
    code, out = audit(capsys, "--from-store", victims.store.url, "--check-heads", str(file))
    assert code == 1, out
    assert "[history-kept] store 'definitions outcome': the registry held 1 versions" in out


def test_the_digest_printed_is_of_the_heads_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 38 (a A4): ``--check-heads`` judged the file as read first and printed
    the sha256 of the file as read after the audit. A forged file was judged (OK), the
    genuine one put back meanwhile, and the genuine digest, the one kept apart, printed.
    The digest is now of the very bytes judged."""
    url = one_key_store(tmp_path)
    genuine_file, forged_file = tmp_path / "heads.json", tmp_path / "forged.json"
    assert audit(capsys, "--from-store", url, "--save-heads", str(genuine_file))[0] == 0
    genuine = genuine_file.read_bytes()
    with open_store(url) as store:
        ExactlyOnce(store, worker="w").run("later", lambda: 2)
    assert audit(capsys, "--from-store", url, "--save-heads", str(forged_file))[0] == 0
    genuine_file.write_bytes(forged_file.read_bytes())
    read = heads.load

    def put_back_once_read(path: Path) -> Any:
        kept = read(path)
        genuine_file.write_bytes(genuine)
        return kept

    monkeypatch.setattr(heads, "load", put_back_once_read)
    code, out = audit(capsys, "--from-store", url, "--check-heads", str(genuine_file))
    assert code == 0, out
    assert hashlib.sha256(forged_file.read_bytes()).hexdigest() in out, out
    assert hashlib.sha256(genuine).hexdigest() not in out, out


def test_saving_heads_never_writes_through_a_planted_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 38 (a A3): the heads were written to ``.NAME.PID.tmp`` opened as it
    was, so a link planted at that name pointed the write at the store's own database,
    which it overwrote. The temporary file is now a new one of its own (O_EXCL)."""
    url = one_key_store(tmp_path)
    database = Path(url.removeprefix("sqlite:///"))
    before = database.read_bytes()
    folder = tmp_path / "kept"
    folder.mkdir()
    for pid in {os.getpid(), *range(os.getpid() - 2, os.getpid() + 3)}:
        (folder / f".today.json.{pid}.tmp").symlink_to(database)
    code, out = audit(capsys, "--from-store", url, "--save-heads", str(folder / "today.json"))
    assert code == 0, out
    assert database.read_bytes() == before
    assert json.loads((folder / "today.json").read_text())["format"] == heads.FORMAT
