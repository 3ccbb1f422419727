"""An independent oracle: the seed documents' tables, transcribed by hand, checked against
the loaded definitions.

Nothing here reads ``spec/*.yaml`` to build its expectations. The state lists, valid edges,
invalid moves and terminal states below are copied from the seeds in ``/work/shared/seeds``
(000 effect, 003 request and node, 004 outcome), spelled as the seeds spell them and turned
into lower_snake names by ``snake``. Only trigger and actor names come from the loaded spec,
because the seeds do not define them.

Where the spec deliberately departs from a seed it says so (an ``amendment`` on the
transition, a finding with that id); those departures are listed in ``AMENDED_EDGES`` and
in the tier / kind / side-effect guard tests, never silently absorbed.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import pytest

import machines
from machines.spec import MachineSpec

MACHINES = ("effect", "outcome", "node", "request")


def snake(seed_name: str) -> str:
    """``CompensationFailed`` -> ``compensation_failed``; ``AWAITING_SIGNATURE`` ->
    ``awaiting_signature``; ``in_flight`` stays."""
    if seed_name.isupper() or "_" in seed_name or seed_name.islower():
        return seed_name.lower()
    return re.sub(r"(?<!^)(?=[A-Z])", "_", seed_name).lower()


# ---------------------------------------------------------------------------------------
# Seed data, transcribed
# ---------------------------------------------------------------------------------------

# Seed 000 "States" section (enum name -> DB value), in the seed's order.
EFFECT_DB_VALUES = {
    "Pending": "pending",
    "Executing": "executing",
    "Committed": "committed",
    "Compensating": "compensating",
    "Compensated": "compensated",
    "CompensationFailed": "compensation_failed",
    "Approved": "approved",
    "Rejected": "rejected",
    "Replayed": "replayed",
}

SEED_STATES: dict[str, tuple[str, ...]] = {
    # seed 000, "States"
    "effect": tuple(EFFECT_DB_VALUES),
    # seed 004: "in_flight, succeeded, failed, or indeterminate"
    "outcome": ("in_flight", "succeeded", "failed", "indeterminate"),
    # seed 003, NodeState "State descriptions"
    "node": (
        "BLOCKED",
        "READY",
        "PREPARING",
        "AWAITING_SIGNATURE",
        "SUBMITTING",
        "SUBMITTED",
        "OBSERVING",
        "COMPLETED",
        "FAILED",
        "UNKNOWN",
        "CANCELLED",
        "SKIPPED",
    ),
    # seed 003, RequestState "State descriptions"
    "request": (
        "RECEIVED",
        "VALIDATED",
        "PENDING_APPROVAL",
        "APPROVED",
        "EXECUTING",
        "WAITING_MANUAL_ACTION",
        "COMPLETED",
        "FAILED",
        "MANUAL_INTERVENTION",
        "REJECTED",
        "EXPIRED",
        "CANCELLED",
    ),
}

SEED_STATE_COUNTS = {"effect": 9, "outcome": 4, "node": 12, "request": 12}

SEED_TERMINAL: dict[str, frozenset[str]] = {
    # seed 000 "Terminal States" table and the Rust is_terminal
    "effect": frozenset({"Committed", "Compensated", "CompensationFailed", "Rejected", "Replayed"}),
    # seed 004: the succeeded / failed outcomes are final (indeterminate is parked, see the
    # spec's finding indeterminate-called-final)
    "outcome": frozenset({"succeeded", "failed"}),
    # seed 003 NodeState graph: the states with "--> [*]"
    "node": frozenset({"COMPLETED", "FAILED", "CANCELLED", "SKIPPED"}),
    # seed 003 "Terminal States (Terminal. No further transitions.)"
    "request": frozenset({"COMPLETED", "FAILED", "REJECTED", "EXPIRED", "CANCELLED"}),
}

SEED_INITIAL = {
    "effect": "Pending",  # "Initial state for all intercepted tool calls"
    "outcome": "in_flight",  # "where it always starts"
    "node": "BLOCKED",  # "[*] --> BLOCKED"
    "request": "RECEIVED",  # "[*] --> RECEIVED"
}

# Context values as the seeds (and the brief) define them; "safe" is refused for effects.
CONTEXTS: dict[str, dict[str, tuple[str, ...]]] = {
    "effect": {"tier": ("compensable", "irreversible")},
    "outcome": {},
    "node": {"kind": ("action", "observe")},
    "request": {"side_effects": ("none", "started")},
}

# Valid edges: (seed source, seed dest, seed label).
SEED_VALID: dict[str, tuple[tuple[str, str, str], ...]] = {
    # seed 000 "Valid Transitions" table
    "effect": (
        ("Pending", "Executing", "Intercept -> Execute"),
        ("Pending", "Approved", "Human approves via dashboard"),
        ("Pending", "Rejected", "Human rejects via dashboard"),
        ("Pending", "Replayed", "Intercept -> Replay"),
        ("Executing", "Committed", "Commit RPC"),
        ("Executing", "Pending", "Fail RPC (reset to retry)"),
        ("Executing", "Compensating", "Saga orchestrator on session failure"),
        ("Approved", "Executing", "Proxy resumes tool call"),
        ("Compensating", "Compensated", "Compensation succeeds"),
        ("Compensating", "CompensationFailed", "Compensation exhausted retries"),
    ),
    # seed 004 diagram (three exits of in_flight) and prose ("reclaim ... re-executes it
    # under a fresh claim": the only non-automatic way back to in_flight)
    "outcome": (
        ("in_flight", "succeeded", "effect ran, result persisted"),
        ("in_flight", "failed", "provably did not happen"),
        ("in_flight", "indeterminate", "we do not know"),
        ("indeterminate", "in_flight", "explicit reclaim, re-executed under a fresh claim"),
    ),
    # seed 003 NodeState mermaid graph
    "node": (
        ("BLOCKED", "READY", "predecessor completed"),
        ("BLOCKED", "SKIPPED", "conditional skip"),
        ("READY", "PREPARING", "preparation started"),
        ("READY", "OBSERVING", "observe-kind node"),
        ("READY", "SKIPPED", "conditional skip"),
        ("READY", "FAILED", "dispatch-time fatal"),
        ("PREPARING", "AWAITING_SIGNATURE", "signature needed"),
        ("PREPARING", "SUBMITTING", "no signature needed"),
        ("PREPARING", "READY", "retry"),
        ("PREPARING", "FAILED", "preparation failed"),
        ("AWAITING_SIGNATURE", "SUBMITTING", "signature completed"),
        ("AWAITING_SIGNATURE", "READY", "retry"),
        ("AWAITING_SIGNATURE", "FAILED", "signature failed/rejected"),
        ("SUBMITTING", "SUBMITTED", "submission succeeded"),
        ("SUBMITTING", "COMPLETED", "sync-terminal submit"),
        ("SUBMITTING", "FAILED", "submission failed (certain)"),
        ("SUBMITTING", "UNKNOWN", "submission result uncertain"),
        ("SUBMITTED", "OBSERVING", "observation started"),
        ("SUBMITTED", "COMPLETED", "immediately completed"),
        ("SUBMITTED", "FAILED", "post-submit failure confirmed"),
        ("SUBMITTED", "UNKNOWN", "observation became uncertain"),
        ("OBSERVING", "COMPLETED", "observation confirmed success"),
        ("OBSERVING", "FAILED", "observation confirmed failure"),
        ("OBSERVING", "UNKNOWN", "state uncertain during observation"),
        ("UNKNOWN", "SUBMITTED", "recovered via reconciliation"),
        ("UNKNOWN", "COMPLETED", "reconciliation confirmed success"),
        ("UNKNOWN", "FAILED", "reconciliation confirmed failure"),
    ),
    # seed 003 RequestState mermaid graph
    "request": (
        ("RECEIVED", "VALIDATED", "input validation passed"),
        ("RECEIVED", "FAILED", "input validation failed"),
        ("VALIDATED", "PENDING_APPROVAL", "enter pending approval"),
        ("PENDING_APPROVAL", "APPROVED", "operator approved"),
        ("PENDING_APPROVAL", "REJECTED", "operator rejected"),
        ("PENDING_APPROVAL", "EXPIRED", "approval timeout"),
        ("APPROVED", "EXECUTING", "execution started"),
        ("APPROVED", "FAILED", "pre-execution error"),
        ("EXECUTING", "COMPLETED", "all nodes completed"),
        ("EXECUTING", "FAILED", "node failed (no side-effect)"),
        ("EXECUTING", "MANUAL_INTERVENTION", "node failed (has side-effect!)"),
        ("EXECUTING", "WAITING_MANUAL_ACTION", "manual_gate node waiting"),
        ("EXECUTING", "CANCELLED", "operator cancelled"),
        ("WAITING_MANUAL_ACTION", "EXECUTING", "manual action completed"),
        ("WAITING_MANUAL_ACTION", "CANCELLED", "operator cancelled"),
        ("MANUAL_INTERVENTION", "EXECUTING", "operator recovered and resumed"),
        ("MANUAL_INTERVENTION", "FAILED", "operator confirmed failure"),
        ("MANUAL_INTERVENTION", "COMPLETED", "operator confirmed completion"),
    ),
}

# Edges the spec adds on purpose (recorded as amendments); not in any seed graph.
AMENDED_EDGES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "effect": (),
    "outcome": (
        ("indeterminate", "succeeded", "gate decision: it landed"),
        ("indeterminate", "failed", "gate decision: it did not land"),
    ),
    "node": (
        ("BLOCKED", "CANCELLED", "operator cancel (seed has no edge into CANCELLED)"),
        ("READY", "CANCELLED", "operator cancel (seed has no edge into CANCELLED)"),
    ),
    "request": (),
}

# Invalid moves the seeds name: (seed source, seed dest or "*", keyword of the reason, label).
SEED_INVALID: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    # seed 000 "Invalid Transitions" table
    "effect": (
        ("Committed", "*", "terminal", "Terminal state. No further transitions."),
        ("Compensated", "*", "terminal", "Terminal state. No further transitions."),
        ("CompensationFailed", "*", "terminal", "Terminal state. No further transitions."),
        ("Rejected", "*", "terminal", "Terminal state. No further transitions."),
        ("Replayed", "*", "terminal", "Terminal state. No further transitions."),
        ("Pending", "Compensating", "prior execution", "Compensation requires prior execution."),
        ("Committed", "Compensating", "retry", "Compensation retry path not implemented."),
        ("Executing", "Approved", "pending", "Approval is only from Pending."),
        ("Pending", "Committed", "execut", "Must execute first."),
    ),
    # seed 004: succeeded / failed are final; retries are not transitions
    "outcome": (
        ("succeeded", "*", "terminal", "final: result replayed"),
        ("failed", "*", "terminal", "final: typed error replayed"),
        ("in_flight", "in_flight", "retr", "retries happen inside in_flight, not as a state"),
    ),
    # seed 003 "Transition rule validation" examples, and the node terminals ("--> [*]")
    "node": (
        ("COMPLETED", "*", "terminal", "end state"),
        ("FAILED", "*", "terminal", "end state"),
        ("CANCELLED", "*", "terminal", "end state"),
        ("SKIPPED", "*", "terminal", "end state"),
        ("FAILED", "READY", "awaken", "a failed node cannot be directly awakened"),
        ("OBSERVING", "PREPARING", "backward", "going backwards is not allowed"),
    ),
    # seed 003 "Terminal states have no allowed outgoing transitions" and the example
    "request": (
        ("COMPLETED", "*", "terminal", "Terminal. No further transitions."),
        ("FAILED", "*", "terminal", "Terminal. No further transitions."),
        ("REJECTED", "*", "terminal", "Terminal. No further transitions."),
        ("EXPIRED", "*", "terminal", "Terminal. No further transitions."),
        ("CANCELLED", "*", "terminal", "Terminal. No further transitions."),
        ("COMPLETED", "EXECUTING", "restart", "something already finished cannot restart"),
    ),
}


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


@cache
def spec_of(machine: str) -> MachineSpec:
    return machines.load(machine)


def states_of(machine: str) -> tuple[str, ...]:
    return tuple(snake(s) for s in SEED_STATES[machine])


def terminals_of(machine: str) -> frozenset[str]:
    return frozenset(snake(s) for s in SEED_TERMINAL[machine])


def contexts(machine: str) -> list[dict[str, str]]:
    """Every full context of the machine (one value for every variable)."""
    variables = CONTEXTS[machine]
    names = sorted(variables)
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(variables[n] for n in names))
    ]


def triggers(machine: str) -> list[str]:
    return sorted({t.trigger for t in spec_of(machine).transitions})


def actors(machine: str) -> list[str]:
    return list(spec_of(machine).actors)


@dataclass(frozen=True)
class Move:
    source: str
    trigger: str
    actor: str
    context: tuple[tuple[str, str], ...]
    dest: str


@cache
def moves(machine: str) -> tuple[Move, ...]:
    """Every successful ``spec.step`` over all seed states x triggers x actors x contexts.

    Any exception other than ``InvalidStateTransition`` propagates and fails the test.
    """
    spec = spec_of(machine)
    out: list[Move] = []
    for source in states_of(machine):
        for trigger in triggers(machine):
            for actor in actors(machine):
                for ctx in contexts(machine):
                    try:
                        dest = spec.step(source, trigger, actor=actor, **ctx)
                    except machines.InvalidStateTransition:
                        continue
                    out.append(Move(source, trigger, actor, tuple(sorted(ctx.items())), dest))
    return tuple(out)


def step_pairs(machine: str) -> set[tuple[str, str]]:
    return {(m.source, m.dest) for m in moves(machine)}


def reachable(machine: str, **ctx: str) -> set[str]:
    """States reachable from the seed's initial state using ``step`` only, under ``ctx``
    (variables left out range over all their values)."""
    fixed = tuple(sorted(ctx.items()))
    wanted = [c for c in contexts(machine) if all(dict(c).get(k) == v for k, v in fixed)] or [{}]
    allowed_ctx = {tuple(sorted(c.items())) for c in wanted}
    start = snake(SEED_INITIAL[machine])
    seen = {start}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for m in moves(machine):
            if m.source == here and m.context in allowed_ctx and m.dest not in seen:
                seen.add(m.dest)
                queue.append(m.dest)
    return seen


def transitions_between(machine: str, source: str, dest: str) -> list:
    return [t for t in spec_of(machine).transitions if t.source == source and t.dest == dest]


def _case_id(machine: str, source: str, dest: str) -> str:
    return f"{machine}:{source}->{dest}"


@dataclass(frozen=True)
class Edge:
    machine: str
    source: str
    dest: str
    label: str


def _edges(table: dict[str, tuple[tuple[str, str, str], ...]]) -> list[Edge]:
    return [
        Edge(machine, snake(s), snake(d), label)
        for machine, rows in table.items()
        for s, d, label in rows
    ]


VALID_EDGES = _edges(SEED_VALID)
AMENDMENTS = _edges(AMENDED_EDGES)


@dataclass(frozen=True)
class Invalid:
    machine: str
    source: str
    dest: str
    keyword: str
    label: str
    wildcard: bool


def _invalid_cases() -> Iterator[Invalid]:
    for machine, rows in SEED_INVALID.items():
        specific = {(snake(s), snake(d)) for s, d, _, _ in rows if d != "*"}
        for s, d, keyword, label in rows:
            source = snake(s)
            if d == "*":
                for dest in states_of(machine):
                    if (source, dest) not in specific:
                        yield Invalid(machine, source, dest, keyword, label, True)
            else:
                yield Invalid(machine, source, snake(d), keyword, label, False)


INVALID = list(_invalid_cases())

TERMINAL_CASES = [(m, s) for m in MACHINES for s in sorted(terminals_of(m))]


def _admitted(machine: str, transition) -> list[dict[str, str]]:
    return [c for c in contexts(machine) if transition.admits(c)]


# ---------------------------------------------------------------------------------------
# 4. State sets, db values, initial states, contexts
# ---------------------------------------------------------------------------------------


def test_seed_transcription_is_self_consistent() -> None:
    for machine in MACHINES:
        names = states_of(machine)
        assert len(names) == len(set(names)) == SEED_STATE_COUNTS[machine], machine
        assert terminals_of(machine) <= set(names), machine
        edges = [e for e in VALID_EDGES + AMENDMENTS if e.machine == machine]
        for e in edges:
            assert e.source in names and e.dest in names, e
    assert snake("CompensationFailed") == "compensation_failed"
    assert snake("AWAITING_SIGNATURE") == "awaiting_signature"
    assert snake("in_flight") == "in_flight"


@pytest.mark.parametrize("machine", MACHINES)
def test_state_set_equals_seed(machine: str) -> None:
    spec = spec_of(machine)
    assert set(spec.states) == set(states_of(machine))
    assert len(spec.states) == SEED_STATE_COUNTS[machine]


@pytest.mark.parametrize("machine", MACHINES)
def test_db_value_equals_name(machine: str) -> None:
    spec = spec_of(machine)
    for name, state in spec.states.items():
        assert state.name == name
        assert state.db_value == name


@pytest.mark.parametrize(("enum_name", "db_value"), sorted(EFFECT_DB_VALUES.items()))
def test_effect_db_value_matches_seed_table(enum_name: str, db_value: str) -> None:
    spec = spec_of("effect")
    state = spec.states[snake(enum_name)]
    assert state.db_value == db_value
    assert state.name.upper() == snake(enum_name).upper()


@pytest.mark.parametrize("machine", MACHINES)
def test_initial_state_matches_seed(machine: str) -> None:
    assert spec_of(machine).initial == snake(SEED_INITIAL[machine])


@pytest.mark.parametrize("machine", MACHINES)
def test_context_values_match_seed(machine: str) -> None:
    spec = spec_of(machine)
    assert {name: tuple(var.values) for name, var in spec.context.items()} == CONTEXTS[machine]


@pytest.mark.parametrize("machine", MACHINES)
def test_every_seed_state_reachable_from_initial(machine: str) -> None:
    assert reachable(machine) == set(states_of(machine))


# ---------------------------------------------------------------------------------------
# 1. Every valid seed edge is allowed and steppable
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edge",
    VALID_EDGES,
    ids=[f"{_case_id(e.machine, e.source, e.dest)} ({e.label})" for e in VALID_EDGES],
)
def test_seed_valid_edge_is_allowed(edge: Edge) -> None:
    spec = spec_of(edge.machine)
    assert spec.allows(edge.source, edge.dest), edge.label
    assert edge.dest in {
        d for ctx in contexts(edge.machine) for d in spec.next_states(edge.source, **ctx)
    }
    found = transitions_between(edge.machine, edge.source, edge.dest)
    assert found, f"no transition {edge.source} -> {edge.dest} ({edge.label})"
    stepped = 0
    for t in found:
        admitted = _admitted(edge.machine, t)
        assert admitted, f"{t.trigger}: no context admits its guard {dict(t.when)}"
        assert t.actors, t
        for actor in t.actors:
            for ctx in admitted:
                assert spec.step(edge.source, t.trigger, actor=actor, **ctx) == edge.dest
                assert spec.allows(edge.source, edge.dest, **ctx)
                stepped += 1
    assert stepped > 0


@pytest.mark.parametrize(
    "edge",
    AMENDMENTS,
    ids=[f"{_case_id(e.machine, e.source, e.dest)} ({e.label})" for e in AMENDMENTS],
)
def test_amended_edge_is_allowed_and_recorded(edge: Edge) -> None:
    spec = spec_of(edge.machine)
    assert spec.allows(edge.source, edge.dest)
    found = transitions_between(edge.machine, edge.source, edge.dest)
    assert found
    finding_ids = {f.id for f in spec.findings}
    for t in found:
        assert t.amendment is not None, f"{t.trigger} departs from the seed without an amendment"
        assert t.amendment in finding_ids
        for actor in t.actors:
            for ctx in _admitted(edge.machine, t):
                assert spec.step(edge.source, t.trigger, actor=actor, **ctx) == edge.dest


@pytest.mark.parametrize("machine", MACHINES)
def test_allowed_pairs_are_exactly_seed_graph_plus_amendments(machine: str) -> None:
    """The seeds' rule: only explicitly listed edges are legal ("No skipping", "only
    permitted transitions should be possible")."""
    expected = {(e.source, e.dest) for e in VALID_EDGES + AMENDMENTS if e.machine == machine}
    by_step = step_pairs(machine)
    assert by_step - expected == set(), "spec steps along edges no seed lists"
    assert expected - by_step == set(), "seed edges the spec cannot step along"
    names = states_of(machine)
    by_allows = {(s, d) for s in names for d in names if spec_of(machine).allows(s, d)}
    assert by_allows == expected


