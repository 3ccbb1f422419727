"""One entity fired from many threads, or many asyncio tasks, never loses or duplicates a
history event: the history is always one unbroken chain of the moves that succeeded."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import machines
from machines.errors import InvalidStateTransition

LOOP = {"pending": "execute", "executing": "fail"}  # effect, Compensable: a cycle to race on


def assert_unbroken_chain(entity: Any, successes: int) -> None:
    events = list(entity.history)
    assert len(events) == successes
    assert [e.seq for e in events] == list(range(1, successes + 1))
    state = "pending"
    for event in events:
        assert event.source == state, f"event {event.seq} starts from {event.source}, not {state}"
        state = event.dest
    assert entity.state == state


def test_threads_racing_on_one_entity() -> None:
    entity = machines.load("effect").machine(tier="compensable")
    threads, per_thread = 8, 400
    successes = [0] * threads
    start = threading.Barrier(threads)

    def worker(index: int) -> None:
        start.wait()
        for i in range(per_thread):
            trigger = ("execute", "fail")[(index + i) % 2]  # half of them will be refused
            try:
                entity.trigger(trigger, actor="proxy")
                successes[index] += 1
            except InvalidStateTransition:
                pass

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert sum(successes) > 0
    assert_unbroken_chain(entity, sum(successes))


def test_threads_reading_state_and_firing_the_matching_trigger() -> None:
    """Read-then-act races: a thread may read a state that changes before it fires; the
    refusal is clean and nothing is recorded twice."""
    entity = machines.load("effect").machine(tier="compensable")
    threads, per_thread = 6, 300
    ok = [0] * threads

    def worker(index: int) -> None:
        for _ in range(per_thread):
            try:
                entity.trigger(LOOP[entity.state], actor="proxy")
                ok[index] += 1
            except InvalidStateTransition:
                pass

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert_unbroken_chain(entity, sum(ok))
    assert sum(ok) >= per_thread  # every thread's reads are not all stale


class SlowRow:
    """A model whose async callbacks yield to the event loop mid-transition."""

    def __init__(self) -> None:
        self.state: str | None = None
        self.entered = 0

    async def on_enter_executing(self, event: Any) -> None:
        await asyncio.sleep(0)
        self.entered += 1

    async def on_exit_executing(self, event: Any) -> None:
        await asyncio.sleep(0)


def test_asyncio_tasks_racing_on_one_entity() -> None:
    async def scenario() -> tuple[Any, int, SlowRow]:
        row = SlowRow()
        entity = machines.load("effect").async_machine(row, tier="compensable")
        successes = 0

        async def task(index: int) -> None:
            nonlocal successes
            for i in range(100):
                try:
                    await entity.trigger(("execute", "fail")[(index + i) % 2], actor="proxy")
                    successes += 1
                except InvalidStateTransition:
                    pass

        await asyncio.gather(*(task(i) for i in range(10)))
        return entity, successes, row

    entity, successes, row = asyncio.run(scenario())
    assert successes > 0
    assert_unbroken_chain(entity, successes)
    assert row.entered == sum(1 for e in entity.history if e.dest == "executing")


def test_async_callback_may_await_a_trigger_on_its_own_entity() -> None:
    class Eager(SlowRow):
        async def on_enter_executing(self, event: Any) -> None:
            await asyncio.sleep(0)
            await event.kwargs["machine"].trigger("commit", actor="proxy")

    async def scenario() -> Any:
        entity = machines.load("effect").async_machine(Eager(), tier="compensable")
        assert await entity.trigger("execute", actor="proxy") == "executing"
        return entity

    entity = asyncio.run(scenario())
    assert entity.state == "committed"
    assert [(e.seq, e.dest) for e in entity.history] == [(1, "executing"), (2, "committed")]


def test_async_refusal_leaves_the_entity_unchanged() -> None:
    async def scenario() -> Any:
        entity = machines.load("outcome").async_machine()
        await entity.trigger("park", actor="worker")
        try:
            await entity.trigger("succeed", actor="worker")
        except InvalidStateTransition as exc:
            return entity, str(exc)
        raise AssertionError("an automatic actor left indeterminate")

    entity, message = asyncio.run(scenario())
    assert entity.state == "indeterminate" and len(entity.history) == 1
    assert "'succeed' is not defined from 'indeterminate'" in message
