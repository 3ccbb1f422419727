"""What every store checks before it reads or writes: each method's arguments (the one
key rule, exact strings, a row as the store returned it, the bounds of ``due``) and the
context an entity is created and moved with.

Every public method of every store calls these first, the same functions on every store:
what one store refuses, every store refuses, with the same error, and nothing has changed
when it does (``Transaction`` lists the errors).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from machines.errors import ContextError, InvalidArgument
from machines.runtime.history import frozen_context
from machines.spec import MachineSpec
from machines.spec.jsonvalue import describe
from machines.spec.records import derived_variables
from machines.store.records import MAX_DUE, MAX_KEY_BYTES, Row, UnstorableData
from machines.store.stored_json import EMPTY


def text(value: object, what: str, machine: str | None = None) -> str:
    """``value`` as an exact ``str``: a subclass (a ``StrEnum``) becomes its text, so no
    method of it runs inside the store; anything else is ``InvalidArgument`` saying that
    ``what`` (of ``machine``) must be a str."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    where = "" if machine is None else f"{machine}: "
    raise InvalidArgument(f"{where}{what} must be a str, not a {type(value).__name__}")


def check_key(value: object, machine: str, what: str = "key") -> str:
    """The one key rule (keys, scopes, a ``due`` field): a non-empty ``str`` of at most
    ``MAX_KEY_BYTES`` bytes of UTF-8 with no NUL, which every store and database can hold
    and index; ``42`` and ``"42"`` are not one key anywhere."""
    key = value if type(value) is str else text(value, f"a {what}", machine)
    size = len(key) if key.isascii() else _utf8_size(key)
    if 0 < size <= MAX_KEY_BYTES and "\x00" not in key:
        return key
    if size < 0:
        problem = "is not valid UTF-8 (it holds a lone surrogate)"
    elif "\x00" in key:
        problem = "holds a NUL character"
    else:
        problem = f"is {size} bytes of UTF-8 (from 1 to {MAX_KEY_BYTES})"
    raise InvalidArgument(f"{machine}: the {what} {describe(key)} {problem}")


def _utf8_size(key: str) -> int:
    try:
        return len(key.encode())
    except UnicodeEncodeError:
        return -1


def spec_for(specs: Mapping[str, MachineSpec], machine: object) -> MachineSpec:
    """The spec of ``machine``; use its ``name`` (never the argument) in SQL."""
    spec = specs.get(text(machine, "a machine name"))
    if spec is None:
        raise InvalidArgument(
            f"this store has no machine {describe(machine)}; it has: {', '.join(sorted(specs))}"
        )
    return spec


def check_context(spec: MachineSpec, context: object) -> Mapping[str, str] | None:
    """``context`` as a read-only mapping of exact strs (None stays None), by the
    runtime's one rule (``history.frozen_context``); the spec judges the values."""
    return None if context is None else frozen_context(context, spec.name)


def check_insert(
    specs: Mapping[str, MachineSpec], machine: object, key: object, context: object, scope: object
) -> tuple[MachineSpec, str, Mapping[str, str], str | None]:
    """``Transaction.insert``'s arguments, checked: (spec, key, context, scope). The
    context must fit an entity being created (``creation_context``)."""
    spec = spec_for(specs, machine)
    key = check_key(key, spec.name)
    checked = creation_context(spec, check_context(spec, context) or EMPTY)
    return spec, key, checked, None if scope is None else check_key(scope, spec.name, "scope")


_MAPPINGS = (MappingProxyType, dict)  # what a row's data and context are, or are replaced by


def check_row(specs: Mapping[str, MachineSpec], row: object) -> MachineSpec:
    """The spec of ``row``, a ``Row`` as a store returned it: its machine, key, state and
    counters are of the types and names the store writes (a row made up for another
    machine, or of garbage, is refused before the spec is asked)."""
    if type(row) is not Row:
        raise InvalidArgument(
            f"a row must be a Row read from the store, not a {type(row).__name__}"
        )
    spec = spec_for(specs, row.machine)
    if (
        type(row.machine) is not str
        or type(row.key) is not str
        or type(row.state) is not str
        or row.state not in spec.states
        or type(row.version) is not int
        or type(row.moves) is not int
        or type(row.data) not in _MAPPINGS
        or type(row.context) not in _MAPPINGS
        or not all(type(k) is str and type(v) is str for k, v in row.context.items())
    ):
        raise InvalidArgument(
            f"{spec.name}: this Row is not one the store returned (the type of its key, "
            "version, moves, data or context, or its state, is not what the store writes); "
            "read the row with get()"
        )
    check_key(row.key, spec.name)
    return spec