# ---------------------------------------------------------------------------------------
# 2. Every invalid move the seeds name is refused
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    INVALID,
    ids=[f"{_case_id(c.machine, c.source, c.dest)} ({c.label})" for c in INVALID],
)
def test_seed_invalid_move_is_refused(case: Invalid) -> None:
    spec = spec_of(case.machine)
    assert not spec.allows(case.source, case.dest)
    for ctx in contexts(case.machine):
        assert not spec.allows(case.source, case.dest, **ctx)
        assert case.dest not in spec.next_states(case.source, **ctx)
    # Exhaustive: every trigger x actor x context from the source raises or goes elsewhere.
    tried = 0
    for trigger in triggers(case.machine):
        for actor in actors(case.machine):
            for ctx in contexts(case.machine):
                tried += 1
                try:
                    dest = spec.step(case.source, trigger, actor=actor, **ctx)
                except machines.InvalidStateTransition as exc:
                    assert exc.machine == case.machine
                    assert exc.state == case.source
                    assert exc.trigger == trigger
                    continue
                assert dest != case.dest, f"{trigger} by {actor} under {ctx} reached {dest}"
    assert tried > 0
    reason = spec.forbidden_reason(case.source, case.dest)
    assert reason is not None, f"no documented reason for {case.source} -> {case.dest}"
    assert case.keyword in reason.lower(), f"reason {reason!r} does not say {case.keyword!r}"


