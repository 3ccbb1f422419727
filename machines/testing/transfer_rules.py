"""The rules of ``TransferSuite``'s verdicts, by name.

Each rule has a short stable name, the first word of every failure that breaks it, so a
user's CI can tell one broken promise from another; ``RULES`` says what each promises.
"""

from __future__ import annotations

from collections.abc import Mapping

RULES: Mapping[str, str] = {
    "submit-once": "submit() is called at most once per node: nothing is ever resent",
    "money-in-flight-held": (
        "work that may have moved money is never failed, abandoned or released: no "
        "release of the reservation (request_failed, or a move into a releasing state) and "
        "no giving up on a sent node with a side effect until the venue or a reconciler "
        "said it failed, unless an operator confirmed the failure"
    ),
    "completion-means-done": (
        "a request is completed only when every node of its plan is done (the venue or a "
        "reconciler said completed, a planner skipped it, an operator passed the gate), "
        "unless an operator confirmed the completion"
    ),
    "callbacks-once": (
        "request_completed and request_failed fire at most once per request, never both, "
        "and only for requests that were submitted"
    ),
    "refusal-changes-nothing": (
        "an operation the engine refuses calls no venue, fires no callback and writes nothing"
    ),
    "legal-history": (
        "the moves the engine records form one unbroken chain of the bundled definition's "
        "edges from its initial state, and never change once recorded"
    ),
    "sent-work-kept": (
        "a node whose submit went out is never given up (failed, cancelled, skipped) on the "
        "engine's own say, side effect or not: the bundled definition's 'failed' means the "
        "evidence says it did not take effect, so only the venue's or a reconciler's "
        "'failed' ends it so (a sibling's failure is no such evidence)"
    ),
    "gate-waits-for-operator": (
        "a manual gate is never handed to the venue, and is handed to the gate desk "
        "(venue.gate) only once an operator's complete_manual for it was accepted"
    ),
    "reservation-with-the-end": (
        "the reservation is released only as the request ends in a releasing state "
        "(with request_failed) and consumed only as it completes (with request_completed): "
        "between steps, every release or consumption announced to venue.reservation() "
        "and every such callback come in pairs, once each"
    ),
    "after-predecessors": (
        "no node is handed to the venue or the gate desk before every node it comes after "
        "is done (the venue or a reconciler said completed, a planner skipped it, an "
        "operator passed the gate)"
    ),
    "halt-after-failure": (
        "once the venue or a reconciler said a node failed (and the engine went on), the "
        "engine starts nothing new for that request: no prepare, no submit"
    ),
    "in-flight-followed": (
        "work in flight is followed to its end: until a started request ends, every step "
        "of it that ends normally asks the venue about each node the venue accepted (or "
        "said pending) without a final word since"
    ),
    "request-kept": "a request the engine accepted stays known to it",
    "adapter-check": "the implementation's own checks (an extra, never the oracle)",
}
"""Every rule the transfer suite judges: name -> what it promises. A failure's message
starts with the name."""
