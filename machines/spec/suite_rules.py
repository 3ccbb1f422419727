"""The rules the property suites judge, each one invariant of the registry
(``machines.spec.registry.INVARIANTS`` holds them with the stored state's and the
definitions'): a suite's failure starts with the id, and its report quotes the statement."""

from __future__ import annotations

from machines.spec.promise import POLICY, Invariant, Layer, invariant

SUITES: tuple[Layer, ...] = ("exactly-once suite", "effect-log suite", "transfer suite")
"""The suites of the three reference systems, which share some rules."""

SUITE_INVARIANTS: tuple[Invariant, ...] = (
    # -- shared by the suites --------------------------------------------------------------
    invariant(
        "adapter-check",
        """The implementation's own check() finds no problem (an extra judged last,
        never the oracle).""",
        *SUITES,
    ),
    invariant(
        "legal-history",
        """The history the implementation exposes is append-only and one unbroken
        chain of the bundled definition's moves from its initial state, and it stands
        where what the suite saw says it stands.""",
        "exactly-once suite",
        "transfer suite",
    ),
    invariant(
        "refusal-changes-nothing",
        """An operation that is refused changes nothing: no state, no history, no call
        upstream, no callback.""",
        "transfer suite",
        "conformance suite",
    ),
    # -- the exactly-once suite ------------------------------------------------------------
    invariant(
        "one-send-per-claim",
        """The upstream receives at most one send per claim (the first call of a key,
        and the first call after each accepted reclaim), and no second caller starts
        the effect while a holder's lease may be live.""",
        "exactly-once suite",
    ),
    invariant(
        "no-retry-after-send",
        "An error the effect raised after it sent is never retried within its claim.",
        "exactly-once suite",
    ),
    invariant(
        "indeterminate-has-cause",
        """A caller is told indeterminate only with a cause: the holder's lease
        expired, the holder crashed, or its own run failed after it may have sent;
        never while another caller holds a live lease and nothing failed, nor to the
        holder whose own effect returned while nothing failed.""",
        "exactly-once suite",
    ),
    invariant(
        "failed-has-cause",
        """A caller is told its effect failed only with a cause: the effect raised the
        proof that nothing was sent, a write of the call failed, or the failure was
        recorded before (replayed) or decided by a person; never for an effect nobody
        ran.""",
        "exactly-once suite",
    ),
    invariant(
        "indeterminate-stays",
        """A key any caller was told is indeterminate stays indeterminate for every
        later caller until an explicit reclaim or decision (a late holder cannot settle
        it).""",
        "exactly-once suite",
    ),
    invariant(
        "replay-identical",
        """A result or error a caller was given replays identically to every later
        caller, and nothing runs the effect again.""",
        "exactly-once suite",
    ),
    invariant(
        "failure-replayed",
        """A failure a caller was told (an error that proved nothing was sent, or a
        person's decision that the effect did not land) is kept: every later caller is
        told the same failure, and the effect does not run again under the key. A
        policy: an executor that frees the key instead, so that a later call runs the
        effect afresh as a new claim (as an idempotency key of Stripe's does when the
        request never started), is safe too: nothing landed (the guarantees judge the
        rest).""",
        "exactly-once suite",
        kind=POLICY,
    ),
    invariant(
        "interrupted-parks",
        """A caller cancelled or interrupted inside the effect (asyncio.CancelledError,
        KeyboardInterrupt) leaves the key parked at once: indeterminate for every later
        caller, never free to run again without a reclaim. A policy: an executor that
        keeps the interrupted caller's lease until it expires, and then parks, is safe
        too (the guarantees judge it).""",
        "exactly-once suite",
        kind=POLICY,
    ),
    invariant(
        "expired-lease-parks",
        """A key whose holder died or stalled past its lease is parked for the next
        caller: told indeterminate, neither run again nor reported in progress.""",
        "exactly-once suite",
    ),
    invariant(
        "bounded-retries",
        """A call starts its effect a bounded number of times, even on errors that
        prove nothing was sent (the suite stops a call at start number 20).""",
        "exactly-once suite",
    ),
    invariant(
        "failed-means-not-sent",
        "A caller is told the effect failed only when nothing was sent in the claim.",
        "exactly-once suite",
    ),
    invariant(
        "result-from-upstream",
        """A result given to a caller is what the upstream answered in that claim, or
        what a person decided.""",
        "exactly-once suite",
    ),
    invariant(
        "in-progress-means-held",
        """A caller is told 'in progress' only while another caller may hold the key's
        lease.""",
        "exactly-once suite",
    ),
    invariant(
        "explicit-exit",
        """A parked key accepts a reclaim (the next call runs the effect under a fresh
        claim) and a decision (every later caller gets it); a key that is not parked
        refuses both.""",
        "exactly-once suite",
    ),
    invariant(
        "typed-answer",
        """Every answer is a result, EffectFailed, EffectIndeterminate or
        EffectInProgress (or StoreError, when a write of the call was made to fail before
        anything was sent), a refusal is a MachinesError, only an interrupt the effect
        raised passes through, and advance_clock, fail_next_write and restart raise
        nothing.""",
        "exactly-once suite",
    ),
    # -- the effect-log suite --------------------------------------------------------------
    invariant(
        "at-most-once",
        """A signature takes effect upstream at most once, ever: its tool never runs
        again after it was sent; only an error that proves nothing was sent frees
        it.""",
        "effect-log suite",
    ),
    invariant(
        "approval",
        """An irreversible call runs only right after a human approved it, once per
        approval, and never after a rejection.""",
        "effect-log suite",
    ),
    invariant(
        "replay",
        """Once a caller is told a result, every later caller gets that very result and
        nothing runs; no caller gets a result that no run returned.""",
        "effect-log suite",
    ),
    invariant(
        "unknown-stays-unknown",
        """A call whose outcome is unknown is never run again nor answered with a
        result; only the saga may compensate it.""",
        "effect-log suite",
    ),
    invariant(
        "cancelled-stays-unknown",
        """A caller cancelled or interrupted inside the tool leaves the effect unknown:
        never free to run again, never answered with a result.""",
        "effect-log suite",
    ),
    invariant(
        "saga-newest-first",
        """The saga undoes a session's effects newest first. A policy: a saga whose
        compensations do not depend on one another may undo them in another
        order.""",
        "effect-log suite",
        kind=POLICY,
    ),
    invariant(
        "saga-only-unknown",
        """The saga undoes only its own session's effects whose outcome is unknown
        (never a committed one, never one that did not take effect).""",
        "effect-log suite",
    ),
    invariant(
        "saga-once",
        "The saga undoes each effect at most once, ever.",
        "effect-log suite",
    ),
    invariant(
        "saga-completes",
        """A saga that returns, or stops with an error while no compensation it ran
        failed, has undone every unknown effect of its session that has a
        compensation.""",
        "effect-log suite",
    ),
    invariant(
        "history-chain",
        """The history the log exposes is a legal chain of the bundled 'effect'
        definition and is only ever appended to.""",
        "effect-log suite",
    ),
    invariant(
        "history-agrees",
        "The state the exposed history ends in agrees with what the suite saw.",
        "effect-log suite",
    ),
    invariant(
        "told-truth",
        "Every answer a caller gets is explained by what happened in the call.",
        "effect-log suite",
    ),
    invariant(
        "not-sent-runs-again",
        """A call whose tool proved nothing was sent (NotSent) leaves its signature free:
        a later call runs the tool again. A policy: a log that keeps the failure instead,
        and tells every later caller it did not happen (EffectFailed, or EffectClosed),
        never running the tool again, is safe too.""",
        "effect-log suite",
        kind=POLICY,
    ),
    invariant(
        "decisions",
        """The log accepts a human decision only on an irreversible call that waits for
        one, and refuses none there.""",
        "effect-log suite",
    ),
    invariant(
        "contract",
        """The adapter keeps its contract: it raises only the errors the contract names
        and returns what each method must; an error that escapes a step is reported
        under this rule, with the run that raised it.""",
        "effect-log suite",
        "transfer suite",
    ),
    # -- the transfer suite ----------------------------------------------------------------
    invariant(
        "submit-once",
        "submit() is called at most once per node: nothing is ever resent.",
        "transfer suite",
    ),
    invariant(
        "money-in-flight-held",
        """Work that may have moved money is never failed, abandoned or released: no
        release of the reservation (request_failed, or a move into a releasing state)
        and no giving up on a sent node with a side effect until the venue or a
        reconciler said it failed, unless an operator confirmed the failure.""",
        "transfer suite",
    ),
    invariant(
        "callbacks-once",
        """request_completed and request_failed fire at most once per request, never
        both, and only for requests that were submitted.""",
        "transfer suite",
    ),
    invariant(
        "sent-work-kept",
        """A node whose submit went out is never given up (failed, cancelled, skipped)
        on the engine's own say, side effect or not: the bundled definition's 'failed'
        means the evidence says it did not take effect, so only the venue's or a
        reconciler's 'failed' ends it so (a sibling's failure is no such
        evidence).""",
        "transfer suite",
    ),
    invariant(
        "gate-waits-for-operator",
        """A manual gate is never handed to the venue, and is handed to the gate desk
        (venue.gate) only once an operator's complete_manual for it was accepted.""",
        "transfer suite",
    ),
    invariant(
        "reservation-with-the-end",
        """The reservation is released only as the request ends in a releasing state
        (with request_failed) and consumed only as it completes (with
        request_completed): between steps, every release or consumption announced to
        venue.reservation() and every such callback come in pairs, once each.""",
        "transfer suite",
    ),
    invariant(
        "after-predecessors",
        """No node is handed to the venue or the gate desk, and no manual gate is passed,
        before every node it comes after is done, however far back (the venue or a
        reconciler said completed, an operator passed the gate, or a planner skipped it: a
        skipped node or a passed gate says nothing of the nodes before it; a skipped manual
        gate is not done, since only an operator passes one).""",
        "transfer suite",
    ),
    invariant(
        "halt-after-failure",
        """Once the venue or a reconciler said a node failed (and the engine went on),
        the engine starts nothing new for that request: no prepare, no submit. A
        policy: an engine that goes on with work independent of the failed node,
        holding whatever money may be in flight, is safe too.""",
        "transfer suite",
        kind=POLICY,
    ),
    invariant(
        "in-flight-asked",
        """Work in flight is never left unasked about for good: a step of a started
        request asks the venue about each node in flight (accepted or pending, or a
        reconciler's "submitted", no final word since) that it was last asked about more
        than the engine's declared bound ago on the suite's clock (``follow_within``, the
        submit timeout unless a suite declares its own): an engine may back off between
        polls; it may not stop.""",
        "transfer suite",
    ),
    invariant(
        "in-flight-followed",
        """Work in flight is followed to its end: until a started request ends, every
        step of it that ends normally asks the venue about each node the venue
        accepted (or said pending) without a final word since. A policy: an engine that
        asks less often (a backoff between polls) is safe too, as long as it gives up no
        work in flight (the guarantees judge that).""",
        "transfer suite",
        kind=POLICY,
    ),
    invariant(
        "request-kept",
        "A request the engine accepted stays known to it.",
        "transfer suite",
    ),
    # -- the conformance suite (and the spec walker, which is it on our runtime) -----------
    invariant(
        "entity-created-as-defined",
        """An entity can be created under every valuation of the definition's context,
        and starts where it was created (the initial state, unless the suite resumed
        one mid-life) with an empty history.""",
        "conformance suite",
    ),
    invariant(
        "legal-move-accepted",
        """Every move the definition allows from the entity's state, by that actor,
        under the entity's context, is accepted and leaves the entity in the state the
        definition moves it to.""",
        "conformance suite",
    ),
    invariant(
        "illegal-move-refused",
        """Every move the definition does not allow (an unknown trigger or actor, a
        trigger not defined from the state, an actor not allowed to fire it, a guard
        the context fails) is refused.""",
        "conformance suite",
    ),
    invariant(
        "terminal-stays-final",
        "Nothing ever leaves a terminal state.",
        "conformance suite",
    ),
    invariant(
        "history-is-a-legal-chain",
        """The exposed history of every entity is exactly the moves the suite saw it
        make, in the order it made them (each event's number above the one before), an
        unbroken chain from where it started each move of which the definition allows,
        and it ends in the state the entity reads.""",
        "conformance suite",
    ),
    invariant(
        "entity-stays-readable",
        """Once the implementation has read an entity's state, its history, or an event
        of it well, every later read of that part of every entity succeeds: a state is
        a name, a history a list, an event well-formed, never an error (a step that
        deletes or garbles a row is the implementation's bug, not the adapter's
        shape).""",
        "conformance suite",
    ),
)
"""Every rule a property suite judges, in the order the site lists them."""