@pytest.mark.parametrize(
    "case",
    INVALID,
    ids=[f"{_case_id(c.machine, c.source, c.dest)} ({c.label})" for c in INVALID],
)
def test_seed_invalid_move_error_names_reason(case: Invalid) -> None:
    """Stepping from the source with a trigger that reaches the dest elsewhere raises an
    error whose message carries the spec's reason for exactly this move."""
    spec = spec_of(case.machine)
    reason = spec.forbidden_reason(case.source, case.dest)
    assert reason is not None
    defined_here = {t.trigger for t in spec.transitions if t.source == case.source}
    into_dest = [
        t for t in spec.transitions if t.dest == case.dest and t.trigger not in defined_here
    ]
    attempts: list[tuple[str, str, dict[str, str]]] = [
        (t.trigger, actor, ctx)
        for t in into_dest
        for actor in t.actors
        for ctx in _admitted(case.machine, t)
    ]
    if not attempts and case.wildcard:
        # Nothing leads into this dest at all (e.g. an initial state): any trigger will do.
        attempts = [
            (trigger, actor, ctx)
            for trigger in triggers(case.machine)
            if trigger not in defined_here
            for actor in actors(case.machine)
            for ctx in contexts(case.machine)
        ]
    assert attempts, f"no trigger leads into {case.dest}"
    wrong: list[str] = []
    for trigger, actor, ctx in attempts:
        with pytest.raises(machines.InvalidStateTransition) as info:
            spec.step(case.source, trigger, actor=actor, **ctx)
        exc = info.value
        assert exc.state == case.source and exc.trigger == trigger
        assert exc.machine == case.machine
        # A trigger that leads elsewhere (the fallback above) is refused for its own
        # destination, so only the source's terminal status is owed in the message.
        leads_here = any(t.trigger == trigger for t in into_dest)
        expected = reason if leads_here else "terminal"
        if expected not in str(exc):
            wrong.append(f"step({case.source!r}, {trigger!r}, actor={actor!r}, {ctx}): {exc}")
    assert not wrong, f"expected the reason {reason!r}; got:\n" + "\n".join(wrong)


