"""Deriving a transfer request's state from its plan's node states.

``rules`` evaluates the derivation rule sets of ``spec/request.yaml`` (the function the
engine and the explorer call); ``proof`` checks them exhaustively against the derivation
invariants, by running that same code over every plan.
"""

from machines.derive.rules import (
    Alphabet,
    Decision,
    Deriver,
    NodeKind,
    Signature,
    derivation_predicates,
    derive_request_state,
)

__all__ = [
    "Alphabet",
    "Decision",
    "Deriver",
    "NodeKind",
    "Signature",
    "derivation_predicates",
    "derive_request_state",
]
