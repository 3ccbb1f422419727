"""The audit trail: one immutable event per state change, in an append-only sequence.

A ``History`` belongs to one entity of one machine and only grows. It stores each move as
a plain tuple (the cheapest thing CPython can append) and hands out ``TransitionEvent``
named tuples when read; the sequence number is the position, so it can have no gaps. What
an entity machine exposes is a ``HistoryView``, which cannot grow either, so nothing
outside the machine can add, remove or rewrite an event.

Nothing enters a history unchecked: names are strings, a context maps strings to strings,
a detail is a JSON object (``machines.spec.jsonvalue``, the one rule for stored values) and a
time is a finite number. So ``write_jsonl`` has nothing left to refuse.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, TextIO, overload

from machines.errors import ContextError, InvalidArgument, MachinesError
from machines.spec.jsonvalue import UnstorableValue, describe, dumps_object, loads_object

Clock = Callable[[], float]
"""Seconds since the epoch; ``time.time`` unless a test or a simulation injects another."""

NO_CONTEXT: Mapping[str, str] = MappingProxyType({})

Record = tuple[str, str, str, str, "Mapping[str, Any] | None", Mapping[str, str], float]
"""(source, dest, trigger, actor, detail, context, at) as stored: checked, read-only."""


def checked_clock(
    clock: object,
    owner: str,
    error: type[MachinesError] = MachinesError,
    consequence: str = "nothing was recorded",
) -> Clock:
    """The one check of an injected clock, for the runtime, the stores and the systems:
    ``clock`` itself when it is ``time.time``; else the same clock, checked on each reading,
    so one that raises, or answers anything but a finite number of seconds, raises ``error``
    (naming ``owner`` and ``consequence``) before anything is written with that time. An
    ``int`` reads as a float while a float holds it exactly. Not a function at all is an
    ``InvalidArgument`` at once."""
    if clock is time.time:
        return time.time
    if not callable(clock):
        raise InvalidArgument(
            f"{owner}: clock must be a function returning seconds since the epoch, "
            f"not a {type(clock).__name__}"
        )

    def checked() -> float:
        try:
            at = clock()
        except Exception as exc:
            raise error(f"{owner}: the clock raised {type(exc).__name__}; {consequence}") from exc
        if at.__class__ is float and math.isfinite(at):
            return at
        if isinstance(at, int) and not isinstance(at, bool):
            whole = int.__index__(at)  # the number itself: a subclass's abs or float could lie
            if abs(whole) < 2**53:
                return float(whole)
        raise error(
            f"{owner}: the clock must return seconds since the epoch as a finite number, not "
            f"{describe(at)}; {consequence}"
        )

    return checked


def frozen_detail(detail: object, what: str) -> Mapping[str, Any]:
    """A read-only deep copy of ``detail``, which must be a JSON object (the one rule of
    ``machines.spec.jsonvalue``), or ``UnstorableValue`` naming ``what``. A deep copy:
    nothing the caller keeps can change the history afterwards; read-only all the way down
    (objects as read-only mappings, lists as ``ReadOnlyList``), so nothing that reads it can
    either (outsider batch 33: a nested list of a recorded event could be cleared)."""
    frozen = _frozen(loads_object(dumps_object(detail, what=what)))
    assert isinstance(frozen, Mapping)
    return frozen


class ReadOnlyList(list[Any]):
    """A JSON list of a recorded detail: equal to the list it was, and unchangeable."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("a recorded event's detail is read-only")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(_frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A frozen detail (``frozen_detail``) as plain JSON values: dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return value


def frozen_context(context: object, what: str) -> Mapping[str, str]:
    """A read-only copy of ``context``, which must map strings to strings, or
    ``ContextError`` naming ``what``."""
    if not isinstance(context, Mapping):
        raise ContextError(f"{what}: a context must be a mapping, not {type(context).__name__}")
    try:
        items = list(context.items())
    except Exception as exc:
        raise ContextError(f"{what}: reading the context raised {type(exc).__name__}") from None
    copy: dict[str, str] = {}
    for key, value in items:
        if not isinstance(key, str) or not isinstance(value, str):
            raise ContextError(
                f"{what}: a context maps names to values, both strings; got "
                f"{describe(key)}: {describe(value)}"
            )
        copy[str.__str__(key)] = str.__str__(value)
    return MappingProxyType(copy)


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
        out["detail"] = None if self.detail is None else thawed(self.detail)
        out["context"] = dict(self.context)
        return out


