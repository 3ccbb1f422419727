"""What only a real PostgreSQL server shows: many threads racing on the same keys and
rows. (The PL/pgSQL schema refusing raw SQL is in tests/test_raw_sql_attacks.py; every
test that takes the ``store`` fixture also runs on PostgreSQL, see tests/conftest.py.)"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import machines
from machines.store import open_store
from machines.store.postgres import PostgresStore, _PostgresTransaction
from machines.store.records import StaleWrite, StoreError
from machines.systems import ExactlyOnce
from tests.conftest import postgres_schema
from tests.test_store import compensable


@pytest.fixture
def url() -> Iterator[str]:
    with postgres_schema() as schema_url:
        yield schema_url


def race(threads: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in ``threads`` threads released at once; each result or error."""
    start = threading.Barrier(threads)
    results: list[Any] = [None] * threads

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = work(i)
        except Exception as error:
            results[i] = error

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return results


def test_a_refusal_by_the_database_reaches_the_caller_as_a_store_error(url: str) -> None:
    store = open_store(url)
    compensable(store)
    with (
        pytest.raises(StoreError, match="change only by a move"),
        store.transaction() as tx,
    ):
        assert isinstance(tx, _PostgresTransaction)
        tx._conn.execute(
            "UPDATE effect_entities SET state = 'executing', version = version + 1 "
            "WHERE key = 'sig-1'"
        )
    with store.transaction() as tx:
        row = tx.get("effect", "sig-1")
    assert row is not None and (row.state, row.moves) == ("pending", 0)
    store.close()


def test_concurrent_claims_create_each_key_once(url: str) -> None:
    stores = [open_store(url) for _ in range(8)]

    def claim(i: int) -> list[bool]:
        created = []
        for k in range(20):
            with stores[i].transaction() as tx:
                _, new = tx.insert("outcome", f"key-{k}")
                created.append(new)
        return created

    results = race(8, claim)
    assert all(isinstance(r, list) for r in results), results
    for k in range(20):
        assert sum(r[k] for r in results) == 1, k
    for s in stores:
        s.close()


def test_callers_racing_for_a_reclaimed_key_are_told_in_progress(url: str) -> None:
    """Outsider batch 29 (a, noted): callers racing for a key just reclaimed each read it
    free; the winner's claim raised the version, and every loser was told StaleWrite, an
    answer run() does not give. A loser reads the key again and sees the winner's lease."""
    from machines.errors import EffectIndeterminate, EffectInProgress

    stores = [open_store(url) for _ in range(8)]
    first = ExactlyOnce(stores[0], worker="first")
    with pytest.raises(EffectIndeterminate):
        first.run("k", lambda: (_ for _ in ()).throw(TimeoutError("after sending")))
    first.reclaim("k", by="ops", reason="the provider says it never arrived")
    ran: list[int] = []

    def call(i: int) -> object:
        def effect() -> int:
            ran.append(i)
            time.sleep(0.2)
            return i

        return ExactlyOnce(stores[i], worker=f"w{i}").run("k", effect)

    results = race(8, call)
    assert len(ran) == 1, ran
    losers = [r for r in results if r != ran[0]]
    assert all(isinstance(r, EffectInProgress) for r in losers), results
    for s in stores:
        s.close()


def test_concurrent_moves_of_one_row_let_exactly_one_win(url: str) -> None:
    stores = [open_store(url) for _ in range(8)]
    with stores[0].transaction() as tx:
        row, _ = tx.insert("outcome", "charge-1")

    def settle(i: int) -> str:
        with stores[i].transaction() as tx:
            return tx.move(row, "succeed", actor="worker", detail={"worker": f"w{i}"}).state

    results = race(8, settle)
    assert results.count("succeeded") == 1, results
    assert all(isinstance(r, StaleWrite) for r in results if r != "succeeded"), results
    with stores[0].transaction() as tx:
        assert len(tx.history("outcome", "charge-1")) == 1
    for s in stores:
        s.close()


def abandoned(url: str, count: int) -> list[str]:
    """``count`` keys whose holder died with its lease long expired."""
    store = open_store(url)
    keys = [f"order-{i:03}" for i in range(count)]
    for key in keys:
        store.insert("outcome", key, data={"owner": "dead", "lease_until": 0.0})
    store.close()
    return keys


