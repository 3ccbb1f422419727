"""The ``transitions`` machines that entities share: one *template* per spec, model class,
state attribute, hooks and flavour (sync or async), built once and kept with the spec.

A ``transitions.Machine`` costs ~20 KB and ``add_model`` rescans its model list, so an
entity never registers with its template: it fires the template's events with its own
model (``fire``). The template's states tell the entity the moment its state is entered
(``Mover._entered``), which is where the runtime appends the move's history event.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, cast

from transitions import Event, EventData, Machine, State
from transitions.extensions.asyncio import AsyncEventData, AsyncMachine, AsyncState

from machines.errors import MachinesError, message_of
from machines.spec.jsonvalue import describe
from machines.spec.routing import shown

if TYPE_CHECKING:
    from machines.runtime.history import Record
    from machines.spec import MachineSpec


class Mover(Protocol):
    """What a template needs of the entity in ``event.kwargs["machine"]``."""

    _pending: Record | None

    def _entered(self) -> None: ...


Callback = str | Callable[[EventData], Any]
"""A model method name or a callable; it receives transitions' ``EventData``."""


@dataclass(frozen=True)
class Hooks:
    """Machine-level callbacks, as in ``transitions.Machine`` (names or callables).

    Each receives ``EventData``: ``event.kwargs["actor"]``, ``["detail"]`` and
    ``["machine"]`` (the entity machine) are always there. Pass names of model methods or
    module-level functions: entities that share hooks share one template machine.
    """

    prepare_event: tuple[Callback, ...] = ()
    before_state_change: tuple[Callback, ...] = ()
    after_state_change: tuple[Callback, ...] = ()
    finalize_event: tuple[Callback, ...] = ()

    def __post_init__(self) -> None:
        """Each field is a sequence of callables or non-empty names (a list is kept as a
        tuple); the whole is hashable, since entities that share hooks share a template."""
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, tuple | list) or not all(
                callable(c) or (isinstance(c, str) and c) for c in value
            ):
                raise MachinesError(
                    f"Hooks.{f.name} must be a tuple of callables or method names, "
                    f"not {describe(value)}"
                )
            object.__setattr__(self, f.name, tuple(value))
        try:
            hash(self)
        except Exception as exc:
            raise MachinesError(
                f"Hooks: every callback must be hashable ({type(exc).__name__}); entities "
                "that share hooks share one template machine"
            ) from None

    def names(self) -> tuple[str, ...]:
        """The callbacks given by name (a model method, or a dotted module path)."""
        return tuple(c for f in fields(self) for c in getattr(self, f.name) if isinstance(c, str))


NO_HOOKS = Hooks()


class _RecordingState(State):
    """A template state that records the move the moment it is entered, before any
    ``on_enter`` callback (``state_cls`` is transitions' documented extension point)."""

    def enter(self, event_data: EventData) -> None:
        mover: Mover = event_data.kwargs["machine"]
        mover._entered()
        State.enter(self, event_data)  # not super(): one lookup less on every move


class _AsyncRecordingState(AsyncState):
    async def enter(self, event_data: AsyncEventData) -> None:  # type: ignore[override]
        cast(Mover, event_data.kwargs["machine"])._entered()
        await super().enter(event_data)


class _Template(Machine):
    state_cls = _RecordingState


class _AsyncTemplate(AsyncMachine):
    state_cls = _AsyncRecordingState  # type: ignore[assignment]


class _DestIs:
    """Condition that picks one of several template edges sharing a source and trigger."""

    def __init__(self, dest: str) -> None:
        self.dest = dest

    def __call__(self, event: EventData) -> bool:
        pending = cast(Mover, event.kwargs["machine"])._pending
        return pending is not None and pending[1] == self.dest


def fire(event: Event, model: object, kwargs: dict[str, Any]) -> bool:
    """``event.trigger(model, **kwargs)``, minus two layers that do nothing here:
    ``Event.trigger`` wraps ``_trigger`` and the ``EventData`` in a ``partial`` for
    ``Machine._process``, which, for a machine without a queue (a template never has one),
    only calls it. Same ``EventData``, same ``_trigger`` (it is in transitions' type
    stubs); the synchronous runtime's hot path."""
    return event._trigger(EventData(None, event, event.machine, model, (), kwargs))


_TEMPLATES_LOCK = threading.Lock()
_TEMPLATES: dict[int, dict[tuple[object, ...], Machine]] = {}
"""Each spec's template machines by ``id(spec)``, kept by the runtime (not by the spec) while
the spec lives: a finalizer drops them when the spec is collected, before its id can be
reused. A plain dict, because every entity's creation looks here (a ``WeakKeyDictionary``
lookup made a weak reference each time, about 5% of creating an entity)."""


def templates_of(spec: MachineSpec) -> frozenset[tuple[object, ...]]:
    """The keys of the templates built so far for ``spec`` (what a test can count)."""
    return frozenset(_TEMPLATES.get(id(spec), ()))


def template(
    spec: MachineSpec,
    model_type: type,
    state_attr: str,
    hooks: Hooks | None,
    asynchronous: bool,
    *,
    model_callbacks: bool,
) -> Machine:
    """The shared template for entities like this one, built once (under a lock) and kept
    for as long as the spec lives. ``model_callbacks``: the model's ``on_enter_<state>`` and
    ``on_exit_<state>`` methods are callbacks (a model of the user's own)."""
    key = (model_type, state_attr, hooks, asynchronous, model_callbacks)
    cache = _TEMPLATES.get(id(spec))
    machine = cache.get(key) if cache is not None else None
    if machine is None:
        with _TEMPLATES_LOCK:
            cache = _TEMPLATES.get(id(spec))
            if cache is None:
                cache = _TEMPLATES[id(spec)] = {}
                weakref.finalize(spec, _TEMPLATES.pop, id(spec), None)
            machine = cache.get(key)
            if machine is None:
                machine = cache[key] = _build_template(
                    spec, model_type, state_attr, hooks or NO_HOOKS, asynchronous, model_callbacks
                )
    return machine


