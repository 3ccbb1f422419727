"""What says money may be moving cannot be weakened by one change (issue 27, outsider's
sixth batch).

- f01: v2 only changed the request's derivation (``side_effects`` started only once a
  side-effect node *completed*), v3 renamed ``executing`` and mapped ``executing=failed``:
  the map was judged under v2's weaker derivation, and a request was released with its
  withdrawal ``unknown``. Now a map is judged under the context every version the entity
  lived under derives.
- f02: the engine ran on a request definition with that weaker derivation. Now a system
  refuses a definition whose derivation differs from the bundled one.
- f03: one raw UPDATE flipped ``has_side_effect`` in an unknown withdrawal's data; the
  engine then released the reservation and nothing said so. Now the engine counts a node
  as having a side effect when its data or the request's plan says so, and the audit names
  the two disagreeing.
- f04, f05: ``audit --save-heads`` given the store's own file replaced it; a PostgreSQL
  URL with an unclosed ``[`` host was a traceback.
- Ninth batch, f04, f10, f19, f23: a node row inserted in a request's scope under another
  key naming a real node shadowed it (the deposit went out while the withdrawal was still
  ready), and one the plan lacks failed the transfer; the audit said nothing. Now the
  engine acts on no node of a request whose rows are not its plan, and the audit names
  each such row.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from machines.cli import main
from machines.errors import InvalidArgument, MachinesError
from machines.spec.states import RequestState
from machines.store import open_store
from machines.systems.transfer import PlanError, TransferEngine, TransferRefused
from machines.testing.transfer.suite import plan_node as node
from tests.conftest import Document, SpecCopy, rename_everywhere
from tests.migration_stores import load_dir
from tests.test_attacks_migration import migrate
from tests.test_transfer import FakeVenue, Recorder, drive, engine_for, executing


@pytest.fixture
def url(database_url: str) -> str:
    """A URL where no store is yet, on SQLite and on PostgreSQL."""
    return database_url


def completed_only(doc: Document) -> None:
    """side_effects 'started' only once a side-effect node completed."""
    doc["derivation"]["context"]["side_effects"][0]["when"] = [
        {"any": {"side_effect": True, "state": ["completed"]}}
    ]


def withdrawal_unknown(url: str) -> None:
    store = open_store(url)
    try:
        engine = engine_for(store, FakeVenue({"w": {"submit": ["unknown"]}}))
        executing(engine, "t1", [node("w", "action", True)])
        drive(engine, "t1", 6)
        assert engine.nodes("t1")["w"].state.value == "unknown"
    finally:
        store.close()


def rewritten(db: Path, key: str, *, drop: tuple[str, ...] = (), **changes: object) -> None:
    """One raw UPDATE of a node's data from a second connection (``changes`` set, ``drop``
    removed), its version raised."""
    raw = sqlite3.connect(db)
    data = json.loads(
        raw.execute("SELECT data FROM node_entities WHERE key = ?", (key,)).fetchone()[0]
    )
    data.update(changes)
    for gone in drop:
        del data[gone]
    raw.execute(
        "UPDATE node_entities SET data = ?, version = version + 1 WHERE key = ?",
        (json.dumps(data), key),
    )
    raw.commit()
    raw.close()


@contextmanager
def started(
    db: Path,
    venue: FakeVenue,
    plan: list[dict[str, Any]],
    recorder: Recorder | None = None,
    steps: int = 3,
) -> Iterator[TransferEngine]:
    """An engine on the SQLite store at ``db`` with request t1 executing ``plan``, driven
    ``steps`` steps; the store is closed afterwards."""
    store = open_store(f"sqlite:///{db}")
    try:
        engine = engine_for(store, venue, recorder)
        executing(engine, "t1", plan)
        drive(engine, "t1", steps)
        yield engine
    finally:
        store.close()


THEN_D = [node("w", "action", True), node("x", "action", False), node("d", "action", True, "w")]
"""A withdrawal, an unrelated node, and a side effect planned after the withdrawal."""


def test_a_weakened_derivation_cannot_make_a_release_look_safe(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    withdrawal_unknown(url)
    v2 = SpecCopy(tmp_path / "v2").edit("request", completed_only).path
    code, out = migrate(capsys, url, v2)
    assert code == 1, out
    assert (
        "the new version's derivation (rule set 'money-safe') breaks context-matches-money" in out
    )
    # a store an earlier release migrated to v2, which did not prove the derivation:
    import machines.store.migration as migration_module

    monkeypatch.setattr(migration_module, "derivation_refusals", lambda *args: [])
    code, out = migrate(capsys, url, v2)
    assert code == 0, out

    def v3_change(doc: Document) -> None:
        completed_only(doc)
        renamed = rename_everywhere(doc, "executing", "running")
        doc.clear()
        doc.update(renamed)

    v3 = SpecCopy(tmp_path / "v3").edit("request", v3_change).path
    code, out = migrate(capsys, url, v3, "request:executing=failed")
    assert code == 1, out  # batch 12: refused before its context is read, as derived
    assert "'executing' is derived from its node entities" in out


def test_the_engine_refuses_a_request_definition_with_another_derivation(tmp_path: Path) -> None:
    specs = load_dir(SpecCopy(tmp_path).edit("request", completed_only).path)
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", specs)
    try:
        with pytest.raises(InvalidArgument, match="its derivation of the state from the nodes"):
            engine_for(store, FakeVenue())
    finally:
        store.close()


def test_a_side_effect_flag_rewritten_by_raw_sql_neither_releases_nor_hides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    venue = FakeVenue({"w": {"submit": ["unknown"]}, "chk": {"prepare": ["retry"]}})
    recorder = Recorder()
    plan = [node("w", "action", True), node("chk", "action", False)]
    with started(db, venue, plan, recorder, steps=4) as engine:
        rewritten(db, "t1/w", has_side_effect=False)
        venue.script["chk"]["prepare"] = [RuntimeError("limit check failed")]
        with pytest.raises(TransferRefused, match="has_side_effect is False, and the plan"):
            drive(engine, "t1", 4)  # batch 10: a row that is not its plan's stops the engine
        assert "request_failed" not in recorder.names
    assert main(["audit", "--from-store", url]) == 1
    assert "its has_side_effect (False) differs from its request's plan (True)" in (
        capsys.readouterr().out
    )
    code, out = migrate(capsys, url, _executing_renamed(tmp_path), "request:executing=failed")
    assert code == 1, out  # batch 12: a derived state is left by the derivation alone
    assert "'executing' is derived from its node entities" in out


def _executing_renamed(tmp_path: Path) -> Path:
    """The request definition with ``executing`` renamed ``running``: the map
    ``executing=failed`` is then asked for."""

    def renamed(doc: Document) -> None:
        doc.update(rename_everywhere(doc, "executing", "running"))

    return SpecCopy(tmp_path / "v2").edit("request", renamed).path


def test_a_node_rows_executor_swapped_by_raw_sql_stops_the_engine_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider, tenth batch (f06): one raw UPDATE gave a no-side-effect check the bank's
    executor; the bank sent money for it, the check failed the transfer and released the
    reservation, and the audit passed. Now every plan field of a node row (executor, side
    effect, predecessors, successors, kind) must be its plan's, or the engine acts on no
    node of the request and the audit names the row."""
    db = tmp_path / "store.db"
    venue = FakeVenue({"w": {"prepare": ["retry"]}})
    with started(db, venue, THEN_D, steps=1) as engine:
        rewritten(db, "t1/x", executor="bank")
        with pytest.raises(TransferRefused, match="executor is 'bank', and the plan says"):
            drive(engine, "t1", 3)
    capsys.readouterr()
    assert main(["audit", "--from-store", f"sqlite:///{db}"]) == 1
    assert "the row is not what its request's plan made it (executor is 'bank'" in (
        capsys.readouterr().out
    )


