"""The audit trail: one immutable event per state change, in an append-only sequence.

A ``History`` belongs to one entity of one machine and only grows. It stores each move as
a plain tuple (the cheapest thing CPython can append) and hands out ``TransitionEvent``
named tuples when read; the sequence number is the position, so it can have no gaps. What
an entity machine exposes is a ``HistoryView``, which cannot grow either, so nothing
outside the machine can add, remove or rewrite an event.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, TextIO, overload

Clock = Callable[[], float]
"""Seconds since the epoch; ``time.time`` unless a test or a simulation injects another."""

NO_CONTEXT: Mapping[str, str] = MappingProxyType({})

_Record = tuple[str, str, str, str, "Mapping[str, Any] | None", Mapping[str, str], float]
"""(source, dest, trigger, actor, detail, context, at) as stored."""


class TransitionEvent(NamedTuple):
    """One state change of one entity."""

    machine: str
    entity: str
    seq: int  # 1, 2, 3, ... per entity, with no gaps
    source: str
    dest: str
    trigger: str
    actor: str
    detail: Mapping[str, Any] | None
    context: Mapping[str, str]
    at: float  # seconds since the epoch, from the injected clock

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of what ``write_jsonl`` writes)."""
        out = self._asdict()
        out["detail"] = None if self.detail is None else dict(self.detail)
        out["context"] = dict(self.context)
        return out


class HistoryView:
    """A read-only sequence of one entity's events: ``len``, indexing, slicing, iteration."""

    __slots__ = ("_entity", "_machine", "_records")

    def __init__(self, machine: str, entity: str, records: list[_Record]) -> None:
        self._machine = machine
        self._entity = entity
        self._records = records

    @property
    def machine(self) -> str:
        return self._machine

    @property
    def entity(self) -> str:
        return self._entity

    def _event(self, index: int) -> TransitionEvent:
        return TransitionEvent(self._machine, self._entity, index + 1, *self._records[index])

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> TransitionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TransitionEvent, ...]: ...

    def __getitem__(self, index: int | slice) -> TransitionEvent | tuple[TransitionEvent, ...]:
        if isinstance(index, slice):
            return tuple(self._event(i) for i in range(*index.indices(len(self._records))))
        if index < 0:
            index += len(self._records)
        if not 0 <= index < len(self._records):
            raise IndexError("history index out of range")
        return self._event(index)

    def __iter__(self) -> Iterator[TransitionEvent]:
        return (self._event(i) for i in range(len(self._records)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HistoryView):
            return tuple(self) == tuple(other)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def write_jsonl(self, out: TextIO) -> int:
        """Write one JSON object per event, one per line; return how many."""
        for event in self:
            out.write(json.dumps(event.to_dict(), sort_keys=True) + "\n")
        return len(self._records)


class History(HistoryView):
    """The append-only log of one entity. ``record`` is the only way in."""

    __slots__ = ("_clock",)

    def __init__(self, machine: str, entity: str, clock: Clock = time.time) -> None:
        super().__init__(machine, entity, [])
        self._clock = clock

    def record(
        self,
        source: str,
        dest: str,
        trigger: str,
        actor: str,
        context: Mapping[str, str] = NO_CONTEXT,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one move, stamped by the clock. ``detail`` is always copied into a
        read-only mapping (shallow). ``context`` is copied too unless it already is a
        read-only mapping: pass one you never mutate underneath, such as
        ``Stepper.context`` (that saves a copy per move on the hot path)."""
        if context.__class__ is not MappingProxyType:
            context = MappingProxyType(dict(context))
        if detail is not None:
            detail = MappingProxyType(dict(detail))
        self._records.append((source, dest, trigger, actor, detail, context, self._clock()))

    def view(self) -> HistoryView:
        """A read-only view that follows this history as it grows."""
        return HistoryView(self._machine, self._entity, self._records)