def test_effect_pending_commit_names_execute_first() -> None:
    spec = spec_of("effect")
    with pytest.raises(machines.InvalidStateTransition) as info:
        spec.step("pending", "commit", actor="proxy")
    reason = spec.forbidden_reason("pending", "committed")
    assert reason is not None and "execut" in reason.lower()
    assert reason in str(info.value)
    assert info.value.reason == reason


# ---------------------------------------------------------------------------------------
# 3. Terminal states
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("machine", MACHINES)
def test_terminal_states_equal_seed(machine: str) -> None:
    spec = spec_of(machine)
    assert {name for name, st in spec.states.items() if st.terminal} == terminals_of(machine)
    for name in states_of(machine):
        assert spec.is_terminal(name) == (name in terminals_of(machine)), name


@pytest.mark.parametrize(
    ("machine", "state"), TERMINAL_CASES, ids=[f"{m}:{s}" for m, s in TERMINAL_CASES]
)
def test_no_transition_leaves_terminal(machine: str, state: str) -> None:
    spec = spec_of(machine)
    assert [t for t in spec.transitions if t.source == state] == []
    assert spec.next_states(state) == ()
    for ctx in contexts(machine):
        assert spec.next_states(state, **ctx) == ()
    for dest in states_of(machine):
        assert not spec.allows(state, dest)
        assert spec.forbidden_reason(state, dest) is not None