def _planted_x(store: Any, executor: str) -> Any:
    """THEN_D's node 'x', inserted under its key before request t1 exists."""
    data = {"name": "x", "has_side_effect": False, "executor": executor}
    data |= {"predecessors": [], "successors": []}
    return store.insert("node", "t1/x", scope="t1", context={"kind": "action"}, data=data)[0]


def test_a_node_row_planted_before_its_request_is_not_adopted(url: str) -> None:
    """Outsider, tenth batch (f11): a row inserted under a node's key before the request was
    submitted was taken for the node by ``submit``. Now submit refuses it."""
    store = open_store(url)
    try:
        _planted_x(store, executor="bank")
        engine = engine_for(store, FakeVenue({}))
        with pytest.raises(PlanError, match="a node row 't1/x' was there before the request"):
            engine.submit("t1", THEN_D)
    finally:
        store.close()


def test_save_heads_refuses_to_replace_what_is_not_a_heads_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    open_store(url).close()
    before = db.read_bytes()
    assert main(["audit", "--from-store", url, "--save-heads", str(db)]) == 2
    assert "exists and is not a heads file" in capsys.readouterr().err
    assert db.read_bytes() == before
    kept = tmp_path / "heads.json"
    assert main(["audit", "--from-store", url, "--save-heads", str(kept)]) == 0
    assert main(["audit", "--from-store", url, "--save-heads", str(kept)]) == 0  # replaced


