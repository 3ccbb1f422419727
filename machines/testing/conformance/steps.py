"""The conformance suite's steps: what one step does, written so that a list of them is a
run anyone can replay (``ConformanceSuite.replay(steps)``).

A ``Fire`` names its entity by number (1 for the first one created); ``renumbered`` keeps
a shortened run meaningful when some of its creations are left out, as the suite's
minimiser leaves them out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from machines.errors import InvalidArgument
from machines.spec.jsonvalue import describe
from machines.spec.records import MachineSpec


@dataclass(frozen=True)
class Create:
    """Create an entity under ``context`` (in ``state``, for a resumable adapter)."""

    context: Mapping[str, str]
    state: str | None = None

    def __repr__(self) -> str:
        where = "" if self.state is None else f", state={self.state!r}"
        shown = dict(self.context) if isinstance(self.context, Mapping) else self.context
        return f"Create(context={shown!r}{where})"


@dataclass(frozen=True)
class Fire:
    """Fire ``trigger`` as ``actor`` at entity number ``entity`` (from 1)."""

    entity: int
    trigger: str
    actor: str
    detail: Mapping[str, Any] | None = None

    def __repr__(self) -> str:
        detail = "" if self.detail is None else f", detail={dict(self.detail)!r}"
        return f"Fire(entity={self.entity}, trigger={self.trigger!r}, actor={self.actor!r}{detail})"


Action = Create | Fire


def renumbered(steps: Sequence[Action], keep: Sequence[int]) -> list[Action]:
    """The steps at the positions ``keep`` (in order), with every ``Fire`` renumbered to
    the entity its own ``Create`` now makes; a ``Fire`` whose entity's creation is left out
    is left out too (it would aim at another entity)."""
    number_of: dict[int, int] = {}  # old entity number -> new
    created = kept_created = 0
    chosen = set(keep)
    out: list[Action] = []
    for position, step in enumerate(steps):
        if isinstance(step, Create):
            created += 1
            if position in chosen:
                kept_created += 1
                number_of[created] = kept_created
                out.append(step)
        elif position in chosen and step.entity in number_of:
            out.append(replace(step, entity=number_of[step.entity]))
    return out


def touching(steps: Sequence[Action], entity: int) -> list[int]:
    """The positions of the steps that create or fire at entity number ``entity``."""
    created = 0
    out = []
    for position, step in enumerate(steps):
        if isinstance(step, Create):
            created += 1
            if created == entity:
                out.append(position)
        elif step.entity == entity:
            out.append(position)
    return out


def checked_steps(steps: object, spec: MachineSpec) -> list[Action]:
    """``steps`` as a list of steps, or ``InvalidArgument`` naming the first that is not a
    ``Create`` under a context of ``spec`` (every variable, each an allowed value; a state
    of ``spec`` if it names one), or a ``Fire`` of ``str`` trigger and actor at an entity
    created before it: a replay of a bad step would blame the implementation for it."""
    if isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
        raise InvalidArgument(
            f"replay(): steps is {describe(steps)}, not a list of Create and Fire steps"
        )
    created = 0
    out: list[Action] = []
    for number, step in enumerate(steps, 1):
        if isinstance(step, Create):
            _check_create(number, step, spec)
            created += 1
        elif not isinstance(step, Fire):
            raise InvalidArgument(
                f"replay(): step {number} is {describe(step)}, not a Create or a Fire"
            )
        elif type(step.entity) is not int or not 1 <= step.entity <= created:
            raise InvalidArgument(
                f"replay(): step {number}, {step!r}, fires at entity {describe(step.entity)}, "
                f"but {created} entit{'y was' if created == 1 else 'ies were'} created before it"
            )
        elif type(step.trigger) is not str or type(step.actor) is not str:
            raise InvalidArgument(
                f"replay(): step {number}, {step!r}, needs a str trigger and a str actor"
            )
        out.append(step)
    return out


def _check_create(number: int, step: Create, spec: MachineSpec) -> None:
    where = f"replay(): step {number}, {step!r},"
    context = step.context
    if not isinstance(context, Mapping) or not all(
        type(k) is str and type(v) is str for k, v in context.items()
    ):
        raise InvalidArgument(f"{where} has a context that is not a mapping of str to str")
    wanted = spec.context
    if set(context) != set(wanted):
        raise InvalidArgument(
            f"{where} gives the variables {sorted(context)}, and '{spec.name}' has {sorted(wanted)}"
        )
    for variable, value in context.items():
        allowed = wanted[variable].values
        if value not in allowed:
            raise InvalidArgument(
                f"{where} gives {variable}={value!r}, which '{spec.name}' does not allow; "
                f"allowed: {', '.join(allowed)}"
            )
    if step.state is not None and step.state not in spec.states:
        raise InvalidArgument(
            f"{where} starts in {describe(step.state)}, not a state of '{spec.name}'"
        )
