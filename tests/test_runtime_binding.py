"""Outsider batch 28 (b 1): entities bound to one model share its lock, machine and context.

A web application that binds a fresh entity to the same row for each request had one lock
per entity object, so two requests moved one ticket from one state at once: both accepted,
the side effect ran twice, and a ticket whose history said closed read open again. The
lock now belongs to the model's state attribute (``machines.runtime.binding``).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

import machines
from machines.errors import ContextError, InvalidStateTransition, MachinesError
from machines.spec.loader import bundled_spec_dir

OUTCOME = machines.load("outcome")
EFFECT = machines.load("effect")


class Row:
    """An ORM-like row whose leaving in_flight does slow work (sends an e-mail)."""

    def __init__(self) -> None:
        self.status: object = None
        self.sent: list[str] = []

    def on_exit_in_flight(self, event: Any) -> None:
        time.sleep(0.05)
        self.sent.append(event.kwargs["actor"])


def _race(row: Row, moves: list[str]) -> list[str]:
    """Each move by its own request: its own entity bound to ``row``, fired at once."""
    told: list[str] = []
    ready = threading.Barrier(len(moves))

    def request(trigger: str) -> None:
        entity = OUTCOME.machine(row, state_attr="status", entity_id="k")
        ready.wait()
        try:
            told.append(entity.trigger(trigger, actor="worker"))
        except InvalidStateTransition:
            told.append("refused")

    threads = [threading.Thread(target=request, args=(m,)) for m in moves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return told


@pytest.mark.parametrize("moves", [["succeed", "succeed"], ["succeed", "park"]])
def test_two_requests_move_one_row_once(moves: list[str]) -> None:
    row = Row()
    told = _race(row, moves)
    assert sorted(told).count("refused") == 1, told
    assert len(row.sent) == 1 and row.status in told, (told, row.sent)


def test_two_async_entities_on_one_row_move_it_once() -> None:
    class AsyncRow:
        def __init__(self) -> None:
            self.status: object = None
            self.sent: list[str] = []

        async def on_exit_in_flight(self, event: Any) -> None:
            await asyncio.sleep(0.02)
            self.sent.append(event.kwargs["actor"])

    async def main() -> tuple[list[object], AsyncRow]:
        row = AsyncRow()
        first = OUTCOME.async_machine(row, state_attr="status")
        second = OUTCOME.async_machine(row, state_attr="status")
        told = await asyncio.gather(
            first.trigger("succeed", actor="worker"),
            second.trigger("park", actor="worker"),
            return_exceptions=True,
        )
        return told, row

    told, row = asyncio.run(main())
    assert sum(isinstance(t, InvalidStateTransition) for t in told) == 1, told
    assert len(row.sent) == 1 and row.status in told


def test_a_second_entity_on_a_bound_row_keeps_its_machine_and_context(tmp_path: Path) -> None:
    text = (bundled_spec_dir() / "effect.yaml").read_text(encoding="utf-8")
    (tmp_path / "twin.yaml").write_text(text.replace("machine: effect", "machine: twin", 1))
    twin = machines.load(tmp_path / "twin.yaml")  # the same states, another machine

    class Charge:
        status: object = None
        other: object = None

    charge = Charge()
    bound = EFFECT.machine(charge, state_attr="status", tier="compensable")
    with pytest.raises(ContextError, match="bound by a live entity with context tier="):
        EFFECT.machine(charge, state_attr="status", tier="irreversible")
    with pytest.raises(MachinesError, match="holds the state of a live effect entity"):
        twin.machine(charge, state_attr="status", tier="compensable")
    with pytest.raises(MachinesError, match="bound to a sync entity; an async one"):
        EFFECT.async_machine(charge, state_attr="status", tier="compensable")
    again = EFFECT.machine(charge, state_attr="status", tier="compensable")
    OUTCOME.machine(charge, state_attr="other")  # another attribute, another entity
    bound.trigger("execute", actor="proxy")
    with pytest.raises(InvalidStateTransition, match="set outside this entity"):
        again.trigger("execute", actor="proxy")
    assert charge.status == "executing"


def test_binding_a_second_entity_writes_nothing_to_the_row() -> None:
    """The second entity reads the state the first one moves; it never writes it back (a
    stale read written back would undo a move made meanwhile)."""

    class Counted:
        def __init__(self) -> None:
            self.writes = 0
            self._status: object = None

        @property
        def status(self) -> object:
            return self._status

        @status.setter
        def status(self, value: object) -> None:
            self.writes += 1
            self._status = value

    row = Counted()
    first = EFFECT.machine(row, state_attr="status", tier="compensable")
    assert row.writes == 1
    EFFECT.machine(row, state_attr="status", tier="compensable")
    assert row.writes == 1 and first.state == "pending"


def test_a_row_is_free_again_once_its_entities_are_gone() -> None:
    """The binding lasts as long as an entity bound to the row lives, and never keeps a
    row alive: a row and its entity that hold each other are collected together."""

    class Charge:
        status: object = None
        machine: object = None

    charge = Charge()
    charge.machine = EFFECT.machine(charge, state_attr="status", tier="compensable")
    charge.machine = None
    gc.collect()
    assert EFFECT.machine(charge, state_attr="status", tier="irreversible").state == "pending"
    cyclic = Charge()
    cyclic.machine = EFFECT.machine(cyclic, state_attr="status", tier="compensable")
    gone = weakref.ref(cyclic)
    del cyclic
    gc.collect()
    assert gone() is None


def test_async_moves_of_one_row_in_two_open_loops_are_refused_not_hung() -> None:
    """Outsider batch 29 (b 1): two threads, an event loop each, each an async entity on
    one row: one move was made and the other caller waited for ever, the asyncio lock's
    wake-up sent to the wrong loop. A move from a second loop while the first is open is
    refused; once that loop is closed (a second asyncio.run) moves go on."""

    class Slow:
        status: object = None

        async def on_enter_in_flight(self, event: Any) -> None:
            await asyncio.sleep(0)

    row = Slow()
    told: dict[str, object] = {}
    inside = threading.Event()
    release = threading.Event()

    async def first() -> None:
        entity = OUTCOME.async_machine(row, state_attr="status")
        await entity.trigger("park", actor="worker")
        inside.set()
        while not release.is_set():  # its loop stays open while the other thread moves
            await asyncio.sleep(0.01)
        told["first"] = entity.state

    async def second() -> None:
        entity = OUTCOME.async_machine(row, state_attr="status")
        try:
            told["second"] = await entity.trigger("decide_landed", actor="operator")
        except MachinesError as refused:
            told["second"] = str(refused)

    thread = threading.Thread(target=lambda: asyncio.run(first()), daemon=True)
    thread.start()
    assert inside.wait(10)
    done = threading.Thread(target=lambda: asyncio.run(second()), daemon=True)
    done.start()
    done.join(10)
    release.set()
    thread.join(10)
    assert not done.is_alive() and not thread.is_alive(), told
    assert "moves in another event loop, which is still open" in str(told["second"]), told
    assert row.status == "indeterminate"

    kept = OUTCOME.async_machine(row, state_attr="status")  # one entity, two loops in turn
    assert asyncio.run(kept.trigger("reclaim", actor="caller")) == "in_flight"
    assert asyncio.run(kept.trigger("succeed", actor="worker")) == "succeeded"
