"""Deriving a transfer request's state from its plan's node states.

``rules`` evaluates the derivation rule sets of ``spec/request.yaml`` and applies their
decision to a request (``Deriver.derived_move``, what the engine, the explorer and the proof
all call); ``proof`` checks them exhaustively against the derivation
invariants, by running that same code over every plan.
"""

from machines.derive.rules import (
    Alphabet,
    Decision,
    DerivedMove,
    Deriver,
    NodeKind,
    Signature,
    derivation_predicates,
    derive_request_state,
)

__all__ = [
    "Alphabet",
    "Decision",
    "DerivedMove",
    "Deriver",
    "NodeKind",
    "Signature",
    "derivation_predicates",
    "derive_request_state",
]
