"""The record of repairs is written by a repair alone (issue 27, outsider batch 16, 18).

The outsider inserted rows into ``machines_repairs`` with the application's rights: a
forged repair was printed by every audit as if it had happened (control characters and
all), and a row with ``found = 'not json'`` or ``at = 1e300`` made the audit and
``machines pending`` end in a traceback. Now the database refuses a row no repair writes
(PostgreSQL: any row from a role that does not own the store), a store that holds one from
before names it in the audit, and every report prints stored text escaped."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from machines.cli import main
from machines.store import open_store
from machines.store.ddl import (
    REPAIRS_INSERT_TRIGGER,
    REPAIRS_MALFORMED,
    REPAIRS_OWNER,
    sqlite_repairs,
    statements,
)
from machines.store.ddl_postgres import postgres_repairs
from tests.raw_sql import DATABASES, Victims, attacked

INSERT = "INSERT INTO machines_repairs (at, person, found) VALUES ({p}, {p}, {p})"
MALFORMED = {
    "a time past any calendar": (1e300, "ops", '["x"]'),
    "a time before 1970": (-1.0, "ops", '["x"]'),
    "a person on two lines": (1000.0, "ops\nroot", "[]"),
    "a person who is an escape sequence": (1000.0, "ops\x1b[2J", "[]"),
    "nobody": (1000.0, "  ", "[]"),
    "found that is no JSON": (1000.0, "ops", "not json"),
    "found that is no list": (1000.0, "ops", '{"a": "b"}'),
    "found that lists no texts": (1000.0, "ops", "[1, null]"),
}


@pytest.fixture(params=DATABASES)
def victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        found.store.close()
        yield found


def with_record_of_repairs(victims: Victims, *, guarded: bool = True) -> None:
    """The record of repairs as a repair makes it (``guarded=False``: as an earlier
    release made it, without the guard on what is recorded)."""
    raw = victims.raw
    if raw.kind == "sqlite":
        for statement in statements(sqlite_repairs()):
            raw.lite.execute(statement)
        if not guarded:
            raw.lite.execute(f"DROP TRIGGER {REPAIRS_INSERT_TRIGGER}")
        return
    raw.pg.execute(postgres_repairs().encode())
    if not guarded:
        raw.pg.execute(f"DROP TRIGGER {REPAIRS_INSERT_TRIGGER} ON machines_repairs".encode())
        raw.pg.execute(f"DROP FUNCTION {REPAIRS_INSERT_TRIGGER}()".encode())


@pytest.mark.parametrize("row", list(MALFORMED))
def test_the_database_refuses_a_record_no_repair_writes(victims: Victims, row: str) -> None:
    with_record_of_repairs(victims)
    refused = victims.raw.attempt([INSERT], MALFORMED[row])
    assert refused is not None and REPAIRS_MALFORMED in str(refused), refused
    assert victims.raw.attempt([INSERT], (1000.0, "Zoë Ops", '["the store: x"]')) is None


def test_sqlite_a_recorded_repair_is_never_replaced(tmp_path: Path) -> None:
    """Outsider batch 17 (a06): ``INSERT OR REPLACE`` at a recorded repair's rowid
    deleted it (REPLACE fires no delete trigger) and put a forged one in its place."""
    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        with_record_of_repairs(victims)
        victims.raw.lite.execute(INSERT.replace("{p}", "?"), (1000.0, "ops", '["x"]'))
        refused = victims.raw.attempt(
            [
                "INSERT OR REPLACE INTO machines_repairs (rowid, at, person, found) "
                "VALUES (1, 5.0, 'nobody', '[\"nothing was wrong\"]')"
            ]
        )
        assert refused is not None and REPAIRS_MALFORMED in str(refused)
        assert victims.raw.query("SELECT person FROM machines_repairs") == [("ops",)]


def test_postgres_only_the_stores_owner_records_a_repair(tmp_path: Path) -> None:
    """The application's role, granted INSERT on every table, still cannot add a repair."""
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        with_record_of_repairs(victims)
        pg, role = victims.raw.pg, f"app_{uuid.uuid4().hex[:8]}"
        (schema,) = pg.execute(b"SELECT current_schema()").fetchone() or ("",)
        pg.execute(f"CREATE ROLE {role}".encode())
        try:
            pg.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}'.encode())
            pg.execute(f"GRANT INSERT, SELECT ON machines_repairs TO {role}".encode())
            refused = victims.raw.attempt(
                [f"SET LOCAL ROLE {role}", INSERT], (1000.0, "ops", '["the store: x"]')
            )
            assert refused is not None and REPAIRS_OWNER in str(refused), refused
        finally:
            pg.execute(f"DROP OWNED BY {role}".encode())
            pg.execute(f"DROP ROLE {role}".encode())


