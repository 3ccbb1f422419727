"""The checks the reference systems run on their arguments before doing anything.

A system's public call is a boundary: an argument of the wrong type must be refused with
``InvalidArgument`` naming the call and the argument before a key is claimed or an effect
runs (a key claimed for a call that then fails on its own arguments would stay parked).
Keys themselves are checked by the store, the one place every system's keys go through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, cast

from machines.errors import InvalidArgument, MachinesError
from machines.runtime.templates import is_async
from machines.spec.jsonvalue import describe
from machines.spec.visible import says_something
from machines.store.arguments import check_key
from machines.store.records import MAX_STORED_INT, Row, StaleWrite, Store, StoreError
from machines.systems.reliance import require_reliable

MAX_RETRIES = 1_000
"""The most retries a system makes of one call (``ExactlyOnce``'s effect, ``compensate``'s
compensation)."""


def text(value: object, what: str) -> str:
    """A ``str`` with something in it besides spaces, as a plain ``str`` (a subclass's own
    ``strip`` or ``__eq__`` could say anything; what is checked is what is stored)."""
    if not isinstance(value, str) or not plain(value).strip():
        raise InvalidArgument(f"{what} must be a non-empty string, not {describe(value)}")
    return plain(value)


def statement(value: object, what: str, refusal: type[MachinesError] = InvalidArgument) -> str:
    """Who decided, or why: a text that says something (``says_something``: a letter or a
    digit), as the audit reads it, so that a decision the audit would call silent is
    refused before it is written (``refusal``: the error the calling system raises)."""
    if not isinstance(value, str) or not says_something(plain(value)):
        raise refusal(
            f"{what} must be a text with a letter or a digit in it, not {describe(value)}"
        )
    return plain(value)


def remark(value: object, what: str, refusal: type[MachinesError] = InvalidArgument) -> str:
    """An optional reason: ``""`` leaves it out; any other text must say something
    (``statement``), so that a reason of only punctuation or invisible characters is
    refused rather than recorded as though the person had explained."""
    if not isinstance(value, str):
        raise refusal(f"{what} must be a string, not {describe(value)}")
    return "" if plain(value) == "" else statement(value, what, refusal)


def plain(value: str) -> str:
    """``value``'s characters as a ``str`` itself, whatever subclass it is."""
    return str.__str__(value)


def optional_text(value: object, what: str) -> str | None:
    return None if value is None else text(value, what)


def name(value: object, what: str, system: str) -> str:
    """Who or what did it (a worker, a tool, an engine): a ``text`` held to the one key
    rule (``store.arguments.check_key``: no NUL, UTF-8, at most ``MAX_KEY_BYTES``), refused
    where it is given rather than at the first write (outsider batch 45, a 17: a worker
    holding a NUL was refused only by ``run``, as the data's fault)."""
    return check_key(text(value, what), system, what)


def optional_name(value: object, what: str, system: str) -> str | None:
    return None if value is None else name(value, what, system)


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be True or False, not {describe(value)}")
    return value


def count(value: object, what: str, *, least: int = 0, most: int | None = None) -> int:
    """An ``int`` (not a bool) in ``least..most``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, not {describe(value)}")
    value = int.__index__(value)  # the number itself: a subclass's comparisons could lie
    if value < least or (most is not None and value > most):
        bound = f"between {least} and {most}" if most is not None else f"at least {least}"
        raise InvalidArgument(f"{what} must be {bound}, not {describe(value)}")
    return value


def seconds(value: object, what: str) -> float:
    """A finite number of seconds, above zero."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {describe(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite or value <= 0:
        raise InvalidArgument(f"{what} must be a finite number above 0, not {describe(value)}")
    return float(value)


def seen(value: object, what: str) -> int | None:
    """The row version a person's decision was made on (``None``: the call reads the row
    itself, as a program that decides on what it reads in the same call does)."""
    return None if value is None else count(value, what, least=1, most=MAX_STORED_INT)


def unchanged(row: Row, seen: int | None) -> Row:
    """``row`` when it is still at version ``seen`` (read in the transaction that writes
    the decision, so nothing can move it between the check and the write); else
    ``StaleWrite``: a person decided on a row that moved since (another person, or its
    system), and their decision must not land on what it has become."""
    if seen is not None and row.version != seen:
        raise StaleWrite(
            f"{row.machine} {describe(row.key)} is at version {row.version}, not the {seen} the "
            f"decision was made on: it moved since (now {row.state}); nothing was written, "
            "read it again and decide again"
        )
    return row


def stored_count(row: Row, field: str) -> int:
    """``row.data[field]`` (absent: 0), a count the system keeps. A live row's data, and a
    finished one's annotations, are writable by whoever can update the table, so what is
    read is checked: anything but a count is ``StoreError`` and nothing is done."""
    value = row.data.get(field, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _unreadable(row, field, value, "a count")
    return value


def stored_fields(row: Row, field: str) -> Mapping[str, Any]:
    """``row.data[field]`` (absent or null: empty), an object the system keeps."""
    value = row.data.get(field) or {}
    if not isinstance(value, Mapping):
        raise _unreadable(row, field, value, "an object")
    return value


def _unreadable(row: Row, field: str, value: object, kind: str) -> StoreError:
    return StoreError(
        f"{row.machine} {describe(row.key)}: its {field} is {describe(value)}, not {kind}: "
        "the row was changed outside machines, and nothing was done (machines audit "
        "--from-store judges the store)"
    )


def function(value: object, what: str, *, asynchronous: bool = False) -> Callable[..., Any]:
    """A callable; a plain one unless ``asynchronous`` (an ``async def`` given where a
    plain function is called would return a coroutine nobody awaits: nothing would run,
    and what called it would record that it had)."""
    if not callable(value):
        raise InvalidArgument(f"{what} must be callable, not {describe(value)}")
    if not asynchronous and is_async(value):
        raise InvalidArgument(
            f"{what} is an async function, which is called here without being awaited (it "
            "would not run): give a plain function (ExactlyOnce.arun takes an async one)"
        )
    return value


def functions(value: object, what: str) -> dict[str, Callable[..., Any]]:
    """A mapping of names to plain callables (compensations by tool, say), copied once:
    what is checked is what is used (a mapping's own ``get`` could answer otherwise)."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{what} must be a mapping of names to callables")
    try:
        pairs = list(value.items())
    except Exception as exc:
        raise InvalidArgument(f"{what} cannot be read: {type(exc).__name__}") from None
    out: dict[str, Callable[..., Any]] = {}
    for name, item in pairs:
        if not isinstance(name, str) or not callable(item):
            raise InvalidArgument(
                f"{what} must map names to callables; {describe(name)} maps to {describe(item)}"
            )
        out[plain(name)] = function(item, f"{what}: {describe(name)}")
    if len(out) != len(pairs):
        raise InvalidArgument(f"{what} names one tool twice")
    return out


def store_with(store: object, machine: str, system: str) -> Store:
    """``store`` when it is a store (``open_store(url)``) that has ``machine``, under a
    definition ``system`` can rely on (``machines.systems.reliance``)."""
    specs = getattr(store, "specs", None)
    try:
        names = specs() if callable(specs) else None
    except Exception:
        names = None
    if not isinstance(names, Mapping) or not callable(getattr(store, "transaction", None)):
        raise InvalidArgument(f"store must be a store (open_store(url)), not {describe(store)}")
    if machine not in names:
        raise InvalidArgument(
            f"the store has no '{machine}' machine; open it with the definition of '{machine}'"
        )
    require_reliable(names, machine, system)
    return cast(Store, store)
