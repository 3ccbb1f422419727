"""One UPDATE with the application's rights, made while the transfer engine runs, cannot
release a reservation, finish a transfer or send money with a withdrawal of unknown fate
without the engine refusing or the audit naming it (outsider batch 34, c):

- B2: a reconcile out of ``unknown`` whose evidence was a zero-width space (or a Hangul
  filler) released the reservation; the audit took it for evidence.
- B3: an automatic node move out of money in flight into a terminal state, written with
  no evidence (``observing -> completed`` by the observer), woke and sent the deposit.
- B4: an operator's ``cancel`` claiming ``side_effects: none`` while the withdrawal was
  ``unknown`` released the reservation; the audit judged releases by automatic actors
  only.
- B5: a forged ``wake`` of the deposit while the withdrawal was ``unknown``: the engine
  sent the deposit.
- B6: a forged ``complete`` by the system while the withdrawal was ``unknown`` consumed
  the reservation and nobody followed the money.

Before, the audit said OK after each; the engine sent the deposit in B3 and B5."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from machines.cli import main
from machines.store import open_store
from machines.systems.transfer import TransferRefused
from machines.testing.transfer.suite import plan_node as node
from tests.test_transfer import FakeVenue, approved, drive, engine_for, executing

TWO_LEGS = [node("w", "action", True), node("d", "action", True, "w")]


def in_flight(tmp_path: Path, venue: FakeVenue, steps: int = 4) -> str:
    """A SQLite store (its URL) with request ``t`` executing: withdrawal ``w`` then deposit
    ``d``, driven ``steps`` times against ``venue``."""
    url = f"sqlite:///{tmp_path / 'money.db'}"
    with open_store(url) as store:
        engine = engine_for(store, venue)
        executing(engine, "t", TWO_LEGS)
        drive(engine, "t", steps)
    return url


def forge(url: str, table: str, key: str, state: str, trigger: str, actor: str, **how: Any) -> None:
    """One raw UPDATE from a second connection: a legal move, as the schema accepts one."""
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        data, context = raw.execute(
            f"SELECT data, context FROM {table} WHERE key = ?", (key,)
        ).fetchone()
        data = {**json.loads(data), **how.get("data", {})}
        context = {**json.loads(context), **how.get("context", {})}
        raw.execute(
            f"UPDATE {table} SET state = ?, moves = moves + 1, version = version + 1, "
            "last_trigger = ?, last_actor = ?, last_detail = ?, last_context = ?, data = ? "
            "WHERE key = ?",
            (
                state,
                trigger,
                actor,
                json.dumps(how["detail"]),
                json.dumps(context),
                json.dumps(data),
                key,
            ),
        )


def end_request(
    url: str,
    state: str,
    trigger: str,
    actor: str,
    detail: dict[str, str],
    side_effects: str,
    reservation: str,
) -> None:
    """A forged move of request ``t`` into a final ``state``, claiming ``side_effects`` and
    recording the ``reservation`` that state sets, as the engine would write it."""
    forge(
        url,
        "request_entities",
        "t",
        state,
        trigger,
        actor,
        detail=detail,
        context={"side_effects": side_effects},
        data={"reservation": reservation, "current_frontier": []},
    )


def audit_says(url: str, capsys: pytest.CaptureFixture[str], *says: str) -> None:
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 1
    out = capsys.readouterr().out
    for text in says:
        assert text in out, out


def audit_clean(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 0, capsys.readouterr().out


def unknown_withdrawal(tmp_path: Path) -> str:
    url = in_flight(tmp_path, FakeVenue({"w": {"submit": ["unknown"]}}))
    with open_store(url) as store:
        assert engine_for(store, FakeVenue()).nodes("t")["w"].state == "unknown"
    return url


@pytest.mark.parametrize(
    "blank",
    ["\u200b", "\u3164", "\u2800", "\u0301", "\U0001d159", "\u303f", "\u1806", "\u2014"],
)
def test_b2_a_reconcile_whose_evidence_shows_nothing_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], blank: str
) -> None:
    url = unknown_withdrawal(tmp_path)
    detail = {"by": "recon", "evidence": blank}
    forge(url, "node_entities", "t/w", "failed", "reconcile_failed", "reconciler", detail=detail)
    audit_says(url, capsys, "[fail-closed-indeterminate] node 't/w': left unknown without")


def test_b3_an_automatic_end_of_money_in_flight_without_evidence_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = in_flight(tmp_path, FakeVenue({"w": {"observe": ["pending"]}}))
    with open_store(url) as store:
        assert engine_for(store, FakeVenue()).nodes("t")["w"].state == "observing"
    forge(url, "node_entities", "t/w", "completed", "complete", "observer", detail={"by": "obs"})
    audit_says(
        url,
        capsys,
        "node 't/w': 'observer' moved it from observing to completed with no evidence",
        "no-auto-terminal-money-in-flight",
    )


def test_b4_a_persons_release_on_a_false_claim_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = unknown_withdrawal(tmp_path)
    detail = {"by": "bob", "reason": "customer asked"}
    end_request(url, "cancelled", "cancel", "operator", detail, "none", "released")
    audit_says(
        url,
        capsys,
        "request 't': 'operator' moved it to cancelled under side_effects 'none', but its "
        "nodes imply side_effects 'started'",
    )


def test_b5_a_node_woken_before_its_predecessor_is_done_is_not_sent_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = unknown_withdrawal(tmp_path)
    detail = {"by": "engine-1", "reason": "every predecessor is completed or skipped"}
    forge(url, "node_entities", "t/d", "ready", "wake", "planner", detail=detail)
    venue = FakeVenue()
    with open_store(url) as store:
        engine = engine_for(store, venue)
        with pytest.raises(TransferRefused, match="'d' is ready while its predecessor"):
            engine.step("t")
        assert ("submit", "d") not in venue.calls and ("prepare", "d") not in venue.calls
        assert engine.nodes("t")["d"].state == "ready"
    audit_says(url, capsys, "node 't/d': 'planner' woke it while its predecessor(s) w were not")


def test_b6_a_completion_with_a_node_not_done_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = unknown_withdrawal(tmp_path)
    detail = {"by": "engine-1", "rule": "all-done"}
    end_request(url, "completed", "complete", "system", detail, "started", "consumed")
    audit_says(
        url,
        capsys,
        "[completion-means-done] request 't': 'system' completed it while node(s) of its "
        "plan are not done (t/d blocked, t/w unknown)",
    )


def test_b3_a_venue_answer_the_node_was_moved_under_is_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's half of B3: the withdrawal was failed by a forged move while its
    submit call was out; the venue then accepted it, the engine's move lost to the forged
    one and dropped the answer, and the request was failed with its reservation released.
    Now an answer that says money may have moved, against a node moved meanwhile to a
    state that says none did, is ``TransferRefused``; the audit names the forged move."""
    url = f"sqlite:///{tmp_path / 'money.db'}"

    class ForgedWhileOut(FakeVenue):
        def submit(self, node: Any) -> Any:
            if node.name == "w":
                forge(
                    url,
                    "node_entities",
                    "t/w",
                    "failed",
                    "fail",
                    "executor",
                    detail={"by": "exec-9"},
                )
            return super().submit(node)

    venue = ForgedWhileOut()
    with open_store(url) as store:
        engine = engine_for(store, venue)
        executing(engine, "t", TWO_LEGS)
        with pytest.raises(TransferRefused, match="says money may have moved, but the node"):
            drive(engine, "t", 4)
        assert ("submit", "w") in venue.calls and ("submit", "d") not in venue.calls
    audit_says(url, capsys, "'executor' moved it from submitting to failed with no evidence")


