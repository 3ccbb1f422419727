"""The named system invariants (the site's ``docs/invariants.md``), as pure predicates over
a snapshot.

A ``Snapshot`` is every entity of every machine with its full history (``snapshot(store)``
reads one consistently), plus what a test harness observed outside the store: how often
each effect really ran upstream. Each invariant returns the ``Breach``es it finds (empty
when it holds), naming the entity and the events involved, so the explorer, ``machines
audit`` and the reference adapters' own ``check()`` judge stored state by the same code.
(The property suites judge an implementation by what they observe, not by this.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from machines.derive import Deriver
from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.vocabulary import APPROVAL, COMPENSATION, EFFECT_STARTED
from machines.spec.vocabulary import RELEASES_RESERVATION as RELEASES
from machines.store.records import Store, derived_variables


@dataclass(frozen=True)
class Entity:
    machine: str
    key: str
    state: str
    context: Mapping[str, str]
    data: Mapping[str, Any]
    scope: str | None
    history: tuple[TransitionEvent, ...]


@dataclass(frozen=True)
class Snapshot:
    """Everything stored, plus ``runs``: (machine, key) -> times the effect ran upstream."""

    entities: Mapping[tuple[str, str], Entity]
    runs: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))

    def of(self, machine: str) -> Iterator[Entity]:
        return (e for (m, _), e in self.entities.items() if m == machine)


@dataclass(frozen=True)
class Breach:
    invariant: str
    machine: str
    key: str
    message: str
    events: tuple[TransitionEvent, ...] = ()

    def describe(self) -> str:
        trail = "".join(
            f"\n    #{e.seq} {e.source} --{e.trigger} ({e.actor})--> {e.dest}" for e in self.events
        )
        return f"[{self.invariant}] {self.machine} '{self.key}': {self.message}{trail}"


def snapshot(store: Store, runs: Mapping[tuple[str, str], int] | None = None) -> Snapshot:
    """Every row and history of ``store``, read in one transaction."""
    entities = {}
    with store.transaction() as tx:
        for machine in store.specs():
            for row in tx.rows(machine):
                entities[(machine, row.key)] = Entity(
                    machine,
                    row.key,
                    row.state,
                    row.context,
                    row.data,
                    row.scope,
                    tuple(tx.history(machine, row.key)),
                )
    return Snapshot(MappingProxyType(entities), MappingProxyType(dict(runs or {})))


Specs = Mapping[str, MachineSpec]
Predicate = Callable[[Specs, Snapshot, Snapshot | None], list[Breach]]


def _machines(specs: Specs, snap: Snapshot) -> Iterator[tuple[MachineSpec, Entity]]:
    for entity in snap.entities.values():
        spec = specs.get(entity.machine)
        if spec is not None:
            yield spec, entity


def terminal_final(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``terminal-final`` (``machines.spec.registry`` states it)."""
    return [
        Breach("terminal-final", e.machine, e.key, f"left terminal state '{ev.source}'", (ev,))
        for spec, e in _machines(specs, snap)
        for ev in e.history
        if spec.states[ev.source].terminal
    ]


