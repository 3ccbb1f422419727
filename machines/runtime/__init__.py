"""The runtime layer: one object per entity on ``transitions`` (``entity``; for asyncio,
``async_entity``), the templates
those objects share (``templates``), and the history every move appends to (``history``).

It hands its entity classes to the definition layer, so that ``MachineSpec.machine`` builds
one without the definition layer importing the runtime.
"""

from machines.runtime.async_entity import AsyncEntityMachine
from machines.runtime.entity import EntityMachine, Hooks
from machines.spec.records import provide_entity_classes

provide_entity_classes(EntityMachine, AsyncEntityMachine)

__all__ = ["AsyncEntityMachine", "EntityMachine", "Hooks"]