@pytest.mark.parametrize("bad", ["postgresql://u@[::1", "postgresql://[zz]/x"])
def test_a_url_with_a_broken_host_is_a_typed_error(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "--from-store", bad]) == 2
    said = capsys.readouterr()
    assert "Traceback" not in said.err and "machines audit:" in said.err


def test_a_derivation_that_forgets_a_started_node_state_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider, seventh batch: v2 renamed the node's unknown to uncertain and left it out
    of the request's side_effects; older versions' derivations did not know the new name,
    so a v3 map released a request with its withdrawal uncertain."""
    withdrawal_unknown(url)
    copy = SpecCopy(tmp_path / "v2")

    def node_renamed(doc: Document) -> None:
        renamed = rename_everywhere(doc, "unknown", "uncertain")
        doc.clear()
        doc.update(renamed)

    def request_forgets(doc: Document) -> None:
        node_renamed(doc)
        completed_only(doc)

    copy.edit("node", node_renamed).edit("request", request_forgets)
    code, out = migrate(capsys, url, copy.path, "node:unknown=uncertain")
    assert code == 1, out
    assert (
        "the new version's derivation (rule set 'money-safe') breaks context-matches-money" in out
    )


def test_a_node_renamed_by_raw_sql_neither_releases_nor_hides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider, seventh batch: the unknown withdrawal's data renamed (a name the plan
    lacks) with has_side_effect false; the plan was looked up by the data's own name."""
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    venue = FakeVenue({"w": {"submit": ["unknown"]}, "chk": {"prepare": ["retry"]}})
    recorder = Recorder()
    plan = [node("w", "action", True), node("chk", "action", False)]
    with started(db, venue, plan, recorder, steps=4) as engine:
        rewritten(db, "t1/w", name="w_gone", has_side_effect=False)
        venue.script["chk"]["prepare"] = [RuntimeError("limit check failed")]
        with pytest.raises(TransferRefused, match="name is 'w_gone', and the plan says 'w'"):
            drive(engine, "t1", 4)  # batch 10: the engine stops at a row not its plan's
        assert "request_failed" not in recorder.names
    assert main(["audit", "--from-store", url]) == 1
    assert "its data names it 'w_gone', and its key and its request's plan" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize("predecessors", [[], ["ghost"]], ids=["emptied", "ghost"])
def test_a_node_waits_for_its_planned_predecessors_whatever_its_row_says(
    tmp_path: Path, predecessors: list[str]
) -> None:
    """Outsider, seventh batch: a blocked node's predecessors emptied by raw SQL woke it
    (a side effect sent before its predecessor was confirmed); a ghost predecessor was a
    raw KeyError. The plan's order is kept, and a ghost is a typed refusal."""
    db = tmp_path / "store.db"
    venue = FakeVenue({"w": {"observe": ["pending"]}, "x": {"observe": ["pending"]}})
    with started(db, venue, THEN_D) as engine:
        assert engine.nodes("t1")["d"].state.value == "blocked"
        rewritten(db, "t1/d", predecessors=predecessors)
        venue.script["x"]["observe"] = ["completed"]  # an unrelated node completes: a wake
        with pytest.raises(TransferRefused, match=r"predecessors is \[.*\], and the plan says"):
            drive(engine, "t1", 3)  # batch 10: a row that is not its plan's stops the engine
        assert venue.count("submit", "d") == 0


def test_a_node_given_another_nodes_name_by_raw_sql_hides_nothing(tmp_path: Path) -> None:
    """Outsider, eighth batch: a node's data renamed to the name of an observing
    side-effect node replaced it in the engine's view (nodes were indexed by data name):
    the request failed with the withdrawal observing. Nodes are indexed by their keys."""
    db = tmp_path / "store.db"
    venue = FakeVenue(
        {"w": {"observe": ["pending"]}, "z": {"prepare": ["retry"]}, "x": {"observe": ["pending"]}}
    )
    recorder = Recorder()
    plan = [node("w", "action", True), node("x", "action", False, "w"), node("z", "action", False)]
    with started(db, venue, plan, recorder) as engine:
        rewritten(db, "t1/x", name="w")
        venue.script["z"]["prepare"] = [RuntimeError("limit check failed")]
        with pytest.raises(TransferRefused, match="name is 'w', and the plan says 'x'"):
            drive(engine, "t1", 4)
        assert "request_failed" not in recorder.names


