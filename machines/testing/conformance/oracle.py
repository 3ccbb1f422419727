"""What the conformance suite saw, judged by the definition it was given.

The oracle keeps its own record of every entity the suite created: the context it was
created under, where it started, and every move the suite saw the implementation accept.
Whether a move is legal is the definition's answer (``MachineSpec.step`` with the entity's
state, context and actor), never the implementation's; what the implementation did is what
the adapter's reads show after each call. A broken rule is a ``RuleBroken`` whose message
starts with the rule's name, then says what happened and what the suite saw last.

A history the adapter exposes is read field by field (``events_of``) and refused
(``AdapterContractError``, naming the event and the field) when it is not a sequence of
events with an ``int`` ``seq`` and ``str`` ``source``, ``trigger``, ``dest`` and
``actor``: a malformed history is never judged as if it said something.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from machines.errors import MachinesError, message_of
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.registry import judged_by
from machines.testing.contract import AdapterContractError
from machines.testing.coverage import Coverage
from machines.testing.verdict import (
    Move,
    RuleBroken,
    chain_break,
    first_difference,
    promised,
    show_chain,
)

CREATED = "entity-created-as-defined"
LEGAL = "legal-move-accepted"
ILLEGAL = "illegal-move-refused"
REFUSAL = "refusal-changes-nothing"
TERMINAL = "terminal-stays-final"
CHAIN = "history-is-a-legal-chain"
READABLE = "entity-stays-readable"

RULES: Mapping[str, str] = judged_by("conformance suite")
"""What each rule of the conformance suite promises; a failure's message starts with its
name."""

TRANSCRIPT = 12
"""How many of the last things the suite saw a report shows."""


class Event(NamedTuple):
    """One recorded move of an entity, as the adapter's ``history`` may return it (a mapping
    or any object with these attributes will do as well): ``seq`` rises from each event
    to the next (1, 2, 3, ... per entity, or numbers drawn from one counter for every
    entity: how a service numbers its events is its own choice)."""

    seq: int
    source: str
    trigger: str
    dest: str
    actor: str

    @property
    def move(self) -> Move:
        return Move(self.source, self.trigger, self.dest, self.actor)


FIELDS = Event._fields
"""The fields every event must have."""
CONTEXT = "context"
"""An optional field: when an event has it (not None), it must be the entity's context."""


class Exposed(NamedTuple):
    """One entity's history as the adapter exposed it, read and checked for shape."""

    events: tuple[Event, ...]
    contexts: tuple[Mapping[str, object] | None, ...]
    """Each event's context: the definition's variables it records are judged (each must
    be the entity's value, a str); keys of the service's own hold what it likes."""


def _field(event: object, name: str) -> Any:
    if isinstance(event, Mapping):
        return event.get(name, _ABSENT)
    return getattr(event, name, _ABSENT)


_ABSENT = object()


def items_of(history: object, where: str) -> list[object]:
    """``history`` (what ``where`` returned) as a list, or ``AdapterContractError``: not a
    sequence, or one that cannot be read."""
    if not isinstance(history, Sequence) or isinstance(history, str | bytes):
        raise AdapterContractError(
            f"{where} returned {type(history).__name__} {describe(history)}, not a sequence "
            "of events; return a list "
            f"of events with fields {', '.join(FIELDS)} (Event, a mapping or an object)"
        )
    try:
        return list(history)
    except Exception as error:  # a hostile sequence: user code
        raise AdapterContractError(
            f"{where} returned a sequence that cannot be read: {_what(error)}"
        ) from error


def events_of(history: object, where: str) -> Exposed:
    """``history`` (what ``where`` returned) as events, or ``AdapterContractError`` naming
    what is wrong: not a sequence (``items_of``), an event without one of ``FIELDS``, a
    field of the wrong type, a ``context`` that is not a mapping with ``str`` keys."""
    events: list[Event] = []
    contexts: list[Mapping[str, object] | None] = []
    for number, event in enumerate(items_of(history, where), 1):
        if type(event) is dict:  # the common shape, read without asking who it is
            fast = tuple(event.get(name, _ABSENT) for name in FIELDS)
            if type(fast[0]) is int and all(type(v) is str for v in fast[1:]):
                events.append(Event(*fast))
                contexts.append(_context_of(event, number, where))
                continue
        values: list[Any] = []
        for name in FIELDS:
            try:
                value = _field(event, name)
            except Exception as error:  # a hostile mapping or attribute: user code
                raise AdapterContractError(
                    f"{where}: field '{name}' of event {number} cannot be read: {_what(error)}"
                ) from error
            wanted = int if name == "seq" else str
            if value is _ABSENT:
                raise AdapterContractError(
                    f"{where}: event {number} ({describe(event)}) has no field '{name}'; "
                    f"every event has {', '.join(FIELDS)}"
                )
            if not isinstance(value, wanted) or isinstance(value, bool):
                raise AdapterContractError(
                    f"{where}: field '{name}' of event {number} is {describe(value)}, not "
                    f"{'an int' if wanted is int else 'a str'}"
                )
            # by its value: a StrEnum or an int subclass is what it holds, its methods aside
            values.append(int.__index__(value) if isinstance(value, int) else str.__str__(value))
        events.append(Event(*values))
        contexts.append(_context_of(event, number, where))
    return Exposed(tuple(events), tuple(contexts))


