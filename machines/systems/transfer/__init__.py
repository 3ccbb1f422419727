"""The transfer engine (seed 003): a money transfer run as a plan of nodes.

One idea per module: ``engine`` (``TransferEngine``, its API and the rules it keeps),
``driver`` (how one node moves, one fenced transaction at a time), ``session`` (a request
and its nodes inside one transaction: wakes, the derived request state, the frontier),
``executor`` (what executors see, implement and hand back), ``policy`` (which node moves
the engine makes in which request mode, shared with the explorer), ``plans`` (checking a
plan before anything is written) and ``errors``.
"""

from machines.systems.transfer.engine import MAX_STEPS, TransferEngine
from machines.systems.transfer.errors import (
    CallbackFailed,
    PlanError,
    TransferConfigError,
    TransferError,
    TransferRefused,
    UnknownTransfer,
)
from machines.systems.transfer.executor import (
    Executor,
    ManualGate,
    ObserveAnswer,
    PlanNode,
    PrepareAnswer,
    SubmitAnswer,
)
from machines.systems.transfer.policy import (
    EXECUTOR,
    OBSERVER,
    OPERATOR,
    PLANNER,
    RECONCILER,
    SIGNER,
    SYSTEM,
    TIMER,
)
from machines.systems.transfer.session import CALLBACKS, NODE, REQUEST, Callback, Movement

__all__ = [
    "CALLBACKS",
    "EXECUTOR",
    "MAX_STEPS",
    "NODE",
    "OBSERVER",
    "OPERATOR",
    "PLANNER",
    "RECONCILER",
    "REQUEST",
    "SIGNER",
    "SYSTEM",
    "TIMER",
    "Callback",
    "CallbackFailed",
    "Executor",
    "ManualGate",
    "Movement",
    "ObserveAnswer",
    "PlanError",
    "PlanNode",
    "PrepareAnswer",
    "SubmitAnswer",
    "TransferConfigError",
    "TransferEngine",
    "TransferError",
    "TransferRefused",
    "UnknownTransfer",
]
