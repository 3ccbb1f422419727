"""What a reference system relies on in the definition a store hands it.

A system makes its moves by name (``ExactlyOnce`` parks a key by firing ``park`` from
``in_flight``) and makes the promises of the bundled definition's rules (nothing automatic
leaves ``indeterminate``). A store may hold another definition under the machine's name: a
user's variant, or a weaker one by mistake. A system on a weaker one would keep its code's
promises in that definition's words: a ``park`` that leads to ``failed`` tells the next
caller that a charge which timed out after it was sent did not happen.

So a system is built only on a definition that

1. starts every entity in the bundled one's initial state and makes every move of the
   bundled one, by the same actor, to the same state, under every context the bundled one
   admits for it;
2. gives each of the bundled one's states the meaning it has there: terminal or not, the
   same built-in tags (a system reads a state by its name: ``failed`` tagged
   ``effect-started`` would be read as "did not happen" while saying it may have), and no
   annotation the bundled one lacks (a ``result`` annotation on ``succeeded`` would let the
   database take a rewrite of the result every later caller is told); and
3. keeps every rule the bundled one declares (its ``invariants`` and its ``forbidden``
   moves), judged on the definition given, and derives a request's state from its nodes
   exactly as the bundled one does (the derivation is proved by ``machines check``; a
   weaker one, ``side_effects`` started only once a node completed, would release a
   reservation with a withdrawal in flight).

Anything more (states, moves, actors, ``x-`` tags, wording of its own) is the owner's
business. A
definition that fails either is ``InvalidArgument``, naming each broken rule or move.

One caller builds systems on weaker definitions on purpose: the definition mutation catalog
(``machines.mutation``), where a reference system on a mutated definition stands for a
user's implementation with that bug, for the suites to catch by what they observe. It does
so inside ``standing_for_a_buggy_implementation()``; the store still judges every move by
the definition it holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

from machines.derive.proof import check_derivation
from machines.errors import InvalidArgument, InvalidStateTransition, MachinesError
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.loader import load
from machines.spec.structure import check_structure
from machines.spec.visible import says_something
from machines.spec.vocabulary import EFFECT_STARTED, RELEASES_RESERVATION, TAGS, describe_guard

_SHOWN = 4
_UNCHECKED: ContextVar[bool] = ContextVar("machines_reliance_unchecked", default=False)
_judged: dict[tuple[int, str], tuple[MachineSpec, tuple[str, ...]]] = {}
_lock = threading.Lock()


def require_reliable(specs: Mapping[str, MachineSpec], machine: str, system: str) -> MachineSpec:
    """The definition of ``machine`` in ``specs`` when ``system`` can rely on it (see the
    module), else ``InvalidArgument`` naming what it breaks. Judged once per definition."""
    given = specs[machine]
    if _UNCHECKED.get():
        return given
    with _lock:
        known = _judged.get((id(given), machine))
    if known is None or known[0] is not given:
        known = (given, tuple(_broken(given, bundled(machine))))
        with _lock:
            if len(_judged) >= 64:
                _judged.clear()
            _judged[(id(given), machine)] = known
    problems = known[1]
    if problems:
        more = f"; and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
        raise InvalidArgument(
            f"{system} cannot run on the store's definition of '{machine}': it breaks what "
            f"{system} relies on: {'; '.join(problems[:_SHOWN])}{more}. Open the store with "
            f"a definition that keeps the bundled one's moves and rules "
            f"(machines.load('{machine}'), or yours with them restored)"
        )
    return given


def require_money_proved(request: MachineSpec, node: MachineSpec, system: str) -> None:
    """Refuse (``InvalidArgument``) a pair of request and node definitions whose
    derivation ``machines check`` cannot prove safe: a node definition of the owner's may
    add states and moves the bundled derivation's rules do not know, and a request may
    then fail with a withdrawal in flight (outsider batch 30). The bundled pair (as it is
    in the store, by its semantic digest) was proved by ``machines check`` itself; any
    other pair is proved here, once per pair (a second or two)."""
    if _UNCHECKED.get():
        return
    key = (id(request), id(node))
    with _lock:
        known = _proved.get(key)
    if known is None or known[0] is not request or known[1] is not node:
        known = (request, node, _unproved(request, node))
        with _lock:
            if len(_proved) >= 16:
                _proved.clear()
            _proved[key] = known
    if known[2]:
        more = f"; and {len(known[2]) - _SHOWN} more" if len(known[2]) > _SHOWN else ""
        raise InvalidArgument(
            f"{system} cannot run on the store's definitions of 'request' and 'node': the "
            f"derivation of a request's state from its nodes is not safe on them: "
            f"{'; '.join(known[2][:_SHOWN])}{more} (machines check shows each "
            "counterexample). Tag the node's added states for what they mean, or restore "
            "the bundled definitions"
        )


_proved: dict[tuple[int, int], tuple[MachineSpec, MachineSpec, tuple[str, ...]]] = {}


def _unproved(request: MachineSpec, node: MachineSpec) -> tuple[str, ...]:
    """The counterexamples of the derivation's proof on ``request`` and ``node``, but the
    ones a rule set keeps for show; none for the bundled pair (by semantic digest), which
    ``machines check`` proved."""
    if all(
        semantic_digest(given) == semantic_digest(bundled(name))
        for given, name in ((request, "request"), (node, "node"))
    ):
        return ()
    report = check_derivation(request, node)
    sets = request.derivation.rule_sets if request.derivation is not None else {}
    return tuple(
        f"{result.name}: {c.invariant}: {c.describe()}"
        for result in report.results
        for c in result.counterexamples
        if c.invariant not in sets[result.name].known_violations  # kept for show
    )


def require_bundled_move(
    machine: str, state: str, trigger: str, actor: str, context: Mapping[str, str]
) -> None:
    """Refuse a move the bundled definition of ``machine`` does not make: from ``state``,
    by ``trigger`` as ``actor`` under ``context``. A system's calls are the bundled
    definition's moves; a move the store's definition adds (an owner's addition the
    check above allows, say an operator's ``confirm_failed`` from ``executing``) is for
    the owner's own code, and made by a system's call it would break the promise the
    system keeps (a transfer marked failed with money moving, a call in flight recorded
    as never run). ``InvalidStateTransition``, nothing written."""
    if _UNCHECKED.get():
        return
    try:
        bundled(machine).step(state, trigger, actor=actor, **context)
    except MachinesError as refused:
        raise InvalidStateTransition(
            machine,
            state,
            trigger=trigger,
            actor=actor,
            reason="the system makes only the bundled definition's moves, and that one "
            f"refuses it ({refused}); the store's definition adds it for the owner's own code",
        ) from None


def bundled(machine: str) -> MachineSpec:
    """The bundled definition of ``machine``, loaded once."""
    with _lock:
        found = _bundled.get(machine)
    if found is None:
        found = load(machine)
        with _lock:
            _bundled[machine] = found
    return found


_bundled: dict[str, MachineSpec] = {}


@contextmanager
def standing_for_a_buggy_implementation() -> Iterator[None]:
    """Within this block (this thread or task only), systems are built on any definition,
    unchecked: for the mutation catalog alone (see the module)."""
    token = _UNCHECKED.set(True)
    try:
        yield
    finally:
        _UNCHECKED.reset(token)


def _broken(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    if given.initial != bundled.initial:
        yield (
            f"its initial state is '{given.initial}', and the bundled one's '{bundled.initial}': "
            "the system makes its first move from the bundled initial state (an entity born "
            "elsewhere could be left, its effect done, where no move of the system records it)"
        )
    yield from _moves_changed(given, bundled)
    yield from _meanings_changed(given, bundled)
    for actor, record in bundled.actors.items():
        if actor in given.actors and given.actors[actor].automatic != record.automatic:
            yield (
                f"actor '{actor}' is {'' if given.actors[actor].automatic else 'not '}automatic, "
                f"and the bundled one is {'' if record.automatic else 'not '}automatic: the "
                "rules that keep a state for people read it"
            )
    yield from _rules_broken(given, bundled)
    yield from _sending_reopened(given, bundled)
    yield from _release_unguarded(given, bundled)
    yield from _effect_forgotten(given, bundled)
    if given.derivation != bundled.derivation:
        yield (
            "its derivation of the state from the nodes differs from the bundled one (the "
            "engine fails, releases or completes a request by it, and its proof that no "
            "money in flight is released is the bundled one's)"
        )


def _meanings_changed(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    for state, record in bundled.states.items():
        if state not in given.states:
            continue  # its moves are named missing
        if given.states[state].terminal != record.terminal:
            yield (
                f"state '{state}' is {'' if given.states[state].terminal else 'not '}terminal, "
                f"and the bundled one is {'' if record.terminal else 'not '}terminal"
            )
        extra = sorted(set(given.states[state].annotations) - set(record.annotations))
        if extra:
            yield (
                f"state '{state}' lets {', '.join(repr(a) for a in extra)} of a finished "
                "entity's data change, and the bundled one does not: the system stores what "
                "every later caller is told there"
            )
        now = [t for t in TAGS if state in given.states_tagged(t)]
        was = [t for t in TAGS if state in bundled.states_tagged(t)]
        if now != was:
            yield (
                f"state '{state}' is tagged [{', '.join(now)}], and the bundled one "
                f"[{', '.join(was)}]: the system reads the state by its name"
            )


def _moves_changed(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    for t in bundled.transitions:
        for context in bundled.valuations():
            if any(context[v] not in values for v, values in t.when.items()):
                continue
            for actor in t.actors:
                move = f"move '{t.trigger}' from '{t.source}' by '{actor}'"
                under = f" under {dict(context)}" if context else ""
                try:
                    dest = given.step(t.source, t.trigger, actor=actor, **context)
                except MachinesError:
                    yield f"the {move}{under} is refused (the bundled one leads to '{t.dest}')"
                    break
                if dest != t.dest:
                    yield f"the {move}{under} leads to '{dest}', not '{t.dest}'"
                    break


def _rules_broken(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    """The bundled rules and forbidden moves, judged on the definition given (a rule that
    names a state, actor or trigger the given one lacks cannot be kept either)."""
    try:
        judged = replace(
            given, invariants=bundled.invariants, forbidden=bundled.forbidden, source=None
        )
        violations = check_structure(judged)
    except (KeyError, MachinesError) as exc:
        yield f"its rules cannot be judged on it ({type(exc).__name__}: {exc})"
        return
    for v in violations:
        yield " ".join(v.describe(location=False).split())


def _sending_reopened(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    """A move of the owner's that leads into a state from which the system starts its
    effect (a source of a bundled move into an ``effect-started`` state): with it, an
    effect that was started, its outcome unknown, could be started again (executing ->
    halted -> pending, by the automatic proxy). The bundled moves back there are the
    system's own (a call that provably failed before it was sent)."""
    started = bundled.states_tagged(EFFECT_STARTED)
    starts = {t.source for t in bundled.transitions if t.dest in started} - started
    # the bundled way to sending (a node's blocked wakes to ready, then prepares and
    # submits): an owner's move into it from a state an effect may have started before
    # starts it again (outsider batch 33: observing -> returned -> blocked sent twice)
    before = _closure(bundled, starts, backward=True, avoiding=started)
    sent = _closure(given, given.states_tagged(EFFECT_STARTED))
    ours = {(t.source, t.trigger, t.dest) for t in bundled.transitions}
    for t in given.transitions:
        if (t.source, t.trigger, t.dest) in ours:
            continue
        if t.dest in starts or (t.dest in before and t.source in sent):
            yield (
                f"the move '{t.trigger}' from '{t.source}' leads to '{t.dest}', from which the "
                "system starts its effect: an effect already started could be started again"
            )


def _release_unguarded(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    """A move of the owner's by an automatic actor into a state that releases the
    reservation, not guarded as the bundled rules guard such moves (``side_effects:
    [none]``): the bundled rule names the bundled releasing states, so a releasing state of
    the owner's, or a new move into a bundled one, escaped it, and a timer released a
    reservation with the withdrawal of unknown fate (outsider batch 34, c B1)."""
    releasing = bundled.states_tagged(RELEASES_RESERVATION)
    guards = [
        r.when
        for r in bundled.invariants
        if r.kind == "automatic_enters_only_when" and r.states and set(r.states) <= releasing
    ]
    ours = {(t.source, t.trigger, t.dest) for t in bundled.transitions}
    theirs = given.states_tagged(RELEASES_RESERVATION)
    for t in given.transitions:
        automatic = [a for a in t.actors if given.actors[a].automatic]
        if (t.source, t.trigger, t.dest) in ours or not automatic or t.dest not in theirs:
            continue
        for when in guards:
            if any(v not in t.when or not set(t.when[v]) <= set(ok) for v, ok in when.items()):
                yield (
                    f"the move '{t.trigger}' from '{t.source}' by the automatic "
                    f"{', '.join(repr(a) for a in automatic)} releases the reservation "
                    f"('{t.dest}') outside {describe_guard(when)}: money may be moving then; "
                    "guard it as the bundled releases are, or give it to a person"
                )
                break


def _closure(
    spec: MachineSpec,
    states: Iterable[str],
    *,
    backward: bool = False,
    avoiding: frozenset[str] = frozenset(),
) -> set[str]:
    """``states`` and every state ``spec``'s moves lead to from them (with ``backward``,
    every state whose moves lead to them), never through a state of ``avoiding``."""
    found = set(states)
    grew = True
    while grew:
        grew = False
        for t in spec.transitions:
            here, there = (t.dest, t.source) if backward else (t.source, t.dest)
            if here in found and there not in found and there not in avoiding:
                found.add(there)
                grew = True
    return found


def _effect_forgotten(given: MachineSpec, bundled: MachineSpec) -> Iterator[str]:
    """A move of the owner's by an automatic actor, without evidence, out of a state where
    the effect may have happened (``effect-started``) into one where it did not, or into a
    terminal state: the system (and the derivation, which counts money in flight by the
    tag) would take an effect that may have happened for one that did not, or an outcome
    nobody knows for a settled one. A withdrawal the venue accepted, moved to an added
    untagged state, let a failed sibling release the reservation with the money out
    (outsider batch 30); through an added tagged state, the automatic executor reached
    ``failed``, and the worker ``succeeded`` with a result of its own (batch 31), around
    the bundled rules that name the states. The bundled moves out (a failure proved before
    sending) are the system's own."""
    started = given.states_tagged(EFFECT_STARTED)
    ours = {(t.source, t.trigger, t.dest) for t in bundled.transitions}
    for t in given.transitions:
        if (t.source, t.trigger, t.dest) in ours or t.source not in started:
            continue
        automatic = [a for a in t.actors if given.actors[a].automatic]
        if not automatic and t.dest not in started and t.dest not in bundled.states:
            yield (
                f"the move '{t.trigger}' from '{t.source}' (the effect may have happened) "
                f"leads to '{t.dest}', a state of yours that says it did not: tag it "
                f"{EFFECT_STARTED} (a person's word that it did not happen goes to a state "
                "of the bundled definition)"
            )
            continue
        if not automatic or says_something(t.evidence):
            continue
        by = f"by the automatic {', '.join(repr(a) for a in automatic)} with no evidence"
        if t.dest not in started:
            yield (
                f"the move '{t.trigger}' from '{t.source}' (the effect may have happened) "
                f"leads to '{t.dest}' (it did not) {by}: tag '{t.dest}' {EFFECT_STARTED}, "
                "or give the move its evidence"
            )
        elif given.states[t.dest].terminal:
            yield (
                f"the move '{t.trigger}' from '{t.source}' (the effect may have happened) "
                f"settles it in '{t.dest}' {by}: give the move its evidence"
            )
