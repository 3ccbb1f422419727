"""The definition layer: what a machine definition says, and nothing that acts on it.

``records`` holds the immutable IR (``MachineSpec`` and its parts); ``loader`` reads, checks
and builds it from YAML (``yamlsource``, ``files``, the structural rules in ``structure``);
``routing`` compiles the one table every move is decided by; ``vocabulary`` names the tags
and formats a guard; ``states`` gives the bundled machines' states as enums; ``jsonvalue``
says which values can be stored. This layer imports nothing of the package but
``machines.errors``.
"""

from machines.spec.records import (
    Actor,
    Clause,
    ContextCase,
    ContextVariable,
    Derivation,
    DerivationRule,
    Finding,
    Forbidden,
    Guard,
    MachineSpec,
    NodeSet,
    Quantifier,
    Rule,
    RuleKind,
    RuleSet,
    State,
    Transition,
)

__all__ = [
    "Actor",
    "Clause",
    "ContextCase",
    "ContextVariable",
    "Derivation",
    "DerivationRule",
    "Finding",
    "Forbidden",
    "Guard",
    "MachineSpec",
    "NodeSet",
    "Quantifier",
    "Rule",
    "RuleKind",
    "RuleSet",
    "State",
    "Transition",
]
