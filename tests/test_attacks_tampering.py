"""A store verifies its own guards on every open (issue 27, items 3-5).

The outsider's attacks between two opens: a forged "next version" registry row (which
made every later open fail and could not be removed), a SQLite guard trigger replaced by
a no-op of the same name, a legal-moves table re-made with a forged move, PostgreSQL
triggers disabled, a guard function replaced by ``RETURN NEW``, ``session_replication_role
= replica`` set for a role. Each was accepted by every later open. Now a writable open
refuses with ``StoreTampered`` naming what differs, a read-only open (the audit) names it
as a ``guards-intact`` breach, ``machines migrate`` refuses too, and ``machines repair``
puts the guards back, recorded, after which the illegal writes are refused again."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from machines.cli import main
from machines.errors import EffectIndeterminate
from machines.spec.loader import bundled_spec_dir
from machines.store import open_store
from machines.store.integrity import StoreTampered
from machines.systems.exactly_once import ExactlyOnce, not_sent
from tests.conftest import SpecCopy, require_postgres, transition
from tests.raw_sql import DATABASES, OE, OM, Victims, _raise, attacked

ILLEGAL = f"UPDATE {OE} SET state = 'in_flight', version = version + 1 WHERE key = 'paid'"
"""A state written without its move: every intact store refuses it."""


@pytest.fixture(params=DATABASES)
def victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        found.store.close()
        yield found


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def sql(victims: Victims, *statements: str) -> None:
    """Statements the database's owner runs, committed."""
    raw = victims.raw
    for statement in statements:
        if raw.kind == "sqlite":
            raw.lite.execute(statement)
        else:
            raw.pg.execute(statement.encode())


def refused_open(victims: Victims, *says: str) -> StoreTampered:
    with pytest.raises(StoreTampered) as caught:
        open_store(victims.store.url)
    for text in says:
        assert text in str(caught.value), str(caught.value)
    assert f"machines repair '{victims.store.url}'" in str(caught.value)
    return caught.value


def repaired(victims: Victims, capsys: pytest.CaptureFixture[str], *says: str) -> str:
    """The audit names the tampering, ``repair`` puts the guards back, the store opens,
    the illegal write is refused, and the audit names the repair."""
    url, spec_dir = victims.store.url, str(bundled_spec_dir())
    code, out = run(capsys, "audit", "--from-store", url)
    assert code == 1 and "[guards-intact]" in out, out
    for text in says:
        assert text in out, out
    code, out = run(capsys, "repair", url, "--spec-dir", spec_dir, "--dry-run", "--by", "ops")
    assert code == 0 and "dry run" in out, out
    refused_open(victims)
    code, out = run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops-7")
    assert code == 0 and "repaired" in out and "recorded" in out, out
    open_store(url).close()
    assert victims.raw.attempt([ILLEGAL]) is not None
    code, out = run(capsys, "audit", "--from-store", url)
    assert "[guards-intact]" not in out and "guards repaired" in out and "by ops-7" in out, out
    code, again = run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops-7")
    assert code == 0 and "nothing to repair" in again, again
    return out


