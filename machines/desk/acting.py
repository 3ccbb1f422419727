"""A person's move, made through the same path as any other.

On a machine a reference system runs (the outcome of ``ExactlyOnce``, the effect of the
``EffectLog``, a transfer's request and nodes), the desk acts through the system's own call
(``decide``, ``approve``, ``confirm_failed``...), which writes what the system keeps beside
the move (a decided result, a cleared lease): a bare move would leave that data behind. The
system is used only when it accepts the store's definition (``machines.systems.reliance``);
on any other machine the move is a plain ``Store.move``. Either way the store, and the
database under it, judges the move, and its history records the actor the person acted as
and their name (``by``) and reason.

A page is acted on as it was read: the entity's version when the page was shown comes with
the move (a transfer's request: its request's and nodes' together, ``page_version``), and
a newer version refuses it (``DeskError``), so two people deciding one entity
get one winner and a message for the other. The system's call carries the same version
(``seen=``) and checks it in its own write transaction: the system may move the entity
after the desk's check, and the decision must not land on what it became.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from machines.desk.waiting import (
    DeskChanged,
    DeskError,
    DeskForbidden,
    DeskNotFound,
    DeskNotNow,
    Move,
    moves_for,
    page_version,
)
from machines.errors import InvalidArgument, MachinesError
from machines.spec import MachineSpec
from machines.spec.jsonvalue import UnstorableValue, describe, encodable
from machines.spec.routing import suggest
from machines.spec.states import RequestState
from machines.spec.visible import says_something
from machines.store.records import Row, Store

RESULT_MOVE = ("outcome", "decide_landed")
"""The one move that records a result a person gives; with any other it is refused."""
MAX_REASON = 2000
"""The longest reason a person may give (characters)."""


@dataclass(frozen=True)
class Decision:
    """What a person asks: a move on one entity as read at ``version``, as ``actor``, with
    their reason (and, for a decided outcome, the result that landed, as JSON text)."""

    machine: str
    key: str
    version: int
    trigger: str
    actor: str
    person: str
    reason: str
    result: str = ""
    gate: str = ""


Route = Callable[[Store, Row, Decision], None]


def _exactly_once(store: Store, row: Row, d: Decision) -> None:
    from machines.systems import ExactlyOnce

    system = ExactlyOnce(store)
    if d.trigger == "reclaim":
        system.reclaim(row.key, by=d.person, reason=d.reason, seen=d.version)
    else:
        landed = d.trigger == "decide_landed"
        system.decide(
            row.key,
            landed=landed,
            by=d.person,
            reason=d.reason,
            result=_result(d) if landed else None,
            seen=d.version,
        )


def _effect_log(store: Store, row: Row, d: Decision) -> None:
    from machines.systems import EffectLog

    system = EffectLog(store)
    (system.approve if d.trigger == "approve" else system.reject)(
        row.key, by=d.person, reason=d.reason, seen=d.version
    )


def _request(store: Store, row: Row, d: Decision) -> None:
    engine = _engine(store)
    if d.gate:
        engine.complete_manual(
            row.key, d.gate, by=d.person, drive=False, seen=d.version, reason=d.reason
        )
    elif d.trigger in ("confirm_failed", "confirm_completed"):
        getattr(engine, d.trigger)(row.key, by=d.person, evidence=d.reason, seen=d.version)
    else:
        getattr(engine, d.trigger)(row.key, by=d.person, reason=d.reason, seen=d.version)


def _node(store: Store, row: Row, d: Decision) -> None:
    from machines.systems.transfer.plans import node_name

    engine = _engine(store)
    request = row.scope or row.key.partition("/")[0]
    engine.refuse_signature(
        request, node_name(row.key), by=d.person, reason=d.reason, seen=d.version
    )


ROUTES: Mapping[tuple[str, str], tuple[Route, str]] = {
    ("outcome", "reclaim"): (_exactly_once, "caller"),
    ("outcome", "decide_landed"): (_exactly_once, "operator"),
    ("outcome", "decide_not_landed"): (_exactly_once, "operator"),
    ("effect", "approve"): (_effect_log, "human"),
    ("effect", "reject"): (_effect_log, "human"),
    **{
        ("request", t): (_request, "operator")
        for t in ("approve", "reject", "cancel", "resume", "confirm_failed", "confirm_completed")
    },
    ("node", "fail"): (_node, "signer"),
}
"""The moves a reference system makes for a person, by (machine, trigger): its call, and
the actor the call writes the move as (only that actor is offered: a definition that lets
another actor make the same move would otherwise record the person as one they are not).
A node's ``sign`` is not among them: the engine sends the transaction in the same call,
which takes the executor the desk does not have; a signature comes through the service's
engine (``TransferEngine.sign``), a refusal may come from the desk."""


SYSTEMS: Mapping[str, str] = {
    "outcome": "ExactlyOnce",
    "effect": "EffectLog",
    "request": "TransferEngine",
    "node": "TransferEngine",
}
"""The reference system that runs each bundled machine; any other machine is the store's."""