def test_a_sweeper_skips_the_rows_another_one_holds(url: str) -> None:
    keys = abandoned(url, 30)
    holding, sweeping = open_store(url), open_store(url)
    held = threading.Event()
    release = threading.Event()
    taken: list[str] = []

    def hold_ten() -> None:
        with holding.transaction() as tx:
            rows = tx.due("outcome", "in_flight", field="lease_until", before=1.0, limit=10)
            taken.extend(row.key for row in rows)
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_ten)
    holder.start()
    assert held.wait(30)
    swept: list[str] = []
    sweeper = threading.Thread(
        target=lambda: swept.extend(ExactlyOnce(sweeping, worker="s").park_expired())
    )
    sweeper.start()
    sweeper.join(10)
    finished_while_held = not sweeper.is_alive()
    release.set()
    holder.join(30)
    sweeper.join(30)
    assert finished_while_held, "the sweeper waited on rows another transaction held"
    assert taken == keys[:10] and swept == keys[10:]
    assert ExactlyOnce(sweeping, worker="s").park_expired() == keys[:10]
    holding.close()
    sweeping.close()


def test_sweepers_side_by_side_park_each_key_once(url: str) -> None:
    keys = abandoned(url, 60)
    stores = [open_store(url) for _ in range(4)]

    def sweep(i: int) -> list[str]:
        mine: list[str] = []
        while batch := ExactlyOnce(stores[i], worker=f"s{i}").park_expired(limit=5):
            mine.extend(batch)
        return mine

    results = race(4, sweep)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sorted(key for batch in results for key in batch) == keys
    with stores[0].transaction() as tx:
        assert all(len(tx.history("outcome", key)) == 1 for key in keys)
        assert {row.state for row in tx.rows("outcome")} == {"indeterminate"}
    for s in stores:
        s.close()


def test_many_processes_may_create_the_schema_at_once(url: str) -> None:
    results = race(6, lambda i: open_store(url))
    assert all(isinstance(r, PostgresStore) for r in results), results
    for r in results:
        r.close()


def test_tables_made_for_another_spec_are_refused(url: str, tmp_path: Path) -> None:
    open_store(url).close()
    source = (machines.load("outcome").path or Path()).read_text()
    changed = tmp_path / "outcome.yaml"
    changed.write_text(source.replace("    actor: caller\n", "    actor: [caller, operator]\n"))
    with pytest.raises(
        StoreError, match=r"machine 'outcome' is stored at definition version 1.*machines migrate"
    ):
        open_store(url, [machines.load(changed)])


def test_an_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        open_store("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_a_lost_connection_is_a_store_error_then_replaced(url: str) -> None:
    import psycopg

    store = open_store(url)
    compensable(store)
    with store.transaction() as tx:
        pid = tx._conn.info.backend_pid  # type: ignore[attr-defined]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.get("effect", "sig-1")
    row, created = store.insert("effect", "sig-2", context={"tier": "compensable"})
    assert created and store.move(row, "execute", actor="proxy").state == "executing"
    store.close()


def test_a_finished_thread_leaves_no_connection_open(url: str) -> None:
    """A server that starts a thread per request must not run out of connections."""
    import psycopg

    named = f"{url}&application_name=thread-churn"
    store = open_store(named)

    def one_request(i: int) -> None:
        store.insert("outcome", f"request-{i}")

    for i in range(30):
        worker = threading.Thread(target=one_request, args=(i,))
        worker.start()
        worker.join()
    with psycopg.connect(url, autocommit=True) as admin:
        # A thread's locals are freed just after join() returns, and a backend leaves
        # pg_stat_activity just after its client hung up: give both a moment.
        for _ in range(100):
            gc.collect()
            (open_now,) = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'thread-churn'"
            ).fetchone() or (None,)
            if open_now == 0:
                break
            time.sleep(0.05)
    assert open_now == 0, f"{open_now} connections left open by finished threads"
    with store.transaction() as tx:
        assert len(tx.rows("outcome")) == 30
    store.close()