@pytest.mark.parametrize("reconciled", ["completed", "submitted"])
def test_b44_a_late_refusal_of_a_node_a_reconciler_settled_is_refused_not_dropped(
    reconciled: str,
) -> None:
    """Outsider batch 44 (c B1): while a submit call was out past its timeout, another
    engine took the node for unknown and a reconciler, reading the venue's records, said
    the money moved; the venue's own late answer then said it failed, and was dropped
    without a trace. An answer that says no money moved, against a node moved meanwhile
    to a final state that says it did, is ``TransferRefused`` for a person to look; one
    against a node still settling (a reconciler's "submitted") is dropped as before."""
    from machines.systems.transfer import TransferEngine

    now = [1000.0]
    store = open_store("memory://")

    class Venue:
        def prepare(self, node: Any) -> str:
            return "submit"

        def observe(self, node: Any) -> str:
            return "completed"

        def submit(self, node: Any) -> str:
            now[0] += 1000  # the call hangs past submit_timeout
            other.step("r")  # another engine: submitting -> unknown
            other.reconcile("r", "w", reconciled, by="rita")
            return "failed"  # the venue's late, contradicting answer

    def engine(name: str) -> TransferEngine:
        return TransferEngine(
            store, {"venue": Venue()}, clock=lambda: now[0], engine_id=name, submit_timeout=60
        )

    one, other = engine("one"), engine("other")
    one.submit("r", [node("w", "action", True)])
    one.validate("r")
    one.request_approval("r")
    one.approve("r", by="olivia")
    one.start("r")
    if reconciled == "completed":
        with pytest.raises(TransferRefused, match="says no money moved, but the node was moved"):
            drive(one, "r", 3)
    else:
        drive(one, "r", 3)  # still settling: its observer's answer decides
    assert one.nodes("r")["w"].state.value == "completed"


