"""What only the runner of an effect's run can write: a proof (commit and reveal) that a
move out of ``executing``, or a note of how the run ended, was made by the process that
started the run, not by anyone else with the application's rights.

A run starts by a move (``execute`` or ``resume``) whose history event (append-only)
carries the SHA-256 of a secret the runner keeps in memory, and the process that started
it (host, pid, start time). The runner reveals the secret in what it writes when the run
ends: the ``commit`` or ``fail`` move's detail, or the note on the row that says its
outcome is unknown. Whoever may write the table can read the digest but not the secret
while the run is on, so a ``fail`` it forges to reopen an effect whose runner died, or a
note it forges to have the saga undo a call still running, reveals nothing: the next
claim refuses the effect (``EffectRewritten``), the saga leaves the call, and the audit
names the move (outsider batches 23 and 25). A run started before this release has no
digest and is taken as it is.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from machines.runtime.history import TransitionEvent
from machines.store.records import Row

PROOF = "proof"
"""The field of a run's starting event's detail: the SHA-256 (hex) of the secret the move
that ends the run reveals (``commit``, ``fail``)."""
NOTE_PROOF = "note_proof"
"""The same for the secret the note of an unknown outcome reveals: another secret, since
the note is on the row, where whoever may write the table reads it, and the run can still
be ended after it (batch 26: a note's secret let a forged ``commit`` through)."""
SECRET = "secret"
"""The field in which the runner reveals a secret: the detail of the move that ends the
run, or the note."""
PROCESS = "process"
"""The field of a run's starting event's detail naming the process that started it."""
STARTS = ("execute", "resume")
"""The moves that start a run (into ``executing``)."""
ENDS = ("commit", "fail")
"""The runner's own moves out of ``executing``, each of which reveals the run's secret."""


class Claim(NamedTuple):
    """A run the log has just started: the row its starting move wrote, and the secrets
    only this runner knows (one its end reveals, one its note does)."""

    row: Row
    secret: str
    note_secret: str

    @property
    def proof(self) -> str:
        return digest(self.secret)


def new_secret() -> tuple[str, str]:
    """A secret and the digest a run's starting event carries."""
    secret = secrets.token_hex(16)
    return secret, digest(secret)


RUNNING: set[str] = set()
"""The proofs of every run this process is making now, from before its claim commits until
the call has returned (batch 26: keyed by the store's URL as typed, a run on the same
database opened under another spelling was undone under its runner; registered only once
the claim had committed, a saga between the two undid a call about to be sent)."""
RUNNING_LOCK = threading.Lock()


def running(proof: str) -> None:
    with RUNNING_LOCK:
        RUNNING.add(proof)


def over(proof: str) -> None:
    with RUNNING_LOCK:
        RUNNING.discard(proof)


def running_here(start: TransitionEvent | None) -> bool:
    """Whether the run ``start`` began is one this process is making now."""
    proof = (start.detail or {}).get(PROOF) if start is not None else None
    with RUNNING_LOCK:
        return isinstance(proof, str) and proof in RUNNING


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii", "replace")).hexdigest()


def reveals(
    start: TransitionEvent | None, said: Mapping[str, Any] | None, proof_field: str = PROOF
) -> bool:
    """Whether ``said`` (a move's detail, or with ``NOTE_PROOF`` a note) reveals the
    secret of the run that ``start`` began; a run whose start carries no proof (from
    before this release) is taken as it is."""
    proof = (start.detail or {}).get(proof_field) if start is not None else None
    if not isinstance(proof, str):
        return True
    secret = (said or {}).get(SECRET)
    return isinstance(secret, str) and secret.isascii() and digest(secret) == proof


def run_start(history: Sequence[TransitionEvent]) -> TransitionEvent | None:
    """The event that started the effect's latest run (None: it never ran)."""
    starts = [e for e in history if e.trigger in STARTS and e.dest == "executing"]
    return starts[-1] if starts else None


def unproven_end(history: Sequence[TransitionEvent]) -> TransitionEvent | None:
    """The first move out of ``executing`` by the runner's own triggers that does not
    reveal the secret of the run it ends: a move its runner did not make."""
    start: TransitionEvent | None = None
    for event in history:
        if (
            event.source == "executing"
            and event.trigger in ENDS
            and not reveals(start, event.detail)
        ):
            return event
        if event.dest == "executing" and event.trigger in STARTS:
            start = event
    return None


def unproven(event: TransitionEvent, so: str = "") -> str:
    """Why ``event`` (an ``unproven_end``) proves nothing, for a refusal's message."""
    told = f"its '{event.trigger}' (move #{event.seq}) was not made by the run's runner (it "
    told += "does not reveal the secret the run started with)"
    return f"{told}, so {so} no run's" if so else told
