"""A reason a person may leave out must, when given, say something (batch 37 a N2).

``approve``, ``reject``, ``cancel`` and ``resume`` of a transfer, an operator's
``complete_manual``, the engine's ``validate`` problems, and the effect log's ``approve`` and
``reject`` took a reason of only punctuation or invisible characters and recorded it as
though the person had explained. Leaving the reason out (``""``) stays allowed; a given one
is judged as every other who, why and evidence is (``says_something``), before anything
is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from machines.errors import MachinesError
from machines.spec.states import RequestState
from machines.store import Store
from machines.systems import EffectLog
from machines.systems.transfer import ManualGate, TransferEngine
from machines.testing.transfer.suite import plan_node as node
from tests.test_transfer import FakeVenue, executing, snapshot

SILENT = [" ", "\u200b", "\u2800", "\U0001d159", "\u303f\u1806", "--", "..."]
SAID = "checked with the desk"


def engine_for(store: Store) -> TransferEngine:
    return TransferEngine(store, {"venue": FakeVenue(), "gate": ManualGate()}, engine_id="e")


def submitted(engine: TransferEngine, request_id: str) -> None:
    engine.submit(request_id, [node("withdraw", "action", True)])


@pytest.mark.parametrize("silent", SILENT)
def test_a_transfer_decision_with_a_reason_that_says_nothing_is_refused(
    store: Store, silent: str
) -> None:
    engine = engine_for(store)
    submitted(engine, "r")
    before = snapshot(store, "r")
    with pytest.raises(MachinesError, match=r"problem.*a letter or a digit"):
        engine.validate("r", problems=[silent])
    with pytest.raises(MachinesError, match=r"problem.*a letter or a digit"):
        engine.validate("r", problems=["amount is negative", silent])
    assert snapshot(store, "r") == before
    engine.validate("r")
    engine.request_approval("r")
    decisions: list[Callable[[], Any]] = [
        lambda: engine.approve("r", by="ann", reason=silent),
        lambda: engine.reject("r", by="ann", reason=silent),
        lambda: engine.cancel("r", by="ann", reason=silent),
    ]
    before = snapshot(store, "r")
    for decision in decisions:
        with pytest.raises(MachinesError, match=r"reason.*a letter or a digit"):
            decision()
    assert snapshot(store, "r") == before
    assert engine.approve("r", by="ann") == RequestState.APPROVED  # left out: allowed
    assert engine.request("r").state == RequestState.APPROVED


@pytest.mark.parametrize("silent", SILENT)
def test_an_operator_who_gives_a_reason_that_says_nothing_is_refused(
    store: Store, silent: str
) -> None:
    engine = engine_for(store)
    plan = [
        node("withdraw", "action", True),
        node("manual_confirm", "observe", False, "withdraw", executor="gate"),
    ]
    executing(engine, "r", plan)
    assert engine.run("r") == RequestState.WAITING_MANUAL_ACTION
    before = snapshot(store, "r")
    with pytest.raises(MachinesError, match=r"reason.*a letter or a digit"):
        engine.resume("r", by="dana", reason=silent)
    with pytest.raises(MachinesError, match=r"reason.*a letter or a digit"):
        engine.complete_manual("r", "manual_confirm", by="dana", reason=silent)
    assert snapshot(store, "r") == before
    assert engine.complete_manual("r", "manual_confirm", by="dana", reason=SAID) in (
        RequestState.EXECUTING,
        RequestState.COMPLETED,
    )


@pytest.mark.parametrize("silent", SILENT)
def test_an_effect_log_decision_with_a_reason_that_says_nothing_is_refused(
    store: Store, silent: str
) -> None:
    log = EffectLog(store)
    with pytest.raises(MachinesError, match=r"reason.*a letter or a digit"):
        log.approve("wire", by="ann", reason=silent)
    with pytest.raises(MachinesError, match=r"reason.*a letter or a digit"):
        log.reject("wire", by="ann", reason=silent)
    with store.transaction() as tx:
        assert tx.rows("effect") == []