@pytest.mark.parametrize("command", ["migrate", "repair"])
def test_a_failing_read_of_the_schema_is_a_message_not_a_traceback(
    url: str, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 19 (a14): with a session whose statements time out (a URL's
    ``-cstatement_timeout``, a role's setting), migrate and repair printed psycopg's
    traceback: the first reads of the store's schema were not turned into a StoreError."""
    import psycopg

    from machines.cli import main
    from machines.spec.loader import bundled_spec_dir
    from machines.store import migration_postgres

    open_store(url).close()

    def times_out(*_: object) -> None:
        raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")

    monkeypatch.setattr(migration_postgres, "one_store_on_path", times_out)
    capsys.readouterr()
    assert main([command, url, "--spec-dir", str(bundled_spec_dir())]) == 2
    said = capsys.readouterr()
    shown = said.out + said.err
    assert "cannot read the store's schema, nothing changed: canceling statement" in shown, shown
    assert "Traceback" not in shown


def test_the_session_settings_the_store_relies_on_are_its_own(url: str) -> None:
    """Outsider batch 21 (a09, a10, a08 note): a URL's options (or a role's settings) gave
    the store's sessions another client encoding (a key or result of '✓' raised a raw
    UnicodeEncodeError), ``extra_float_digits=-15`` (times read back rounded, and kept
    heads named edits nobody made) and ``synchronous_commit=off`` (a claim already taken
    could be lost in a crash, and its effect run again); and (batch 22, a B5) serializable
    by default (racing callers of one key were told StaleWrite) or read-only by default
    (every write refused as if the store were an audit's). The store pins them."""
    hostile = (
        url + "%20-cclient_encoding%3DLATIN1%20-cextra_float_digits%3D-15"
        "%20-csynchronous_commit%3Doff%20-cdefault_transaction_isolation%3Dserializable"
        "%20-cdefault_transaction_read_only%3Don"
    )
    with open_store(hostile) as store:
        assert ExactlyOnce(store, worker="w").run("key-✓", lambda: {"v": "✓"}) == {"v": "✓"}
        with store.transaction() as tx:
            row = tx.get("outcome", "key-✓")
            settings = [
                tx._conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[attr-defined]
                for name in (
                    "client_encoding",
                    "extra_float_digits",
                    "synchronous_commit",
                    "transaction_isolation",
                    "transaction_read_only",
                )
            ]
    assert settings == ["UTF8", "3", "on", "read committed", "off"]
    with open_store(url) as plain, plain.transaction() as tx:
        same = tx.get("outcome", "key-✓")
    assert row is not None and same is not None
    assert (row.created_at, row.updated_at) == (same.created_at, same.updated_at)
    assert row.created_at != round(row.created_at)


def preparing_one_withdrawal(store: Any, venue: Any) -> Any:
    """An engine ``A`` on ``store`` with request ``r1`` executing, its one withdrawal ``x``
    (sent through ``venue``) preparing."""
    from machines.systems import TransferEngine

    engine = TransferEngine(store, {"venue": venue}, engine_id="A")
    plan = [{"name": "x", "kind": "action", "has_side_effect": True, "executor": "venue"}]
    engine.submit("r1", plan)
    engine.validate("r1")
    engine.request_approval("r1")
    engine.approve("r1", by="alice")
    engine.start("r1")
    engine.step("r1")  # ready -> preparing
    return engine


def test_a_venues_answer_survives_a_race_for_the_request_row(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 30 (a 3): while an engine recorded the venue's answer to a submit,
    another writer raised the request row's version (another engine's derived move, say);
    the engine's session lost the race and was dropped, the node's move with it, and the
    node later went unknown, its history saying the venue never reported back. The move is
    made again while the node itself is as it was read."""
    from machines.systems.transfer import session as sessions

    class Venue:
        def prepare(self, node: object) -> str:
            return "submit"

        def submit(self, node: object) -> str:
            return "completed"

        def observe(self, node: object) -> str:
            return "pending"

    store, other = open_store(url), open_store(url)
    engine = preparing_one_withdrawal(store, Venue())
    move_node, raced = sessions.Session.move_node, []

    def racing(self: Any, row: Any, trigger: str, *args: Any, **kwargs: Any) -> Any:
        if not raced and trigger == "complete":  # after the session read the request
            raced.append(True)
            with other.transaction() as tx:  # another writer touches the request row
                request = tx.get("request", "r1")
                assert request is not None
                tx.update(request, request.data)
        return move_node(self, row, trigger, *args, **kwargs)

    monkeypatch.setattr(sessions.Session, "move_node", racing)
    engine.step("r1")  # preparing -> submitting, and the venue answers completed
    assert raced and engine.nodes("r1")["x"].state.value == "completed"
    store.close()
    other.close()


def test_a_cancel_committed_while_the_engine_marks_a_node_sent_stops_the_send(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 35 (b 6): at READ COMMITTED, a person's cancel written through the
    store (as the desk writes it: the request's row alone; the withdrawal only preparing,
    so ``side_effects: none`` truly) committed between the engine's read of the request
    and its move of the node into submitting; the engine then called ``submit`` for a
    cancelled request whose reservation was released, and nothing ever observed the node.
    The transaction that marks a node sent now writes the request's row too, so it loses
    to the cancel and sends nothing."""
    from machines.systems.transfer import driver

    class Venue:
        submitted = 0

        def prepare(self, node: object) -> str:
            return "submit"

        def submit(self, node: object) -> str:
            Venue.submitted += 1
            return "accepted"

        def observe(self, node: object) -> str:
            return "pending"

    store, other = open_store(url), open_store(url)
    engine = preparing_one_withdrawal(store, Venue())
    allowed, raced = driver.allowed, []

    def racing(mode: Any, state: str, trigger: str, actor: str) -> bool:
        if trigger == "submit" and not raced:  # the engine has read the request
            with other.transaction() as tx:
                row = tx.get("request", "r1")
                assert row is not None
                data = {**row.data, "reservation": "released", "current_frontier": []}
                detail = {"by": "bob", "reason": "customer asked"}
                context = {"side_effects": "none"}
                raced.append(
                    tx.move(
                        row, "cancel", actor="operator", context=context, detail=detail, data=data
                    )
                )
        return allowed(mode, state, trigger, actor)

    monkeypatch.setattr(driver, "allowed", racing)
    engine.step("r1")  # preparing -> submitting: lost to the cancel
    assert raced and raced[0].state == "cancelled"
    assert Venue.submitted == 0
    assert engine.request("r1").state == "cancelled"
    assert engine.nodes("r1")["x"].state.value != "submitting"
    store.close()
    other.close()


def test_two_engines_completing_two_withdrawals_at_once_wake_the_deposit(url: str) -> None:
    """Outsider batch 38 (b A7): at READ COMMITTED, two engines each completed one of two
    withdrawals at the same moment; each transaction saw the other withdrawal still
    observed, so neither woke the deposit, and neither wrote the request's row, so nothing
    conflicted. The deposit stayed blocked for ever, the request executing with its
    reservation held, and nothing named it. Every transaction that moves a node now
    writes its request's row first, so the two take turns and the second wakes it."""
    from machines.systems import TransferEngine

    barrier, watching = threading.Barrier(2, timeout=10), threading.Event()

    class Venue:
        def __init__(self, mine: str) -> None:
            self.mine = mine

        def prepare(self, node: Any) -> str:
            return "submit"

        def submit(self, node: Any) -> str:
            return "accepted"

        def observe(self, node: Any) -> str:
            if watching.is_set() and node.name == self.mine:
                barrier.wait()
                return "completed"
            return "pending"

    withdrawal = {"kind": "action", "has_side_effect": True, "executor": "v"}
    plan = [
        {"name": "w1", **withdrawal},
        {"name": "w2", **withdrawal},
        {"name": "deposit", **withdrawal, "after": ["w1", "w2"]},
    ]
    stores = [open_store(url), open_store(url)]
    first, second = (
        TransferEngine(s, {"v": Venue(m)}) for s, m in zip(stores, ["w1", "w2"], strict=True)
    )
    first.submit("t", plan)
    first.validate("t")
    first.request_approval("t")
    first.approve("t", by="alice")
    first.start("t")
    for _ in range(3):
        first.step("t")
    assert {n: r.state.value for n, r in first.nodes("t").items()} == {
        "w1": "observing",
        "w2": "observing",
        "deposit": "blocked",
    }
    watching.set()
    race(2, lambda n: (first, second)[n].step("t"))
    watching.clear()
    states = {n: r.state.value for n, r in first.nodes("t").items()}
    assert states["w1"] == states["w2"] == "completed"
    assert states["deposit"] == "ready", states
    first.run("t")
    assert first.nodes("t")["deposit"].state.value == "observing"  # sent, now followed
    for store in stores:
        store.close()
