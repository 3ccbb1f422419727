"""A transaction is all or nothing however it ends, on memory, SQLite and PostgreSQL: one
that dies by a ``BaseException`` (a crash, ``KeyboardInterrupt``, a cancelled task) is
rolled back like one that raises an ``Exception``. Found by the code mutant
``memory-crash-commits`` (``python -m code_mutants``), which no other test killed."""

from __future__ import annotations

import pytest

from machines.store import Store


class Dies(BaseException):
    """The process dies here (as ``machines.testing.faults.SimulatedCrash``)."""


def test_a_transaction_that_dies_is_rolled_back(store: Store) -> None:
    """issue 14 item 3: a crash between two writes leaves nothing of either."""
    with store.transaction() as tx:
        tx.insert("effect", "a", context={"tier": "compensable"})
    with pytest.raises(Dies), store.transaction() as tx:
        row = tx.get("effect", "a")
        assert row is not None
        tx.move(row, "execute", actor="proxy")
        tx.insert("effect", "b", context={"tier": "compensable"})
        raise Dies
    with store.transaction() as tx:
        row = tx.get("effect", "a")
        assert row is not None and row.state == "pending" and row.moves == 0 and row.version == 1
        assert tx.history("effect", "a") == [] and tx.get("effect", "b") is None
    with store.transaction() as tx:  # and the store works on
        assert tx.move(row, "execute", actor="proxy").state == "executing"