@pytest.mark.parametrize(
    ("machine", "state"), TERMINAL_CASES, ids=[f"{m}:{s}" for m, s in TERMINAL_CASES]
)
def test_every_trigger_from_terminal_raises(machine: str, state: str) -> None:
    spec = spec_of(machine)
    count = 0
    for trigger in triggers(machine):
        for actor in actors(machine):
            for ctx in contexts(machine):
                with pytest.raises(machines.InvalidStateTransition) as info:
                    spec.step(state, trigger, actor=actor, **ctx)
                assert info.value.state == state
                assert "terminal" in str(info.value).lower()
                count += 1
    assert count > 0


# ---------------------------------------------------------------------------------------
# 5. Tier rules (seed 000) and node kind rules (seed 003)
# ---------------------------------------------------------------------------------------

COMPENSATION_EDGES = [
    ("executing", "compensating"),
    ("compensating", "compensated"),
    ("compensating", "compensation_failed"),
]
APPROVAL_EDGES = [("pending", "approved"), ("pending", "rejected")]


def _refused_under(machine: str, source: str, dest: str, **ctx: str) -> None:
    spec = spec_of(machine)
    assert not spec.allows(source, dest, **ctx)
    assert dest not in spec.next_states(source, **ctx)
    found = transitions_between(machine, source, dest)
    assert found
    for t in found:
        for actor in t.actors:
            with pytest.raises(machines.InvalidStateTransition):
                spec.step(source, t.trigger, actor=actor, **ctx)
    for m in moves(machine):
        if m.source == source and dict(m.context).items() >= ctx.items():
            assert m.dest != dest, m


