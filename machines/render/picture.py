"""One entity's picture: its machine's diagram with the state it is in and the moves it took.

``entity_picture(m)`` takes an entity of the object runtime (or anything with a ``spec``,
a ``state`` and a ``history`` of events with ``source``, ``trigger`` and ``dest``) and
gives a ``Picture``, which Jupyter shows as an SVG (``_repr_svg_``): the current state
filled, the moves it took drawn thick and green. The runtime does not draw itself (it sits
below the rendering), so a notebook asks for the picture::

    from machines.render.picture import entity_picture
    entity_picture(ticket)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from machines.errors import MachinesError
from machines.render.dot import to_dot
from machines.render.files import DrawingFailed, render_svg
from machines.spec import MachineSpec


class _Event(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def trigger(self) -> str: ...
    @property
    def dest(self) -> str: ...


class _Entity(Protocol):
    @property
    def spec(self) -> MachineSpec: ...
    @property
    def state(self) -> str: ...
    @property
    def history(self) -> Iterable[_Event]: ...


@dataclass(frozen=True)
class Picture:
    """An entity's diagram: ``dot`` always, ``svg`` when Graphviz' ``dot`` is installed."""

    dot: str

    @property
    def svg(self) -> str:
        drawn = render_svg(self.dot)
        if drawn is None:
            raise MachinesError(
                "drawing an SVG needs Graphviz' dot program (apt-get install graphviz, brew "
                "install graphviz); the picture's .dot text is there without it"
            )
        return drawn

    def _repr_svg_(self) -> str | None:
        """What Jupyter shows: the SVG, or nothing (then the text) without Graphviz or
        when it fails."""
        try:
            return render_svg(self.dot)
        except DrawingFailed:
            return None


def entity_picture(entity: _Entity) -> Picture:
    """The picture of ``entity``: its state, and the moves of its history."""
    taken = {(event.source, event.trigger, event.dest) for event in entity.history}
    return Picture(to_dot(entity.spec, current=entity.state, taken=taken))
