"""A person's decision lands only on the row they decided on: every call of a reference
system that records a person's decision takes ``seen=``, the version the person read,
and checks it in the transaction that writes (``StaleWrite``, nothing written, if the row
moved since). The desk passes the version its page showed; without it, a decision made on
one attempt could land on a later one that the system made in between."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from machines.errors import InvalidArgument
from machines.store import Row, StaleWrite, Store
from machines.systems import EffectLog, ExactlyOnce
from machines.systems.effectlog_errors import EffectAwaitingApproval
from machines.systems.transfer import TransferEngine
from machines.testing.transfer.suite import plan_node
from tests.test_transfer import FakeVenue, engine_for, executing


@dataclass
class Case:
    """A row waiting on a person, the call that records their decision, and the row."""

    call: Callable[[Any], object]
    machine: str
    key: str


def parked(store: Store, key: str) -> None:
    row = store.insert("outcome", key)[0]
    store.move(row, "park", actor="worker", detail={"evidence": "lease expired"})


def outcome(store: Store, how: str) -> Case:
    parked(store, "k")
    system = ExactlyOnce(store)
    if how == "reclaim":
        return Case(
            lambda seen: system.reclaim("k", by="olga", reason="r", seen=seen), "outcome", "k"
        )
    landed = how == "landed"
    result = 7 if landed else None

    def decide(seen: Any) -> None:
        system.decide("k", landed=landed, by="olga", reason="r", result=result, seen=seen)

    return Case(decide, "outcome", "k")


def effect(store: Store, how: str) -> Case:
    log = EffectLog(store)
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire:1", lambda: "sent", tier="irreversible", tool="wire", session="s")
    call = log.approve if how == "approve" else log.reject
    return Case(lambda seen: call("wire:1", by="olga", reason="r", seen=seen), "effect", "wire:1")


def awaiting_approval(store: Store) -> TransferEngine:
    engine = engine_for(store, FakeVenue())
    engine.submit("t", [plan_node("check", "observe", False)])
    engine.validate("t")
    engine.request_approval("t")
    return engine


def request(store: Store, how: str) -> Case:
    if how in ("approve", "reject"):
        engine = awaiting_approval(store)
        call = getattr(engine, how)
        return Case(lambda seen: call("t", by="olga", reason="r", seen=seen), "request", "t")
    if how == "cancel":
        engine = engine_for(store, FakeVenue())
        executing(engine, "t", [plan_node("check", "observe", False)])
        return Case(lambda seen: engine.cancel("t", by="olga", seen=seen), "request", "t")
    if how in ("resume", "complete_manual"):
        engine = engine_for(store, FakeVenue())
        plan = [
            plan_node("withdraw", "action", True),
            plan_node("manual_confirm", "action", False, "withdraw", executor="gate"),
        ]
        executing(engine, "t", plan)
        assert engine.run("t") == "waiting_manual_action"
        if how == "resume":
            return Case(lambda seen: engine.resume("t", by="olga", seen=seen), "request", "t")
        return Case(
            lambda seen: engine.complete_manual("t", "manual_confirm", by="olga", seen=seen),
            "request",
            "t",
        )
    venue = FakeVenue(
        {
            "withdraw": {"submit": [TimeoutError("no answer")]},
            "check": {"observe": ["failed"]},
        }
    )
    engine = engine_for(store, venue)
    plan = [plan_node("withdraw", "action", True), plan_node("check", "observe", False)]
    executing(engine, "t", plan)
    for _ in range(6):
        engine.step("t")
    assert engine.request("t").state == "manual_intervention"
    call = getattr(engine, how)
    return Case(lambda seen: call("t", by="olga", evidence="statement", seen=seen), "request", "t")


def node(store: Store, how: str) -> Case:
    engine = engine_for(store, FakeVenue({"withdraw": {"prepare": ["sign"]}}))
    executing(engine, "t", [plan_node("withdraw", "action", True)])
    engine.run("t")
    assert engine.nodes("t")["withdraw"].state == "awaiting_signature"
    if how == "sign":
        return Case(
            lambda seen: engine.sign("t", "withdraw", by="hsm", seen=seen), "node", "t/withdraw"
        )

    def refuse(seen: Any) -> None:
        engine.refuse_signature("t", "withdraw", by="hsm", reason="limit", seen=seen)

    return Case(refuse, "node", "t/withdraw")


CASES: dict[str, Callable[[Store], Case]] = {
    "ExactlyOnce.decide landed": lambda s: outcome(s, "landed"),
    "ExactlyOnce.decide not landed": lambda s: outcome(s, "not_landed"),
    "ExactlyOnce.reclaim": lambda s: outcome(s, "reclaim"),
    "EffectLog.approve": lambda s: effect(s, "approve"),
    "EffectLog.reject": lambda s: effect(s, "reject"),
    **{
        f"TransferEngine.{how}": (lambda s, how=how: request(s, how))
        for how in (
            "approve",
            "reject",
            "cancel",
            "resume",
            "complete_manual",
            "confirm_failed",
            "confirm_completed",
        )
    },
    "TransferEngine.sign": lambda s: node(s, "sign"),
    "TransferEngine.refuse_signature": lambda s: node(s, "refuse_signature"),
}


def read(store: Store, case: Case) -> tuple[Row, int]:
    with store.transaction() as tx:
        row = tx.get(case.machine, case.key)
        assert row is not None
        return row, len(tx.history(case.machine, case.key))


def seen_now(store: Store, case: Case) -> int:
    """The version a person reading the entity now would pass: a transfer's request is
    read with its nodes (``TransferEngine.transfer_version``)."""
    if case.machine == "request":
        return TransferEngine(store, {}).transfer_version(case.key)
    version = read(store, case)[0].version
    assert version is not None
    return version


@pytest.mark.parametrize("name", list(CASES))
def test_a_decision_on_a_row_that_moved_since_writes_nothing(store: Store, name: str) -> None:
    case = CASES[name](store)
    before = read(store, case)
    version = seen_now(store, case)
    for stale in [v for v in (version - 1, version + 1) if v >= 1]:
        with pytest.raises(StaleWrite, match=f"not the {stale} the decision was made on"):
            case.call(stale)
        assert read(store, case) == before
    for garbage in (0, -1, True, "3", 2.0, [version], 2**63, 10**5000):  # no store holds it
        with pytest.raises(InvalidArgument, match="seen"):
            case.call(garbage)
        assert read(store, case) == before
    case.call(version)
    assert seen_now(store, case) > version


@pytest.mark.parametrize("name", ["ExactlyOnce.reclaim", "TransferEngine.approve"])
def test_without_seen_the_call_decides_on_what_it_reads(store: Store, name: str) -> None:
    case = CASES[name](store)
    version = read(store, case)[0].version
    case.call(None)
    assert read(store, case)[0].version > version


@pytest.mark.parametrize("how", ["confirm_failed", "confirm_completed"])
def test_a_decision_on_a_transfer_whose_node_moved_since_writes_nothing(
    store: Store, how: str
) -> None:
    """Outsider batch 18 (a19): ``seen=`` covered the request row alone, and a node can
    move without the request's row changing (a withdrawal the venue's records show sent),
    so an operator's ``confirm_failed`` made on the page from before landed. The version
    a request's decision names is the transfer's, its nodes' included."""
    case = request(store, how)
    engine = TransferEngine(store, {})
    read_at = engine.transfer_version("t")
    engine.reconcile("t", "withdraw", "submitted", by="venue-records")
    assert engine.transfer_version("t") != read_at  # (a node's move holds the request's row
    # too since batch 38, b A7; the transfer's version is what a decision names either way)
    with pytest.raises(StaleWrite, match="or one of its nodes moved since"):
        case.call(read_at)
    assert engine.request("t").state == "manual_intervention"
    case.call(engine.transfer_version("t"))
