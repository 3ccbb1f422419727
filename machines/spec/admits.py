"""What a group of edges admits, and what one group admits that another does not.

The edges of one ``transition_key`` (source, trigger, dest) admit a set of (actor, context
values) pairs: each edge its actors times, for each guarded variable, the values its guard
allows (a variable the guard leaves out: every value). That set is kept as ``Cube``s, one
per edge, over the variables any of the edges compared guards; their difference is a list
of cubes again, exact, and never enumerates the valuations. ``machines.spec.diff``
compares two versions of a definition with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from machines.spec.vocabulary import describe_guard

Cube = tuple[frozenset[str], tuple[frozenset[str], ...]]
"""Actors times one set of values per variable of its ``Space``: a part of what edges admit."""


class Space:
    """The variables that the ``edges`` (transition forms, ``canonical.transition_form``)
    guard, each with every value it may hold (``declared``, and any a guard names)."""

    def __init__(self, edges: Iterable[Mapping[str, Any]], declared: Mapping[str, Iterable[str]]):
        listed = list(edges)
        self.variables = tuple(sorted({var for t in listed for var in t["when"]}))
        self.universe = {
            var: frozenset(declared.get(var, ())).union(*(t["when"].get(var, ()) for t in listed))
            for var in self.variables
        }

    def cubes(self, edges: Iterable[Mapping[str, Any]]) -> list[Cube]:
        """What each of ``edges`` admits."""
        return [
            (
                frozenset(t["actors"]),
                tuple(
                    frozenset(t["when"][var]) if var in t["when"] else self.universe[var]
                    for var in self.variables
                ),
            )
            for t in edges
        ]

    def text(self, cubes: Sequence[Cube]) -> str:
        """``cubes`` for a person: its actors and each guard (the variables it restricts),
        ``actor proxy when tier=irreversible`` or ``actors a, b in any context``."""
        merged: dict[tuple[frozenset[str], ...], frozenset[str]] = {}
        for actors, values in cubes:
            merged[values] = merged.get(values, frozenset()) | actors
        parts = []
        for values, actors in merged.items():
            guard = {
                var: allowed
                for var, allowed in zip(self.variables, values, strict=True)
                if allowed != self.universe[var]
            }
            where = f"when {describe_guard(guard, 'label')}" if guard else "in any context"
            parts.append(f"{actors_text(sorted(actors))} {where}")
        return "; ".join(sorted(parts))


def actors_text(actors: Iterable[str]) -> str:
    """``actor proxy`` or ``actors a, b``."""
    listed = list(actors)
    return f"actor{'s' if len(listed) > 1 else ''} {', '.join(listed)}"


def actors_of(cubes: Iterable[Cube]) -> frozenset[str]:
    """Every actor some of ``cubes`` admits."""
    return frozenset().union(*(actors for actors, _ in cubes))


def minus(cubes: Iterable[Cube], others: Iterable[Cube]) -> list[Cube]:
    """What ``cubes`` admit and ``others`` do not, as cubes (that do not overlap when
    ``cubes`` do not)."""
    pieces = list(cubes)
    for other in others:
        pieces = [piece for cube in pieces for piece in _subtract(cube, other)]
    return pieces


def restricted(cubes: Iterable[Cube], actors: frozenset[str]) -> list[Cube]:
    """``cubes`` for ``actors`` only (those left with no actor dropped)."""
    return [(a & actors, values) for a, values in cubes if a & actors]


def _subtract(cube: Cube, other: Cube) -> list[Cube]:
    """``cube`` less ``other``: for each dimension in turn, the part outside ``other`` in
    it and inside ``other`` in every dimension before it."""
    dims = (cube[0], *cube[1])
    cut = (other[0], *other[1])
    if any(not (a & b) for a, b in zip(dims, cut, strict=True)):
        return [cube]
    out: list[Cube] = []
    kept: list[frozenset[str]] = []
    for k, (a, b) in enumerate(zip(dims, cut, strict=True)):
        rest = a - b
        if rest:
            parts = (*kept, rest, *dims[k + 1 :])
            out.append((parts[0], tuple(parts[1:])))
        kept.append(a & b)
    return out
