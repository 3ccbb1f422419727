"""The store contract, on memory, SQLite and PostgreSQL alike. What the databases refuse
on their own (raw SQL, no Python in the way) is in tests/test_raw_sql_attacks.py."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

import machines
from machines.errors import ContextError, InvalidArgument, InvalidStateTransition
from machines.store import RecordExists, StaleWrite, Store, StoreError, open_store
from machines.store.ddl import sqlite_schema
from machines.store.records import Row
from machines.store.versions import DefinitionChanged
from machines.systems import ExactlyOnce
from tests.conftest import postgres_schema, store_url


def compensable(store: Store, key: str = "sig-1", scope: str | None = "session-1") -> None:
    with store.transaction() as tx:
        tx.insert("effect", key, context={"tier": "compensable"}, scope=scope)


def executing(url: str) -> None:
    """One effect, sig-1, moved once (pending -> executing) through the store at ``url``."""
    store = open_store(url)
    compensable(store)
    with store.transaction() as tx:
        row = tx.get("effect", "sig-1")
        assert row is not None
        tx.move(row, "execute", actor="proxy")
    store.close()


class TestContract:
    def test_insert_starts_in_the_initial_state_and_never_overwrites(self, store: Store) -> None:
        with store.transaction() as tx:
            row, created = tx.insert(
                "effect", "k", context={"tier": "compensable"}, data={"tool": "charge"}, scope="s"
            )
            assert created and row.state == "pending" and row.moves == 0 and row.version == 1
            again, created_again = tx.insert(
                "effect", "k", context={"tier": "compensable"}, data={"tool": "other"}, scope="s"
            )
            assert not created_again and again.data == {"tool": "charge"}

    def test_same_key_in_another_scope_or_context_is_refused(self, store: Store) -> None:
        compensable(store, "k", "s")
        for scope, tier in (("t", "compensable"), ("s", "irreversible")):
            with pytest.raises(RecordExists), store.transaction() as tx:
                tx.insert("effect", "k", context={"tier": tier}, scope=scope)

    def test_move_records_state_and_history_together(self, store: Store) -> None:
        compensable(store)
        with store.transaction() as tx:
            row = tx.get("effect", "sig-1")
            assert row is not None
            row = tx.move(row, "execute", actor="proxy", detail={"by": "proxy-1"})
            row = tx.move(row, "commit", actor="proxy", data={"result": [1, 2]})
        with store.transaction() as tx:
            events = tx.history("effect", "sig-1")
            stored = tx.get("effect", "sig-1")
        assert stored is not None and stored.state == "committed" and stored.moves == 2
        assert stored.data == {"result": [1, 2]}
        assert [(e.seq, e.source, e.dest, e.trigger, e.actor) for e in events] == [
            (1, "pending", "executing", "execute", "proxy"),
            (2, "executing", "committed", "commit", "proxy"),
        ]
        assert events[0].detail == {"by": "proxy-1"} and events[0].context == {
            "tier": "compensable"
        }

    def test_illegal_move_writes_nothing(self, store: Store) -> None:
        compensable(store)
        with store.transaction() as tx:
            row = tx.get("effect", "sig-1")
            assert row is not None
            with pytest.raises(InvalidStateTransition, match="must execute before"):
                tx.move(row, "commit", actor="proxy")
            with pytest.raises(InvalidStateTransition, match="may not fire"):
                tx.move(row, "execute", actor="human")
        with store.transaction() as tx:
            assert tx.history("effect", "sig-1") == []
            assert tx.get("effect", "sig-1") == row

    def test_stale_row_is_fenced(self, store: Store) -> None:
        compensable(store)
        with store.transaction() as tx:
            old = tx.get("effect", "sig-1")
            assert old is not None
            tx.update(old, {"lease": "mine"})
            with pytest.raises(StaleWrite):
                tx.move(old, "execute", actor="proxy")
            with pytest.raises(StaleWrite):
                tx.update(old, {"lease": "theirs"})

    def test_an_exception_rolls_the_whole_transaction_back(self, store: Store) -> None:
        compensable(store, "a")
        with pytest.raises(RuntimeError), store.transaction() as tx:
            row = tx.get("effect", "a")
            assert row is not None
            tx.move(row, "execute", actor="proxy")
            tx.insert("effect", "b", context={"tier": "compensable"})
            raise RuntimeError("crash between writes")
        with store.transaction() as tx:
            row = tx.get("effect", "a")
            assert row is not None and row.state == "pending" and row.moves == 0
            assert tx.history("effect", "a") == [] and tx.get("effect", "b") is None

    def test_scope_lists_rows_in_creation_order(self, store: Store) -> None:
        for key in ("third", "first", "second"):
            compensable(store, key, "s1")
        compensable(store, "elsewhere", "s2")
        with store.transaction() as tx:
            assert [r.key for r in tx.scope("effect", "s1")] == ["third", "first", "second"]
            assert [r.key for r in tx.rows("effect")] == ["third", "first", "second", "elsewhere"]
            assert tx.rows("outcome") == []

    def test_bad_context_and_data_are_refused(self, store: Store) -> None:
        with pytest.raises(ContextError, match="tier=safe is refused"), store.transaction() as tx:
            tx.insert("effect", "k", context={"tier": "safe"})
        with pytest.raises(StoreError, match="data cannot be stored"), store.transaction() as tx:
            tx.insert("effect", "k", context={"tier": "compensable"}, data={"x": object()})
        with store.transaction() as tx:
            assert tx.get("effect", "k") is None

    def test_a_write_returns_the_row_a_read_gives(self, store: Store) -> None:
        """Writes build the new row without reading it back; it must be the stored one."""
        data = {"nested": {"list": [1, 2.5, None, True], "ü": "ß"}, "big": 2**53, "f": 0.1}

        def stored(row: Row) -> Row | None:
            with store.transaction() as tx:
                return tx.get(row.machine, row.key)

        row, _ = store.insert("effect", "k", context={"tier": "compensable"}, data=data, scope="s")
        assert stored(row) == row
        row = store.move(row, "execute", actor="proxy", data={**data, "runner": "w1"})
        assert stored(row) == row
        with store.transaction() as tx:
            row = tx.update(row, {"result": [data]})
        assert stored(row) == row
        with store.transaction() as tx:
            row = tx.move(row, "commit", actor="proxy", detail={"by": "w1"})
        assert stored(row) == row and row.data == {"result": [data]}

    def test_one_write_transactions_keep_the_contract(self, store: Store) -> None:
        row, created = store.insert("effect", "k", context={"tier": "compensable"})
        again, created_again = store.insert("effect", "k", context={"tier": "compensable"})
        assert (created, created_again, again) == (True, False, row)
        with pytest.raises(RecordExists):
            store.insert("effect", "k", context={"tier": "irreversible"})
        with pytest.raises(InvalidStateTransition):
            store.move(row, "commit", actor="proxy")
        moved = store.move(row, "execute", actor="proxy")
        with pytest.raises(StaleWrite):
            store.move(row, "execute", actor="proxy")
        with store.transaction() as tx:
            assert [e.seq for e in tx.history("effect", "k")] == [1]
            assert tx.get("effect", "k") == moved

    def test_due_rows_are_those_below_the_mark_oldest_first(self, store: Store) -> None:
        marks: list[object] = [5, 1.5, 20, None, True, "3", 2]
        for i, mark in enumerate(marks):
            store.insert("outcome", f"k{i}", data={"until": mark})
        store.insert("effect", "e", context={"tier": "compensable"}, data={"until": 1})
        with store.transaction() as tx:
            settled = tx.move(tx.rows("outcome")[6], "succeed", actor="worker")
            assert settled.key == "k6"  # due by its mark, but no longer in_flight

            def due(limit: int) -> list[str]:
                rows = tx.due("outcome", "in_flight", field="until", before=10, limit=limit)
                return [row.key for row in rows]

            assert due(10) == ["k0", "k1"] and due(1) == ["k0"]
            assert tx.due("outcome", "in_flight", field="other", before=10, limit=5) == []

    def test_transactions_do_not_nest(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert("effect", "outer", context={"tier": "compensable"})
            with pytest.raises(StoreError, match="transaction"), store.transaction():
                pass
            with pytest.raises(StoreError, match="transaction"):
                store.insert("effect", "inner", context={"tier": "compensable"})
        with store.transaction() as tx:
            assert tx.get("effect", "inner") is None

    def test_unknown_machine_is_named(self, store: Store) -> None:
        with (
            pytest.raises(InvalidArgument, match="no machine 'invoice'"),
            store.transaction() as tx,
        ):
            tx.get("invoice", "k")


def test_unknown_store_url_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="unsupported store URL"):
        open_store("redis://localhost")
    with pytest.raises(InvalidArgument, match="needs a file path"):
        open_store("sqlite:///")
    with pytest.raises(InvalidArgument, match="use memory://"):  # batch 35 (a I)
        open_store("sqlite:///:memory:")
    for uri in ("file:x.db?mode=memory&cache=shared", "FILE:/tmp/y.db?nolock=1"):  # batch 36
        with pytest.raises(InvalidArgument, match="is a SQLite URI"):
            open_store(f"sqlite:///{uri}")


def test_database_made_for_another_spec_version_is_refused(tmp_path: Path) -> None:
    open_store(f"sqlite:///{tmp_path}/v.db").close()
    spec = machines.load("outcome")
    source = (spec.path or Path()).read_text()
    changed = tmp_path / "spec"
    changed.mkdir()
    (changed / "outcome.yaml").write_text(
        source.replace("  - trigger: park\n", "  - trigger: park\n    evidence: none\n")
    )  # moves unchanged
    assert machines.load(changed / "outcome.yaml")  # still valid, same moves: accepted
    open_store(f"sqlite:///{tmp_path}/v.db", [machines.load(changed / "outcome.yaml")]).close()
    (changed / "outcome.yaml").write_text(
        source.replace("    actor: caller\n", "    actor: [caller, operator]\n")
    )
    with pytest.raises(
        DefinitionChanged,
        match=r"what changed: 0 breaking, 1 widening \(transition .*machines migrate",
    ):
        open_store(f"sqlite:///{tmp_path}/v.db", [machines.load(changed / "outcome.yaml")])


def test_generated_schema_names_every_state_and_legal_move() -> None:
    spec = machines.load("effect")
    ddl = sqlite_schema(spec)
    assert f"WHEN NEW.state IS NOT '{spec.initial}'" in ddl  # created in the initial state
    assert "('pending', 'executing', 'execute', 'proxy', 'compensable')" in ddl
    assert "('pending', 'replayed', 'replay', 'engine', NULL)" in ddl


def test_connections_close_with_their_thread_and_with_the_store() -> None:
    import gc
    import threading

    from machines.store.connections import ThreadConnections

    closed: list[str] = []
    connections: ThreadConnections[str] = ThreadConnections(closed.append)

    def thread_work(name: str) -> None:
        assert connections.current() is None
        connections.keep(name)
        assert connections.current() == name and connections.open_count() >= 1

    for name in ("a", "b"):
        worker = threading.Thread(target=thread_work, args=(name,))
        worker.start()
        worker.join()
    gc.collect()
    assert closed == ["a", "b"] and connections.open_count() == 0
    connections.keep("main")
    connections.keep("main again")  # a replaced connection is closed at once
    assert closed == ["a", "b", "main"] and connections.current() == "main again"
    connections.close_all()
    assert closed[-1] == "main again" and connections.current() is None


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_store_is_closed_at_the_end_of_a_with_block(kind: str, tmp_path: Path) -> None:
    """Noticed this session: ``with open_store(url) as store:`` failed (no context
    manager), so every test wrapped stores in ``contextlib.closing``."""
    from contextlib import ExitStack

    from tests.conftest import postgres_schema, store_url

    with ExitStack() as cleanup:
        url = (
            cleanup.enter_context(postgres_schema())
            if kind == "postgres"
            else store_url(kind, tmp_path)
        )
        closed: list[bool] = []
        with open_store(url) as store:
            store.insert("outcome", "k", data={})
            real = store.close
            store.close = lambda: (closed.append(True), real())[1]  # type: ignore[method-assign]
        assert closed == [True]
        if kind != "memory":
            with open_store(url) as again, again.transaction() as tx:
                assert tx.get("outcome", "k") is not None


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_in_states_lists_the_longest_waiting_first_in_pages_and_counts_every_state(
    tmp_path: Path, kind: str
) -> None:
    """What the desk lists (issue 30): rows in any of the states, by the time of their
    last write then creation order, in pages; and the count of each state."""
    with ExitStack() as stack:
        url = (
            stack.enter_context(postgres_schema())
            if kind == "postgres"
            else store_url(kind, tmp_path)
        )
        ticks = iter(range(1, 1000))
        store = stack.enter_context(open_store(url, clock=lambda: next(ticks)))
        rows = {k: store.insert("outcome", k)[0] for k in ("a", "b", "c", "d")}
        for k in ("c", "a", "b"):  # parked in this order: c has waited longest
            store.move(rows[k], "park", actor="worker", detail={"why": "timeout"})
        with store.transaction() as tx:
            waiting = tx.in_states("outcome", ["indeterminate"], limit=2)
            assert [r.key for r in waiting] == ["c", "a"]
            page = tx.in_states("outcome", ["indeterminate"], limit=2, offset=2)
            assert [r.key for r in page] == ["b"]
            assert tx.in_states("outcome", [], limit=5) == []
            both = tx.in_states("outcome", ["in_flight", "indeterminate"], limit=10)
            assert [r.key for r in both] == ["d", "c", "a", "b"]
            assert tx.counts("outcome") == {"in_flight": 1, "indeterminate": 3}
            assert tx.counts("effect") == {}


def test_a_closed_store_refuses_its_next_use(store: Store) -> None:
    """A store used after ``close`` used to open a new connection without a word (and keep
    it, with nobody to close it): a bug in the caller (a store closed while a thread still
    works with it) went unseen. Every store now refuses, naming itself."""
    store.insert("outcome", "k")
    store.close()
    for use in (
        lambda: store.insert("outcome", "k2"),
        lambda: store.transaction().__enter__(),
    ):
        with pytest.raises(StoreError, match="this store was closed; open it again"):
            use()
    store.close()  # closing twice is fine


@pytest.mark.parametrize("command", ["migrate", "repair"])
def test_migrate_and_repair_refuse_a_sqlite_uri_as_every_store_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """Outsider batch 37 (a B3): ``machines repair`` and ``migrate`` opened
    ``sqlite:///file:money.db`` as a SQLite URI (another file, or ``mode=memory``) once a
    file of that literal name existed; ``open_store`` refused it."""
    from machines.cli import main
    from machines.spec.loader import bundled_spec_dir

    monkeypatch.chdir(tmp_path)
    open_store("sqlite:///money.db").close()
    (tmp_path / "file:money.db").write_bytes((tmp_path / "money.db").read_bytes())
    capsys.readouterr()
    assert main([command, "sqlite:///file:money.db", "--spec-dir", str(bundled_spec_dir())]) == 2
    said = capsys.readouterr()
    assert "is a SQLite URI" in said.out + said.err


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_create_false_opens_only_a_store_that_is_there(kind: str, tmp_path: Path) -> None:
    """``open_store(url, create=False)`` (what the desk opens) makes no store: where there
    is none it is a ``StoreError`` and nothing is written; an existing store opens, and a
    value that is not a bool is refused, not taken as true."""
    with pytest.raises(InvalidArgument, match="create must be True or False"):
        open_store("memory://", create=1)  # type: ignore[arg-type]
    with ExitStack() as cleanup:
        if kind == "memory":
            with pytest.raises(StoreError, match="no store to open without making it"):
                open_store("memory://", create=False)
            return
        url = (
            cleanup.enter_context(postgres_schema())
            if kind == "postgres"
            else f"sqlite:///{tmp_path / 'store.db'}"
        )
        with pytest.raises(StoreError, match="no store is there"):
            open_store(url, create=False)
        assert not (tmp_path / "store.db").exists()
        open_store(url, [machines.load("outcome")]).close()
        before = _tables(url)
        with pytest.raises(StoreError, match="no tables for 'effect', 'node', 'request'"):
            open_store(url, create=False)  # batch 42 c 4b, 4c: they were made
        assert _tables(url) == before
        with open_store(url, [machines.load("outcome")], create=False) as store:
            assert ExactlyOnce(store).run("k", lambda: 7) == 7


def _tables(url: str) -> list[str]:
    """The names of the tables at ``url`` (SQLite or PostgreSQL)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            return sorted(r[0] for r in raw.execute("SELECT name FROM sqlite_master"))
    import psycopg

    with psycopg.connect(url) as raw:
        rows = raw.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return sorted(r[0] for r in rows)
