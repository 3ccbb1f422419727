"""The guards every store applies before its database does (memory, SQLite, PostgreSQL
alike): a move is judged under the context the entity was created with, an entity is
created with its whole fixed context, and a finished entity's data never changes except
its declared annotations (issue 13 items 5 and 7)."""

from __future__ import annotations

import json

import pytest

import machines
from machines.cli import main
from machines.errors import ContextError, SpecError
from machines.store import Store, StoreError
from machines.store.records import Row
from tests.conftest import SpecCopy


def effect(store: Store, key: str, tier: str) -> Row:
    row, _ = store.insert("effect", key, context={"tier": tier})
    return row


def unchanged(store: Store, row: Row) -> None:
    with store.transaction() as tx:
        assert tx.get(row.machine, row.key) == row
        assert len(tx.history(row.machine, row.key)) == row.moves


def test_a_move_cannot_give_a_fixed_variable_another_value(store: Store) -> None:
    """issue 13 item 5: an Irreversible effect does not execute without approval because
    a caller says ``tier=compensable`` for this one move."""
    row = effect(store, "wire", "irreversible")
    with pytest.raises(ContextError, match="'tier' is fixed"), store.transaction() as tx:
        tx.move(row, "execute", actor="proxy", context={"tier": "compensable"})
    with pytest.raises(ContextError, match="'tier' is fixed"):
        store.move(row, "execute", actor="proxy", context={"tier": "compensable"})
    unchanged(store, row)
    approved = store.move(row, "approve", actor="human", context={"tier": "irreversible"})
    assert approved.state == "approved"  # the stored value itself may be repeated
    with store.transaction() as tx:
        assert [e.context for e in tx.history("effect", "wire")] == [{"tier": "irreversible"}]


def test_an_entity_is_created_with_exactly_its_fixed_context(store: Store) -> None:
    """issue 13 item 5: every guard is judged against the stored context, so the context
    is whole from the start: no fixed variable left out, no derived one stored."""
    with pytest.raises(ContextError, match="missing: tier"):
        store.insert("effect", "k")
    with pytest.raises(ContextError, match="side_effects is derived"):
        store.insert("request", "r", context={"side_effects": "none"})
    with store.transaction() as tx:
        assert tx.get("effect", "k") is None and tx.get("request", "r") is None


def test_a_derived_variable_is_given_with_each_move(store: Store) -> None:
    """The request's ``side_effects`` comes from its nodes at each move (the derivation);
    it is judged as given, and recorded with the move."""
    row, _ = store.insert("request", "r")
    for trigger, actor in (("validate", "system"), ("request_approval", "system")):
        row = store.move(row, trigger, actor=actor, context={"side_effects": "none"})
    row = store.move(row, "approve", actor="operator", context={"side_effects": "started"})
    with pytest.raises(ContextError):
        store.move(row, "start", actor="system", context={"side_effects": "maybe"})
    with store.transaction() as tx:
        events = tx.history("request", "r")
        assert tx.get("request", "r") == row and row.context == {}
    assert [e.context for e in events] == [{"side_effects": v} for v in ("none", "none", "started")]


def test_a_finished_entity_keeps_its_data_but_its_annotations(store: Store) -> None:
    """issue 13 item 7: a committed effect's cached result is what every replay returns,
    so no update changes it; its replay count (an annotation) may still grow."""
    row = effect(store, "charge", "compensable")
    row = store.move(row, "execute", actor="proxy")
    row = store.move(row, "commit", actor="proxy", data={"result": 1, "replay_count": 0})
    with store.transaction() as tx:
        row = tx.update(row, {**row.data, "replay_count": 1, "last_replayed_at": 5.0})
    for forged in ({"result": 2}, {"result": 1.0}, {"result": True}, {}, {"extra": 1}):
        with pytest.raises(StoreError, match="terminal state"), store.transaction() as tx:
            tx.update(row, {**row.data, **forged} if forged else {})
    unchanged(store, row)
    assert row.data == {"result": 1, "replay_count": 1, "last_replayed_at": 5.0}


def test_annotations_are_declared_on_terminal_states_only(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = machines.load("effect")
    assert spec.states["committed"].annotations == ("replay_count", "last_replayed_at")
    assert main(["export", "effect", "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)["states"]
    assert exported["committed"]["annotations"] == ["replay_count", "last_replayed_at"]
    assert "annotations" not in exported["pending"]  # the export leaves defaults out

    def on_pending(doc: dict[str, object]) -> None:
        states = doc["states"]
        assert isinstance(states, dict)
        states["pending"]["annotations"] = ["runs"]

    spec_copy.edit("effect", on_pending)
    with pytest.raises(SpecError, match="'pending' is not terminal"):
        machines.load(spec_copy.file("effect"))