def test_an_intact_store_opens_and_has_nothing_to_repair(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(victims.store.url).close()
    code, out = run(capsys, "repair", victims.store.url, "--spec-dir", str(bundled_spec_dir()))
    assert code == 0 and "nothing to repair" in out, out
    code, out = run(capsys, "audit", "--from-store", victims.store.url)
    assert code == 0 and "guards repaired" not in out, out


def test_a_dropped_guard_is_named_and_repaired(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite used to put a dropped trigger back silently on the next open, keeping the
    writes made meanwhile out of sight; PostgreSQL never noticed."""
    if victims.raw.kind == "sqlite":
        sql(victims, 'DROP TRIGGER "outcome_entities_still"')
        where = "trigger outcome_entities_still: missing"
    else:
        sql(victims, f'DROP TRIGGER "outcome_entities_guard" ON {OE}')
        where = "trigger outcome_entities_guard: missing"
    refused_open(victims, "machine 'outcome'", where)
    assert victims.raw.attempt([ILLEGAL]) is None  # the hole the owner made
    repaired(victims, capsys, audit_line(where))


def audit_line(difference: str) -> str:
    """How the audit names a difference of machine outcome: ``outcome 'OBJECT': WHAT``."""
    place, what = difference.split(": ", 1)
    return f"[guards-intact] outcome '{place}': {what}"


def test_a_guard_replaced_by_a_no_op_of_the_same_name_is_named(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    if victims.raw.kind == "sqlite":
        sql(
            victims,
            'DROP TRIGGER "outcome_entities_still"',
            f'CREATE TRIGGER "outcome_entities_still" BEFORE UPDATE ON {OE} WHEN 0 '
            "BEGIN SELECT 1; END",
        )
        where = "trigger outcome_entities_still: changed from the one generated"
    else:
        sql(
            victims,
            'CREATE OR REPLACE FUNCTION "outcome_entities_guard"() RETURNS trigger '
            "LANGUAGE plpgsql AS $body$ BEGIN RETURN NEW; END $body$",
        )
        where = "function outcome_entities_guard(): changed from the one generated"
    refused_open(victims, where)
    assert victims.raw.attempt([ILLEGAL]) is None
    repaired(victims, capsys, audit_line(where))


def test_a_forged_legal_move_is_named(victims: Victims, capsys: pytest.CaptureFixture[str]) -> None:
    """The legal-moves table re-made with a forged move (its frozen guards off, then back
    as generated): an illegal move would pass the guard that reads it."""
    forged = (
        f"INSERT INTO {OM} (source, dest, trigger, actor) "
        "VALUES ('succeeded', 'in_flight', 'undo', 'worker')"
    )
    if victims.raw.kind == "sqlite":
        found = victims.raw.lite.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
            (OM.strip('"'),),
        ).fetchall()
        sql(victims, *[f'DROP TRIGGER "{n}"' for n, _ in found], forged, *[s for _, s in found])
    else:
        sql(
            victims,
            f"ALTER TABLE {OM} DISABLE TRIGGER ALL",
            forged,
            f"ALTER TABLE {OM} ENABLE TRIGGER ALL",
        )
    refused_open(
        victims,
        "legal-moves table: a move the definition lacks: succeeded --undo (worker)--> in_flight",
    )
    repaired(victims, capsys, "outcome 'legal-moves table': a move the definition lacks")


def test_a_forged_registry_row_of_an_earlier_release_is_named_and_removed(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before this release the database took a forged next version; after it every open
    raised DefinitionChanged and the row could not be removed. Such a store (made here by
    switching the new guard off) is now named as tampered and repaired."""
    if victims.raw.kind == "sqlite":
        sql(victims, 'DROP TRIGGER "machines_definitions_installed"')
    else:
        sql(
            victims,
            'ALTER TABLE machines_definitions DISABLE TRIGGER "machines_definitions_installed"',
        )
    sql(
        victims,
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) SELECT machine, 2, 'forged', fingerprint, definition, 0 "
        "FROM machines_definitions WHERE machine = 'outcome'",
    )
    if victims.raw.kind == "postgres":  # the guard disabled is itself a difference
        sql(
            victims,
            'ALTER TABLE machines_definitions ENABLE TRIGGER "machines_definitions_installed"',
        )
    row = "row outcome version 2: added outside machines: the installed schema serves version 1"
    refused_open(victims, row)
    code, out = run(capsys, "migrate", victims.store.url, "--spec-dir", str(bundled_spec_dir()))
    assert code == 2 and row in out and "machines repair" in out, out
    repaired(victims, capsys, "[guards-intact] store 'row outcome version 2': added outside")


def test_triggers_disabled_on_postgres_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        sql(victims, f"ALTER TABLE {OE} DISABLE TRIGGER ALL")
        refused_open(victims, "trigger outcome_entities_guard: disabled")
        assert victims.raw.attempt([ILLEGAL]) is None
        repaired(victims, capsys, audit_line("trigger outcome_entities_guard: disabled"))


@pytest.mark.parametrize(
    "attribute", ["SECURITY DEFINER", "IMMUTABLE", "STABLE", "STRICT", "LEAKPROOF", "PARALLEL SAFE"]
)
def test_postgres_a_guard_functions_attribute_changed_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attribute: str
) -> None:
    """Same body, same search path, another attribute. Running as its owner, whoever moves
    would read and write through the guard with the owner's rights; ``IMMUTABLE`` (outsider
    batch 14) opened clean, the audit passed, and every later move failed after its effect
    ran, leaving the key in flight. Named, and repair puts it back."""
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        sql(victims, f'ALTER FUNCTION "outcome_entities_guard"() {attribute}')
        where = "function outcome_entities_guard(): changed from the one generated"
        refused_open(victims, where)
        repaired(victims, capsys, audit_line(where))
        found = victims.raw.pg.execute(
            "SELECT prosecdef, provolatile::text, proisstrict, proleakproof, proparallel::text "
            "FROM pg_proc WHERE proname = 'outcome_entities_guard' AND pronamespace = "
            "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        ).fetchone()
        assert found == (False, "v", False, False, "u")


@contextmanager
def own_database() -> Iterator[tuple[str, str]]:
    """A database of its own on the test server (its name and URL), dropped afterwards: a
    setting made for it cannot reach the stores other tests open meanwhile."""
    import psycopg

    base = require_postgres()
    database = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}".encode())
    try:
        yield database, base.rsplit("/", 1)[0] + f"/{database}"
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {database} WITH (FORCE)".encode())


def test_a_role_that_fires_no_trigger_is_refused() -> None:
    """``session_replication_role = replica`` set for a role turns every guard off in every
    session that role opens: the store refuses to open as that role, and also as any other
    (outsider F4: the setting was seen only in the opening session). ``local`` fires every
    guard, and is no alarm."""
    import psycopg

    with own_database() as (database, url):
        open_store(url).close()
        role = f"replica_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {role} LOGIN SUPERUSER".encode())
            try:
                admin.execute(
                    f"ALTER ROLE {role} IN DATABASE {database} "
                    "SET session_replication_role = local".encode()
                )
                open_store(url.replace("postgres@", f"{role}@", 1)).close()
                open_store(url).close()
                admin.execute(
                    f"ALTER ROLE {role} IN DATABASE {database} "
                    "SET session_replication_role = replica".encode()
                )
                as_role = url.replace("postgres@", f"{role}@", 1)
                refused_open_url(as_role, "session_replication_role: is 'replica'")
                refused_open_url(url, f"is set to 'replica' for {role} in {database}")
            finally:
                admin.execute(f"ALTER ROLE {role} IN DATABASE {database} RESET ALL".encode())
                admin.execute(f"DROP ROLE {role}".encode())


def refused_open_url(url: str, says: str) -> None:
    with pytest.raises(StoreTampered, match=says):
        open_store(url)


# -- issue 27 item 6: a raw edit of a lease ---------------------------------------------------


HOLDER_REMOVED = '{"owner": null, "lease_until": null, "runs": 1}'


@pytest.fixture(params=DATABASES)
def open_victims(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Victims]:
    with attacked(request.param, tmp_path) as found:
        yield found


def ran_again(victims: Victims, key: str) -> list[str]:
    """The next caller of ``key``: it must park the key, never run the effect."""
    calls: list[str] = []
    eo = ExactlyOnce(victims.store, worker="next")
    with pytest.raises(EffectIndeterminate, match="removed without a reclaim"):
        eo.run(key, lambda: calls.append(key))
    return calls


