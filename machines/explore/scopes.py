"""The explorable systems, their scopes, and the model of a system in a scope."""

from __future__ import annotations

from pathlib import Path

from machines.errors import UnknownName
from machines.explore.outcome import DEFAULT_SCOPES as OUTCOME_DEFAULTS
from machines.explore.outcome import SCOPES as OUTCOME_SCOPES
from machines.explore.outcome import OutcomeModel
from machines.explore.search import Model
from machines.explore.transfer import TransferModel
from machines.explore.transfer_plans import DEFAULT_SCOPES as TRANSFER_DEFAULTS
from machines.explore.transfer_plans import SCOPES as TRANSFER_SCOPES
from machines.spec import MachineSpec
from machines.spec.loader import load

SYSTEMS = ("transfer", "exactly-once")
MACHINES_OF = {"transfer": ("request", "node"), "exactly-once": ("outcome",)}
"""The machines each system's model is built from (``build_model``)."""


def scopes_of(system: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every scope, the scopes explored by default) of a system."""
    if system == "transfer":
        return tuple(TRANSFER_SCOPES), TRANSFER_DEFAULTS
    if system == "exactly-once":
        return tuple(OUTCOME_SCOPES), OUTCOME_DEFAULTS
    raise UnknownName(f"unknown system '{system}'; systems: {', '.join(SYSTEMS)}")


def build_model(
    system: str,
    scope: str,
    *,
    rules: str | None = None,
    spec_dir: Path | None = None,
    symmetry: bool = True,
    judged_by_bundled: bool = False,
) -> Model:
    """The model of ``system`` in ``scope``, on the bundled definitions or ``spec_dir``'s;
    ``judged_by_bundled`` judges the invariants by the bundled definitions (their tags and
    their money rules) even when the system runs on ``spec_dir``'s: a mutated copy must not
    judge itself. The exactly-once model's invariants are its own, not read from the
    definition, so there the flag changes nothing."""
    every, _ = scopes_of(system)
    if scope not in every:
        raise UnknownName(f"{system} has no scope '{scope}'; scopes: {', '.join(every)}")

    def spec(name: str) -> MachineSpec:
        return load(name if spec_dir is None else spec_dir / f"{name}.yaml")

    if system == "transfer":
        return TransferModel(
            spec("request"),
            spec("node"),
            TRANSFER_SCOPES[scope],
            scope=scope,
            rules=rules,
            symmetry=symmetry,
            judge=(load("request"), load("node")) if judged_by_bundled else None,
        )
    if rules is not None:
        raise UnknownName("a derivation rule set applies to the transfer system only")
    bounds = OUTCOME_SCOPES[scope]
    return OutcomeModel(
        spec("outcome"), bounds, label=f"{scope} ({bounds.name})", symmetry=symmetry
    )