class HistoryView:
    """A read-only sequence of one entity's events: ``len``, indexing, slicing, iteration."""

    __slots__ = ("_entity", "_machine", "_records")

    def __init__(self, machine: str, entity: str, records: list[Record]) -> None:
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
        """Write one JSON object per event, one per line; return how many.

        All or nothing: every line is encoded before the first is written, so an event
        that cannot be written (``UnstorableValue``) leaves ``out`` untouched. The text
        goes out in one ``write``; an I/O error there is the stream's own. Anything but a
        text stream (None, a path, a binary file) is ``InvalidArgument``, before anything."""
        write = getattr(out, "write", None)
        if not callable(write) or isinstance(out, io.RawIOBase | io.BufferedIOBase):
            raise InvalidArgument(
                f"write_jsonl writes to a text stream (an open file in text mode, sys.stdout, "
                f"io.StringIO), not {describe(out)}"
            )
        lines = []
        for event in self:
            try:
                lines.append(json.dumps(event.to_dict(), sort_keys=True, allow_nan=False))
            except (TypeError, ValueError, RecursionError) as exc:
                raise UnstorableValue(
                    f"{self._machine} entity {describe(self._entity)}: event {event.seq} cannot "
                    f"be written as JSON ({type(exc).__name__}); nothing was written"
                ) from None
        out.write("".join(f"{line}\n" for line in lines))
        return len(lines)


class Recorder(Protocol):
    """``History.record``'s signature."""

    def __call__(
        self,
        source: str,
        dest: str,
        trigger: str,
        actor: str,
        context: Mapping[str, str] = ...,
        detail: Mapping[str, Any] | None = ...,
    ) -> None: ...


class History(HistoryView):
    """The append-only log of one entity. ``record`` is the only way in."""

    __slots__ = ("_append", "record")

    record: Recorder
    """``record(source, dest, trigger, actor, context=NO_CONTEXT, detail=None)``: append
    one move, stamped by the clock, after checking everything (a refusal appends nothing).
    See ``_recorder``; it is a closure of each history because it is the hot path."""

    def __init__(self, machine: str, entity: str, clock: Clock = time.time) -> None:
        if not isinstance(machine, str) or not isinstance(entity, str):
            raise MachinesError(
                "a History names its machine and entity by strings, not "
                f"{type(machine).__name__} and {type(entity).__name__}"
            )
        super().__init__(machine, entity, [])
        self._append = self._records.append
        self.record = _recorder(machine, entity, self._append, checked_clock(clock, machine))

    def view(self) -> HistoryView:
        """A read-only view that follows this history as it grows."""
        return HistoryView(self._machine, self._entity, self._records)


def _recorder(
    machine: str, entity: str, append: Callable[[Record], None], clock: Clock
) -> Recorder:
    """One history's ``record``: a closure over its list's ``append`` and its clock (the
    cheapest callable CPython has, since a store or a loop calls it once per move)."""
    proxy = MappingProxyType

    def record(
        source: str,
        dest: str,
        trigger: str,
        actor: str,
        context: Mapping[str, str] = NO_CONTEXT,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one move, stamped by the clock; check everything first, so that a
        refusal (``MachinesError``) appends nothing.

        Names must be strings. ``detail`` must be a JSON object (``machines.spec.jsonvalue``)
        and is deep-copied, read-only. ``context`` must map strings to strings and is
        copied, unless it already is a read-only mapping: one of those is taken as it is
        (pass one you never mutate underneath and whose contents are checked, such as
        ``Stepper.context``; that saves a copy and a check per move on the hot path)."""
        if (
            source.__class__ is not str
            or dest.__class__ is not str
            or trigger.__class__ is not str
            or actor.__class__ is not str
            or context.__class__ is not proxy
            or detail is not None
        ):
            source, dest, trigger, actor, detail, context = _checked(
                f"{machine} entity {describe(entity)}",
                source,
                dest,
                trigger,
                actor,
                detail,
                context,
            )
        append((source, dest, trigger, actor, detail, context, clock()))

    return record


def _checked(
    what: str,
    source: object,
    dest: object,
    trigger: object,
    actor: object,
    detail: object,
    context: object,
) -> tuple[str, str, str, str, Mapping[str, Any] | None, Mapping[str, str]]:
    """``record``'s arguments checked and copied (the path off the hot one)."""
    source, dest, trigger, actor = (
        _name(what, role, value)
        for role, value in (
            ("source", source),
            ("dest", dest),
            ("trigger", trigger),
            ("actor", actor),
        )
    )
    if context.__class__ is not MappingProxyType:
        context = frozen_context(context, what)
    if detail is not None:
        detail = frozen_detail(detail, f"{what}: the detail of {describe(trigger)}")
    return source, dest, trigger, actor, detail, context


def _name(what: str, role: str, value: object) -> str:
    if not isinstance(value, str):
        raise MachinesError(
            f"{what}: the {role} of a history event must be a string, not {type(value).__name__}"
        )
    return str.__str__(value)