def _context_of(event: object, number: int, where: str) -> Mapping[str, object] | None:
    try:
        context = _field(event, CONTEXT)
    except Exception as error:  # user code
        raise AdapterContractError(
            f"{where}: field 'context' of event {number} cannot be read: {_what(error)}"
        ) from error
    if context is _ABSENT or context is None:
        return None
    try:
        items = list(context.items()) if isinstance(context, Mapping) else None
    except Exception as error:  # a hostile mapping: user code
        raise AdapterContractError(
            f"{where}: field 'context' of event {number} cannot be read: {_what(error)}"
        ) from error
    if items is None or not all(isinstance(k, str) for k, _ in items):
        raise AdapterContractError(
            f"{where}: field 'context' of event {number} is {describe(context)}, not a "
            "mapping with str keys (leave it out, or None, if your events record none)"
        )
    return {str.__str__(k): str.__str__(v) if isinstance(v, str) else v for k, v in items}


@dataclass
class Tracked:
    """One entity the suite created: its number (from 1), the adapter's handle for it, its
    context, where it started, and every move the suite saw it make."""

    number: int
    handle: object
    context: Mapping[str, str]
    start: str
    moves: list[Move] = field(default_factory=list)
    judged: int = 0
    """How many of ``moves``, from the first, an exposed history was judged a legal chain
    with: a history that still begins with them is judged from there on (judging the
    whole chain after every step made a long tour quadratic; outsider batch 35, c 5)."""

    @property
    def state(self) -> str:
        """Where the definition and the moves the suite saw say it stands."""
        return self.moves[-1].dest if self.moves else self.start

    def __str__(self) -> str:
        return f"entity {self.number}"


def _what(error: BaseException) -> str:
    return f"{type(error).__name__}: {message_of(error, 200)}"


def _shown(context: Mapping[str, object]) -> str:
    shown = (f"{k}={v if isinstance(v, str) else describe(v)}" for k, v in context.items())
    return ", ".join(shown) or "no context"


