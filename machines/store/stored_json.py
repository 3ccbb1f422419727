"""How a store reads back the JSON it keeps (``context``, ``data``, an event's
``detail``): strictly, so that a text the store never writes is named rather than handed on.

Both databases hold what any session that may write a row wrote there: a key given twice
(whose readers disagree), a number no float holds, a NUL or a lone surrogate. Read as it
is, such a value would reach a system, and every write of it back would be refused; read
here it is an ``Unreadable`` text with its reason, which a row read turns into a
``StoreError`` naming the entity (and the audit into a breach with its place). The other
columns of a row read are checked the same way (``typed``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from machines.spec.jsonvalue import MAX_DIGITS, describe
from machines.store.records import StoreError

EMPTY: Mapping[str, Any] = MappingProxyType({})
"""The read-only empty mapping: an empty column, or no context given."""


class Unreadable(str):
    """A stored JSON text the store will not read (``read_json``): the text, and why."""

    reason: str


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return found


class _DuplicateKey(ValueError):
    pass


class _NotStored(ValueError):
    pass


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotStored(f"holds the number {text[:40]}, which no float holds")
    return number


def _whole(text: str) -> int:
    """An integer of at most ``MAX_DIGITS`` digits, whatever this process's own limit
    (``sys.set_int_max_str_digits``, at least 640): read in parts of 600 digits, so that a
    process that lowered it reads what every other process wrote (outsider batch 40, a 4)."""
    digits = text.lstrip("-")
    if len(digits) > MAX_DIGITS:
        raise _NotStored(f"holds an integer of {len(digits)} digits, more than Python reads")
    whole = 0
    for start in range(0, len(digits), 600):
        part = digits[start : start + 600]
        whole = whole * 10 ** len(part) + int(part)
    return -whole if text.startswith("-") else whole


def _no_constant(text: str) -> float:
    raise _NotStored(f"holds {text}, which JSON has not")


_STRICT = json.JSONDecoder(
    object_pairs_hook=_unique_keys,
    parse_float=_finite,
    parse_int=_whole,
    parse_constant=_no_constant,
)
_ESCAPED_OUTSIDE_UTF8 = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
"""An escaped NUL or surrogate: a text that holds one may hold what the store never writes."""


def read_json(text: str | bytes) -> object:
    """A stored JSON text as Python values, or ``Unreadable``: not JSON, nested too deep,
    an object that gives a key twice (SQLite reads the first value, PostgreSQL and Python
    the last: a text the store never writes, whose readers disagree), or a value the store
    never writes (a number no float holds, a NUL, a lone surrogate): read as it is, a
    system would hand it on, and every write of it back would be refused."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        value = _STRICT.decode(text)
        if _ESCAPED_OUTSIDE_UTF8.search(text):
            _utf8_only(value)
        return value
    except _DuplicateKey as twice:
        reason = f"gives the key {describe(twice.args[0])} twice"
    except _NotStored as odd:
        reason = str(odd)
    except RecursionError:
        reason = "is nested too deep to read"
    except ValueError:
        reason = "is not JSON"
    unreadable = Unreadable(text)
    unreadable.reason = reason
    return unreadable


def _utf8_only(value: object) -> None:
    """Refuse a NUL or a lone surrogate anywhere in ``value`` (``_NotStored``)."""
    texts = [value]
    while texts:
        item = texts.pop()
        if isinstance(item, dict):
            texts += [*item, *item.values()]
        elif isinstance(item, list):
            texts += item
        elif isinstance(item, str):
            if "\x00" in item:
                raise _NotStored("holds a NUL character, which the store never writes")
            if _SURROGATE.search(item):
                raise _NotStored("holds a lone surrogate, which is not UTF-8")


_SURROGATE = re.compile("[\ud800-\udfff]")


def decode(text: str | None) -> Mapping[str, Any]:
    """A JSON object column as the database holds it (SQLite: text), read-only at the top;
    anything but a JSON object there was written behind the store's back: ``StoreError``."""
    if text is None:
        return EMPTY
    if not isinstance(text, str):  # a BLOB or a number in a TEXT column SQLite was told to allow
        raise StoreError(
            f"the database holds {type(text).__name__} {describe(text)} where JSON text "
            "belongs; it was written behind the store's back"
        )
    if not text:
        return EMPTY
    return frozen(read_json(text))


def frozen(value: object) -> Mapping[str, Any]:
    """A JSON object column as read (a dict), read-only at the top; anything else was
    written behind the store's back: ``StoreError``."""
    if type(value) is dict:
        return MappingProxyType(value)
    what = f"a text that {value.reason}" if isinstance(value, Unreadable) else describe(value)
    raise StoreError(
        f"the database holds {what} where a JSON object belongs; it was written "
        "outside the store (machines audit --from-store checks the rest)"
    )


_COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    "key": (str,),
    "state": (str,),
    "scope": (str, type(None)),
    "ordinal": (int,),
    "moves": (int,),
    "version": (int,),
    "created_at": (int, float),
    "updated_at": (int, float),
}


def typed(**columns: object) -> None:
    """Each column of a row read is of the type its table declares: SQLite keeps what its
    checks refuse once they are switched off (``PRAGMA ignore_check_constraints``), and a
    time that is a text would be compared with numbers wherever it is read."""
    for column, value in columns.items():
        wanted = _COLUMN_TYPES[column]
        if (
            isinstance(value, bool)
            or not isinstance(value, wanted)
            or (isinstance(value, float) and not math.isfinite(value))
            or (isinstance(value, str) and not value.isascii() and not _utf8(value))
        ):
            raise StoreError(
                f"the database holds {describe(value)} as its {column}, which the table's "
                "checks refuse; it was written outside the store (machines audit "
                "--from-store checks the rest)"
            )


def _utf8(text: str) -> bool:
    """Whether ``text`` is UTF-8 (SQLite hands on a key's bytes that are not as lone
    surrogates, read leniently: ``sqlite._lenient_text``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
