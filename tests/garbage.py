"""Garbage of every type, for the fuzz tests of the public boundaries.

Each boundary (spec loading, ``step`` and the runtime, the stores, the systems, the CLI,
the audit) is fed values from ``garbage()`` in place of each argument, and must either do
what it documents or raise a ``MachinesError``: never a raw ``TypeError``, ``ValueError``,
``RecursionError`` or driver error, and never a half-written change. One strategy for all
of them, so that every boundary is attacked with the same nasty values.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import strategies as st


class Hostile:
    """An object whose every dunder a careless boundary might call raises."""

    def __str__(self) -> str:
        raise RuntimeError("Hostile.__str__")

    def __repr__(self) -> str:
        return "Hostile()"  # so that Hypothesis can still print a failing example

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("Hostile.__eq__")

    def __hash__(self) -> int:
        raise RuntimeError("Hostile.__hash__")

    def __len__(self) -> int:
        raise RuntimeError("Hostile.__len__")

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("Hostile.__iter__")

    def __bool__(self) -> bool:
        raise RuntimeError("Hostile.__bool__")


class StrSubclass(str):
    """A ``str`` that is not quite one: equal to its text, but its own type."""


def posing_as(text: str) -> type[str]:
    """A ``str`` subclass whose instances keep their own characters but compare equal to
    anything and hash as ``text``: what a lookup by ``__eq__``/``__hash__`` would take
    for ``text`` (the checks under attack must read the characters instead)."""

    class Posing(str):
        def __eq__(self, other: object) -> bool:
            return True

        def __ne__(self, other: object) -> bool:
            return False

        def __hash__(self) -> int:
            return hash(text)

    Posing.__name__ = Posing.__qualname__ = f"PosingAs_{text}"
    return Posing


class IntEnumValue(enum.IntEnum):
    ONE = 1


class StrEnumValue(enum.StrEnum):
    IN_FLIGHT = "in_flight"


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


SPECIAL: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    2**53 + 1,
    10**5000,
    math.nan,
    math.inf,
    -0.0,
    "",
    " ",
    "\x00",
    "\ud800",  # a lone surrogate: not encodable as UTF-8
    "a" * 10_000,
    "é" * 40,
    "'; DROP TABLE outcome_entities; --",
    "*",
    b"bytes",
    bytearray(b"x"),
    (),
    (1, 2),
    [],
    [None],
    {},
    {1: "a"},
    {None: 1},
    {"a": {1, 2}},
    frozenset({"a"}),
    {"a", "b"},
    datetime.datetime(2026, 12, 1),
    decimal.Decimal("1.5"),
    fractions.Fraction(1, 3),
    complex(1, 2),
    uuid.UUID(int=0),
    Path("/dev/null"),
    object(),
    Hostile(),
    StrSubclass("in_flight"),
    IntEnumValue.ONE,
    StrEnumValue.IN_FLIGHT,
    _nested(2000),
    print,
    type,
    Ellipsis,
    NotImplemented,
)
"""Values that have broken, or could break, a boundary: one of each awkward kind."""


def _each(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """``sampled_from`` without the ``repr`` of every value (some values refuse one)."""

    def pick(index: int) -> Any:
        return values[index]

    return st.integers(0, len(values) - 1).map(pick)


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(),
        st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc", "Zs", "So"])),
        st.binary(),
    )


def garbage(*, extra: tuple[Any, ...] = (), max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """Any value at all: ``SPECIAL``, random scalars, and containers of them (lists,
    tuples, dicts with keys of any hashable type, sets). ``extra`` adds values that are
    nearly right for the boundary under test (a real state name, a real key), which gets
    the garbage past the first check and into the code behind it."""
    leaves = st.one_of(_each(SPECIAL), scalars(), *(_each(extra),) * bool(extra))
    hashable = st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.binary())
    return leaves | st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.dictionaries(hashable, inner, max_size=3),
            st.dictionaries(st.text(max_size=8), inner, max_size=3),
            st.frozensets(hashable, max_size=3),
        ),
        max_leaves=max_leaves,
    )