class Oracle:
    """The suite's record of every entity, and the judge of every observation."""

    def __init__(self, spec: MachineSpec, coverage: Coverage | None) -> None:
        self.spec = spec
        self.coverage = coverage
        self.entities: list[Tracked] = []
        self.seen: list[str] = []

    def breaks(self, rule: str, message: str) -> RuleBroken:
        shown = "\n".join(f"    {line}" for line in self.seen[-TRANSCRIPT:]) or "    (nothing)"
        return RuleBroken(
            rule, f"{message}\n  {promised(rule, RULES[rule])}\n  what the suite saw last:\n{shown}"
        )

    # -- creating ---------------------------------------------------------------------------

    def created(self, handle: object, context: Mapping[str, str], start: str) -> Tracked:
        tracked = Tracked(len(self.entities) + 1, handle, dict(context), start)
        self.entities.append(tracked)
        where = "" if start == self.spec.initial else f" in '{start}'"
        self.seen.append(f"{tracked} created{where} with {_shown(context)}")
        return tracked

    def refused_creation(self, context: Mapping[str, str], start: str, error: Exception) -> None:
        where = "" if start == self.spec.initial else f" in '{start}'"
        raise self.breaks(
            CREATED,
            f"creating an entity{where} with {_shown(context)} raised {_what(error)}, "
            "though the definition has that context",
        )

    # -- firing -----------------------------------------------------------------------------

    def expect(self, tracked: Tracked, trigger: str, actor: str) -> str | MachinesError:
        """The definition's answer: the destination, or its refusal."""
        try:
            return self.spec.step(tracked.state, trigger, actor=actor, **tracked.context)
        except MachinesError as refusal:
            return refusal

    def returned(self, tracked: Tracked, trigger: str, actor: str) -> None:
        """The call firing ``trigger`` by ``actor`` returned: the entity is read next."""
        self.seen.append(f"{tracked}: {trigger} by {actor} in '{tracked.state}': accepted")

    def accepted(
        self, tracked: Tracked, trigger: str, actor: str, expected: str | MachinesError, now: str
    ) -> None:
        """The implementation accepted ``trigger`` by ``actor`` (``returned``) and now
        reads ``now``."""
        before = tracked.state
        call = f"{tracked}: {trigger} by {actor} in '{before}'"
        self.seen[-1] = f"{call}: accepted, now in '{now}'"
        if self.coverage is not None:
            self.coverage.record_probe(self.spec.name, before, trigger, actor, moved=True)
        if self.spec.is_terminal(before):
            raise self.breaks(
                TERMINAL, f"{call} was accepted: terminal '{before}' was left (now '{now}')"
            )
        if isinstance(expected, MachinesError):
            raise self.breaks(
                ILLEGAL,
                f"{call} was accepted (now in '{now}'); the definition refuses it: "
                f"{message_of(expected, 200)}",
            )
        if now != expected:
            raise self.breaks(
                LEGAL,
                f"{call} was accepted but left it in '{now}'; the definition moves it to "
                f"'{expected}'",
            )
        tracked.moves.append(Move(before, trigger, expected, actor))
        self.seen[-1] = f"{tracked}: {tracked.moves[-1]}"
        if self.coverage is not None:
            self.coverage.record(self.spec.name, before, trigger, expected)

    def refused(
        self,
        tracked: Tracked,
        trigger: str,
        actor: str,
        expected: str | MachinesError,
        error: Exception,
    ) -> None:
        """The implementation refused (its call raised ``error``)."""
        call = f"{tracked}: {trigger} by {actor} in '{tracked.state}'"
        self.seen.append(f"{call}: refused ({type(error).__name__})")
        if self.coverage is not None:
            self.coverage.record_probe(self.spec.name, tracked.state, trigger, actor, moved=False)
        if not isinstance(expected, MachinesError):
            raise self.breaks(
                LEGAL,
                f"{call} was refused ({_what(error)}); the definition allows it, to "
                f"'{expected}', with {_shown(tracked.context)}",
            )

    def unchanged(self, tracked: Tracked, now: str, exposed: Exposed) -> None:
        """After a refusal: the entity reads as it did, with the history it had."""
        moves = [e.move for e in exposed.events]
        if now != tracked.state or moves != tracked.moves:
            raise self.breaks(
                REFUSAL,
                f"{self.seen[-1]}, yet it changed: it was in '{tracked.state}' with history "
                f"{show_chain(tracked.moves)}, it is in '{now}' with history "
                f"{show_chain(moves)}",
            )

    # -- what the adapter exposes --------------------------------------------------------

    def unreadable(self, tracked: Tracked, error: AdapterContractError, what: str) -> RuleBroken:
        """``tracked`` cannot be read, after the adapter read ``what`` well: a step broke
        it."""
        self.seen.append(f"{tracked} read: {message_of(error, 200)}")
        return self.breaks(
            READABLE,
            f"{tracked} cannot be read, though the adapter read {what} well before: "
            f"{message_of(error, 300)}",
        )

    def created_as_defined(self, tracked: Tracked, now: str, exposed: Exposed) -> None:
        if now != tracked.start or exposed.events:
            raise self.breaks(
                CREATED,
                f"{tracked} was created in '{tracked.start}' with {_shown(tracked.context)}; "
                f"it reads '{now}' with {len(exposed.events)} event(s) of history",
            )

    def history(self, tracked: Tracked, now: str, exposed: Exposed) -> None:
        """The exposed history is one legal chain from the start, exactly the moves the
        suite saw, numbered 1, 2, 3, ..., and it ends where the entity reads."""
        events = exposed.events
        seqs = [e.seq for e in events]
        if any(later <= earlier for earlier, later in itertools.pairwise(seqs)):
            raise self.breaks(
                CHAIN,
                f"the history of {tracked} is numbered {seqs}: each event's number must be "
                "above the one before it (the order the moves were made in)",
            )
        moves = [e.move for e in events]
        known = tracked.judged if moves[: tracked.judged] == tracked.moves[: tracked.judged] else 0
        found = chain_break(
            moves, self.spec, tracked.context, start=tracked.start, judged=known, terminal=True
        )
        if found is not None:
            number, move, at, how, legal, refusal = found
            if how == "terminal":
                raise self.breaks(TERMINAL, f"event {number} of {tracked}, {move}, leaves '{at}'")
            why = {
                "disconnected": f"does not start where the history had reached, '{at}'",
                "refused": f"is not a move the definition allows ({message_of(refusal, 160)})"
                if refusal is not None
                else "is not a move the definition allows",
                "elsewhere": f"leads elsewhere: the definition moves to '{legal}'",
            }[how]
            raise self.breaks(CHAIN, f"event {number} of {tracked}, {move}, {why}")
        if moves == tracked.moves:
            tracked.judged = len(moves)
        else:
            raise self.breaks(
                CHAIN,
                f"the history of {tracked} is not the moves the suite saw it make: "
                f"{first_difference(moves, tracked.moves)}; its history is "
                f"{show_chain(moves)}",
            )
        for number, context in enumerate(exposed.contexts, 1):
            differs = {  # the definition's variables the event records: a service may
                k: v  # record fewer, or keys of its own (outsider batch 42, c 3c)
                for k, v in dict(context or {}).items()
                if k in tracked.context and v != tracked.context[k]
            }
            if differs:
                raise self.breaks(
                    CHAIN,
                    f"event {number} of {tracked} records context {_shown(context or {})}; "
                    f"{tracked} has {_shown(tracked.context)}",
                )
        if now != tracked.state:
            raise self.breaks(
                CHAIN,
                f"{tracked} reads '{now}', but its history (the moves the suite saw) ends in "
                f"'{tracked.state}'",
            )
