"""Every invariant the package judges, once: its id, what it promises, and who judges it.

An invariant id names one promise wherever it is judged: in the definitions (``machines
check``'s structural checks and derivation proof), in stored state (the predicates of
``machines.checks.invariants`` that the audit, the explorer's judges and the reference
systems' ``check()`` run), in the audit of a recorded history, in the explorer's models, and
in the property suites (a failure's message starts with the id). Each of those reads its
statements here, and ``tests/test_registry.py`` finds every id the code judges by, checks
it is registered for that judge, and that every judge registered for an id judges it: an id
can be neither misspelled in one place nor promised and never checked.

What an invariant is lives in ``machines.spec.promise``; the property suites' rules are
listed in ``machines.spec.suite_rules`` and held here with the rest. The rules a definition
states in its own ``invariants:`` (such as ``no-skipping-commit``) are not here: they are
data of that definition, checked by ``machines check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from machines.errors import UnknownName
from machines.spec.promise import GUARANTEE as GUARANTEE
from machines.spec.promise import LAYERS as LAYERS
from machines.spec.promise import POLICY as POLICY
from machines.spec.promise import Invariant as Invariant
from machines.spec.promise import Kind as Kind
from machines.spec.promise import Layer as Layer
from machines.spec.promise import invariant
from machines.spec.routing import shown, suggest
from machines.spec.suite_rules import SUITE_INVARIANTS

INVARIANTS: Mapping[str, Invariant] = MappingProxyType(
    {
        i.id: i
        for i in (
            # -- the definitions, stored state, the derivation and the explorer ----------------
            invariant(
                "required-rules",
                """Every definition declares a rule of each required kind: terminal_final,
                all_reachable and can_terminate.""",
                "definitions",
            ),
            invariant(
                "fail-closed-exits",
                """An automatic actor leaves a state tagged fail-closed only by a move that
                states its evidence; every other way out is a person's.""",
                "definitions",
            ),
            invariant(
                "needs-human-exits",
                """No automatic actor leaves a state tagged needs-human: a person must act
                before anything moves.""",
                "definitions",
            ),
            invariant(
                "fail-closed-terminal",
                """No terminal state is tagged fail-closed: nobody can tell what happened
                there, so a person must be able to settle it, and nothing leaves a terminal
                state.""",
                "definitions",
            ),
            invariant(
                "known-machine",
                "Every recorded event names a machine that has a definition.",
                "audit",
            ),
            invariant(
                "known-names",
                """Every recorded event names only states, triggers, actors and context
                variables its machine's definition defines (in a store, the definition of
                the version the event was made under, which the store records).""",
                "audit",
            ),
            invariant(
                "terminal-final",
                """A terminal state has no way out: no recorded event of any entity leaves
                one (a state terminal in the definition version the event was made under).
                A migration event may map an entity out of a terminal state its new version
                removes only into a terminal one.""",
                "stored state",
                "audit",
                "explorer",
            ),
            invariant(
                "append-only-history",
                """Every state change has exactly one event: the events form one unbroken
                chain from the initial state to the current one, each a move the spec allows
                under the entity's own context (a fixed variable an event gives another value
                is a breach), and no earlier snapshot's history was rewritten. In a store each
                event is judged by the definition version it was made under, and versions
                never decrease along a history; a migration event (actor migration, trigger
                migrate) installs a later version b, names from_version b-1 and to_version b,
                and maps the entity out of a state of version b-1 that version b removes into
                a state of version b.""",
                "stored state",
                "audit",
            ),
            invariant(
                "guards-intact",
                """A store's guards are the ones machines installed for the version of each
                definition it serves: every trigger and function as generated and enabled,
                the legal moves as the definition gives them, no registry row a migration
                did not add; a difference is named with its place (the store refuses to
                open for writing until its owner runs machines repair, which is
                recorded).""",
                "audit",
            ),
            invariant(
                "history-kept",
                """Against heads kept earlier (machines audit --save-heads), every kept
                entity is still there, its first events are the ones kept (each event's link
                hashes the one before it and the event as stored, so an edit, insertion,
                deletion or reordering at or before the kept head changes the head), and an
                entity kept in a terminal state has not moved and its data, but for its
                annotations, has not changed; and, kept heads or not, every entity with a
                history still has its row.""",
                "audit",
            ),
            invariant(
                "fail-closed-indeterminate",
                """Nothing automatic leaves indeterminate; each exit records who and why, as
                does each exit from a state of any machine tagged fail-closed (a node's
                unknown: only a reading of the venue's records, which names itself and
                its evidence, leaves it).""",
                "stored state",
                "audit",
            ),
            invariant(
                "exactly-once",
                """The upstream effect ran at most once per key, plus once per explicit
                reclaim (outcome) or per execution the effect log started (effect); recorded
                outcomes are complete; an effect the log could run again (pending, approved)
                was never written outside a move, as a run that ended unknown is.""",
                "stored state",
                "explorer",
            ),
            invariant(
                "tier-discipline",
                """The states tagged compensation only for Compensable effects, those tagged
                approval only for Irreversible ones, and Safe effects never in the log.""",
                "stored state",
                "audit",
            ),
            invariant(
                "no-auto-terminal-money-in-flight",
                """Unknown nodes leave only by reconciliation; an automatic actor never puts a
                request in a reservation-releasing state while a node with a side effect is in
                an effect-started state (money on its way, of unknown fate, or landed). A node
                the venue certainly refused (submitting -> failed) moved no money, so it does
                not count. A derivation rule set keeps it when it never derives a state tagged
                releases-reservation while a node with a side effect is in a node state tagged
                effect-started. A stored request records the reservation its state sets.""",
                "stored state",
                "audit",
                "derivation",
                "explorer",
            ),
            invariant(
                "derivation-consistency",
                """Every derived state is a legal move (or no move) from each state the
                derivation is applied in, by the derivation's actor, under the context the
                nodes imply; so a request that is executing has no derived decision left
                unapplied, and no node left blocked once every node it comes after is done
                (the engine wakes and derives after every node move).""",
                "stored state",
                "derivation",
                "explorer",
            ),
            invariant(
                "derivation-settles",
                "When every node is terminal, the derivation names a request state.",
                "derivation",
            ),
            invariant(
                "completion-means-done",
                """A request is completed (a state tagged consumes-reservation) only when every
                node of its plan is done (a state tagged done: the venue or a reconciler said
                completed, a planner skipped it, an operator passed the gate), unless an
                operator confirmed the completion.""",
                "stored state",
                "derivation",
                "explorer",
                "transfer suite",
            ),
            invariant(
                "context-matches-money",
                """The context the nodes imply refuses the guarded moves into a state tagged
                releases-reservation exactly while a node with a side effect is in a node
                state tagged effect-started (never fewer: money released in flight; never
                more: a transfer that moved no money could not be cancelled); and no
                automatic move into such a state, out of a state the derivation applies in,
                goes unguarded by the context the nodes imply.""",
                "derivation",
            ),
            invariant(
                "no-dead-rule",
                "Every rule decides at least one plan (otherwise the order hides it).",
                "derivation",
            ),
            invariant(
                "acknowledged-outcome-kept",
                "An outcome a caller was told stays the outcome its key records.",
                "explorer",
            ),
            invariant(
                "failed-means-proven",
                "A key is recorded failed only when the effect provably did not happen.",
                "explorer",
            ),
            *SUITE_INVARIANTS,
        )
    }
)
"""Every invariant, by id."""


def judged_by(layer: Layer) -> Mapping[str, str]:
    """Id -> statement of the invariants ``layer`` judges, in registry order."""
    if layer not in LAYERS:
        raise UnknownName(f"'{shown(layer)}' is not a layer{suggest(layer, LAYERS)}")
    return MappingProxyType({i.id: i.statement for i in INVARIANTS.values() if layer in i.layers})


def policies_of(layer: Layer) -> frozenset[str]:
    """The ids of the invariants ``layer`` judges that are policies, not guarantees."""
    return frozenset(i for i in judged_by(layer) if INVARIANTS[i].kind == POLICY)


def kind_of(id: str) -> Kind:
    """Whether invariant ``id`` is a guarantee or a policy."""
    found = INVARIANTS.get(id)
    if found is None:
        raise UnknownName(f"'{shown(id)}' is no invariant{suggest(id, INVARIANTS)}")
    return found.kind