def append_only_history(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``append-only-history`` (``machines.spec.registry`` states it)."""
    out = []
    for spec, e in _machines(specs, snap):
        state = spec.initial
        derived = derived_variables(spec)
        fixed = {k: v for k, v in e.context.items() if k not in derived}
        for i, ev in enumerate(e.history, start=1):
            forged = sorted(k for k, v in fixed.items() if ev.context.get(k) != v)
            if forged:
                out.append(
                    Breach(
                        "append-only-history",
                        e.machine,
                        e.key,
                        "an event judged under another context than the entity's: "
                        + ", ".join(f"{k}={ev.context.get(k)!r}, not {fixed[k]!r}" for k in forged),
                        (ev,),
                    )
                )
            if ev.seq != i or ev.source != state:
                out.append(
                    Breach(
                        "append-only-history",
                        e.machine,
                        e.key,
                        f"event {i} does not continue from '{state}'",
                        (ev,),
                    )
                )
                break
            try:
                dest = spec.step(ev.source, ev.trigger, actor=ev.actor, **{**ev.context, **fixed})
                why = "" if dest == ev.dest else f": the move leads to '{dest}', not '{ev.dest}'"
            except MachinesError as refused:
                why = f": {refused}"
            if why:
                out.append(
                    Breach(
                        "append-only-history",
                        e.machine,
                        e.key,
                        f"an event the spec does not allow{why}",
                        (ev,),
                    )
                )
            state = ev.dest
        else:
            if state != e.state:
                out.append(
                    Breach(
                        "append-only-history",
                        e.machine,
                        e.key,
                        f"history ends in '{state}' but the entity is '{e.state}'",
                        e.history[-1:],
                    )
                )
        if previous is not None:
            before = previous.entities.get((e.machine, e.key))
            if before is not None and e.history[: len(before.history)] != before.history:
                out.append(
                    Breach(
                        "append-only-history",
                        e.machine,
                        e.key,
                        "history was rewritten since the previous snapshot",
                        before.history,
                    )
                )
    for key in previous.entities.keys() - snap.entities.keys() if previous else ():
        out.append(Breach("append-only-history", key[0], key[1], "the entity disappeared"))
    return out


def fail_closed_indeterminate(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``fail-closed-indeterminate`` (``machines.spec.registry`` states it)."""
    spec = specs.get("outcome")
    if spec is None:
        return []
    out = []
    for e in snap.of("outcome"):
        for ev in e.history:
            if ev.source != "indeterminate":
                continue
            if spec.actors[ev.actor].automatic:
                out.append(
                    Breach(
                        "fail-closed-indeterminate",
                        e.machine,
                        e.key,
                        f"automatic actor '{ev.actor}' left indeterminate",
                        (ev,),
                    )
                )
            elif not (ev.detail and ev.detail.get("by") and ev.detail.get("reason")):
                out.append(
                    Breach(
                        "fail-closed-indeterminate",
                        e.machine,
                        e.key,
                        "left indeterminate without recording who and why",
                        (ev,),
                    )
                )
    return out


def exactly_once(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``exactly-once`` (``machines.spec.registry`` states it)."""
    out = []
    for e in snap.of("outcome"):
        allowed = 1 + sum(ev.trigger == "reclaim" for ev in e.history)
        ran = snap.runs.get(("outcome", e.key), 0)
        if ran > allowed:
            out.append(
                Breach(
                    "exactly-once",
                    e.machine,
                    e.key,
                    f"ran {ran} times upstream; allowed {allowed}",
                    e.history,
                )
            )
        if e.state == "succeeded" and "result" not in e.data:
            out.append(Breach("exactly-once", e.machine, e.key, "succeeded without a result"))
        if e.state == "failed" and not e.data.get("error"):
            out.append(Breach("exactly-once", e.machine, e.key, "failed without an error"))
    for e in snap.of("effect"):
        allowed = sum(ev.dest == "executing" for ev in e.history)
        ran = snap.runs.get(("effect", e.key), 0)
        if ran > allowed:
            out.append(
                Breach(
                    "exactly-once",
                    e.machine,
                    e.key,
                    f"ran {ran} times upstream; only {allowed} executions started",
                    e.history,
                )
            )
    return out


def tier_discipline(specs: Specs, snap: Snapshot, previous: Snapshot | None) -> list[Breach]:
    """The breaches of ``tier-discipline`` (``machines.spec.registry`` states it)."""
    effect_spec = specs.get("effect")
    if effect_spec is None:
        return []
    compensation = effect_spec.states_tagged(COMPENSATION)
    approval = effect_spec.states_tagged(APPROVAL)
    out = []
    for e in snap.of("effect"):
        tier = e.context.get("tier")
        visited = {e.state, *(ev.dest for ev in e.history)}
        wrong = {COMPENSATION: visited & compensation, APPROVAL: visited & approval}
        if tier not in ("compensable", "irreversible"):
            out.append(Breach("tier-discipline", e.machine, e.key, f"logged with tier {tier!r}"))
        if tier != "compensable" and wrong[COMPENSATION]:
            out.append(
                Breach(
                    "tier-discipline",
                    e.machine,
                    e.key,
                    f"{tier} effect reached {sorted(wrong[COMPENSATION])}",
                    e.history,
                )
            )
        if tier != "irreversible" and wrong[APPROVAL]:
            out.append(
                Breach(
                    "tier-discipline",
                    e.machine,
                    e.key,
                    f"{tier} effect reached {sorted(wrong[APPROVAL])}",
                    e.history,
                )
            )
    return out


def no_auto_terminal_money_in_flight(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``no-auto-terminal-money-in-flight`` (stated in the registry)."""
    node_spec, request_spec = specs.get("node"), specs.get("request")
    if node_spec is None or request_spec is None:
        return []
    started = node_spec.states_tagged(EFFECT_STARTED)
    releases = request_spec.states_tagged(RELEASES)
    out = []
    moved: dict[str, list[Entity]] = {}
    for n in snap.of("node"):
        for ev in n.history:
            if ev.source == "unknown" and ev.actor != "reconciler":
                out.append(
                    Breach(
                        "no-auto-terminal-money-in-flight",
                        n.machine,
                        n.key,
                        f"'{ev.actor}' moved a node out of unknown",
                        (ev,),
                    )
                )
        if n.data.get("has_side_effect") and n.state in started:
            moved.setdefault(n.scope or "", []).append(n)
    for r in snap.of("request"):
        last = r.history[-1] if r.history else None
        if (
            last is not None
            and r.state in releases
            and request_spec.actors[last.actor].automatic
            and moved.get(r.key)
        ):
            names = ", ".join(n.key for n in moved[r.key])
            out.append(
                Breach(
                    "no-auto-terminal-money-in-flight",
                    r.machine,
                    r.key,
                    f"'{last.actor}' moved it to {r.state} after side-effect nodes "
                    f"started ({names})",
                    (last,),
                )
            )
    return out


def derivation_consistency(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None,
) -> list[Breach]:
    """The breaches of ``derivation-consistency`` (``machines.spec.registry`` states it)."""
    node_spec, request_spec = specs.get("node"), specs.get("request")
    if node_spec is None or request_spec is None or request_spec.derivation is None:
        return []
    deriver = Deriver.build(request_spec, node_spec)
    nodes: dict[str, list[Entity]] = {}
    for n in snap.of("node"):
        nodes.setdefault(n.scope or "", []).append(n)
    out = []
    for r in snap.of("request"):
        if r.state not in request_spec.derivation.applied_in:
            continue
        plan = [
            (n.data.get("name", n.key), n.state, bool(n.data.get("has_side_effect")))
            for n in nodes.get(r.key, [])
        ]
        derived = deriver.derive(plan)
        if derived is not None:
            out.append(
                Breach(
                    "derivation-consistency",
                    r.machine,
                    r.key,
                    f"nodes imply '{derived}' but the request is still {r.state}",
                )
            )
    return out


PREDICATES: Mapping[str, Predicate] = MappingProxyType(
    {
        "terminal-final": terminal_final,
        "append-only-history": append_only_history,
        "fail-closed-indeterminate": fail_closed_indeterminate,
        "exactly-once": exactly_once,
        "tier-discipline": tier_discipline,
        "no-auto-terminal-money-in-flight": no_auto_terminal_money_in_flight,
        "derivation-consistency": derivation_consistency,
    }
)
"""The predicate of every invariant judged on stored state, by its registry id."""


def check_invariants(
    specs: Specs,
    snap: Snapshot,
    previous: Snapshot | None = None,
) -> list[Breach]:
    """Every breach of every invariant in ``snap`` (and against ``previous``, if given)."""
    return [breach for check in PREDICATES.values() for breach in check(specs, snap, previous)]