def test_rows_written_before_the_guard_are_named_never_a_crash(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record of repairs without its guard (dropped by the owner, or made before the
    guard existed) holds rows no repair wrote: the audit names the missing guard and each
    row (``guards-intact``, with its row) and prints every stored text escaped; ``pending``
    and a writable open refuse, naming the missing guard (outsider batch 17, a16: it was
    taken for an older store's and quietly put back); ``machines repair`` puts it back,
    recorded, after which such a row is refused and the old rows stay named."""
    from machines.spec.loader import bundled_spec_dir
    from machines.store.integrity import StoreTampered

    with_record_of_repairs(victims, guarded=False)
    raw, url = victims.raw, victims.store.url
    p = "?" if raw.kind == "sqlite" else "%s"
    rows = [
        (1e300, "ops", '["x"]'),
        (1000.0, "ops", "not json"),
        (1000.0, "ops\x1b]0;owned\x07", "[]"),
        (2000.0, "mallory", '["\\u001b[2Jall is well"]'),  # well formed, text escaped
    ]
    for row in rows:
        if raw.kind == "sqlite":
            raw.lite.execute(INSERT.replace("{p}", p), row)
        else:
            raw.pg.execute(INSERT.replace("{p}", p).encode(), row)
    capsys.readouterr()
    code = main(["audit", "--from-store", url])
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"trigger {REPAIRS_INSERT_TRIGGER}" in out and "missing" in out, out
    for number in (1, 2, 3):
        assert f"[guards-intact] store 'record of repairs, row {number}'" in out, out
    assert "record of repairs, row 4" not in out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07" in out and "by mallory: \\x1b[2Jall is well" in out, out
    assert main(["pending", url]) == 2
    with pytest.raises(StoreTampered, match=REPAIRS_INSERT_TRIGGER):
        open_store(url)
    spec_dir = str(bundled_spec_dir())
    assert main(["repair", url, "--spec-dir", spec_dir, "--by", "ops"]) == 0
    open_store(url).close()
    refused = raw.attempt([INSERT], (1e300, "ops", "[]"))
    assert refused is not None and REPAIRS_MALFORMED in str(refused)
    assert main(["audit", "--from-store", url]) == 1  # the rows from before stay named


def test_the_record_of_repairs_dropped_whole_is_named(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 18 (a16 variant): the whole record dropped (through the
    application's SQLite connection, or by the PostgreSQL owner) left an audit with exit
    0, as if no repair had ever been made. Every store is installed with its record of
    repairs, so a missing one is a ``guards-intact`` breach, a writable open refuses, and
    ``machines repair`` puts it back (and records itself in it)."""
    from machines.spec.loader import bundled_spec_dir
    from machines.store.integrity import StoreTampered

    raw, url = victims.raw, victims.store.url
    assert "machines_repairs" in raw.tables()
    if raw.kind == "sqlite":
        raw.lite.execute("DROP TABLE machines_repairs")
    else:
        raw.pg.execute(b"DROP TABLE machines_repairs CASCADE")
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 1
    out = capsys.readouterr().out
    assert "[guards-intact]" in out and "store 'table machines_repairs': missing" in out, out
    with pytest.raises(StoreTampered, match="machines_repairs"):
        open_store(url)
    spec_dir = str(bundled_spec_dir())
    assert main(["repair", url, "--spec-dir", spec_dir, "--by", "ops"]) == 0
    open_store(url).close()
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 0
    assert "table machines_repairs: missing" in capsys.readouterr().out


def test_a_repair_given_a_machine_the_store_lacks_is_refused_changing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 45 (c F5): definitions naming a machine the store lacks were
    repaired with that machine ignored, and the audit the repair then advised failed on
    it. The repair refuses, naming the machine and those to give."""
    import shutil

    from machines.spec.loader import bundled_spec_dir, load

    (tmp_path / "specs").mkdir()
    for name in ("outcome", "effect"):
        shutil.copy(bundled_spec_dir() / f"{name}.yaml", tmp_path / "specs")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url, [load("outcome")]).close()
    code = main(["repair", url, "--spec-dir", str(tmp_path / "specs"), "--by", "alice"])
    said = capsys.readouterr()
    assert code == 2, said
    assert "the store has no machine 'effect'" in said.out and "(outcome)" in said.out


def test_the_audit_a_repair_advises_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 46 (b 45): a repair whose definitions came from the project (no
    ``--spec-dir``) advised ``machines audit ... --spec-dir None``, which fails as written.
    It names the folder it used, quoted for a shell, and the command runs."""
    import shlex
    import shutil
    import sqlite3

    from machines.spec.loader import bundled_spec_dir

    shutil.copytree(bundled_spec_dir(), tmp_path / "specs")
    monkeypatch.setenv("MACHINES_SPEC_DIR", str(tmp_path / "specs"))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    conn = sqlite3.connect(tmp_path / "store.db")
    conn.execute("DROP TRIGGER outcome_entities_legal_move")
    conn.commit()
    conn.close()
    assert main(["repair", url, "--by", "alice"]) == 0
    said = capsys.readouterr().out
    advised = shlex.split(said.split("judge the data written meanwhile: ", 1)[1])
    assert advised[:2] == ["machines", "audit"] and "None" not in advised, said
    assert main(advised[1:]) == 0, capsys.readouterr()
