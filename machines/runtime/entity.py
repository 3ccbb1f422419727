"""Entity machines: one object per entity, on the ``transitions`` library.

Why the shape: a ``transitions.Machine`` costs ~20 KB and ``add_model`` rescans its model
list (quadratic in the number of entities). So every entity of one spec and one model
class shares a single *template* machine (``machines.runtime.templates``); an entity fires
the template's events with its own model (``templates.fire``) and never registers with it.
Nothing is injected into user models (no ``is_*``/``to_*`` methods): triggers are called
through the entity machine.

Every move is decided by the spec's compiled table first (``MachineSpec.stepper`` /
``step``), so a refusal never reaches ``transitions`` and leaves the state unchanged.

State and history change as one act. Everything a move needs is checked before anything
changes: the trigger, actor and context (by the table), the detail (a JSON object) and the
time (the clock is read and checked then). The history event is then complete, and it is
appended when the destination state is entered (a ``State`` subclass): right after the
state is set and before any ``on_enter`` or ``after`` callback, by an append that cannot
fail. So a callback that raises in ``prepare``, ``before`` or ``on_exit`` leaves both
unchanged; one that raises in ``on_enter`` or ``after`` leaves both changed (its exception
propagates); triggers fired from callbacks are recorded in the order they happen.
"""

from __future__ import annotations

import _thread
import abc
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, cast

from transitions import MachineError

from machines.errors import ContextError, InvalidStateTransition, MachinesError, UnknownName
from machines.runtime.binding import Gate, bind
from machines.runtime.history import (
    Clock,
    History,
    HistoryView,
    Record,
    checked_clock,
    frozen_detail,
)
from machines.runtime.templates import Hooks as Hooks
from machines.runtime.templates import check_hook_names, fire, refuse_async_callbacks, template
from machines.spec.jsonvalue import describe
from machines.spec.records import derived_variables
from machines.spec.routing import plain, shown, suggest

if TYPE_CHECKING:
    from machines.spec import MachineSpec


class _NoActor(str):
    """The default of ``actor=``: a call that names no actor is refused with a
    ``MachinesError`` (never Python's own ``TypeError``)."""

    __slots__ = ()


NO_ACTOR: str = _NoActor("")