def check_move(
    specs: Mapping[str, MachineSpec],
    row: object,
    trigger: object,
    actor: object,
    context: object,
    detail: object,
    data: object,
) -> tuple[str, str, Mapping[str, str] | None]:
    """``Transaction.move``'s arguments, checked: (trigger, actor, context). ``detail``
    and ``data`` must be mappings or None here; ``encode`` judges their values."""
    spec = check_row(specs, row)
    trigger = text(trigger, "a trigger", spec.name)
    actor = text(actor, "an actor", spec.name)
    checked = check_context(spec, context)
    if detail is not None and not isinstance(detail, Mapping):
        raise _not_a_mapping(spec, row, "detail", detail)
    if data is not None and not isinstance(data, Mapping):
        raise _not_a_mapping(spec, row, "data", data)
    return trigger, actor, checked


def check_update(specs: Mapping[str, MachineSpec], row: object, data: object) -> MachineSpec:
    """``Transaction.update``'s arguments, checked: the new ``data`` must be a mapping."""
    spec = check_row(specs, row)
    if not isinstance(data, Mapping):
        raise _not_a_mapping(spec, row, "data", data)
    return spec


def _not_a_mapping(spec: MachineSpec, row: object, column: str, value: object) -> UnstorableData:
    key = row.key if isinstance(row, Row) else "?"
    return UnstorableData(
        f"{spec.name} {describe(key)}: {column} must be a mapping (a JSON object), not a "
        f"{type(value).__name__}"
    )


def check_due(
    spec: MachineSpec, state: object, field: object, before: object, limit: object
) -> tuple[str, str, float, int]:
    """``Transaction.due``'s arguments, checked: (state, field, before, limit)."""
    state = text(state, "a state", spec.name)
    if state not in spec.states:
        raise InvalidArgument(
            f"{describe(state)} is not a state of machine '{spec.name}'; states: "
            f"{', '.join(spec.states)}"
        )
    field = check_key(field, spec.name, "field")
    if type(before) is not float and type(before) is not int:  # not a bool, nor a subclass
        raise InvalidArgument(
            f"{spec.name}: before must be an int or a float, not a {type(before).__name__}"
        )
    try:
        bound = float(before)
    except OverflowError:
        raise InvalidArgument(f"{spec.name}: before is too large for a float") from None
    if math.isnan(bound):
        raise InvalidArgument(f"{spec.name}: before must be a number, not NaN")
    if type(limit) is not int or not 0 < limit <= MAX_DUE:
        raise InvalidArgument(
            f"{spec.name}: limit must be an int from 1 to {MAX_DUE}, not {describe(limit)}"
        )
    return state, field, bound, limit


def creation_context(spec: MachineSpec, given: Mapping[str, str]) -> Mapping[str, str]:
    """``given`` (a context of strings, ``check_context``) when it fits an entity being
    created: a value the spec admits for every fixed variable and nothing else (a derived
    variable is given per move, never stored); ``ContextError`` otherwise. The guards of
    every later move are judged against it."""
    if not given and not spec.context:
        return given
    spec.stepper(**given)  # unknown variables and refused values
    derived = derived_variables(spec)
    stored = sorted(derived.intersection(given))
    if stored:
        raise ContextError(
            f"{spec.name}: {', '.join(stored)} is derived for each move, not stored when an "
            "entity is created; leave it out"
        )
    missing = [v for v in spec.context if v not in derived and v not in given]
    if missing:
        raise ContextError(
            f"{spec.name}: an entity is created with a value for each fixed context variable; "
            f"missing: {', '.join(missing)}"
        )
    return given


def decide_move(
    specs: Mapping[str, MachineSpec],
    row: Row,
    trigger: str,
    actor: str,
    context: Mapping[str, str] | None,
) -> tuple[str, Mapping[str, str]]:
    """The destination and full context of a move, decided by the spec against the
    entity's stored context; raises ``InvalidStateTransition`` / ``ContextError`` exactly
    as ``spec.step`` does. ``context`` may give the derived variables (computed per move);
    a fixed variable it gives must equal the stored value (a ``ContextError`` names it), so
    that no caller can judge a move under a context the entity was not created with."""
    spec = spec_for(specs, row.machine)
    if context is None:
        return spec.step(row.state, trigger, actor=actor, **row.context), row.context
    derived = derived_variables(spec)
    for var, value in (check_context(spec, context) or {}).items():
        if var not in derived and var in spec.context and row.context.get(var) != value:
            raise ContextError(
                f"{spec.name} '{row.key}': context variable '{var}' is fixed when the entity "
                f"is created ({var}={row.context.get(var)!r}); a move cannot give it another "
                f"value ({describe(value)})"
            )
    full = MappingProxyType({**row.context, **context})
    return spec.step(row.state, trigger, actor=actor, **full), full


