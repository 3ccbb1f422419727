"""What one invariant is: its id, its statement, who judges it, and whether breaking it is a
bug whatever the design (a guarantee) or breaks this package's choice (a policy). The
invariants themselves are listed in ``machines.spec.registry`` (the stored state's and the
definitions') and ``machines.spec.suite_rules`` (the property suites')."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Layer = Literal[
    "definitions",
    "derivation",
    "stored state",
    "audit",
    "explorer",
    "exactly-once suite",
    "effect-log suite",
    "transfer suite",
    "conformance suite",
]
"""Who judges an invariant: ``machines check``'s structural checks of a definition, its
derivation proof, the predicates over a store's snapshot, the audit of a recorded history,
the explorer's models, or one of the property suites (the conformance suite judges any
implementation of any definition; the spec walker is that suite on this package's
runtime)."""

LAYERS: tuple[Layer, ...] = get_args(Layer)


Kind = Literal["guarantee", "policy"]
"""What breaking an invariant means. A guarantee is kept by every correct implementation
(nothing runs twice, no acknowledged answer lost, nothing leaves indeterminate on its own):
breaking one is a bug whatever the design. A policy is this package's choice among safe
designs (park a key at once when its caller is interrupted, rather than hold it until the
lease expires): a suite judges it by default, names it as a policy when it breaks, and lets
a user whose system chooses otherwise leave it out (``policies`` on the suite)."""

GUARANTEE: Kind = "guarantee"
POLICY: Kind = "policy"


@dataclass(frozen=True)
class Invariant:
    """One promise: ``id`` (what failures start with), ``statement`` (what it promises, as
    the site shows it), ``layers`` (who judges it), ``kind`` (a guarantee or a policy)."""

    id: str
    statement: str
    layers: frozenset[Layer]
    kind: Kind = GUARANTEE


def invariant(id: str, statement: str, *layers: Layer, kind: Kind = GUARANTEE) -> Invariant:
    """An invariant whose statement is written across lines, as one line."""
    return Invariant(id, " ".join(statement.split()), frozenset(layers), kind)