def _system_runs(store: Store, machine: str) -> bool:
    """Whether the reference system of ``machine`` accepts the store's definition of it."""
    from machines.systems.reliance import require_reliable

    system = SYSTEMS.get(machine)
    if system is None:
        return False
    try:
        require_reliable(store.specs(), machine, system)
    except InvalidArgument:
        return False
    return True


def offered(store: Store, row: Row, roles: Collection[str]) -> list[Move]:
    """The moves a person with ``roles`` may make on ``row`` from the desk: those the
    definition admits under the context its system judges by (a transfer request's
    ``side_effects`` derived from its nodes), and, where the reference system runs the
    machine, only those it makes (a lone node's ``cancel`` is part of cancelling its
    request). A transfer waiting on a manual action resumes by the gate whose action the
    person did, one move per gate ready: the engine records it on the gate and the
    service's engine drives the gate on."""
    spec = store.specs()[row.machine]
    system = _system_runs(store, row.machine)
    context = row.context
    if system and row.machine == "request":
        # A plan that cannot be read derives nothing: offer what needs no derived value.
        with contextlib.suppress(MachinesError):
            context = _engine(store).guard_context(row.key)
    moves = moves_for(spec, row, roles, context)
    if not system:
        return moves
    out = []
    for m in moves:
        route = ROUTES.get((row.machine, m.trigger))
        if route is None or route[1] != m.actor:
            continue
        waits_on_gate = row.state == RequestState.WAITING_MANUAL_ACTION
        if row.machine == "request" and m.trigger == "resume" and waits_on_gate:
            out += [
                Move(m.trigger, m.actor, m.dest, f"You did the manual action of {gate}.", gate)
                for gate in _engine(store).ready_gates(row.key)
            ]
        else:
            out.append(m)
    return out


def _engine(store: Store) -> Any:
    """The transfer engine's calls over ``store``, without executors: the desk records what
    a person did, and the service's own engine drives the nodes."""
    from machines.systems import TransferEngine

    return TransferEngine(store, {})


def _result(d: Decision) -> Any:
    if not d.result.strip():
        return None
    try:
        return person_json(d.result)
    except DeskError as why:
        raise DeskError(
            f'the result must be JSON (a number, "text", an object...), or empty: {why}'
        ) from None


