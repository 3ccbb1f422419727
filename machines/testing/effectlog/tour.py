"""The effect-log suite's tour: every behaviour of every kind of call, and what can meet
it next, walked once before the random runs.

A signature's life is short: a call of it ends returned, failed provably, unknown, or
refused, and the next step meets that. So the tour runs, each on a fresh log: every
behaviour of a compensable call alone; each followed by a second call of every behaviour,
by a call of the signature that has no compensation, by the saga of its session in each
way it can go, and by a human's decision on it (which the log must refuse); two unknown
calls undone by the saga, twice, in each way it can go; then the irreversible call, alone,
after a rejection, and after an approval, followed by every behaviour of a second call or a
person's decision either way. A run whose next step cannot be taken (the saga has nothing
to do) ends there.
"""

from __future__ import annotations

from machines.testing.effectlog.rules import Behaviour, Saga
from machines.testing.recorded import Step


def _call(signature: str, behaviour: Behaviour) -> Step:
    rule = {"1": "call", "2": "call_in_s2"}[signature[-1]]
    if signature.startswith("wire"):
        rule = "call_irreversible"
    return Step(rule, {"signature": signature, "behaviour": behaviour})


def _decide(signature: str, approve: bool) -> Step:
    return Step("human_decides", {"signature": signature, "approve": approve})


def _saga(session: str, saga: Saga) -> Step:
    return Step("compensate", {"session": session, "saga": saga})


def tour_runs() -> list[list[Step]]:
    """Every run of the tour, shortest first."""
    first = [_call("charge-1", b) for b in Behaviour]
    follows: list[Step] = [
        *(_call("charge-1", b) for b in Behaviour),
        _call("notify-1", Behaviour.TIMEOUT),
        *(_saga("s1", saga) for saga in Saga),
        _decide("charge-1", True),
    ]
    runs: list[list[Step]] = [[call] for call in first]
    runs += [[_call("wire-1", b)] for b in Behaviour]
    runs += [[call, then] for call in first for then in follows]
    unknown = [_call("charge-1", Behaviour.TIMEOUT), _call("book-1", Behaviour.TIMEOUT)]
    runs += [[*unknown, _saga("s1", saga), _saga("s1", again)] for saga in Saga for again in Saga]
    asked = _call("wire-1", Behaviour.RETURN)  # the log records the call; it awaits a person
    approved = [asked, _decide("wire-1", True)]
    runs += [[asked, _decide("wire-1", False), _call("wire-1", b)] for b in Behaviour]
    runs += [[*approved, _call("wire-1", b)] for b in Behaviour]
    runs += [
        [*approved, _call("wire-1", b), then]
        for b in Behaviour
        for then in [
            *(_call("wire-1", b2) for b2 in Behaviour),
            _decide("wire-1", True),
            _decide("wire-1", False),
            _saga("s1", Saga.WORKS),
        ]
    ]
    return runs
