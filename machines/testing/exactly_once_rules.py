"""The rules of ``ExactlyOnceSuite``'s verdicts, by name.

Each rule has a short stable name, the first word of every failure that breaks it, so a
user's CI can tell one broken promise from another; ``RULES`` says what each promises.
"""

from __future__ import annotations

from collections.abc import Mapping

ATTEMPTS = 20
"""How many starts of its effect the suite lets one call make: a retry loop with no bound
would hold the user's CI (and the suite's record) for ever."""

RULES: Mapping[str, str] = {
    "one-send-per-claim": (
        "the upstream receives at most one send per claim (the first call of a key, and the "
        "first call after each accepted reclaim), and no second caller starts the effect "
        "while a holder's lease may be live"
    ),
    "no-retry-after-send": (
        "an error the effect raised after it sent is never retried within its claim"
    ),
    "indeterminate-stays": (
        "a key any caller was told is indeterminate stays indeterminate for every later "
        "caller until an explicit reclaim or decision (a late holder cannot settle it)"
    ),
    "replay-identical": (
        "a result or error a caller was given replays identically to every later caller, "
        "and nothing runs the effect again"
    ),
    "interrupted-parks": (
        "a caller cancelled or interrupted inside the effect (asyncio.CancelledError, "
        "KeyboardInterrupt) leaves the key parked: indeterminate for every later caller, "
        "never free to run again without a reclaim"
    ),
    "expired-lease-parks": (
        "a key whose holder died or stalled past its lease is parked for the next caller: "
        "told indeterminate, neither run again nor reported in progress"
    ),
    "bounded-retries": (
        "a call starts its effect a bounded number of times, even on errors that prove "
        f"nothing was sent (the suite stops a call at start number {ATTEMPTS})"
    ),
    "failed-means-not-sent": (
        "a caller is told the effect failed only when nothing was sent in the claim"
    ),
    "result-from-upstream": (
        "a result given to a caller is what the upstream answered in that claim, or what a "
        "person decided"
    ),
    "in-progress-means-held": (
        "a caller is told 'in progress' only while another caller may hold the key's lease"
    ),
    "explicit-exit": (
        "a parked key accepts a reclaim (the next call runs the effect under a fresh claim) "
        "and a decision (every later caller gets it); a key that is not parked refuses both"
    ),
    "typed-answer": (
        "every answer is a result, EffectFailed, EffectIndeterminate or EffectInProgress, "
        "a refusal is a MachinesError, only an interrupt the effect raised passes through, "
        "and advance_clock, fail_next_write and restart raise nothing"
    ),
    "legal-history": (
        "the history the adapter exposes is append-only, a legal chain of the bundled "
        "outcome definition, and stands where what the callers were told says"
    ),
    "adapter-check": "the adapter's own check() finds no problem",
}
"""Every rule the suite judges, by the name its failure message starts with."""