def test_a_lease_holder_removed_by_a_raw_update_parks_the_key(
    open_victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """``busy`` is held by a live worker; one UPDATE (version + 1, no move) removes its
    holder. The next caller used to take it for a reclaimed key and run the effect again."""
    victims = open_victims
    sql(
        victims,
        f"UPDATE {OE} SET data = '{HOLDER_REMOVED}', version = version + 1 WHERE key = 'busy'",
    )
    code, out = run(capsys, "audit", "--from-store", victims.store.url)
    assert code == 1 and "[exactly-once] outcome 'busy': in flight without a lease holder" in out, (
        out
    )
    assert ran_again(victims, "busy") == []


def test_a_reclaimed_key_changed_afterwards_parks_instead_of_running(
    open_victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reclaim frees the key for one fresh run, in the row version it wrote; a raw write
    after it (here: the data rewritten, version + 1) parks the key instead."""
    victims = open_victims
    eo = ExactlyOnce(victims.store, worker="w", classify=not_sent(ValueError))
    with pytest.raises(EffectIndeterminate):
        eo.run("k", _raise(RuntimeError("timed out after sending")))
    eo.reclaim("k", by="ops", reason="the provider says it never arrived")
    sql(victims, f"UPDATE {OE} SET data = data, version = version + 1 WHERE key = 'k'")
    code, out = run(capsys, "audit", "--from-store", victims.store.url)
    assert code == 1 and "but its reclaim wrote version" in out, out
    assert ran_again(victims, "k") == []


def test_a_reclaimed_key_untouched_runs_once_more(open_victims: Victims) -> None:
    eo = ExactlyOnce(open_victims.store, worker="w")
    with pytest.raises(EffectIndeterminate):
        eo.run("k", _raise(RuntimeError("timed out after sending")))
    eo.reclaim("k", by="ops", reason="the provider says it never arrived")
    calls: list[str] = []
    assert eo.run("k", lambda: calls.append("k") or "done") == "done"
    assert calls == ["k"]


# -- the doors of the check itself ---------------------------------------------------------


def test_a_dropped_newest_guard_is_named_never_taken_for_an_older_store(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (a16): the registry's installed-schema guard, when missing, was
    taken for a store an earlier release made, not named, and quietly put back by the next
    writable open; a row forged meanwhile went unseen. Its absence is now named like any
    guard's, and ``machines repair`` puts it back, recorded."""
    if victims.raw.kind == "sqlite":
        sql(victims, 'DROP TRIGGER "machines_definitions_installed"')
    else:
        sql(
            victims,
            'DROP TRIGGER "machines_definitions_installed" ON machines_definitions',
            'DROP FUNCTION "machines_definitions_installed"()',
        )
    code, out = run(capsys, "audit", "--from-store", victims.store.url)
    assert code == 1 and "machines_definitions_installed" in out and "missing" in out, out
    refused_open(victims, "machines_definitions_installed", "missing")
    url, spec_dir = victims.store.url, str(bundled_spec_dir())
    assert run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops")[0] == 0
    open_store(url).close()
    forged = (
        "INSERT INTO machines_definitions (machine, version, digest, fingerprint, definition, "
        "installed_at) VALUES ('outcome', 2, 'forged', 'forged', '{}', 0)"
    )
    assert "a row added by hand is refused" in str(victims.raw.attempt([forged]))


def widen(doc: dict[str, Any]) -> None:
    transition(doc, "indeterminate", "in_flight")["actor"] = ["caller", "operator"]


def test_repair_never_migrates(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repair reinstalls the version the store serves: other definitions are refused,
    naming the migration, and nothing changes."""
    other = SpecCopy(tmp_path / "other").edit("outcome", widen).path
    code, out = run(capsys, "repair", victims.store.url, "--spec-dir", str(other), "--by", "ops")
    assert code == 2 and "DefinitionChanged" not in out and "machines migrate" in out, out
    code, out = run(capsys, "repair", victims.store.url, "--spec-dir", str(tmp_path / "none"))
    assert code == 2 and "machines repair:" in out, out
    code, out = run(capsys, "repair", "memory://", "--spec-dir", str(bundled_spec_dir()))
    assert code == 2 and "sqlite:///path or postgresql://" in out, out


# -- the outsider's second batch: tamperings the first check let through ----------------------


def test_postgres_a_guard_narrowed_to_one_column_or_hidden_by_an_overload_is_named(
    tmp_path: Path,
) -> None:
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        sql(
            victims,
            f'DROP TRIGGER "outcome_entities_guard" ON {OE}',
            f'CREATE TRIGGER "outcome_entities_guard" BEFORE INSERT OR UPDATE OF data ON {OE} '
            'FOR EACH ROW EXECUTE FUNCTION "outcome_entities_guard"()',
        )
        refused_open(victims, "trigger outcome_entities_guard: changed")
    with attacked("postgres", tmp_path / "overload") as victims:
        victims.store.close()
        (body,) = victims.raw.pg.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = 'outcome_entities_guard' AND "
            "pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        ).fetchone()
        sql(
            victims,
            'CREATE OR REPLACE FUNCTION "outcome_entities_guard"() RETURNS trigger '
            "LANGUAGE plpgsql AS $b$ BEGIN RETURN NEW; END $b$",
            "SET check_function_bodies = off",
            'CREATE FUNCTION "outcome_entities_guard"(int) RETURNS trigger LANGUAGE plpgsql '
            f"AS $b${body}$b$",
        )
        refused_open(victims, "function outcome_entities_guard(): changed")


def test_postgres_a_schema_named_in_mixed_case_works(tmp_path: Path) -> None:
    import psycopg

    from tests.conftest import require_postgres

    server = require_postgres()
    schema = f"Tenant_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"'.encode())
    try:
        url = f"{server}?options=-csearch_path%3D%22{schema}%22"
        open_store(url).close()
        open_store(url).close()
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())


def test_sqlite_a_trigger_on_a_guarded_table_named_in_other_case_is_named(
    tmp_path: Path,
) -> None:
    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        sql(
            victims,
            'CREATE TRIGGER zz BEFORE INSERT ON "OUTCOME_HISTORY" BEGIN SELECT RAISE(IGNORE); END',
        )
        refused_open(victims, "trigger zz: not generated by machines")


def test_a_lease_expiry_rewritten_to_text_parks_the_key(open_victims: Victims) -> None:
    """A raw edit the database accepts (``lease_until`` = ``"soon"``) made the next caller
    crash with a TypeError, and the key stayed in flight for good."""
    victims = open_victims
    busy = '{"owner": "elsewhere", "lease_until": "soon", "runs": 1}'
    sql(victims, f"UPDATE {OE} SET data = '{busy}', version = version + 1 WHERE key = 'busy'")
    eo = ExactlyOnce(victims.store, worker="next")
    with pytest.raises(EffectIndeterminate, match="no readable expiry"):
        eo.run("busy", lambda: "ran")


def test_an_older_versions_guards_put_back_are_named_and_never_undo_the_migration(
    victims: Victims, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider F6: after a migration to version 2, the owner reinstalls version 1's own
    (genuine) guards. The store took the guards' word for its version, so the genuine
    version-2 row read as forged, and ``repair`` with the old definitions deleted it. Now
    the row is recognised as one a migration wrote: the store serves version 2, a repair
    with the old definitions is refused (it would migrate back), and one with version 2's
    puts its guards back, keeping both rows."""
    from machines.spec.loader import load
    from machines.store.ddl import sqlite_schema, statements
    from machines.store.ddl_postgres import postgres_schema
    from machines.store.migration import migrate
    from tests.migration_stores import load_dir, registry

    v2 = SpecCopy(tmp_path / "v2").edit("outcome", widen).path
    url = victims.store.url
    assert migrate(url, load_dir(v2)).applied
    old = load("outcome")
    if victims.raw.kind == "sqlite":
        triggers = victims.raw.lite.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name LIKE 'outcome_%'"
        ).fetchall()
        sql(victims, *(f'DROP TRIGGER "{t}"' for (t,) in triggers), 'DROP TABLE "outcome_moves"')
        sql(victims, *statements(sqlite_schema(old, 1)))
    else:
        sql(victims, 'DROP TABLE "outcome_moves"', postgres_schema(old, 1))
    says = "guards are those of version 1, but the store was migrated to version 2"
    with pytest.raises(StoreTampered, match=says):
        open_store(url, load_dir(v2))
    code, out = run(capsys, "repair", url, "--spec-dir", str(bundled_spec_dir()), "--by", "ops")
    assert code == 2 and "machines migrate" in out, out
    assert registry(url, load_dir(v2))["outcome"] == [1, 2]
    code, out = run(capsys, "repair", url, "--spec-dir", str(v2), "--by", "ops")
    assert code == 0 and says in out and "recorded" in out, out
    assert registry(url, load_dir(v2))["outcome"] == [1, 2]
    open_store(url, load_dir(v2)).close()
    assert victims.raw.attempt([ILLEGAL]) is not None


# -- the outsider's third batch: PostgreSQL tables changed around the guards -----------------

TABLE_CHANGES = {
    "a child table inherits the entities": (
        f"CREATE TABLE forged_rows () INHERITS ({OE})",
        "table outcome_entities: is inherited by another table",
    ),
    "the history's primary key dropped": (
        'ALTER TABLE "outcome_history" DROP CONSTRAINT "outcome_history_pkey"',
        "table outcome_history: constraint missing (dropped?): primarykeyentity,seq",
    ),
    "a CHECK dropped": (
        f'ALTER TABLE {OE} DROP CONSTRAINT "outcome_entities_moves_check"',
        "table outcome_entities: constraint missing (dropped?): checkmoves>=0",
    ),
    "row-level security on": (
        f"ALTER TABLE {OE} ENABLE ROW LEVEL SECURITY",
        "table outcome_entities: has row-level security on",
    ),
    "a rule that swallows moves": (
        f"CREATE RULE swallow AS ON UPDATE TO {OE} DO INSTEAD NOTHING",
        "table outcome_entities: has a rule",
    ),
    "the history unlogged": (
        'ALTER TABLE "outcome_history" SET UNLOGGED',
        "table outcome_history: is not logged",
    ),
    "a NOT NULL dropped": (
        f"ALTER TABLE {OE} ALTER COLUMN version DROP NOT NULL",
        "table outcome_entities: columns (",
    ),
    "a UNIQUE index added": (
        f"CREATE UNIQUE INDEX one_per_state ON {OE} (state, scope)",
        "table outcome_entities: has a UNIQUE index not generated by machines",
    ),
    "a column given another collation": (
        f'ALTER TABLE {OM} ALTER COLUMN dest TYPE text COLLATE "C"',
        "table outcome_moves: columns (source text NOT NULL, dest text COLLATE C NOT NULL",
    ),
    "an index on an expression": (
        'CREATE INDEX my_q ON "outcome_history" ((1 / (CASE WHEN seq > 1000 THEN 0 ELSE 1 END)))',
        "table outcome_history: has an index on an expression or with a WHERE clause",
    ),
    "an identity column in a history (outsider batch 15: every write failed)": (
        'ALTER TABLE "outcome_history" ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY',
        "seq integer GENERATED AS IDENTITY NOT NULL",
    ),
    "a constraint added to the registry": (
        "ALTER TABLE machines_definitions ADD CONSTRAINT no_more CHECK (version < 2)",
        "the store: table machines_definitions: a constraint not generated by machines",
    ),
}


@pytest.mark.parametrize("case", sorted(TABLE_CHANGES))
def test_postgres_a_table_changed_around_its_guards_is_named(case: str, tmp_path: Path) -> None:
    """Outsider F3: the check compared triggers and functions only, so a child table (whose
    rows the store reads as its own, judged by no guard), a dropped key or CHECK, row-level
    security, a rule or an unlogged table went unnoticed."""
    statement, says = TABLE_CHANGES[case]
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        sql(victims, statement)
        refused_open(victims, says)


def test_plain_indexes_and_always_enabled_triggers_are_no_alarm(tmp_path: Path) -> None:
    """What a DBA adds for their own queries (a plain index) or that makes a guard fire in
    more sessions (ENABLE ALWAYS) is no tampering; ENABLE REPLICA (fires in none of the
    store's sessions) is."""
    for kind in DATABASES:
        (tmp_path / kind).mkdir()
        with attacked(kind, tmp_path / kind) as victims:
            victims.store.close()
            sql(victims, f"CREATE INDEX reporting_by_state ON {OE} (state)")
            if kind == "postgres":
                sql(victims, f'ALTER TABLE {OE} ENABLE ALWAYS TRIGGER "outcome_entities_guard"')
            open_store(victims.store.url).close()
            if kind == "sqlite":
                sql(victims, f"CREATE UNIQUE INDEX one_per_state ON {OE} (state, scope)")
                refused_open(victims, "index one_per_state: not generated by machines")
            else:
                sql(victims, f'ALTER TABLE {OE} ENABLE REPLICA TRIGGER "outcome_entities_guard"')
                refused_open(victims, "trigger outcome_entities_guard")


@pytest.mark.parametrize(
    ("by", "says"),
    [("ops\n[ok]", "holds a character that is not printable"), ("   ", "names nobody")],
    ids=["two-lines", "blank"],
)
def test_repair_refuses_a_person_named_over_two_lines_or_nobody(
    victims: Victims, capsys: pytest.CaptureFixture[str], by: str, says: str
) -> None:
    """A line break in --by would print a forged line into every later audit; blanks
    (outsider, fourth batch) would record a repair by nobody."""
    url = victims.store.url
    code, out = run(capsys, "repair", url, "--spec-dir", str(bundled_spec_dir()), "--by", by)
    assert code == 2 and says in out, out


def test_repair_leaves_a_changed_table_to_its_owner_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        sql(victims, f"CREATE TABLE forged_rows () INHERITS ({OE})")
        before = victims.raw.snapshot()
        url, spec_dir = victims.store.url, str(bundled_spec_dir())
        code, out = run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops")
        assert code == 2 and "Undo those by hand" in out and "inherited" in out, out
        assert victims.raw.snapshot() == before
        sql(victims, "DROP TABLE forged_rows")
        open_store(url).close()


def test_the_record_of_repairs_is_itself_guarded(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repair's record is append-only; its guard dropped (to erase a repair) is named
    like any other."""
    url, spec_dir = victims.store.url, str(bundled_spec_dir())
    if victims.raw.kind == "sqlite":
        sql(victims, 'DROP TRIGGER "outcome_entities_still"')
    else:
        sql(victims, f'DROP TRIGGER "outcome_entities_guard" ON {OE}')
    code, out = run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops")
    assert code == 0, out
    open_store(url).close()
    assert "never changes" in str(victims.raw.attempt(["DELETE FROM machines_repairs"]))
    if victims.raw.kind == "sqlite":
        sql(victims, 'DROP TRIGGER "machines_repairs_no_delete"')
        where = "trigger machines_repairs_no_delete: missing"
    else:
        sql(victims, 'ALTER TABLE machines_repairs DISABLE TRIGGER "machines_repairs_frozen"')
        where = "trigger machines_repairs_frozen: disabled"
    refused_open(victims, f"the store: {where}")


def test_a_view_over_intact_legal_moves_does_not_block_a_repair(
    victims: Victims, capsys: pytest.CaptureFixture[str]
) -> None:
    """The repair remade every legal-moves table, so a view a DBA made over one (PostgreSQL
    refuses to drop a table a view depends on) made every repair fail."""
    sql(victims, f"CREATE VIEW legal_moves_report AS SELECT * FROM {OM}")
    if victims.raw.kind == "sqlite":
        sql(victims, 'DROP TRIGGER "outcome_entities_still"')
    else:
        sql(victims, f'ALTER TABLE {OE} DISABLE TRIGGER "outcome_entities_guard"')
    url = victims.store.url
    code, out = run(capsys, "repair", url, "--spec-dir", str(bundled_spec_dir()), "--by", "ops")
    assert code == 0 and "repaired 1 differences" in out, out
    open_store(url).close()
    assert victims.raw.attempt(["SELECT count(*) FROM legal_moves_report"]) is None


def test_sqlite_an_index_that_can_refuse_a_write_is_named_a_plain_one_is_not(
    tmp_path: Path,
) -> None:
    """Outsider: the plain-index exemption let an index on an expression refuse every
    legal ``fail`` move; and a plain index on the registry was a false alarm."""
    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        sql(victims, "CREATE INDEX by_machine ON machines_definitions (machine)")
        open_store(victims.store.url).close()
        sql(
            victims,
            "CREATE INDEX my_q ON \"outcome_history\" (json_extract('{}', CASE WHEN "
            "seq > 1000 THEN 'bad' ELSE '$' END))",
        )
        refused_open(victims, "index my_q: not generated by machines")
        sql(victims, "DROP INDEX my_q")
        sql(victims, 'CREATE INDEX my_p ON "outcome_history" (dest) WHERE seq > 0')
        refused_open(victims, "index my_p: not generated by machines")


def test_repair_puts_back_the_guard_of_its_own_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        url, spec_dir = victims.store.url, str(bundled_spec_dir())
        sql(victims, 'DROP TRIGGER "outcome_entities_still"')
        assert run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops")[0] == 0
        sql(
            victims,
            'DROP TRIGGER "machines_repairs_no_delete"',
            "CREATE TRIGGER machines_repairs_no_delete BEFORE DELETE ON machines_repairs "
            "BEGIN SELECT 1; END",
        )
        refused_open(victims, "trigger machines_repairs_no_delete: changed")
        code, out = run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops")
        assert code == 0, out
        open_store(url).close()
        assert "never changes" in str(victims.raw.attempt(["DELETE FROM machines_repairs"]))


def test_postgres_other_ways_to_switch_the_guards_off_are_named() -> None:
    """Outsider, second batch: ``GRANT SET ON PARAMETER session_replication_role`` to the
    application's role, or a function that sets it, let a role that owns nothing write with
    no guard firing, and every open was clean. Each is made inside a transaction that is
    rolled back, so no other test's store ever sees it."""
    import psycopg

    from machines.store.integrity_postgres import _replication_roles

    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(require_postgres()) as conn:
        assert _replication_roles(conn) == []
        conn.execute(f"CREATE ROLE {role}".encode())
        conn.execute(f"GRANT SET ON PARAMETER session_replication_role TO {role}".encode())
        conn.execute(
            b"CREATE FUNCTION pg_temp.off() RETURNS void LANGUAGE sql "
            b"SET session_replication_role = replica AS 'SELECT 1'"
        )
        found = [d.what for d in _replication_roles(conn)]
        conn.rollback()
    assert any("set to 'replica' by function" in what for what in found), found
    assert any(f"may be set by roles that are no superuser ({role})" in w for w in found), found


@pytest.mark.parametrize("spelled", ["REPLICA", "Replica"])
def test_postgres_replica_in_any_case_is_named(spelled: str) -> None:
    """Outsider batch 39 (a P2, P3, P1): PostgreSQL keeps a setting as it was written and
    reads an enum in any case; ``'REPLICA'`` for a role, or in a function's settings,
    passed every open (only ``replica`` was looked for), and that role's sessions rewrote a
    committed result with no guard firing. ``GRANT ALTER SYSTEM ON PARAMETER`` (every
    session, after a reload) was not looked for at all. Each is made in a transaction that
    is rolled back."""
    import psycopg

    from machines.store.integrity_postgres import _replication_roles

    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(require_postgres()) as conn:
        assert _replication_roles(conn) == []
        conn.execute(f"CREATE ROLE {role}".encode())
        conn.execute(f"ALTER ROLE {role} SET session_replication_role = '{spelled}'".encode())
        conn.execute(
            f"CREATE FUNCTION pg_temp.off() RETURNS void LANGUAGE sql "
            f"SET session_replication_role = '{spelled}' AS 'SELECT 1'".encode()
        )
        conn.execute(f"GRANT ALTER SYSTEM ON PARAMETER session_replication_role TO {role}".encode())
        found = [d.what for d in _replication_roles(conn)]
        conn.rollback()
    assert any(f"is set to 'replica' for {role} in every database" in w for w in found), found
    assert any("set to 'replica' by function" in what for what in found), found
    assert any(f"may be set by roles that are no superuser ({role})" in w for w in found), found


def test_a_second_store_earlier_on_the_search_path_is_refused_not_used() -> None:
    """Outsider, ninth batch (f18): with the default search path (``"$user", public``), a
    schema named after the role put a clean copy of the store first; every later open,
    the executor and the audit used the copy, and a key parked in the real store ran
    again. Now an open refuses a search path that finds a store outside the schema its
    tables would be those of, or finds two."""
    from machines.store.postgres import temporary_schema
    from machines.store.records import StoreError

    server = require_postgres()
    with temporary_schema(server) as first, temporary_schema(server) as second:
        name_of = {url: url.rpartition("%3D")[2] for url in (first, second)}
        open_store(second).close()  # the real store
        both = f"{first.rpartition('%3D')[0]}%3D{name_of[first]}%2C{name_of[second]}"
        with pytest.raises(StoreError, match=f"finds a store in '{name_of[second]}'"):
            open_store(both)  # would have made a second store in the first schema
        open_store(first).close()  # a copy, made where it was asked for
        for read_only in (False, True):
            with pytest.raises(StoreError, match="one store would stand in for another"):
                open_store(both, read_only=read_only)
        assert main(["audit", "--from-store", both]) == 2
        spec_dir = str(bundled_spec_dir())  # batch 10 (f10): migrate and repair too
        assert main(["migrate", both, "--spec-dir", spec_dir]) == 2
        assert main(["repair", both, "--spec-dir", spec_dir, "--by", "owner"]) == 2


def test_a_store_made_later_earlier_on_the_path_never_takes_over_an_open_store() -> None:
    """Outsider, eleventh batch (f05): a store opened on ``"$user", public`` checked the
    search path once; a second store made afterwards in a schema earlier on the path took
    over the open store's next session, and a key ran twice. Every session is now pinned to
    the schema the store was found in."""
    import threading

    import psycopg

    from machines.store.postgres import temporary_schema

    server = require_postgres()
    with temporary_schema(server) as first, temporary_schema(server) as second:
        early, late = (url.rpartition("%3D")[2] for url in (first, second))
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {early}")  # not there yet when the store opens
        both = f"{first.rpartition('%3D')[0]}%3D{early}%2C{late}"
        store = open_store(both)  # made in the later schema, the only one that exists
        try:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f"CREATE SCHEMA {early}")
            open_store(first).close()  # a clean copy, earlier on the store's path
            found: list[str] = []

            def another_session() -> None:  # a new thread opens a new session
                with store.transaction() as tx:
                    tx.insert("outcome", "order-1", data={})
                found.append("done")

            worker = threading.Thread(target=another_session)
            worker.start()
            worker.join()
            assert found == ["done"]
        finally:
            store.close()
        with psycopg.connect(server, autocommit=True) as admin:
            keys = [r[0] for r in admin.execute(f"SELECT key FROM {late}.outcome_entities")]
            copied = [r[0] for r in admin.execute(f"SELECT key FROM {early}.outcome_entities")]
        assert keys == ["order-1"] and copied == []


def test_sqlite_an_index_of_a_collation_of_its_own_or_a_table_named_like_a_guards_function(
    tmp_path: Path,
) -> None:
    """Outsider batch 15: a "plain" index under a collation the store's connection lacks,
    or a table named json_each (which the guards call), opened clean and made every write
    fail, and the audit said OK. Each is named on open."""
    import sqlite3

    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        path = victims.store.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        conn.create_collation("evil", lambda a, b: (a > b) - (a < b))
        conn.execute(f"CREATE INDEX by_scope ON {OE} (scope COLLATE evil)")
        conn.commit()
        conn.close()
        refused_open(victims, "index by_scope: not generated by machines")
        sql(victims, "DROP INDEX by_scope", "CREATE TABLE json_each (key, value, type)")
        refused_open(victims, "table json_each: has the name of the function json_each()")


def test_sqlite_a_guard_planted_before_the_first_open_is_named_not_served(
    tmp_path: Path,
) -> None:
    """A file prepared before machines ever opened it, holding a machine's tables with a
    no-op under a guard's name: ``IF NOT EXISTS`` keeps the planted one, so the first open
    checks what it installed too, and refuses with nothing written."""
    import sqlite3

    from machines.spec.loader import load
    from machines.store.ddl import sqlite_schema, statements

    path = tmp_path / "planted.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for statement in statements(sqlite_schema(load("outcome"), 1)):
            if '"outcome_entities_legal_move"' in statement:
                statement = (
                    'CREATE TRIGGER "outcome_entities_legal_move" BEFORE UPDATE ON '
                    '"outcome_entities" BEGIN SELECT 1; END'
                )
            conn.execute(statement)
        conn.commit()
    with pytest.raises(StoreTampered, match="trigger outcome_entities_legal_move: changed"):
        open_store(f"sqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert not any("registry" in t or t.startswith("effect") for t in tables), tables


@contextmanager
def low_role(url: str) -> Iterator[tuple[Any, str, str]]:
    """A role that owns nothing and may create objects in the store's schema (a connection
    as the server's owner, committed at once, the schema's name; the role and its objects
    dropped after)."""
    import psycopg

    role = f"planter_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        (schema,) = conn.execute(b"SELECT current_schema()").fetchone() or ("",)
        conn.execute(f"CREATE ROLE {role}".encode())
        conn.execute(f'GRANT USAGE, CREATE ON SCHEMA "{schema}" TO {role}'.encode())
        try:
            yield conn, role, schema
        finally:
            conn.execute(b"RESET ROLE")
            conn.execute(f"DROP OWNED BY {role} CASCADE".encode())
            conn.execute(f"DROP ROLE {role}".encode())


@pytest.mark.parametrize("planted", ["guard function", "entities table"])
def test_postgres_an_object_planted_before_the_first_open_is_refused(planted: str) -> None:
    """Outsider batch 16, 10: a role with CREATE on the schema made a guard function (or a
    table) of the store before its first open; the install kept it, and its owner, so that
    role could later swap the guard's body and put it back with every open and audit
    clean. Now the first open refuses while that role may create objects there, and, once
    it may not, while what it planted is there (naming the object and its owner); it
    installs nothing; with the planted object gone it installs."""
    from machines.spec.loader import load
    from machines.store.ddl import REGISTRY
    from machines.store.ddl_postgres import postgres_schema
    from machines.store.postgres import temporary_schema

    with temporary_schema(require_postgres()) as url, low_role(url) as (conn, role, schema):
        conn.execute(f"SET ROLE {role}".encode())
        if planted == "guard function":
            conn.execute(
                b'CREATE FUNCTION "outcome_entities_guard"() RETURNS trigger '
                b"LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$"
            )
        else:
            script = postgres_schema(load("outcome"), 1)
            start = script.index('CREATE TABLE IF NOT EXISTS "outcome_entities"')
            conn.execute(script[start : script.index(");", start) + 2].encode())
        conn.execute(b"RESET ROLE")
        with pytest.raises(StoreTampered, match=f"{role} may create objects in it"):
            open_store(url)
        conn.execute(f'REVOKE CREATE ON SCHEMA "{schema}" FROM {role}'.encode())
        with pytest.raises(StoreTampered) as caught:
            open_store(url)
        said = str(caught.value)
        assert f"made by '{role}'" in said or f"is owned by '{role}'" in said, said
        assert "outcome_entities" in said
        found = conn.execute(b"SELECT to_regclass(%s)", (REGISTRY,)).fetchone()
        assert found == (None,)  # nothing installed
        conn.execute(f"DROP OWNED BY {role} CASCADE".encode())
        open_store(url).close()


def test_postgres_a_guard_given_to_another_role_is_named_on_every_open(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same class after the install: a guard function or a table given to another
    role (``ALTER ... OWNER TO``) lets that role switch it off between two opens. Every
    open refuses, and the audit names it."""
    from machines.store.postgres import temporary_schema

    with temporary_schema(require_postgres()) as url, low_role(url) as (conn, role, schema):
        conn.execute(f'REVOKE CREATE ON SCHEMA "{schema}" FROM {role}'.encode())
        open_store(url).close()
        conn.execute(f'ALTER FUNCTION "effect_history_guard"() OWNER TO {role}'.encode())
        with pytest.raises(StoreTampered, match=f"effect_history_guard.*made by '{role}'"):
            open_store(url)
        code, out = run(capsys, "audit", "--from-store", url)
        assert code == 2 and "effect_history_guard" in out, out  # its code is not run
        conn.execute(b'ALTER FUNCTION "effect_history_guard"() OWNER TO CURRENT_USER')
        conn.execute(f'ALTER TABLE "outcome_history" OWNER TO {role}'.encode())
        with pytest.raises(StoreTampered, match="table outcome_history: is owned by"):
            open_store(url)
        code, out = run(capsys, "audit", "--from-store", url)
        assert code == 1 and "[guards-intact]" in out and "outcome_history" in out, out
        conn.execute(b'ALTER TABLE "outcome_history" OWNER TO CURRENT_USER')
        open_store(url).close()


HIJACKS = {
    # outsider batch 17 (a13): called while every open pins its search path
    "format": "format(text, text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO ran VALUES (current_user); RETURN $1; END $$",
    # a02: called by the creation-order guard on every insert
    "currval": "currval(text) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO ran VALUES (current_user); RETURN -5; END $$",
    # a03: an aggregate the finished-data guard calls
    "json_object_agg": "json_object_agg(text, json) (SFUNC = step, STYPE = json)",
}


@pytest.mark.parametrize("when", ["before the first open", "after the install"])
@pytest.mark.parametrize("function", list(HIJACKS))
def test_postgres_no_code_of_another_role_runs_inside_the_guards(function: str, when: str) -> None:
    """Outsider batch 17 (a02, a03, a13, a18): PostgreSQL prefers a function with the exact
    argument types in any schema on the path to a built-in that needs a conversion, so a
    role with CREATE on the store's schema made ``currval(text)``, ``format(text, text)``
    or ``json_object_agg(text, json)`` there, and the guards (and the store's own open)
    ran it: a place chosen in creation order, a finished effect's result rewritten, code
    run as the owner. Now every open refuses while another role may create objects in the
    schema, or code of such a role is there, and runs none of it meanwhile."""
    from machines.store.postgres import temporary_schema

    with temporary_schema(require_postgres()) as url, low_role(url) as (conn, role, schema):
        if when == "after the install":
            conn.execute(f'REVOKE CREATE ON SCHEMA "{schema}" FROM {role}'.encode())
            open_store(url).close()
            conn.execute(f'GRANT CREATE ON SCHEMA "{schema}" TO {role}'.encode())
        conn.execute(f"SET ROLE {role}".encode())
        conn.execute(b"CREATE TABLE ran (who text)")
        conn.execute(b"GRANT INSERT ON ran TO PUBLIC")
        conn.execute(
            b"CREATE FUNCTION step(json, text, json) RETURNS json LANGUAGE plpgsql AS $$ "
            b"BEGIN INSERT INTO ran VALUES (current_user); RETURN $3; END $$"
        )
        kind = "AGGREGATE" if function == "json_object_agg" else "FUNCTION"
        conn.execute(f"CREATE {kind} {HIJACKS[function]}".encode())
        conn.execute(b"RESET ROLE")
        for read_only in (False, True):
            if when == "before the first open" and read_only:
                continue
            with pytest.raises(StoreTampered, match=f"{role} may create objects in it"):
                open_store(url, read_only=read_only)
        conn.execute(f'REVOKE CREATE ON SCHEMA "{schema}" FROM {role}'.encode())
        with pytest.raises(StoreTampered, match=f"{function}.*made by '{role}'"):
            open_store(url)
        if when == "after the install":  # a migration and a repair check it too
            spec_dir = str(bundled_spec_dir())
            assert main(["migrate", url, "--spec-dir", spec_dir]) == 2
            assert main(["repair", url, "--spec-dir", spec_dir, "--by", "ops"]) == 2
        assert conn.execute(b"SELECT count(*) FROM ran").fetchone() == (0,)


def test_postgres_a_lock_held_by_another_session_is_an_error_never_a_hang(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (a08): any role holding the schema's advisory lock hung every
    writable open and repair, and the application's role locking a table hung the audit
    and pending. Every session now waits at most ``LOCK_TIMEOUT`` seconds for a lock."""
    import psycopg

    from machines.store import postgres
    from machines.store.postgres import LOCK_SCHEMA, SCHEMA_LOCK, temporary_schema
    from machines.store.records import StoreError

    monkeypatch.setattr(postgres, "LOCK_TIMEOUT", 1)
    with temporary_schema(require_postgres()) as url, psycopg.connect(url) as other:
        open_store(url).close()
        other.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))  # one key per database
        other.commit()
        open_store(url).close()  # (batch 18, a08 residual) held up every store's open
        other.execute("SELECT pg_advisory_unlock_all()")
        other.execute(LOCK_SCHEMA.replace("xact_lock", "lock"), (SCHEMA_LOCK,))  # this schema's
        other.commit()
        with pytest.raises(StoreError, match="waited 1 s for a lock another session holds"):
            open_store(url)
        spec_dir = str(bundled_spec_dir())
        assert run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", "ops")[0] == 2
        other.execute("SELECT pg_advisory_unlock_all()")
        other.execute(b'LOCK TABLE "outcome_entities" IN ACCESS EXCLUSIVE MODE')
        code, out = run(capsys, "audit", "--from-store", url)
        assert code == 2 and "waited 1 s" in out, out
        code, out = run(capsys, "pending", url)
        assert code == 2 and "waited 1 s" in out, out
        other.rollback()
        open_store(url).close()


def test_sqlite_a_hostile_object_name_is_printed_escaped_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 17 (a17, a14): an index named with an escape sequence was printed
    raw by repair --dry-run, migrate and pending (through the refusal's message); and a
    repair by a name holding a line separator was recorded, then named by every audit as
    written by hand."""
    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        url, spec_dir = victims.store.url, str(bundled_spec_dir())
        sql(
            victims,
            'CREATE UNIQUE INDEX "\x1b]0;owned\x07\x1b[2J" ON outcome_entities (key, state)',
        )
        for argv in (
            ["repair", url, "--spec-dir", spec_dir, "--by", "ops", "--dry-run"],
            ["migrate", url, "--spec-dir", spec_dir],
            ["pending", url],
            ["audit", "--from-store", url],
        ):
            code, out = run(capsys, *argv)
            assert code in (0, 1, 2) and "\x1b" not in out and "\x07" not in out, (argv, out)
            assert "\\x1b]0;owned" in out, (argv, out)
        for name in ("ops\u2028root", "ops\u202eroot"):
            code, out = run(capsys, "repair", url, "--spec-dir", spec_dir, "--by", name)
            assert code == 2 and "not printable" in out, out


def test_the_refusal_of_a_tampered_store_holds_no_raw_control_character(tmp_path: Path) -> None:
    """Outsider batch 18: ``StoreTampered`` from ``open_store`` quoted an index named with
    an escape sequence as it was, so a service that logs the error printed it."""
    with attacked("sqlite", tmp_path) as victims:
        victims.store.close()
        sql(victims, 'CREATE UNIQUE INDEX "\x1b[2Jowned" ON outcome_entities (key, state)')
        with pytest.raises(StoreTampered) as caught:
            open_store(victims.store.url)
        assert "\x1b" not in str(caught.value) and "\\x1b[2Jowned" in str(caught.value)


def test_postgres_a_subscription_writing_into_the_store_is_named(tmp_path: Path) -> None:
    """Outsider batch 41 (a 14): a superuser's logical-replication subscription wrote
    into the store's tables; its apply worker runs as a replica and fires no ordinary
    trigger, so a finished outcome was moved back with no guard firing, and the next open
    was not refused. A table a subscription writes into is named at every open (here the
    subscription is made disabled, with no slot: the catalog holds it all the same)."""
    import psycopg

    server = require_postgres()
    publisher, subscription = f"pub_{uuid.uuid4().hex[:10]}", f"sub_{uuid.uuid4().hex[:10]}"
    with attacked("postgres", tmp_path) as victims:
        victims.store.close()
        schema = victims.store.url.rpartition("%3D")[2]
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {publisher}")
        try:
            there = server.rpartition("/")[0] + f"/{publisher}"
            with psycopg.connect(there, autocommit=True) as pub:
                pub.execute(f"CREATE SCHEMA {schema}")
                pub.execute(f"CREATE TABLE {schema}.outcome_entities (key text PRIMARY KEY)")
                pub.execute(f"CREATE PUBLICATION p FOR TABLE {schema}.outcome_entities")
            sql(
                victims,
                f"CREATE SUBSCRIPTION {subscription} CONNECTION '{there}' PUBLICATION p "
                "WITH (create_slot = false, slot_name = NONE, enabled = false, "
                "copy_data = false)",
            )
            try:
                refused_open(
                    victims,
                    "table outcome_entities: is written by logical-replication subscription "
                    f"{subscription}",
                )
            finally:
                sql(victims, f"DROP SUBSCRIPTION {subscription}")
        finally:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE {publisher} WITH (FORCE)")
