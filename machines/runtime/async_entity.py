"""The entity machine for asyncio code: ``spec.async_machine(...)``.

Its moves are ``EntityMachine``'s (``machines.runtime.entity``), awaited. What is its own is
the lock: an ``asyncio.Lock`` per entity (per model, for the entities bound to one model's
state: ``machines.runtime.binding``), in one event loop at a time; and a move fired from
inside another (by a callback, or by a task a callback started) runs inside the move that
holds the lock, which ends only after it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from transitions import MachineError

from machines.runtime.binding import Gate
from machines.runtime.entity import NO_ACTOR, EntityBase

if TYPE_CHECKING:
    from machines.spec import MachineSpec


_MOVING: contextvars.ContextVar[frozenset[object]] = contextvars.ContextVar(
    "machines_moving", default=frozenset()
)
"""The tokens of the async entities' moves the current context is inside. A context
variable, not the current task: transitions runs callbacks in tasks of their own
(``gather``), and those inherit it. A token, not the entity: a task a callback starts
inherits it too, and outlives the move (outsider batch 27: such a task skipped the lock
for good, and made a move beside another); it counts only while its move holds the lock."""


class AsyncEntityMachine(EntityBase):
    """One entity's lifecycle for asyncio code, on ``transitions``' ``AsyncMachine``:
    ``await m.trigger(...)``; callbacks may be coroutines. Build it with
    ``spec.async_machine(...)``. An ``asyncio.Lock`` per entity (per model it is bound to)
    serialises moves; a callback may await another trigger on the same entity (it runs
    inside the first)."""

    __slots__ = ("_moves",)
    _asynchronous: ClassVar[bool] = True

    def __init__(self, spec: MachineSpec, model: object | None = None, **options: Any) -> None:
        super().__init__(spec, model, **options)
        self._moves = self._gate if self._gate is not None else Gate(asynchronous=True)
        """The lock, the token of the move that holds it now (None: no move), and the
        nested moves under way, which the move holding the lock ends after; shared by the
        entities bound to one model's state (``machines.runtime.binding``)."""

    async def trigger(
        self,
        name: str,
        *,
        actor: str = NO_ACTOR,
        detail: Mapping[str, Any] | None = None,
        **context: str,
    ) -> str:
        """As ``EntityMachine.trigger``, awaited."""
        moving, moves = _MOVING.get(), self._moves
        if moves.holding is not None and moves.holding in moving:
            # nested, from a callback (or a task one started): the move holding the lock
            # ends only after it, so no other move comes between (outsider batch 27)
            ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            moves.nested.add(ended)
            try:
                return await self._move(name, actor, detail, context)
            finally:
                moves.nested.discard(ended)
                ended.set_result(None)
        moves.enter(asyncio.get_running_loop(), self._spec.name)
        async with moves.lock:
            held = moves.holding = object()
            token = _MOVING.set(moving | {held})
            try:
                return await self._move(name, actor, detail, context, holding=True)
            finally:
                _MOVING.reset(token)
                moves.holding = None

    async def _move(
        self,
        name: str,
        actor: str,
        detail: Mapping[str, Any] | None,
        context: Mapping[str, str],
        *,
        holding: bool = False,
    ) -> str:
        outer = self._pending
        kwargs, dest = self._begin(name, actor, detail, context)
        source = self._pending[0] if self._pending is not None else None
        try:
            moved = self._events[name].trigger(self._model, **kwargs)
            done = await cast(Awaitable[bool], moved)  # an AsyncEvent: its trigger is a coroutine
        except MachineError:
            raise self._changed_under(name, actor, source) from None
        finally:
            try:
                nested = self._moves.nested
                while holding and nested:  # the nested moves it started end first
                    await asyncio.gather(*nested, return_exceptions=True)
            finally:
                self._pending = outer
                self._changing = False
        if not done:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # transitions caught the cancellation and said "not applied": the caller
                # must be told it was cancelled (the move may have been made; its history
                # says), not that machines failed (outsider batch 26)
                raise asyncio.CancelledError
            raise self._not_applied(name)
        return dest