class EntityBase(abc.ABC):
    """What the sync and async entity machines share: binding, state, history, decisions."""

    __slots__ = (
        "__weakref__",
        "_attr",
        "_born",
        "_changing",
        "_clock",
        "_context",
        "_entity_id",
        "_events",
        "_gate",
        "_history",
        "_model",
        "_pending",
        "_spec",
        "_state",
        "_stepper",
        "_template",
    )
    _asynchronous: ClassVar[bool] = False

    def __init__(
        self,
        spec: MachineSpec,
        model: object | None = None,
        *,
        state: str | None = None,
        state_attr: str = "state",
        entity_id: str | None = None,
        clock: Clock = time.time,
        hooks: Hooks | None = None,
        **context: str,
    ) -> None:
        """Check every option before anything is set: a refusal (``MachinesError``)
        leaves the model untouched. The common case (no model, a string id) is inlined."""
        self._spec = spec
        self._stepper = spec.stepper(**context)
        self._context = self._stepper.context
        self._clock = checked_clock(clock, spec.name)
        if hooks is not None and not isinstance(hooks, Hooks):
            raise MachinesError(
                f"{spec.name}: hooks must be a machines.runtime.Hooks, not {type(hooks).__name__}"
            )
        own = model is None
        if own:  # the entity keeps its state itself, in a private slot
            if state_attr.__class__ is not str or state_attr != "state":
                raise MachinesError(
                    f"{spec.name}: state_attr is for a model of your own; pass model=..."
                )
            model, state_attr = self, "_state"
            current = spec.initial if state is None else _start_state(spec, None, "", state)[0]
        elif type(state_attr) is str and state_attr.isidentifier() and state_attr[:2] != "__":
            current, held = _start_state(spec, model, state_attr, state)
        else:
            raise MachinesError(
                f"{spec.name}: state_attr must name an attribute of the model (such as "
                f"'status'), not {describe(state_attr)}"
            )
        if entity_id.__class__ is not str or not entity_id:
            entity_id = _entity_id(spec, None if own else model, entity_id)
        if hooks is not None:
            check_hook_names(spec, hooks, model)
        if not self._asynchronous:
            refuse_async_callbacks(spec, hooks, None if own else model)
        self._entity_id = entity_id
        self._model = model
        self._attr = state_attr
        self._history: History | None = None  # created on first use: most entities are idle
        self._born = current  # where the history starts, until it has a move
        self._template = template(
            spec, type(model), state_attr, hooks, self._asynchronous, model_callbacks=not own
        )
        self._events = self._template.events
        self._pending: Record | None = None
        self._changing = False
        self._gate: Gate | None = None  # an entity of its own state locks by itself
        if own:
            self._state: str = current
            return
        self._gate, shared = bind(
            self, model, state_attr, spec.name, self._context, asynchronous=self._asynchronous
        )
        if shared and held:
            return  # another live entity's state: written by moves only, never by binding
        try:
            setattr(model, state_attr, current)
        except Exception as exc:
            raise MachinesError(
                f"{spec.name}: the model (a {type(model).__name__}) cannot hold its state in "
                f"'{state_attr}' ({type(exc).__name__}); pass a model whose attribute can be set"
            ) from None

    # -- what an entity exposes ---------------------------------------------------------

    @property
    def spec(self) -> MachineSpec:
        return self._spec

    @property
    def model(self) -> object:
        """The bound model: yours, or the entity itself when you passed none."""
        return self._model

    @property
    def state(self) -> str:
        current = self._source()
        text = plain(current)
        if text is None:
            raise MachinesError(
                f"{self._spec.name}: the model's {self._attr} holds a "
                f"{type(current).__name__}, not a state name"
            )
        return text

    @property
    def entity_id(self) -> str:
        return self._entity_id

    @property
    def context(self) -> Mapping[str, str]:
        return self._context

    @property
    def history(self) -> HistoryView:
        """Every state change of this entity, oldest first; read-only."""
        return self._recorder().view()

    def can(self, trigger: str, *, actor: str = NO_ACTOR, **context: str) -> bool:
        """Whether ``trigger`` by ``actor`` would be accepted now (nothing changes). A
        mistake is not a "no": a bad context still raises ``ContextError``, and a trigger,
        actor or current state that is not a string ``InvalidStateTransition``."""
        try:
            self._decide(trigger, actor, context)
        except InvalidStateTransition:
            names = (trigger, actor, getattr(self._model, self._attr, None))
            if actor is not NO_ACTOR and all(isinstance(name, str) for name in names):
                return False
            raise
        return True

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """``m.execute(actor="proxy")`` is ``m.trigger("execute", actor="proxy")``."""
        spec = object.__getattribute__(self, "_spec")
        if name in spec.triggers:
            return partial(self.trigger, name)
        raise AttributeError(
            f"{type(self).__name__} of '{spec.name}' has no attribute or trigger '{name}'"
            f"{suggest(name, sorted(spec.triggers))}"
        )

    def __repr__(self) -> str:
        state = shown(getattr(self._model, self._attr, None))
        return f"<{type(self).__name__} {self._spec.name} {self.entity_id} in '{state}'>"

    @abc.abstractmethod
    def trigger(
        self,
        name: str,
        *,
        actor: str = NO_ACTOR,
        detail: Mapping[str, Any] | None = None,
        **context: str,
    ) -> Any:
        """Fire ``name`` as ``actor`` (see the two subclasses)."""

    # -- internals ----------------------------------------------------------------------

    def _source(self) -> Any:
        """The model's state as it holds it; a model whose attribute raises is a
        ``MachinesError`` (as when the entity is made), and nothing moves."""
        try:
            return getattr(self._model, self._attr)
        except Exception as exc:
            raise MachinesError(
                f"{self._spec.name}: reading the model's {self._attr} raised "
                f"{type(exc).__name__}; nothing moved"
            ) from exc

    def _decide(
        self, trigger: str, actor: str, context: Mapping[str, str]
    ) -> tuple[str, str, Mapping[str, str]]:
        source = self._source()
        if actor is NO_ACTOR:
            raise self._no_actor(source, trigger)
        if self._changing:
            raise InvalidStateTransition(
                self._spec.name,
                shown(source),
                trigger=shown(trigger),
                actor=shown(actor),
                reason="another transition of this entity is under way (fired from a prepare "
                "or before callback); fire it from an on_enter or after callback instead",
            )
        self._continues(self._last_entered(), source, trigger, actor)
        if context:
            self._keep_fixed(context)
            # the bound values judge the move: a value given for a fixed variable only
            # repeats one (as its exact text), and its object may compare as it likes
            derived = derived_variables(self._spec)
            fixed = {
                k: v
                for k, v in self._context.items()
                if k not in derived and plain(context.get(k, v)) is not None
            }  # garbage given for one is left for spec.step to name
            merged = MappingProxyType({**self._context, **context, **fixed})
            return source, self._spec.step(source, trigger, actor=actor, **merged), merged
        return source, self._stepper(source, trigger, actor), self._context

    def _last_entered(self) -> str:
        """The state this entity last entered: its history's last, or the one it was made
        in while it has none."""
        history = self._history
        return history._records[-1][1] if history is not None and history._records else self._born

    def _continues(self, entered: str, source: object, trigger: str, actor: str) -> None:
        """A move starts where this entity's history ends (where it was made, before its
        first move): a model whose state was set outside the entity (a stale row reloaded,
        other code) would otherwise move from a state the entity never reached, out of a
        terminal one included (outsider batch 24: a committed charge set back to pending was
        executed again; batch 25: the same before the first move)."""
        text = plain(source)
        if text is None or text == entered:
            return  # a state that is no text is named by spec.step
        raise InvalidStateTransition(
            self._spec.name,
            shown(source),
            trigger=shown(trigger),
            actor=shown(actor),
            reason=f"the model's {self._attr} was set outside this entity, which is in "
            f"'{shown(entered)}'; nothing moved. Bind a new entity to the model to start "
            "from what it holds now",
        )

    def _no_actor(self, source: object, trigger: object) -> InvalidStateTransition:
        return InvalidStateTransition(
            self._spec.name,
            shown(source),
            trigger=shown(trigger),
            reason="no actor was given: every move names who makes it "
            f"(trigger({shown(trigger)!r}, actor=...); actors: {', '.join(self._spec.actors)})",
        )

    def _keep_fixed(self, context: Mapping[str, object]) -> None:
        """One context per entity, as in the stores: a move may give a derived variable
        (a request's ``side_effects``); a fixed one only repeats the value bound when the
        entity was made, or ``ContextError`` (a move judged under another context would
        pass a guard the entity does not)."""
        derived = derived_variables(self._spec)
        for var, value in context.items():
            if var in derived or var not in self._spec.context or plain(value) is None:
                continue  # not fixed, or garbage that spec.step names precisely
            bound, given = self._context.get(var), plain(value)
            if bound is None or not str.__eq__(bound, given):
                where = f"{self._spec.name} entity '{shown(self._entity_id)}'"
                raise ContextError(
                    f"{where}: context variable '{var}' is fixed when the entity is made "
                    + (
                        f"({var}={bound!r}); a move cannot give it another value ({given!r})"
                        if bound is not None
                        else f"and it was not bound; bind it there: spec.machine({var}=...)"
                    )
                )

    def _begin(
        self,
        trigger: str,
        actor: str,
        detail: Mapping[str, Any] | None,
        context: Mapping[str, str],
    ) -> tuple[dict[str, Any], str]:
        """Decide the move, check its detail, read the clock, and mark the complete event
        pending; return transitions' kwargs and the dest."""
        source, dest, ctx = self._decide(trigger, actor, context)
        frozen = None if detail is None else self._frozen(trigger, detail)
        self._pending = (source, dest, trigger, actor, frozen, ctx, self._clock())
        self._changing = True
        return {"actor": actor, "detail": detail, "machine": self}, dest

    def _frozen(self, trigger: str, detail: object) -> Mapping[str, Any]:
        return frozen_detail(
            detail,
            f"{self._spec.name} entity '{shown(self._entity_id)}': the detail of '{trigger}'",
        )

    def _entered(self) -> None:
        """The state just changed (the template says so): append the pending event,
        checked and stamped before the move began, so this cannot fail; then allow nested
        triggers (from on_enter and after callbacks)."""
        pending = self._pending
        assert pending is not None, "a state was entered outside a trigger"
        (self._history or self._recorder())._append(pending)
        self._changing = False

    def _recorder(self) -> History:
        history = self._history
        if history is None:
            history = self._history = History(self._spec.name, self._entity_id, self._clock)
        return history

    def _changed_under(self, trigger: str, actor: str, source: object) -> InvalidStateTransition:
        """transitions refused the move it was handed: the model's state read otherwise
        when it looked again (a property that changes between two reads). Nothing moved."""
        return InvalidStateTransition(
            self._spec.name,
            shown(source),
            trigger=shown(trigger),
            actor=shown(actor),
            reason=f"the model's {self._attr} changed while the move was being made; nothing moved",
        )

    def _not_applied(self, trigger: str) -> MachinesError:
        return MachinesError(
            f"{self._spec.name}: transitions did not apply '{trigger}' although the spec "
            "allowed it; this is a bug in machines, please report it"
        )