@pytest.mark.parametrize(
    ("source", "dest"), COMPENSATION_EDGES, ids=[f"{s}->{d}" for s, d in COMPENSATION_EDGES]
)
def test_compensation_only_for_compensable(source: str, dest: str) -> None:
    spec = spec_of("effect")
    assert spec.allows(source, dest, tier="compensable")
    _refused_under("effect", source, dest, tier="irreversible")


@pytest.mark.parametrize(
    ("source", "dest"), APPROVAL_EDGES, ids=[f"{s}->{d}" for s, d in APPROVAL_EDGES]
)
def test_approval_only_for_irreversible(source: str, dest: str) -> None:
    spec = spec_of("effect")
    assert spec.allows(source, dest, tier="irreversible")
    _refused_under("effect", source, dest, tier="compensable")


def test_tier_reachability() -> None:
    compensation = {"compensating", "compensated", "compensation_failed"}
    approval = {"approved", "rejected"}
    compensable = reachable("effect", tier="compensable")
    irreversible = reachable("effect", tier="irreversible")
    assert compensation <= compensable
    assert approval.isdisjoint(compensable)
    assert approval <= irreversible
    assert compensation.isdisjoint(irreversible)
    assert {"committed", "replayed"} <= compensable & irreversible


def test_irreversible_cannot_execute_directly_from_pending() -> None:
    spec = spec_of("effect")
    assert spec.allows("pending", "executing", tier="compensable")
    _refused_under("effect", "pending", "executing", tier="irreversible")
    with pytest.raises(machines.InvalidStateTransition):
        spec.step("pending", "execute", actor="proxy", tier="irreversible")