class _Refused(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Refused(f"it gives the key {describe(key)} twice")
        found[key] = value
    return found


def _exact(text: str) -> float:
    number = float(text)
    if not math.isfinite(number) or Decimal(repr(number)) != Decimal(text):
        raise _Refused(f"its number {text[:40]} would be kept as {number!r}")
    return number


def _no_constant(text: str) -> float:
    raise _Refused(f"{text} is not JSON")


def person_json(text: str | bytes) -> object:
    """What a person sent as JSON (a body, a form's result), read so that nothing they
    wrote is silently changed: a key given twice (the last would decide; outsider batch 34,
    b 18: the form stored ``{"id": "tx-real", "id": "tx-typo"}`` as ``tx-typo``), a number
    with more digits than a float keeps, NaN or Infinity is a ``DeskError`` naming it."""
    try:
        return json.loads(
            text, object_pairs_hook=_unique, parse_float=_exact, parse_constant=_no_constant
        )
    except _Refused as why:
        raise DeskError(str(why)) from None
    except (ValueError, RecursionError):
        raise DeskError("it is not JSON") from None


def act(store: Store, d: Decision, roles: frozenset[str]) -> Row:
    """Make the move ``d`` asks for, if the definition lets one of ``roles`` make it on the
    entity as it was read; the entity's row afterwards."""
    specs = store.specs()
    if d.machine not in specs:
        raise DeskNotFound(f"no machine {d.machine!r} in this store")
    reason = d.reason.strip()
    if not says_something(reason):
        raise DeskError(
            "give a reason, with a letter or a digit in it: the history keeps it with your name"
        )
    if len(reason) > MAX_REASON or "\x00" in reason:
        raise DeskError(f"a reason has at most {MAX_REASON} characters and no NUL")
    if not encodable(reason):
        raise DeskError("a reason holds a lone surrogate, which no store keeps")
    d = dataclasses.replace(d, reason=reason)
    if d.result.strip() and (d.machine, d.trigger) != RESULT_MOVE:
        raise DeskError(
            f"a result goes only with deciding that an outcome landed ({RESULT_MOVE[0]}'s "
            f"{RESULT_MOVE[1]}, which records it); {d.machine}'s {d.trigger} would drop it: "
            "leave the result out"
        )
    with store.transaction() as tx:
        row = tx.get(d.machine, d.key)
        read = None if row is None else page_version(specs, tx, row)
    if row is None:
        raise DeskNotFound(f"no {d.machine} {d.key!r} in this store")
    never = _never_allowed(specs[d.machine], d, roles)  # whatever the version (batch 46, b 15)
    if never is not None:
        raise never
    if read != d.version:
        raise _changed(d, row, read)
    allowed = {(m.trigger, m.actor, m.gate) for m in offered(store, row, roles)}
    if (d.trigger, d.actor, d.gate) not in allowed:
        raise DeskNotNow(
            f"you may not {_moving(d)} in {row.state}: the definition does not let that move "
            "be made from there now; look at the entity again"
        )
    route = ROUTES.get((d.machine, d.trigger))
    try:
        if route is not None and _system_runs(store, d.machine):
            route[0](store, row, d)
        else:
            store.move(row, d.trigger, actor=d.actor, detail={"by": d.person, "reason": reason})
    except MachinesError:
        with store.transaction() as tx:
            now = tx.get(d.machine, d.key)
            moved = now is not None and page_version(specs, tx, now) != read
        if now is not None and moved:  # someone acted first
            raise _changed(d, now) from None
        raise
    with store.transaction() as tx:
        after = tx.get(d.machine, d.key)
    assert after is not None
    return after


def _never_allowed(spec: MachineSpec, d: Decision, roles: frozenset[str]) -> DeskError | None:
    """Why the desk will never make move ``d``, by its status (outsider batch 45, b 32: a
    misspelt trigger and a move the state refuses were both "your roles may not"), or
    None: a trigger or actor the definition lacks is the request's fault (400); an actor
    that is none of the person's roles, or a move the definition gives that actor nowhere
    (batch 46, b 21: "look at the entity again", for a move that can never be made), is
    the person's (403). A move of their role that the entity's state refuses now is the
    entity's (409, ``DeskNotNow``)."""
    named = (("trigger", d.trigger, spec.triggers), ("actor", d.actor, spec.actors))
    for what, name, known in named:
        if name not in known:
            return DeskError(f"{d.machine} has no {what} {name!r}{suggest(name, sorted(known))}")
    if d.actor not in roles:
        return DeskForbidden(
            f"you may not {_moving(d)}: {d.actor} is none of your roles "
            f"({', '.join(sorted(roles))})"
        )
    if not any(t.trigger == d.trigger and d.actor in t.actors for t in spec.transitions):
        return DeskForbidden(
            f"you may not {_moving(d)}: the definition lets {d.actor} make {d.trigger} from "
            "no state"
        )
    return None


def _moving(d: Decision) -> str:
    return f"{d.trigger} {d.machine} {d.key!r} as {d.actor}" + (
        f" by gate {d.gate!r}" if d.gate else ""
    )


def _changed(d: Decision, now: Row, read: int | None = None) -> DeskError:
    if read is not None and d.version > read:  # batch 46, b 16: "changed since", of a future
        return DeskChanged(
            f"{d.machine} {d.key!r} is at version {read}, and version {d.version} is none it "
            f"has had; it is {now.state}: look at it again"
        )
    return DeskChanged(
        f"{d.machine} {d.key!r} changed since the page was shown: it is now {now.state} "
        "(someone else acted, or its system moved it); look at it again"
    )


def refusal_status(exc: MachinesError) -> int:
    """The HTTP status of a decision refused: a ``DeskError``'s own (400 the request is
    wrong, 403 a move the roles may not make, 404 no such machine or entity, 409 the entity
    changed since the version named); an argument the store or a system refuses before
    anything is read (a key of a NUL, a text no store keeps: batch 42, c 4d) is 400; any
    other refusal is the entity's state or system refusing the move now (409). A script
    that reads the entity again on 409 then never loops on a request that can never be
    right (outsider batch 41, c 31)."""
    if isinstance(exc, DeskError):
        return exc.status
    return 400 if isinstance(exc, InvalidArgument | UnstorableValue) else 409