def specs_by_name(specs: object) -> dict[str, MachineSpec]:
    """The specs a store is opened (or migrated) for, by name: an iterable of loaded
    ``MachineSpec``s or a mapping of each one's own name to it, each name once (the tables
    are named after it); anything else is ``InvalidArgument``."""
    if isinstance(specs, str | bytes) or not isinstance(specs, Mapping | Iterable):
        raise InvalidArgument(
            f"specs must be loaded MachineSpecs (a list, or a mapping by name), not a "
            f"{type(specs).__name__}"
        )
    try:
        pairs = list(specs.items()) if isinstance(specs, Mapping) else [(None, s) for s in specs]
    except Exception as exc:
        raise InvalidArgument(f"reading specs raised {type(exc).__name__}") from None
    by_name: dict[str, MachineSpec] = {}
    for name, spec in pairs:
        if not isinstance(spec, MachineSpec):
            raise InvalidArgument(f"specs must be loaded MachineSpecs, not a {type(spec).__name__}")
        if name is not None and (type(name) is not str or name != spec.name):
            raise InvalidArgument(
                f"specs maps {describe(name)} to machine '{spec.name}'; map each spec's own name"
            )
        if by_name.setdefault(spec.name, spec) is not spec:
            raise InvalidArgument(f"specs hold two different machines named '{spec.name}'")
    return by_name


MAX_PAGE = 1000
"""The most rows ``Transaction.in_states`` returns at once."""
MAX_OFFSET = 2**31 - 1
"""The most rows ``Transaction.in_states`` skips: more than any store holds in one state."""


def check_page(
    spec: MachineSpec, states: object, limit: object, offset: object
) -> tuple[tuple[str, ...], int, int]:
    """``Transaction.in_states``' arguments, checked: (states, limit, offset)."""
    if isinstance(states, str) or not isinstance(states, list | tuple | frozenset | set):
        raise InvalidArgument(
            f"{spec.name}: states must be a list of state names, not {describe(states)}"
        )
    names = []
    for state in states:
        state = text(state, "a state", spec.name)
        if state not in spec.states:
            raise InvalidArgument(
                f"{describe(state)} is not a state of machine '{spec.name}'; states: "
                f"{', '.join(spec.states)}"
            )
        names.append(state)
    if type(limit) is not int or not 0 < limit <= MAX_PAGE:
        raise InvalidArgument(
            f"{spec.name}: limit must be an int from 1 to {MAX_PAGE}, not {describe(limit)}"
        )
    if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:
        raise InvalidArgument(
            f"{spec.name}: offset must be an int from 0 to {MAX_OFFSET}, not {describe(offset)}"
        )
    return tuple(sorted(set(names))), limit, offset


def sqlite_path(url: str) -> str:
    """The file a ``sqlite:///PATH`` URL names, for every store and command that opens
    one; ``InvalidArgument`` for no path, ``:memory:`` (a database per connection, neither
    kept nor shared) and a SQLite URI (``file:...``: a build with ``SQLITE_USE_URI`` reads
    its options, which can keep nothing, ``mode=memory``, or switch off the locks that keep
    two writers apart, ``nolock=1``; outsider batches 35 and 36, a)."""
    path = url[len("sqlite:///") :]
    if not path:
        raise InvalidArgument("sqlite:/// needs a file path, e.g. sqlite:///effects.db")
    if path[:5].lower() == "file:":
        raise InvalidArgument(
            f"sqlite:///{path[:40]}... is a SQLite URI (file:...), whose options can keep "
            "nothing (mode=memory) or switch off the locks that keep two writers apart "
            "(nolock=1); give a plain file path"
        )
    if path == ":memory:":
        raise InvalidArgument(
            "sqlite:///:memory: is a database per connection, neither kept nor shared "
            "between threads (a second thread would find no tables); use memory:// for a "
            "store in this process, or a file path"
        )
    return path
