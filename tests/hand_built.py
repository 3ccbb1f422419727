"""Events and entities built by hand, for snapshots that break an invariant on purpose."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from machines.checks.snapshots import Entity
from machines.runtime.history import TransitionEvent


def event(
    machine: str,
    key: str,
    seq: int,
    source: str,
    dest: str,
    trigger: str,
    actor: str,
    context: dict[str, str] | None = None,
    detail: dict[str, Any] | None = None,
) -> TransitionEvent:
    return TransitionEvent(
        machine,
        key,
        seq,
        source,
        dest,
        trigger,
        actor,
        None if detail is None else MappingProxyType(detail),
        MappingProxyType(context or {}),
        0.0,
    )


def entity(
    machine: str,
    key: str,
    state: str,
    events: list[TransitionEvent],
    *,
    context: dict[str, str] | None = None,
    data: dict[str, Any] | None = None,
    scope: str | None = None,
) -> Entity:
    return Entity(
        machine,
        key,
        state,
        MappingProxyType(context or {}),
        MappingProxyType(data or {}),
        scope,
        tuple(events),
    )