def _walk(machine: str, path: list[str], **ctx: str) -> None:
    """Step along a seed path, using whichever trigger/actor the spec offers."""
    spec = spec_of(machine)
    for source, dest in itertools.pairwise(path):
        options = [
            m
            for m in moves(machine)
            if m.source == source and m.dest == dest and dict(m.context) == ctx
        ]
        assert options, f"{machine}: no step {source} -> {dest} under {ctx}"
        m = options[0]
        assert spec.step(source, m.trigger, actor=m.actor, **ctx) == dest


def test_effect_seed_paths() -> None:
    # "No skipping ... (e.g. Pending -> Executing -> Committed)"
    _walk("effect", ["pending", "executing", "committed"], tier="compensable")
    # Irreversible: approved, then the proxy resumes
    _walk("effect", ["pending", "approved", "executing", "committed"], tier="irreversible")
    _walk(
        "effect",
        ["pending", "executing", "compensating", "compensation_failed"],
        tier="compensable",
    )


def test_effect_safe_tier_is_refused() -> None:
    spec = spec_of("effect")
    with pytest.raises(machines.ContextError):
        spec.allows("pending", "executing", tier="safe")
    with pytest.raises(machines.ContextError):
        spec.step("pending", "execute", actor="proxy", tier="safe")
    with pytest.raises(machines.ContextError):
        spec.next_states("pending", tier="safe")


def test_node_ready_to_observing_only_for_observe() -> None:
    spec = spec_of("node")
    assert spec.allows("ready", "observing", kind="observe")
    _refused_under("node", "ready", "observing", kind="action")
    with pytest.raises(machines.InvalidStateTransition):
        spec.step("ready", "start_observing", actor="observer", kind="action")