@pytest.mark.parametrize(
    ("key", "changes"),
    [
        ("t1/d", {"predecessors": 5}),
        ("t1/d", {"drop": ("has_side_effect",)}),
    ],
    ids=["predecessors-not-a-list", "side-effect-gone"],
)
def test_a_node_row_rewritten_to_garbage_is_refused_typed(
    tmp_path: Path, key: str, changes: dict[str, object]
) -> None:
    db = tmp_path / "store.db"
    venue = FakeVenue({"w": {"observe": ["pending"]}, "x": {"observe": ["pending"]}})
    with started(db, venue, THEN_D) as engine:
        rewritten(db, key, **changes)  # type: ignore[arg-type]
        venue.script["x"]["observe"] = ["completed"]
        with contextlib.suppress(MachinesError):  # a typed refusal; anything else fails
            drive(engine, "t1", 3)
        assert venue.count("submit", "d") == 0


def _forge(url: str, how: str) -> None:
    """Outsider, ninth batch (f04, f10, f19, f23): a node row written by anyone who may
    insert rows, in the scope of request t1."""
    store = open_store(url)
    try:
        if how == "shadow":  # another key naming 'w', in t1's scope: it shadowed the real one
            data = {"name": "w", "has_side_effect": True, "executor": "venue"}
            data |= {"predecessors": [], "successors": ["d"]}
            row, _ = store.insert("node", "x/w", scope="t1", context={"kind": "action"}, data=data)
            store.move(row, "skip", actor="planner", detail={"by": "app"})
        else:  # a node the plan lacks: failing it halted and failed t1
            data = {"name": "evil", "has_side_effect": True, "executor": "venue"}
            data |= {"predecessors": [], "successors": []}
            store.insert("node", "t1/evil", scope="t1", context={"kind": "action"}, data=data)
    finally:
        store.close()


@pytest.mark.parametrize("how", ["shadow", "extra"])
def test_a_node_row_the_plan_does_not_name_is_refused_by_the_engine_and_named(
    url: str, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine acts on no node of a request whose node rows are not its plan (a forged
    row could stand in for the real withdrawal, or fail the transfer), and the audit names
    the row; before, the request completed with its real withdrawal still ready."""
    store = open_store(url)
    venue = FakeVenue({"w": {"prepare": ["retry"]}})
    try:
        engine = engine_for(store, venue)
        executing(engine, "t1", THEN_D)
        drive(engine, "t1", 2)
    finally:
        store.close()
    _forge(url, how)
    store = open_store(url)
    try:
        engine = engine_for(store, venue)
        with pytest.raises(TransferRefused, match="that its plan does not name"):
            drive(engine, "t1", 4)
        with store.transaction() as tx:
            request, real = tx.get("request", "t1"), tx.get("node", "t1/w")
        assert request is not None and request.state == RequestState.EXECUTING
        assert real is not None and real.state != "completed"
    finally:
        store.close()
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 1
    assert "its plan does not name it: it was written outside the engine" in capsys.readouterr().out


def test_a_node_row_planted_and_moved_before_its_request_is_not_adopted(url: str) -> None:
    """Outsider, eleventh batch (f01): a row with exactly the plan's data, moved on through
    legal moves before the request existed, was taken for the node: the withdrawal never
    ran and the request completed. A pre-existing row must be the untouched node."""
    store = open_store(url)
    try:
        row = _planted_x(store, executor="venue")  # exactly what the plan makes of 'x'
        store.move(row, "skip", actor="planner", detail={"by": "app"})
        engine = engine_for(store, FakeVenue({}))
        with pytest.raises(PlanError, match="untouched node"):
            engine.submit("t1", THEN_D)
    finally:
        store.close()


def test_a_stored_plan_erased_by_raw_sql_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider, eleventh batch (f09): a request whose plan was replaced by a string was
    taken for another system's, and its nodes went unjudged."""
    db = tmp_path / "store.db"
    with started(db, FakeVenue({"w": {"prepare": ["retry"]}}), THEN_D, steps=1):
        pass
    raw = sqlite3.connect(db)
    data = json.loads(raw.execute("SELECT data FROM request_entities WHERE key='t1'").fetchone()[0])
    data["plan"] = "erased"
    raw.execute(
        "UPDATE request_entities SET data = ?, version = version + 1 WHERE key = 't1'",
        (json.dumps(data),),
    )
    raw.commit()
    raw.close()
    capsys.readouterr()
    assert main(["audit", "--from-store", f"sqlite:///{db}"]) == 1
    assert "its stored plan is not one the engine wrote" in capsys.readouterr().out


def withdrawal_of_unknown_fate(tmp_path: Path) -> str:
    """A SQLite store (its URL) with request ``t`` executing and its one withdrawal
    ``unknown``: submitted, and no answer."""
    url = f"sqlite:///{tmp_path / 'money.db'}"
    with open_store(url) as store:
        venue = FakeVenue({"withdraw": {"submit": [TimeoutError("no answer")]}})
        engine = engine_for(store, venue)
        executing(engine, "t", [node("withdraw", "action", True)])
        for _ in range(4):
            engine.step("t")
        assert engine.nodes("t")["withdraw"].state == "unknown"
    return url


@pytest.mark.parametrize(
    "detail", ["{}", '{"by": true, "evidence": 1}', '{"by": " ", "evidence": "x"}']
)
def test_a_node_reconciled_without_saying_why_is_named_by_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], detail: str
) -> None:
    """Outsider batch 23 (a A6b): the application's role moved an unknown node (money of
    unknown fate) by the reconciler's legal move with an empty detail; once another node
    completed, the request was derived failed and its reservation released, and the audit
    said OK. Every exit from a state tagged fail-closed, in any machine, records who and
    why (``fail-closed-indeterminate``)."""
    url = withdrawal_of_unknown_fate(tmp_path)
    with open_store(url) as store, store.transaction() as tx:
        row = tx.get("node", "t/withdraw")
    assert row is not None
    with sqlite3.connect(tmp_path / "money.db") as raw:
        raw.execute(
            "UPDATE node_entities SET state = 'failed', moves = moves + 1, "
            "version = version + 1, last_trigger = 'reconcile_failed', "
            "last_actor = 'reconciler', last_detail = ?, last_context = ? "
            "WHERE key = 't/withdraw'",
            (detail, json.dumps(dict(row.context))),
        )
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 1
    out = capsys.readouterr().out
    assert "[fail-closed-indeterminate] node 't/withdraw': left unknown without recording" in out, (
        out
    )