def _build_template(
    spec: MachineSpec,
    model_type: type,
    state_attr: str,
    hooks: Hooks,
    asynchronous: bool,
    model_callbacks: bool,
) -> Machine:
    if model_callbacks and not asynchronous:
        _refuse_async_methods(spec, model_type)
    states = []
    for name in spec.states:
        on_enter: list[Callback] = []
        on_exit: list[Callback] = []
        if model_callbacks:
            if callable(getattr(model_type, f"on_enter_{name}", None)):
                on_enter.append(f"on_enter_{name}")
            if callable(getattr(model_type, f"on_exit_{name}", None)):
                on_exit.append(f"on_exit_{name}")
        states.append({"name": name, "on_enter": on_enter, "on_exit": on_exit})
    shared: dict[tuple[str, str], int] = {}
    for t in spec.transitions:
        shared[(t.source, t.trigger)] = shared.get((t.source, t.trigger), 0) + 1
    edges = [
        {
            "trigger": t.trigger,
            "source": t.source,
            "dest": t.dest,
            "conditions": [_DestIs(t.dest)] if shared[(t.source, t.trigger)] > 1 else [],
        }
        for t in spec.transitions
    ]
    cls = _AsyncTemplate if asynchronous else _Template
    return cls(
        model=None,
        states=states,
        transitions=edges,
        initial=spec.initial,
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
        model_attribute=state_attr,
        name=f"{spec.name}: ",
        prepare_event=list(hooks.prepare_event),
        before_state_change=list(hooks.before_state_change),
        after_state_change=list(hooks.after_state_change),
        finalize_event=list(hooks.finalize_event),
    )


def check_hook_names(spec: MachineSpec, hooks: Hooks, model: object) -> None:
    """A hook given by name must name something the model has, or a dotted module path,
    so that a typo fails here rather than in the middle of a move."""
    for name in hooks.names():
        if "." in name:
            dotted(spec, name)
            continue
        try:
            found = hasattr(model, name)
        except Exception:
            found = False
        if not found:
            raise MachinesError(
                f"{spec.name}: hook '{shown(name)}' is neither an attribute of the model "
                f"(a {type(model).__name__}) nor a dotted module path"
            )


def refuse_async_callbacks(spec: MachineSpec, hooks: Hooks | None, model: object | None) -> None:
    """A synchronous entity calls its hooks and its model's ``on_enter_<state>`` /
    ``on_exit_<state>`` without awaiting them: an ``async def`` there would return a
    coroutine nobody runs, and the move would be recorded while its callback never ran.
    Refused before the entity exists (``AsyncEntityMachine`` awaits them)."""
    found: list[tuple[str, object]] = []
    for name in hooks.names() if hooks is not None else ():
        if "." in name:
            found.append((f"hook '{shown(name)}'", dotted(spec, name)))
        elif model is not None:
            found.append((f"hook '{name}'", inspect.getattr_static(model, name, None)))
    for field in fields(hooks) if hooks is not None else ():
        for callback in getattr(hooks, field.name):
            if not isinstance(callback, str):
                found.append((f"a hook of {field.name}", callback))
    _refuse_async(spec, found)


def _refuse_async_methods(spec: MachineSpec, model_type: type) -> None:
    """``refuse_async_callbacks`` for the model class's ``on_enter_<state>`` and
    ``on_exit_<state>``: once per class, when its synchronous template is built (each
    ``getattr_static`` walks the class's MRO: on every entity's creation, it made binding
    a model cost some thirty times an entity of its own)."""
    _refuse_async(
        spec,
        [
            (f"the model's {which}{state}", inspect.getattr_static(model_type, which + state, None))
            for state in spec.states
            for which in ("on_enter_", "on_exit_")
        ],
    )


def _refuse_async(spec: MachineSpec, found: list[tuple[str, object]]) -> None:
    for what, callback in found:
        if callback is not None and is_async(callback):
            raise MachinesError(
                f"{spec.name}: {what} is an async function, which a synchronous entity "
                "would call without awaiting (it would never run): make it a plain function, "
                "or use spec.async_machine(...)"
            )


def dotted(spec: MachineSpec, name: str) -> object:
    """What a hook's dotted module path names (``package.module.function``), as the
    entity would call it: resolved now, so that a typo or an async function there fails
    before the entity exists rather than in the middle of a move (outsider batch 24: an
    async hook named by its path was called unawaited and never ran)."""
    module, _, attribute = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except Exception as error:
        raise MachinesError(
            f"{spec.name}: hook '{shown(name)}' names no function by its dotted module path "
            f"({type(error).__name__}: {message_of(error)}): check the module and the name"
        ) from None


def is_async(callback: object) -> bool:
    """An ``async def`` (a partial of one too), or an object whose ``__call__`` is one: what
    a caller that does not await would call without it running (the runtime's synchronous
    entities, the systems' plain-function arguments)."""
    if isinstance(callback, staticmethod | classmethod):
        callback = callback.__func__
    if inspect.iscoroutinefunction(callback):
        return True
    call = (
        None
        if inspect.isroutine(callback)
        else inspect.getattr_static(type(callback), "__call__", None)
    )
    return inspect.iscoroutinefunction(call)
