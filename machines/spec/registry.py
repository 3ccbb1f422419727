"""Every invariant the package judges, once: its id, what it promises, and who judges it.

An invariant id names one promise wherever it is judged: in the definitions (``machines
check``'s structural checks and derivation proof), in stored state (the predicates of
``machines.checks.invariants`` that the audit, the explorer's judges and the reference
systems' ``check()`` run), in the audit of a recorded history, in the explorer's models, and
in the property suites (a failure's message starts with the id). Each of those reads its
statements here, and ``tests/test_registry.py`` finds every id the code judges by, checks
it is registered for that judge, and that every judge registered for an id judges it: an id
can be neither misspelled in one place nor promised and never checked.

The rules a definition states in its own ``invariants:`` (such as ``no-skipping-commit``) are
not here: they are data of that definition, checked by ``machines check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from machines.errors import UnknownName
from machines.spec.routing import shown, suggest

Layer = Literal[
    "definitions",
    "derivation",
    "stored state",
    "audit",
    "explorer",
    "exactly-once suite",
    "effect-log suite",
    "transfer suite",
    "conformance suite",
]
"""Who judges an invariant: ``machines check``'s structural checks of a definition, its
derivation proof, the predicates over a store's snapshot, the audit of a recorded history,
the explorer's models, or one of the property suites (the conformance suite judges any
implementation of any definition; the spec walker is that suite on this package's
runtime)."""

LAYERS: tuple[Layer, ...] = get_args(Layer)


Kind = Literal["guarantee", "policy"]
"""What breaking an invariant means. A guarantee is kept by every correct implementation
(nothing runs twice, no acknowledged answer lost, nothing leaves indeterminate on its own):
breaking one is a bug whatever the design. A policy is this package's choice among safe
designs (park a key at once when its caller is interrupted, rather than hold it until the
lease expires): a suite judges it by default, names it as a policy when it breaks, and lets
a user whose system chooses otherwise leave it out (``policies`` on the suite)."""

GUARANTEE: Kind = "guarantee"
POLICY: Kind = "policy"


@dataclass(frozen=True)
class Invariant:
    """One promise: ``id`` (what failures start with), ``statement`` (what it promises, as
    the site shows it), ``layers`` (who judges it), ``kind`` (a guarantee or a policy)."""

    id: str
    statement: str
    layers: frozenset[Layer]
    kind: Kind = GUARANTEE


def _invariant(id: str, statement: str, *layers: Layer, kind: Kind = GUARANTEE) -> Invariant:
    return Invariant(id, " ".join(statement.split()), frozenset(layers), kind)


_SUITES: tuple[Layer, ...] = ("exactly-once suite", "effect-log suite", "transfer suite")

INVARIANTS: Mapping[str, Invariant] = MappingProxyType(
    {
        i.id: i
        for i in (
            # -- the definitions, stored state, the derivation and the explorer ----------------
            _invariant(
                "required-rules",
                """Every definition declares a rule of each required kind: terminal_final,
                all_reachable and can_terminate.""",
                "definitions",
            ),
            _invariant(
                "known-machine",
                "Every recorded event names a machine that has a definition.",
                "audit",
            ),
            _invariant(
                "known-names",
                """Every recorded event names only states, triggers, actors and context
                variables its machine's definition defines (in a store, the definition of
                the version the event was made under, which the store records).""",
                "audit",
            ),
            _invariant(
                "terminal-final",
                """A terminal state has no way out: no recorded event of any entity leaves
                one (a state terminal in the definition version the event was made under).
                A migration event may map an entity out of a terminal state its new version
                removes only into a terminal one.""",
                "stored state",
                "audit",
                "explorer",
            ),
            _invariant(
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
            _invariant(
                "guards-intact",
                """A store's guards are the ones machines installed for the version of each
                definition it serves: every trigger and function as generated and enabled,
                the legal moves as the definition gives them, no registry row a migration
                did not add; a difference is named with its place (the store refuses to
                open for writing until its owner runs machines repair, which is
                recorded).""",
                "audit",
            ),
            _invariant(
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
            _invariant(
                "fail-closed-indeterminate",
                """Nothing automatic leaves indeterminate; each exit records who and why, as
                does each exit from a state of any machine tagged fail-closed (a node's
                unknown: only a reading of the venue's records, which names itself and
                its evidence, leaves it).""",
                "stored state",
                "audit",
            ),
            _invariant(
                "exactly-once",
                """The upstream effect ran at most once per key, plus once per explicit
                reclaim (outcome) or per execution the effect log started (effect); recorded
                outcomes are complete; an effect the log could run again (pending, approved)
                was never written outside a move, as a run that ended unknown is.""",
                "stored state",
                "explorer",
            ),
            _invariant(
                "tier-discipline",
                """The states tagged compensation only for Compensable effects, those tagged
                approval only for Irreversible ones, and Safe effects never in the log.""",
                "stored state",
                "audit",
            ),
            _invariant(
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
            _invariant(
                "derivation-consistency",
                """Every derived state is a legal move (or no move) from each state the
                derivation is applied in, by the derivation's actor, under the context the
                nodes imply; so a request that is executing has no derived decision left
                unapplied (the engine derives after every node move).""",
                "stored state",
                "derivation",
                "explorer",
            ),
            _invariant(
                "derivation-settles",
                "When every node is terminal, the derivation names a request state.",
                "derivation",
            ),
            _invariant(
                "completion-means-done",
                """A request is completed (a state tagged consumes-reservation) only when every
                node of its plan is done (a state tagged done: the venue or a reconciler said
                completed, a planner skipped it, an operator passed the gate), unless an
                operator confirmed the completion.""",
                "derivation",
                "explorer",
                "transfer suite",
            ),
            _invariant(
                "context-matches-money",
                """The context the nodes imply refuses the guarded moves into a state tagged
                releases-reservation exactly while a node with a side effect is in a node
                state tagged effect-started (never fewer: money released in flight; never
                more: a transfer that moved no money could not be cancelled).""",
                "derivation",
            ),
            _invariant(
                "no-dead-rule",
                "Every rule decides at least one plan (otherwise the order hides it).",
                "derivation",
            ),
            _invariant(
                "acknowledged-outcome-kept",
                "An outcome a caller was told stays the outcome its key records.",
                "explorer",
            ),
            _invariant(
                "failed-means-proven",
                "A key is recorded failed only when the effect provably did not happen.",
                "explorer",
            ),
            # -- shared by the suites -----------------------------------------------------------
            _invariant(
                "adapter-check",
                """The implementation's own check() finds no problem (an extra judged last,
                never the oracle).""",
                *_SUITES,
            ),
            _invariant(
                "legal-history",
                """The history the implementation exposes is append-only and one unbroken
                chain of the bundled definition's moves from its initial state, and it stands
                where what the suite saw says it stands.""",
                "exactly-once suite",
                "transfer suite",
            ),
            _invariant(
                "refusal-changes-nothing",
                """An operation that is refused changes nothing: no state, no history, no call
                upstream, no callback.""",
                "transfer suite",
                "conformance suite",
            ),
            # -- the exactly-once suite ---------------------------------------------------------
            _invariant(
                "one-send-per-claim",
                """The upstream receives at most one send per claim (the first call of a key,
                and the first call after each accepted reclaim), and no second caller starts
                the effect while a holder's lease may be live.""",
                "exactly-once suite",
            ),
            _invariant(
                "no-retry-after-send",
                "An error the effect raised after it sent is never retried within its claim.",
                "exactly-once suite",
            ),
            _invariant(
                "indeterminate-has-cause",
                """A caller is told indeterminate only with a cause: the holder's lease
                expired, the holder crashed, or its own run failed after it may have sent;
                never while another caller holds a live lease and nothing failed.""",
                "exactly-once suite",
            ),
            _invariant(
                "indeterminate-stays",
                """A key any caller was told is indeterminate stays indeterminate for every
                later caller until an explicit reclaim or decision (a late holder cannot settle
                it).""",
                "exactly-once suite",
            ),
            _invariant(
                "replay-identical",
                """A result or error a caller was given replays identically to every later
                caller, and nothing runs the effect again.""",
                "exactly-once suite",
            ),
            _invariant(
                "interrupted-parks",
                """A caller cancelled or interrupted inside the effect (asyncio.CancelledError,
                KeyboardInterrupt) leaves the key parked at once: indeterminate for every later
                caller, never free to run again without a reclaim. A policy: an executor that
                keeps the interrupted caller's lease until it expires, and then parks, is safe
                too (the guarantees judge it).""",
                "exactly-once suite",
                kind=POLICY,
            ),
            _invariant(
                "expired-lease-parks",
                """A key whose holder died or stalled past its lease is parked for the next
                caller: told indeterminate, neither run again nor reported in progress.""",
                "exactly-once suite",
            ),
            _invariant(
                "bounded-retries",
                """A call starts its effect a bounded number of times, even on errors that
                prove nothing was sent (the suite stops a call at start number 20).""",
                "exactly-once suite",
            ),
            _invariant(
                "failed-means-not-sent",
                "A caller is told the effect failed only when nothing was sent in the claim.",
                "exactly-once suite",
            ),
            _invariant(
                "result-from-upstream",
                """A result given to a caller is what the upstream answered in that claim, or
                what a person decided.""",
                "exactly-once suite",
            ),
            _invariant(
                "in-progress-means-held",
                """A caller is told 'in progress' only while another caller may hold the key's
                lease.""",
                "exactly-once suite",
            ),
            _invariant(
                "explicit-exit",
                """A parked key accepts a reclaim (the next call runs the effect under a fresh
                claim) and a decision (every later caller gets it); a key that is not parked
                refuses both.""",
                "exactly-once suite",
            ),
            _invariant(
                "typed-answer",
                """Every answer is a result, EffectFailed, EffectIndeterminate or
                EffectInProgress, a refusal is a MachinesError, only an interrupt the effect
                raised passes through, and advance_clock, fail_next_write and restart raise
                nothing.""",
                "exactly-once suite",
            ),
            # -- the effect-log suite -----------------------------------------------------------
            _invariant(
                "at-most-once",
                """A signature takes effect upstream at most once, ever: its tool never runs
                again after it was sent; only an error that proves nothing was sent frees
                it.""",
                "effect-log suite",
            ),
            _invariant(
                "approval",
                """An irreversible call runs only right after a human approved it, once per
                approval, and never after a rejection.""",
                "effect-log suite",
            ),
            _invariant(
                "replay",
                """Once a caller is told a result, every later caller gets that very result and
                nothing runs; no caller gets a result that no run returned.""",
                "effect-log suite",
            ),
            _invariant(
                "unknown-stays-unknown",
                """A call whose outcome is unknown is never run again nor answered with a
                result; only the saga may compensate it.""",
                "effect-log suite",
            ),
            _invariant(
                "cancelled-stays-unknown",
                """A caller cancelled or interrupted inside the tool leaves the effect unknown:
                never free to run again, never answered with a result.""",
                "effect-log suite",
            ),
            _invariant(
                "saga-newest-first",
                """The saga undoes a session's effects newest first. A policy: a saga whose
                compensations do not depend on one another may undo them in another
                order.""",
                "effect-log suite",
                kind=POLICY,
            ),
            _invariant(
                "saga-only-unknown",
                """The saga undoes only its own session's effects whose outcome is unknown
                (never a committed one, never one that did not take effect).""",
                "effect-log suite",
            ),
            _invariant(
                "saga-once",
                "The saga undoes each effect at most once, ever.",
                "effect-log suite",
            ),
            _invariant(
                "saga-completes",
                """A saga that returns, or stops with an error while no compensation it ran
                failed, has undone every unknown effect of its session that has a
                compensation.""",
                "effect-log suite",
            ),
            _invariant(
                "history-chain",
                """The history the log exposes is a legal chain of the bundled 'effect'
                definition and is only ever appended to.""",
                "effect-log suite",
            ),
            _invariant(
                "history-agrees",
                "The state the exposed history ends in agrees with what the suite saw.",
                "effect-log suite",
            ),
            _invariant(
                "told-truth",
                "Every answer a caller gets is explained by what happened in the call.",
                "effect-log suite",
            ),
            _invariant(
                "decisions",
                """The log accepts a human decision only on an irreversible call that waits for
                one, and refuses none there.""",
                "effect-log suite",
            ),
            _invariant(
                "contract",
                """The adapter keeps its contract: it raises only the errors the contract names
                and returns what each method must; an error that escapes a step is reported
                under this rule, with the run that raised it.""",
                "effect-log suite",
                "transfer suite",
            ),
            # -- the transfer suite -------------------------------------------------------------
            _invariant(
                "submit-once",
                "submit() is called at most once per node: nothing is ever resent.",
                "transfer suite",
            ),
            _invariant(
                "money-in-flight-held",
                """Work that may have moved money is never failed, abandoned or released: no
                release of the reservation (request_failed, or a move into a releasing state)
                and no giving up on a sent node with a side effect until the venue or a
                reconciler said it failed, unless an operator confirmed the failure.""",
                "transfer suite",
            ),
            _invariant(
                "callbacks-once",
                """request_completed and request_failed fire at most once per request, never
                both, and only for requests that were submitted.""",
                "transfer suite",
            ),
            _invariant(
                "sent-work-kept",
                """A node whose submit went out is never given up (failed, cancelled, skipped)
                on the engine's own say, side effect or not: the bundled definition's 'failed'
                means the evidence says it did not take effect, so only the venue's or a
                reconciler's 'failed' ends it so (a sibling's failure is no such
                evidence).""",
                "transfer suite",
            ),
            _invariant(
                "gate-waits-for-operator",
                """A manual gate is never handed to the venue, and is handed to the gate desk
                (venue.gate) only once an operator's complete_manual for it was accepted.""",
                "transfer suite",
            ),
            _invariant(
                "reservation-with-the-end",
                """The reservation is released only as the request ends in a releasing state
                (with request_failed) and consumed only as it completes (with
                request_completed): between steps, every release or consumption announced to
                venue.reservation() and every such callback come in pairs, once each.""",
                "transfer suite",
            ),
            _invariant(
                "after-predecessors",
                """No node is handed to the venue or the gate desk before every node it comes
                after is done (the venue or a reconciler said completed, a planner skipped it,
                an operator passed the gate).""",
                "transfer suite",
            ),
            _invariant(
                "halt-after-failure",
                """Once the venue or a reconciler said a node failed (and the engine went on),
                the engine starts nothing new for that request: no prepare, no submit. A
                policy: an engine that goes on with work independent of the failed node,
                holding whatever money may be in flight, is safe too.""",
                "transfer suite",
                kind=POLICY,
            ),
            _invariant(
                "in-flight-followed",
                """Work in flight is followed to its end: until a started request ends, every
                step of it that ends normally asks the venue about each node the venue
                accepted (or said pending) without a final word since.""",
                "transfer suite",
            ),
            _invariant(
                "request-kept",
                "A request the engine accepted stays known to it.",
                "transfer suite",
            ),
            # -- the conformance suite (and the spec walker, which is it on our runtime) -------
            _invariant(
                "entity-created-as-defined",
                """An entity can be created under every valuation of the definition's context,
                and starts where it was created (the initial state, unless the suite resumed
                one mid-life) with an empty history.""",
                "conformance suite",
            ),
            _invariant(
                "legal-move-accepted",
                """Every move the definition allows from the entity's state, by that actor,
                under the entity's context, is accepted and leaves the entity in the state the
                definition moves it to.""",
                "conformance suite",
            ),
            _invariant(
                "illegal-move-refused",
                """Every move the definition does not allow (an unknown trigger or actor, a
                trigger not defined from the state, an actor not allowed to fire it, a guard
                the context fails) is refused.""",
                "conformance suite",
            ),
            _invariant(
                "terminal-stays-final",
                "Nothing ever leaves a terminal state.",
                "conformance suite",
            ),
            _invariant(
                "history-is-a-legal-chain",
                """The exposed history of every entity is exactly the moves the suite saw it
                make, numbered 1, 2, 3, ..., an unbroken chain from where it started each move
                of which the definition allows, and it ends in the state the entity reads.""",
                "conformance suite",
            ),
            _invariant(
                "entity-stays-readable",
                """Once the implementation has shown an entity with a well-formed history,
                every later read of every entity succeeds: its state is a name and its history
                a list of well-formed events, never an error (a move that deletes or garbles a
                row is the implementation's bug, not the adapter's shape).""",
                "conformance suite",
            ),
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