def test_node_awaiting_signature_only_for_action() -> None:
    spec = spec_of("node")
    assert spec.allows("preparing", "awaiting_signature", kind="action")
    _refused_under("node", "preparing", "awaiting_signature", kind="observe")
    assert "awaiting_signature" in reachable("node", kind="action")
    assert "awaiting_signature" not in reachable("node", kind="observe")


def test_node_kind_flowchart_paths() -> None:
    # seed 003 "How state progression differs between Action Node and Observe Node"
    action = ["blocked", "ready", "preparing", "awaiting_signature", "submitting"]
    action += ["submitted", "observing", "completed"]
    observe = ["blocked", "ready", "preparing", "submitting", "submitted", "observing"]
    observe += ["completed"]
    _walk("node", action, kind="action")
    _walk("node", observe, kind="observe")
    _walk("node", ["blocked", "ready", "observing", "completed"], kind="observe")


# ---------------------------------------------------------------------------------------
# 6. Outcome: indeterminate fails closed
# ---------------------------------------------------------------------------------------


def test_outcome_indeterminate_left_only_by_non_automatic_actors() -> None:
    spec = spec_of("outcome")
    exits = [t for t in spec.transitions if t.source == "indeterminate"]
    assert exits
    assert any(t.dest == "in_flight" for t in exits)  # reclaim
    for t in exits:
        assert t.actors
        for actor in t.actors:
            assert spec.actors[actor].automatic is False, f"{t.trigger} by {actor}"
    automatic = {name for name, a in spec.actors.items() if a.automatic}
    assert automatic
    for m in moves("outcome"):
        if m.source == "indeterminate":
            assert m.actor not in automatic, m


def test_outcome_worker_cannot_reclaim() -> None:
    spec = spec_of("outcome")
    with pytest.raises(machines.InvalidStateTransition) as info:
        spec.step("indeterminate", "reclaim", actor="worker")
    assert info.value.state == "indeterminate"
    assert spec.step("indeterminate", "reclaim", actor="caller") == "in_flight"
    for trigger in triggers("outcome"):
        with pytest.raises(machines.InvalidStateTransition):
            spec.step("indeterminate", trigger, actor="worker")


def test_outcome_in_flight_exits_are_the_seed_three() -> None:
    spec = spec_of("outcome")
    assert set(spec.next_states("in_flight")) == {"succeeded", "failed", "indeterminate"}
    assert not spec.is_terminal("indeterminate")


# ---------------------------------------------------------------------------------------
# 7. Node: unknown is left only through reconciliation
# ---------------------------------------------------------------------------------------


def test_node_unknown_left_only_by_reconciler() -> None:
    spec = spec_of("node")
    exits = [t for t in spec.transitions if t.source == "unknown"]
    assert {t.dest for t in exits} == {"submitted", "completed", "failed"}
    for t in exits:
        assert set(t.actors) == {"reconciler"}, t.trigger
    stepped = [m for m in moves("node") if m.source == "unknown"]
    assert {m.actor for m in stepped} == {"reconciler"}
    assert {m.dest for m in stepped} == {"submitted", "completed", "failed"}
    assert not spec.is_terminal("unknown")


# ---------------------------------------------------------------------------------------
# Human decisions the seeds name
# ---------------------------------------------------------------------------------------

HUMAN_EDGES = [
    # seed 000: "Human approves/rejects via dashboard"
    ("effect", "pending", "approved"),
    ("effect", "pending", "rejected"),
    # seed 003: labels naming the operator; MANUAL_INTERVENTION "Requires human intervention"
    ("request", "pending_approval", "approved"),
    ("request", "pending_approval", "rejected"),
    ("request", "executing", "cancelled"),
    ("request", "waiting_manual_action", "cancelled"),
    ("request", "manual_intervention", "executing"),
    ("request", "manual_intervention", "failed"),
    ("request", "manual_intervention", "completed"),
]


@pytest.mark.parametrize(
    ("machine", "source", "dest"),
    HUMAN_EDGES,
    ids=[_case_id(m, s, d) for m, s, d in HUMAN_EDGES],
)
def test_human_edges_fired_only_by_non_automatic_actors(
    machine: str, source: str, dest: str
) -> None:
    spec = spec_of(machine)
    found = transitions_between(machine, source, dest)
    assert found
    for t in found:
        for actor in t.actors:
            assert spec.actors[actor].automatic is False, f"{t.trigger} by {actor}"
    for m in moves(machine):
        if m.source == source and m.dest == dest:
            assert spec.actors[m.actor].automatic is False, m
