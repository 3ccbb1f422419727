"""One way to turn a value into JSON text that comes back exactly, and to say what is not.

A stored result is replayed to every later caller, a history detail is read back by an
audit, and the same value goes to memory, SQLite and PostgreSQL. So a value is stored only
if reading the text back gives a value equal to it, of the same JSON kinds, on every
store: a tuple (it would come back a list), a dict with non-string keys (they would come
back strings), a set, a ``datetime``, NaN or infinity, a lone surrogate (not UTF-8), a NUL
character (PostgreSQL's JSON refuses it) or an integer too long to print are refused with
``UnstorableValue``, which says what and where. Nothing here imports the rest of the
package, so every layer (history, stores, systems) uses this one rule.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from machines.errors import MachinesError

MAX_DEPTH = 100
"""Deeper nesting is refused: no real result nests this deep, and a deeper one would
exhaust the stack of a reader (ours, or a database's JSON parser)."""

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 120, 120, 120
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL that is not an escaped backslash


def _mapping_as_dict(value: object) -> dict[Any, Any]:
    """Any mapping (a row's read-only data, say) is written as the JSON object it holds."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
    default=_mapping_as_dict,
)


class UnstorableValue(MachinesError, ValueError):
    """A value that cannot be stored as JSON and read back unchanged."""


def describe(value: object, limit: int = 80) -> str:
    """A short, safe description of any value for an error message: its ``repr`` cut to
    ``limit`` characters (built from a bounded part of the value: a 50 MB string or a
    million-item list costs no more than a short one), or only its type when even
    ``repr`` fails (a hostile ``__repr__``, an integer too long to print)."""
    try:
        text = _SHORT.repr(value)
    except Exception:
        return f"a {type(value).__name__} (its repr failed)"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def dumps(value: object, *, what: str = "the value") -> str:
    """The JSON text of ``value``, or ``UnstorableValue`` naming ``what`` and why."""
    try:
        text = _ENCODER.encode(value)
        problem = _problem(value, text)
    except (TypeError, ValueError, RecursionError) as exc:
        problem = f"JSON cannot hold it ({_reason(exc)})"
    except Exception as exc:  # a hostile __eq__, __iter__ or the like
        problem = f"reading it raised {type(exc).__name__}"
    if problem is not None:
        raise UnstorableValue(
            f"{what} cannot be stored: {problem}: {describe(value)}; store plain JSON values "
            "(str-keyed dicts, lists, str, finite numbers, bool, None)"
        )
    return text


def as_stored(value: object, *, what: str = "the value") -> Any:
    """``value`` as every reader of the store gets it back: equal, and of the plain JSON
    types (a ``StrEnum`` comes back a ``str``, a read-only mapping a ``dict``). Hand this
    to the first caller too, so that the first caller and every replay see the same."""
    return json.loads(dumps(value, what=what))


def dumps_object(value: object, *, what: str = "the value") -> str:
    """``dumps`` for a column that holds a JSON object (data, context, detail)."""
    if type(value) is not dict and not isinstance(value, Mapping):
        raise UnstorableValue(
            f"{what} must be a mapping (a JSON object), not a {type(value).__name__}"
        )
    return dumps(value, what=what)


def loads_object(text: str) -> Mapping[str, Any]:
    """A stored JSON object, read-only at the top level."""
    loaded = json.loads(text)
    if not isinstance(loaded, dict):
        raise UnstorableValue(f"a stored JSON object is a {type(loaded).__name__}: {text[:80]}")
    return MappingProxyType(loaded)


MAX_DIGITS = sys.int_info.default_max_str_digits
"""The most digits of an integer every reader turns into an ``int`` (4300): Python's own
limit unless a process raises it, which a writer that did must not rely on (outsider batch
39, a E2: 10**5000 stored by such a process was refused by every other reader, as though
written outside the store)."""


_TOO_LONG = 10**MAX_DIGITS


def _long_integer(value: object) -> int | None:
    """About how many digits an integer in ``value`` of more than ``MAX_DIGITS`` has."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if abs(item) >= _TOO_LONG:
                return int(item.bit_length() * math.log10(2)) + 1
        elif isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return None


def encodable(text: str) -> bool:
    """Whether ``text`` has UTF-8 bytes: a lone surrogate (what Python reads from bytes
    that are not UTF-8, or from a JSON escape) has none, so no store, file or hash takes
    it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _problem(value: object, text: str) -> str | None:
    if len(text) > MAX_DIGITS and (digits := _long_integer(value)) is not None:
        return f"it holds an integer of about {digits} digits (at most {MAX_DIGITS})"
    if "\\u0000" in text and _NUL.search(text):
        return "it holds a NUL character, which PostgreSQL's JSON refuses"
    if not text.isascii() and not encodable(text):
        return "it holds a lone surrogate, which is not UTF-8"
    if _plain(value, 0):
        return None  # exact JSON types all the way down: it reads back equal by construction
    depth = _depth(text)
    if depth > MAX_DEPTH:
        return f"it nests {depth} levels deep (at most {MAX_DEPTH})"
    if json.loads(text) != value:
        return (
            "it would not come back the same (a tuple comes back a list, a non-string key a string)"
        )
    return None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: object, depth: int) -> bool:
    """Whether ``value`` is built of exact JSON types only (``dict``, or a read-only view
    of one, with ``str`` keys; ``list``, ``str``, ``int``, ``float``, ``bool``, None)
    within ``MAX_DEPTH``: then its
    text reads back equal without reading it (the encoder already refused NaN and
    unprintable integers). Anything else is judged by reading the text back. Leaves are
    checked in the loop, without a call each: this runs on every stored value."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict or kind is MappingProxyType:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return False
            if type(item) not in _SCALARS and not _plain(item, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:  # type: ignore[attr-defined]
            if type(item) not in _SCALARS and not _plain(item, depth + 1):
                return False
        return True
    return False


def _depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings. A text with few brackets
    in all is not walked at all, so the common small value costs two C-speed counts."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    deepest = level = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            level += 1
            deepest = max(deepest, level)
        elif char in "]}":
            level -= 1
    return deepest


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    text = str(exc)
    return text if len(text) <= 120 else f"{text[:117]}..."
