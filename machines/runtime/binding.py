"""One gate per model: every entity bound to the same model's state moves under one lock.

An entity's lock alone serialises only the moves made through that entity object. A web
application that binds a fresh entity to the same row for each request (the way back after
a refusal says "bind a new entity") would otherwise have two locks for one state, and two
moves accepted from it (outsider batch 28). So the lock belongs to the model's state
attribute: every live entity bound to (model, attribute) shares one ``Gate``, and one
machine and one context with it (``ContextError`` or ``MachinesError`` otherwise: one
entity, one context, as in the stores). An entity that keeps its own state (no model)
has a gate of its own.

The registry knows a model by its ``id`` and holds no reference to it: the entities bound
to it hold it, so its ``id`` names it while one of them lives. Each entity is counted by a
weak reference the registry keeps (not the entity, so its callback runs even when the
entity dies in a reference cycle), and the last one's end removes the entry, before the
model's memory (and so its ``id``) can be reused.
"""

from __future__ import annotations

import _thread
import asyncio
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any

from machines.errors import ContextError, MachinesError
from machines.spec.routing import shown


class Gate:
    """What the moves of one entity's state are serialised by: the lock (re-entrant for
    threads, an ``asyncio.Lock`` for tasks), and for tasks the token of the move that holds
    it, the nested moves started under that move (``machines.runtime.async_entity``), and
    the event loop its moves run in (``enter``)."""

    __slots__ = ("_loop", "holding", "lock", "nested")

    def __init__(self, asynchronous: bool) -> None:
        self.lock: Any = None if asynchronous else _thread.RLock()  # async: made by enter
        self.holding: object | None = None
        self.nested: set[asyncio.Future[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def enter(self, loop: asyncio.AbstractEventLoop, machine: str) -> None:
        """Let a move start in ``loop``: the loop of every move so far, or a new one once
        that loop is closed (a second ``asyncio.run``, with a fresh lock). An asyncio lock
        cannot serialise two loops (a thread each): a move from another loop while the
        first is open would wait for a wake-up that never comes (outsider batch 29), so it
        is refused."""
        if loop is self._loop:
            return
        with _GUARD:
            current = self._loop
            if current is loop:
                return
            if current is not None and not current.is_closed():
                raise MachinesError(
                    f"{machine}: this entity's state already moves in another event loop, "
                    "which is still open (in another thread?); an asyncio lock cannot keep "
                    "two loops' moves apart: move a model's async entities in one loop, or "
                    "use sync entities (spec.machine) across threads"
                )
            self._loop, self.lock = loop, asyncio.Lock()


class _Binding:
    """The entities bound to one model's state attribute now: their machine, context and
    kind, their gate, and a weak reference to each."""

    __slots__ = ("asynchronous", "context", "entities", "gate", "machine")

    def __init__(self, machine: str, context: Mapping[str, str], asynchronous: bool) -> None:
        self.machine = machine
        self.context = dict(context)
        self.asynchronous = asynchronous
        self.gate = Gate(asynchronous)
        self.entities: set[weakref.ref[object]] = set()


_BINDINGS: dict[tuple[int, str], _Binding] = {}
_GUARD = _thread.RLock()  # re-entrant: an entity's end may be collected while binding


def bind(
    entity: object,
    model: object,
    attr: str,
    machine: str,
    context: Mapping[str, str],
    *,
    asynchronous: bool,
) -> tuple[Gate, bool]:
    """The gate of ``model``'s ``attr`` for ``entity``, and whether another live entity
    was bound to it already (then the model's state is theirs too: read, never written).
    Refused (nothing bound) when that binding is of another machine, another context, or
    the other kind of entity (sync or async: their locks cannot exclude each other)."""
    key = (id(model), attr)
    with _GUARD:
        found = _BINDINGS.get(key)
        shared = found is not None and bool(found.entities)
        if found is None or not found.entities:
            found = _Binding(machine, context, asynchronous)
        else:
            _refuse_another(found, attr, machine, context, asynchronous)
        found.entities.add(weakref.ref(entity, partial(_ended, key, found)))
        _BINDINGS[key] = found  # again: an entity collected meanwhile may have removed it
    return found.gate, shared


def _refuse_another(
    found: _Binding, attr: str, machine: str, context: Mapping[str, str], asynchronous: bool
) -> None:
    where = f"the model's {attr}"
    if found.machine != machine:
        raise MachinesError(
            f"{machine}: {where} holds the state of a live {found.machine} entity; one "
            "attribute holds one machine's state (give this machine another state_attr)"
        )
    if found.asynchronous != asynchronous:
        kinds = ("an async", "a sync") if found.asynchronous else ("a sync", "an async")
        raise MachinesError(
            f"{machine}: {where} is bound to {kinds[0]} entity; {kinds[1]} one beside it "
            "could move it at the same time (bind the same kind)"
        )
    if dict(context) != found.context:
        shown_context = ", ".join(f"{k}={shown(v)}" for k, v in found.context.items())
        raise ContextError(
            f"{machine}: {where} is bound by a live entity with context "
            f"{shown_context or '(none)'}; an entity has one context, so bind with the same "
            "values"
        )


def _ended(key: tuple[int, str], binding: _Binding, ref: weakref.ref[object]) -> None:
    with _GUARD:
        binding.entities.discard(ref)
        if not binding.entities and _BINDINGS.get(key) is binding:
            del _BINDINGS[key]