def _start_state(
    spec: MachineSpec, model: object | None, attr: str, state: object
) -> tuple[str, bool]:
    """Where an entity starts: the model's own state, else ``state``, else the initial one;
    each checked to be a state name before it is compared or shown. With whether the
    model held it."""
    try:
        current = getattr(model, attr, None) if model is not None else None
    except Exception as exc:
        raise MachinesError(
            f"{spec.name}: reading the model's {attr} raised {type(exc).__name__}"
        ) from None
    for what, value in ((f"the model's {attr}", current), ("state=", state)):
        if value is not None and (plain(value) is None or plain(value) not in spec.states):
            raise UnknownName(
                f"{spec.name}: {what} {describe(value)} is not a state"
                f"{suggest(plain(value), spec.states)}; states: {', '.join(spec.states)}"
            )
    own, given = plain(current), plain(state)
    if own is not None and given is not None and own != given:
        raise MachinesError(
            f"{spec.name}: the model's {attr} is '{own}' but state='{given}' "
            "was passed; pass one or the other"
        )
    if own is not None:
        return cast(str, current), True  # the model's own object (a StrEnum member stays one)
    return given or spec.initial, False


def _entity_id(spec: MachineSpec, model: object | None, entity_id: object) -> str:
    """``entity_id`` (a non-empty string), else the text of the model's ``id``, else a
    fresh random id (``model`` is ``None`` for an entity without a model of its own)."""
    if entity_id is not None:
        text = plain(entity_id)
        if not text:
            raise MachinesError(
                f"{spec.name}: entity_id must be a non-empty string, not {describe(entity_id)}"
            )
        return text
    try:
        own = getattr(model, "id", None) if model is not None else None
        return str(own) if own is not None else uuid.uuid4().hex
    except Exception as exc:
        raise MachinesError(
            f"{spec.name}: the model's id cannot name the entity ({type(exc).__name__}); "
            "pass entity_id=..."
        ) from None


