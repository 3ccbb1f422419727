"""Exhaustive bounded exploration of the reference systems' models.

``search`` is the breadth-first search over any ``Model``; ``outcome`` and ``transfer`` are
the models of the exactly-once and transfer systems; ``scopes`` names the systems, their
scopes and builds a model of one.
"""

from machines.explore.scopes import MACHINES_OF, SYSTEMS, build_model, scopes_of
from machines.explore.search import Exploration, Model, ProgressBar, Violation, explore

__all__ = [
    "MACHINES_OF",
    "SYSTEMS",
    "Exploration",
    "Model",
    "ProgressBar",
    "Violation",
    "build_model",
    "explore",
    "scopes_of",
]