def test_a_reservation_rewritten_outside_the_engine_is_named_by_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 24 (a 3): a data-only write set an executing request's reservation
    to ``released`` while its withdrawal's fate was unknown; the engine and the audit
    noticed nothing until the request next moved. The audit judges the recorded
    reservation against the one the request's state sets."""
    url = withdrawal_of_unknown_fate(tmp_path)
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 0
    with sqlite3.connect(tmp_path / "money.db") as raw:
        raw.execute(
            "UPDATE request_entities SET data = json_set(data, '$.reservation', 'released'), "
            "version = version + 1 WHERE key = 't'"
        )
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 1
    out = capsys.readouterr().out
    assert "request 't': its data says the reservation is 'released'" in out, out


def test_a_plan_and_its_rows_rewritten_together_keep_the_money_in_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 26 (a 1): the plan and the node rows rewritten together, saying the
    sent withdrawal had no side effect: a sibling's failure then failed the request and
    released its reservation with the money on its way, and the audit said OK (the guards
    cannot tell such writes from the engine's). Every node move records the side effect
    the engine read then, in history, which no write changes: the engine derives no
    release from the rewrite, and the audit names it."""
    url = f"sqlite:///{tmp_path / 'money.db'}"
    venue = FakeVenue({"withdraw": {"observe": ["pending"]}, "check": {"observe": ["pending"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        executing(engine, "t", [node("withdraw", "action", True), node("check", "action", False)])
        for _ in range(4):
            engine.step("t")
        assert engine.nodes("t")["withdraw"].state == "observing"
    with sqlite3.connect(tmp_path / "money.db") as raw:
        (text,) = raw.execute("SELECT data FROM request_entities WHERE key = 't'").fetchone()
        data = json.loads(text)
        for entry in data["plan"]:
            entry["has_side_effect"] = False
        raw.execute(
            "UPDATE request_entities SET data = ?, version = version + 1 WHERE key = 't'",
            (json.dumps(data),),
        )
        raw.execute(
            "UPDATE node_entities SET data = json_set(data, '$.has_side_effect', json('false')), "
            "version = version + 1 WHERE scope = 't'"
        )
    venue.script["check"] = {"observe": ["failed"]}
    with open_store(url) as store:
        engine = engine_for(store, venue)
        with contextlib.suppress(MachinesError):  # since batch 38: the plan is not the start's
            engine.step("t")
        with store.transaction() as tx:
            request = tx.get("request", "t")
        assert request is not None
        assert (request.state, request.data["reservation"]) != ("failed", "released"), request
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 1
    assert "its moves recorded it with a side effect" in capsys.readouterr().out