class EntityMachine(EntityBase):
    """One entity's lifecycle for synchronous code. Build it with ``spec.machine(...)``.

    Thread-safe: one re-entrant lock per entity serialises decide, move and record, so
    concurrent triggers on one entity never lose or duplicate a history event. Entities
    bound to one model's state share that lock (``machines.runtime.binding``).
    """

    __slots__ = ("_lock",)

    def __init__(self, spec: MachineSpec, model: object | None = None, **options: Any) -> None:
        super().__init__(spec, model, **options)
        gate = self._gate
        # the C lock threading.RLock wraps, without the wrapper
        self._lock = gate.lock if gate is not None else _thread.RLock()

    def trigger(
        self,
        name: str,
        *,
        actor: str = NO_ACTOR,
        detail: Mapping[str, Any] | None = None,
        **context: str,
    ) -> str:
        """Fire ``name`` as ``actor``; return the new state.

        Raises ``InvalidStateTransition`` (state and history unchanged) when the spec refuses
        the move or a name is not a string, ``ContextError`` for bad context,
        ``UnstorableValue`` for a ``detail`` that is not a JSON object, ``MachinesError``
        for a clock that fails: all before anything changes. ``detail`` is stored, as a
        read-only copy, with the history event; callbacks receive it as passed. Extra
        keywords give context for this move: a derived variable (a request's
        ``side_effects``) may take any admitted value; a fixed one may only repeat the
        value bound when the entity was made (``ContextError`` otherwise).
        """
        with self._lock:
            outer = self._pending  # set when fired from a callback of another move
            if context or self._changing or actor is NO_ACTOR:
                source, dest, ctx = self._decide(name, actor, context)
            else:  # the common case, inlined: the bound context's precomputed table
                source = self._source()
                entered = self._last_entered()
                if type(source) is not str or source != entered:
                    self._continues(entered, source, name, actor)
                dest = self._stepper(source, name, actor)
                ctx = self._context
            frozen = None if detail is None else self._frozen(name, detail)
            self._pending = (source, dest, name, actor, frozen, ctx, self._clock())
            self._changing = True
            try:
                done = fire(
                    self._events[name],
                    self._model,
                    {"actor": actor, "detail": detail, "machine": self},
                )
            except MachineError:
                raise self._changed_under(name, actor, source) from None
            finally:
                self._pending = outer
                self._changing = False
            if not done:
                raise self._not_applied(name)
            return dest