# -- outsider batch 35 (b) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "moved",
    [
        [("ready", "wake", "planner"), ("preparing", "prepare", "executor")],
        [
            ("ready", "wake", "planner"),
            ("preparing", "prepare", "executor"),
            ("awaiting_signature", "request_signature", "executor"),
        ],
    ],
    ids=["preparing", "awaiting-signature"],
)
def test_b35_1_a_node_moved_on_past_ready_is_not_sent_before_its_predecessor_is_done(
    tmp_path: Path, moved: list[tuple[str, str, str]]
) -> None:
    """Outsider batch 35 (b 1): a forged wake and prepare of the deposit while the
    withdrawal was still observed; the engine checked predecessors only for a node found
    ready, sent the deposit from preparing, and the audit said OK once the withdrawal
    completed. The transaction that marks a node sent now refuses it, whatever state it
    was found in, and nothing is sent."""
    url = in_flight(tmp_path, FakeVenue({"w": {"observe": ["pending"]}}))
    for state, trigger, actor in moved:
        forge(url, "node_entities", "t/d", state, trigger, actor, detail={"by": "engine-1"})
    state = moved[-1][0]
    venue = FakeVenue({"w": {"observe": ["pending"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        assert engine.nodes("t")["w"].state == "observing"
        with pytest.raises(TransferRefused, match=r"predecessor\(s\) w are not done"):
            if state == "awaiting_signature":
                engine.sign("t", "d", by="signer-1")
            else:
                engine.step("t")
        assert ("submit", "d") not in venue.calls
        assert engine.nodes("t")["d"].state == state


def test_b35_5_a_node_whose_executor_the_engine_lacks_is_a_typed_refusal(tmp_path: Path) -> None:
    """Outsider batch 35 (b 5): an engine without the plan's executor stepped a request,
    and a raw ``KeyError('venue')`` escaped the second step. It is ``TransferConfigError``
    naming the node and the executor, before anything is marked sent."""
    from machines.systems import TransferEngine
    from machines.systems.transfer import TransferConfigError
    from machines.systems.transfer.executor import ManualGate

    url = in_flight(tmp_path, FakeVenue(), steps=0)
    with open_store(url) as store:
        engine = TransferEngine(store, {"gate": ManualGate()}, engine_id="engine-2")
        with pytest.raises(TransferConfigError, match=r"node 'w' .* executor 'venue'"):
            for _ in range(3):
                engine.step("t")
        assert engine.nodes("t")["w"].state in ("ready", "preparing")


def test_b35_1b_a_wake_forged_before_the_predecessor_was_done_stays_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 35 (b 1b): a wake of the deposit forged while the withdrawal was
    observed was named only until the withdrawal completed: the audit judged it by the
    states stored now. The engine's wake records the event that made each predecessor
    done (its number and the store's time for it), which nobody can write before it
    happens; a wake without it is named whatever the predecessors are now."""
    url = in_flight(tmp_path, FakeVenue({"w": {"observe": ["pending"]}}))
    detail = {"by": "engine-1", "reason": "every predecessor is completed or skipped"}
    forge(url, "node_entities", "t/d", "ready", "wake", "planner", detail=detail)
    with open_store(url) as store:
        engine = engine_for(store, FakeVenue())  # the withdrawal completes, then the deposit
        drive(engine, "t", 8)
        assert {n: r.state for n, r in engine.nodes("t").items()} == {
            "w": "completed",
            "d": "completed",
        }
    audit_says(url, capsys, "node 't/d': 'planner' woke it while its predecessor(s) w were not")


def test_b35_1b_the_engines_own_wake_is_not_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = in_flight(tmp_path, FakeVenue(), steps=10)
    audit_clean(url, capsys)


# -- outsider batch 36 (b) ------------------------------------------------------------------


def three_legs_with_a_check(tmp_path: Path, gate: bool) -> str:
    """A store with ``w`` (a withdrawal) observed, then an observe node (a manual gate when
    ``gate``), then ``d`` (the deposit) after it."""
    check = node("manual_ok" if gate else "c", "observe", False, "w")
    if gate:
        check["executor"] = "gate"
    plan = [node("w", "action", True), check, node("d", "action", True, check["name"])]
    url = f"sqlite:///{tmp_path / 'money.db'}"
    with open_store(url) as store:
        engine = engine_for(store, FakeVenue({"w": {"observe": ["pending"]}}))
        executing(engine, "t", plan)
        drive(engine, "t", 4)
        assert engine.nodes("t")["w"].state == "observing"
    return url


def test_b36_1_a_node_moved_on_before_its_predecessor_is_done_is_not_followed(
    tmp_path: Path,
) -> None:
    """Outsider batch 36 (b 1): a forged wake and ``start_observing`` of a check between
    the withdrawal and the deposit; the engine observed the check, completed it, woke the
    deposit and sent it while the withdrawal was observed. The engine now refuses to move
    any node on while a node it waits for is not done, and a node counts as done only
    when the nodes before it are (unless it was skipped)."""
    url = three_legs_with_a_check(tmp_path, gate=False)
    detail = {"by": "engine-1", "reason": "every predecessor is completed or skipped"}
    forge(url, "node_entities", "t/c", "ready", "wake", "planner", detail=detail)
    forge(url, "node_entities", "t/c", "observing", "start_observing", "observer", detail=detail)
    venue = FakeVenue({"w": {"observe": ["pending"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        with pytest.raises(TransferRefused, match=r"'c' is observing while its predecessor"):
            drive(engine, "t", 4)
        assert ("observe", "c") not in venue.calls and ("submit", "d") not in venue.calls
    forge(url, "node_entities", "t/c", "completed", "complete", "observer", detail=detail)
    with open_store(url) as store:  # even completed outright, the deposit waits for w
        engine = engine_for(store, venue)
        drive(engine, "t", 4)
        assert engine.nodes("t")["d"].state == "blocked"
        assert ("submit", "d") not in venue.calls


def test_b36_2_an_operator_passes_no_gate_woken_before_its_predecessor_is_done(
    tmp_path: Path,
) -> None:
    """Outsider batch 36 (b 2): a forged wake of an observe-kind manual gate while the
    withdrawal was observed; the operator's ``complete_manual`` (as the desk calls it)
    passed the gate, and the engine sent the deposit."""
    from machines.systems import TransferEngine

    url = three_legs_with_a_check(tmp_path, gate=True)
    detail = {"by": "engine-1", "reason": "every predecessor is completed or skipped"}
    forge(url, "node_entities", "t/manual_ok", "ready", "wake", "planner", detail=detail)
    with open_store(url) as store:
        with pytest.raises(TransferRefused, match=r"'manual_ok' is ready while its predecessor"):
            TransferEngine(store, {}).complete_manual(
                "t", "manual_ok", by="ops-ann", drive=False, reason="checked"
            )
        assert engine_for(store, FakeVenue()).nodes("t")["manual_ok"].state == "ready"


def test_b36_a_a_write_of_a_nodes_data_while_its_call_is_out_loses_no_answer(
    tmp_path: Path,
) -> None:
    """Outsider batch 36 (b A): the application wrote a note into the withdrawal's data
    (its version raised, its state and moves as they were) while its ``submit`` call was
    out; the engine dropped the venue's answer, and the node later went ``unknown`` as
    one that never reported back. The move is made again on the row as it is now."""
    url = f"sqlite:///{tmp_path / 'money.db'}"
    path = url.removeprefix("sqlite:///")

    class NotedWhileOut(FakeVenue):
        def submit(self, node: Any) -> Any:
            answer = super().submit(node)
            if node.name == "w":
                with sqlite3.connect(path) as raw:
                    raw.execute(
                        "UPDATE node_entities SET data = json_set(data, '$.note', 'x'), "
                        "version = version + 1 WHERE key = 't/w'"
                    )
            return answer

    venue = NotedWhileOut({"w": {"submit": ["completed"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        executing(engine, "t", TWO_LEGS)
        drive(engine, "t", 3)
        w = engine.nodes("t")["w"]
        assert w.state == "completed" and w.data["note"] == "x", (w.state, dict(w.data))


# -- outsider batch 37 (a) ------------------------------------------------------------------


def test_b37_b2_a_gate_passed_without_a_persons_action_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 37 (a B2): one raw UPDATE moved a ready manual gate on
    (``start_observing``) with the operator's action written into its data; the gate's
    executor passed it, the deposit was sent, and the audit said OK. The audit names a gate
    moved on by a move that names no person (the engine's names one), and keeps quiet about
    a gate an operator passed."""
    url = three_legs_with_a_check(tmp_path, gate=True)
    venue = FakeVenue({"w": {"observe": ["completed"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        drive(engine, "t", 4)
        assert engine.nodes("t")["manual_ok"].state == "ready"
    audit_clean(url, capsys)
    detail = {"by": "engine-1", "reason": "did the action of manual_ok"}
    manual = {"manual": {"by": "ops-ann", "at": 1.0}}
    forge(url, "node_entities", "t/manual_ok", "observing", "start_observing", "observer",
          detail=detail, data=manual)  # fmt: skip
    audit_says(url, capsys, "moved manual gate 'manual_ok' on from ready to observing naming no")


def test_b37_b2_a_gate_an_operator_passed_is_not_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = three_legs_with_a_check(tmp_path, gate=True)
    venue = FakeVenue({"w": {"observe": ["completed"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        drive(engine, "t", 4)
        engine.complete_manual("t", "manual_ok", by="ops-ann", reason="checked the account")
        drive(engine, "t", 6)
        assert engine.nodes("t")["manual_ok"].state == "completed"
    audit_clean(url, capsys)


def test_b37_n1_a_skipped_node_passes_on_what_it_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 37 (a N1): the planner skipped the check between the withdrawal and
    the deposit while the withdrawal was observed; the skipped check counted as done, and
    the deposit was woken and sent before the withdrawal settled. A skipped node takes
    itself out of the plan, not the order: the deposit waits for the withdrawal."""
    url = three_legs_with_a_check(tmp_path, gate=False)
    venue = FakeVenue({"w": {"observe": ["pending", "pending", "completed"]}})
    with open_store(url) as store:
        engine = engine_for(store, venue)
        assert engine.skip("t", "c", by="planner-1", reason="same bank") == "skipped"
        drive(engine, "t", 1)
        assert engine.nodes("t")["d"].state == "blocked"
        assert ("prepare", "d") not in venue.calls and ("submit", "d") not in venue.calls
        drive(engine, "t", 8)
        assert engine.nodes("t")["w"].state == "completed"
        assert engine.nodes("t")["d"].state == "completed"
    audit_clean(url, capsys)


def test_b37_n1_a_wake_past_a_skipped_node_before_its_predecessor_is_done_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = three_legs_with_a_check(tmp_path, gate=False)
    with open_store(url) as store:
        engine_for(store, FakeVenue()).skip("t", "c", by="planner-1", reason="same bank")
        with store.transaction() as tx:
            history = tx.history("node", "t/c")
    detail = {  # as the engine writes it, naming the skip that made the check done
        "by": "engine-1",
        "reason": "every predecessor is completed or skipped",
        "done_by": {"c": [len(history), history[-1].at]},
    }
    forge(url, "node_entities", "t/d", "ready", "wake", "planner", detail=detail)
    audit_says(url, capsys, "'planner' woke it while its predecessor(s) c were not done")


def test_b38_a7_a_node_left_blocked_after_its_predecessors_are_done_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 38 (b A7): two engines on PostgreSQL each completed one of two
    withdrawals at once and neither woke the deposit; the transfer stayed executing with
    its reservation held, the deposit blocked, and the audit said OK. The engine now takes
    turns (``hold_request``); the audit names a node of an executing request left blocked
    while every node it comes after is done, here left so by one raw UPDATE."""
    url = in_flight(tmp_path, FakeVenue({"w": {"observe": ["pending"]}}))
    detail = {"by": "engine-1", "evidence": "observe() answered 'completed'"}
    forge(url, "node_entities", "t/w", "completed", "complete", "observer", detail=detail)
    audit_says(url, capsys, "[derivation-consistency] request 't': its node 'd' is still blocked")


def test_b38_a5_a_manual_gate_is_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 38 (b A5): a planner's ``skip`` of a blocked manual gate passed it;
    the deposit was sent and the request completed with nobody's action recorded, and the
    audit said OK. The engine refuses to skip a gate, and the audit names a skipped one
    (here skipped by one raw UPDATE)."""
    url = three_legs_with_a_check(tmp_path, gate=True)
    with open_store(url) as store:
        engine = engine_for(store, FakeVenue())
        with pytest.raises(TransferRefused, match="'manual_ok' is a manual gate"):
            engine.skip("t", "manual_ok", by="planner-bot", reason="auto")
        assert engine.nodes("t")["manual_ok"].state == "blocked"
    detail = {"by": "planner-bot", "reason": "auto"}
    forge(url, "node_entities", "t/manual_ok", "skipped", "skip", "planner", detail=detail)
    audit_says(url, capsys, "'planner' skipped manual gate 'manual_ok'")


def test_b38_a6_a_late_answer_after_a_reconciliation_is_raised_and_says_so(
    tmp_path: Path,
) -> None:
    """Outsider batch 38 (b A6): a submit call that stayed out past the timeout; another
    engine declared the node unknown, a reconciler failed it (the reservation released),
    and then the venue answered completed. The answer is raised to whoever called step,
    and the error no longer claims that the audit names the (legitimate) reconciliation."""
    import threading

    url = f"sqlite:///{tmp_path / 'money.db'}"
    release, now = threading.Event(), [1000.0]

    class Slow(FakeVenue):
        def submit(self, node: Any) -> str:
            release.wait(10)
            return "completed"

    with open_store(url) as store:
        slow = engine_for(store, Slow(), clock=lambda: now[0], submit_timeout=60)
        other = engine_for(store, FakeVenue(), clock=lambda: now[0], submit_timeout=60)
        executing(slow, "t", [node("w", "action", True)])
        slow.step("t")  # ready -> preparing
        raised: list[BaseException] = []

        def send() -> None:
            try:
                slow.step("t")
            except TransferRefused as error:
                raised.append(error)

        sender = threading.Thread(target=send)
        sender.start()
        while slow.nodes("t")["w"].state != "submitting":
            release.wait(0.01)
        now[0] += 61
        other.step("t")
        other.reconcile("t", "w", "failed", by="recon", note="the venue shows nothing yet")
        assert other.request("t").data["reservation"] == "released"
        release.set()
        sender.join()
    assert len(raised) == 1, raised
    assert "recorded anywhere but in this error" in str(raised[0])
    assert "names the move)" not in str(raised[0])


def test_b38_a1_a_plan_rewritten_after_the_start_is_refused_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 38 (b A1): with the withdrawal sent, the deposit's predecessors were
    taken out of the request's plan and every node row together, by writes of data alone;
    the rows matched the plan, the engine woke and sent the deposit while the withdrawal
    was observed, and the audit said OK. The start records the plan's digest; a plan with
    another one stops the engine for that request, and the audit names it."""
    venue = FakeVenue({"w": {"observe": ["pending"] * 5}})
    url = in_flight(tmp_path, venue, steps=2)
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        (data,) = raw.execute("SELECT data FROM request_entities WHERE key = 't'").fetchone()
        request = json.loads(data)
        request["plan"][1]["after"] = []
        raw.execute(
            "UPDATE request_entities SET data = ?, version = version + 1 WHERE key = 't'",
            (json.dumps(request),),
        )
        for key, data in raw.execute("SELECT key, data FROM node_entities").fetchall():
            row = {**json.loads(data), "predecessors": [], "successors": []}
            raw.execute(
                "UPDATE node_entities SET data = ?, version = version + 1 WHERE key = ?",
                (json.dumps(row), key),
            )
    with open_store(url) as store:
        engine = engine_for(store, venue)
        with pytest.raises(TransferRefused, match="not the one it started with"):
            engine.run("t", max_steps=5)
        assert ("submit", "d") not in venue.calls
    audit_says(url, capsys, "[no-auto-terminal-money-in-flight] request 't': its plan is not")


@pytest.mark.parametrize("digest", ["missing", None, 7, "0" * 63])
def test_b39_a1_a_start_that_records_no_digest_fixes_no_plan_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], digest: object
) -> None:
    """Outsider batch 39 (b A1): a start written with the application's rights and no
    ``plan_digest`` (or one that is no digest) turned the fixed-plan check off in the engine
    and the audit alike; the plan rewritten after the withdrawal was sent let the deposit
    go while it was observed, audit OK. The engine's start always records one, so a start
    without one stops the engine for that request, and the audit names it."""
    url = f"sqlite:///{tmp_path / 'money.db'}"
    with open_store(url) as store:
        engine = engine_for(store, FakeVenue())
        approved(engine, "t", TWO_LEGS)
        with store.transaction() as tx:
            row = tx.get("request", "t")
            assert row is not None
            detail: dict[str, object] = {"by": "engine-1"}
            if digest != "missing":
                detail["plan_digest"] = digest
            tx.move(row, "start", actor="system", detail=detail)
        with pytest.raises(TransferRefused, match="its start recorded no digest of it"):
            engine.step("t")
    audit_says(url, capsys, "request 't': its plan is not the one it started with")


def test_b40_a1_nodes_moved_in_a_request_never_started_are_named_and_not_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 40 (a 1): the withdrawal and the deposit of a request only approved
    were moved to completed by raw moves (the deposit's wake naming the withdrawal's
    completion); the audit said OK, and the engine's start then completed the request.
    The audit names a node moved in a request never started, and the engine starts no
    request whose nodes moved."""
    url = f"sqlite:///{tmp_path / 'money.db'}"
    with open_store(url) as store:
        engine = engine_for(store, FakeVenue())
        approved(engine, "t", TWO_LEGS)
    evidence = {"by": "x", "evidence": "the venue said so"}
    forge(url, "node_entities", "t/w", "ready", "wake", "planner", detail={"by": "x"})
    forge(url, "node_entities", "t/w", "preparing", "prepare", "executor", detail=evidence)
    with open_store(url) as store:
        with pytest.raises(TransferRefused, match=r"not started, yet its node\(s\) w moved"):
            engine_for(store, FakeVenue()).start("t")
        assert engine_for(store, FakeVenue()).request("t").state == "approved"
    audit_says(url, capsys, "node 't/w': 'planner' moved it (wake) while request 't' had not")


@pytest.mark.parametrize("answer", ["pending", "completed"])
def test_b45_a_late_pending_of_a_node_the_venue_failed_meanwhile_is_dropped(answer: str) -> None:
    """Outsider batch 45 (found by the transfer suite's random runs): while one engine's
    observe call was out, another engine observed the same node and the venue said it
    failed; the first call's answer, "pending", then came back. That earlier, non-final
    word met a node the venue's own final word had failed, and the engine raised
    ``TransferRefused`` for a person. The venue's later final word stands: the late answer
    is dropped, as any stale answer is; a final "completed" against it is still refused."""
    from machines.systems.transfer import TransferEngine

    store = open_store("memory://")
    late = [answer]

    class Venue:
        calls = 0

        def prepare(self, node: Any) -> str:
            return "submit"

        def submit(self, node: Any) -> str:
            return "accepted"

        def observe(self, node: Any) -> str:
            if node.name == "w":
                return "completed"
            Venue.calls += 1
            if Venue.calls == 1:
                other.step("r")  # meanwhile: the other engine asks, and hears "failed"
                return late[0]
            return "failed"

    def engine(name: str) -> TransferEngine:
        return TransferEngine(store, {"venue": Venue()}, engine_id=name)

    one, other = engine("one"), engine("other")
    one.submit("r", TWO_LEGS)
    one.validate("r")
    one.request_approval("r")
    one.approve("r", by="olivia")
    one.start("r")
    if answer == "completed":  # two final words that disagree: a person must look
        with pytest.raises(TransferRefused, match="says money may have moved"):
            drive(one, "r", 6)
    else:
        drive(one, "r", 6)
    assert one.nodes("r")["d"].state.value == "failed"


def test_b46_a_venue_answer_that_keeps_losing_races_is_raised_never_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outsider batch 46 (c 6): with six engines stepping forty nodes of one request on
    PostgreSQL, a node's move recording the venue's "completed" lost five races for the
    request row in a row and was dropped without a trace; the node later went unknown and
    a person had to ask the venue again. A move is now made again up to ``APPLY_ATTEMPTS``
    times, with a growing random pause, and one that still cannot be recorded is a
    ``StoreError`` naming the answer, never silence."""
    from contextlib import contextmanager

    from machines.store.records import StaleWrite, StoreError
    from machines.systems.transfer import TransferEngine, driver

    store = open_store("memory://")
    racing = [False]

    class Venue:
        def prepare(self, node: Any) -> str:
            return "submit"

        def submit(self, node: Any) -> str:
            racing[0] = True  # from now on every session loses to another engine
            return "completed"

        def observe(self, node: Any) -> str:
            return "completed"

    engine = TransferEngine(store, {"venue": Venue()})
    real = driver.Driver._session

    @contextmanager
    def losing(self: Any, request_id: str) -> Any:
        if racing[0]:
            raise StaleWrite("another engine moved the request first")
        with real(self, request_id) as session:
            yield session

    monkeypatch.setattr(driver.Driver, "_session", losing)
    monkeypatch.setattr(driver, "APPLY_ATTEMPTS", 3)
    engine.submit("r", [node("w", "action", True)])
    engine.validate("r")
    engine.request_approval("r")
    engine.approve("r", by="olivia")
    engine.start("r")
    with pytest.raises(StoreError, match=r"complete by executor .* could not be recorded"):
        drive(engine, "r", 4)
    racing[0] = False
    assert engine.nodes("r")["w"].state.value == "submitting"  # not taken for silent
