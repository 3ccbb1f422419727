"""Issue 27 item 7: a weaker definition handed to a reference system.

A store may hold any definition under a bundled machine's name. A system built on one that
moves its own triggers elsewhere, or drops a rule the system's promises rest on, must refuse
to start (``InvalidArgument`` naming the move or the rule), on every kind of store; one
that only adds wording of its own is accepted."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

import machines
from machines.errors import InvalidArgument, SpecError
from machines.spec import MachineSpec
from machines.spec.structure import REQUIRED_KINDS
from machines.store import Store, open_store
from machines.systems import EffectLog, ExactlyOnce, TransferEngine
from tests.conftest import Document, SpecCopy, postgres_schema, store_url

KINDS = ["memory", "sqlite", "postgres"]


def moved(spec: MachineSpec, trigger: str, dest: str) -> MachineSpec:
    """``spec`` with every ``trigger`` leading to ``dest``, and only the rules every machine
    must declare (as a careless or hostile owner would write it to make it load)."""
    return replace(
        spec,
        transitions=tuple(
            replace(t, dest=dest, evidence=t.evidence or "said so") if t.trigger == trigger else t
            for t in spec.transitions
        ),
        invariants=tuple(r for r in spec.invariants if r.kind in REQUIRED_KINDS),
        forbidden=(),
    )


def with_automatic_exit(spec: MachineSpec, state: str, dest: str, actor: str) -> MachineSpec:
    """``spec`` with one more move, out of ``state`` by ``actor``, and the rules left as they
    are: the move breaks the bundled rules the system relies on."""
    template = next(t for t in spec.transitions if t.source == state)
    extra = replace(template, trigger="auto_retry", dest=dest, actors=(actor,), evidence="a timer")
    return replace(spec, transitions=(*spec.transitions, extra))


def reworded(spec: MachineSpec) -> MachineSpec:
    return replace(spec, title=f"{spec.title}, ours", description="Our own words.")


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """Opens a fresh store of one kind for the specs given; closes every one (and drops
    its PostgreSQL schema) afterwards."""
    numbers = itertools.count()
    with ExitStack() as stack:

        def open_for(*specs: MachineSpec) -> Store:
            if request.param == "postgres":
                url = stack.enter_context(postgres_schema())
            else:
                url = store_url(request.param, tmp_path, f"s{next(numbers)}.db")
            store = open_store(url, list(specs))
            stack.callback(store.close)
            return store

        yield open_for


def build(system: str, store: Store) -> object:
    if system == "ExactlyOnce":
        return ExactlyOnce(store)
    if system == "EffectLog":
        return EffectLog(store)
    return TransferEngine(store, {})


def test_a_park_that_reads_failed_is_refused(opener: Callable[..., Store]) -> None:
    """A charge that timed out after it was sent must never read "did not happen"."""
    store = opener(moved(machines.load("outcome"), "park", "failed"))
    with pytest.raises(InvalidArgument) as refused:
        ExactlyOnce(store)
    message = str(refused.value)
    assert "ExactlyOnce cannot run on the store's definition of 'outcome'" in message
    assert (
        "the move 'park' from 'in_flight' by 'worker' leads to 'failed', not 'indeterminate'"
        in (message)
    )


@pytest.mark.parametrize(
    ("system", "machine", "state", "dest", "actor", "rule"),
    [
        ("ExactlyOnce", "outcome", "indeterminate", "in_flight", "worker", "fail-closed"),
        ("EffectLog", "effect", "pending", "approved", "proxy", "approval-by-a-human"),
        ("TransferEngine", "node", "unknown", "failed", "executor", "unknown-only-by-recon"),
        ("TransferEngine", "request", "manual_intervention", "completed", "system", "manual-int"),
    ],
)
def test_an_automatic_move_around_a_person_is_refused(
    opener: Callable[..., Store],
    system: str,
    machine: str,
    state: str,
    dest: str,
    actor: str,
    rule: str,
) -> None:
    """Each system's states for people keep their bundled rules: no automatic way in or
    out."""
    specs = {name: machines.load(name) for name in ("outcome", "effect", "request", "node")}
    specs[machine] = with_automatic_exit(specs[machine], state, dest, actor)
    store = opener(*specs.values())
    with pytest.raises(InvalidArgument, match=rf"{system} cannot run .* \[{rule}") as refused:
        build(system, store)
    assert f"'{machine}'" in str(refused.value)


@pytest.mark.parametrize("system", ["ExactlyOnce", "EffectLog", "TransferEngine"])
def test_the_bundled_definitions_and_a_rewording_are_accepted(
    opener: Callable[..., Store], system: str
) -> None:
    specs = [reworded(machines.load(name)) for name in ("outcome", "effect", "request", "node")]
    build(system, opener(*specs))


def test_a_move_the_system_makes_must_be_there(opener: Callable[..., Store]) -> None:
    outcome = machines.load("outcome")
    without_fail = replace(
        outcome, transitions=tuple(t for t in outcome.transitions if t.trigger != "fail")
    )
    with pytest.raises(InvalidArgument, match="the move 'fail' from 'in_flight' by 'worker' is"):
        ExactlyOnce(opener(without_fail))


def test_a_rule_that_names_what_the_definition_lacks_cannot_be_kept(
    opener: Callable[..., Store],
) -> None:
    """A definition without the state a bundled rule is about cannot keep that rule."""
    effect = machines.load("effect")
    renamed = replace(
        effect,
        transitions=tuple(t for t in effect.transitions if "rejected" not in (t.source, t.dest)),
        states={k: v for k, v in effect.states.items() if k != "rejected"},
    )
    with pytest.raises(InvalidArgument, match="EffectLog cannot run"):
        EffectLog(opener(renamed))


@pytest.mark.parametrize(
    ("system", "machine"),
    [
        ("ExactlyOnce", "outcome"),
        ("EffectLog", "effect"),
        ("TransferEngine", "node"),
        ("TransferEngine", "request"),
    ],
)
def test_a_new_initial_state_before_the_bundled_one_is_refused(
    opener: Callable[..., Store], system: str, machine: str
) -> None:
    """Outsider batch 14: a copy that only adds a state before the initial one keeps every
    bundled move, tag and rule, yet the system's first move is refused there, after the
    effect ran, and the key is left where nothing records it."""
    specs = {name: machines.load(name) for name in ("outcome", "effect", "request", "node")}
    given = specs[machine]
    first = given.initial
    template = next(t for t in given.transitions if t.source == first)
    queued = replace(given.states[first], name="queued", db_value="queued", tags=())
    start = replace(template, trigger="start_queue", source="queued", dest=first, when={})
    specs[machine] = replace(
        given,
        initial="queued",
        states={"queued": queued, **given.states},
        transitions=(start, *given.transitions),
    )
    store = opener(*specs.values())
    with pytest.raises(InvalidArgument, match=rf"{system} cannot run .*'{machine}'") as refused:
        build(system, store)
    assert f"its initial state is 'queued', and the bundled one's '{first}'" in str(refused.value)


def with_person_move(spec: MachineSpec, trigger: str, source: str) -> MachineSpec:
    """``spec`` with ``trigger`` also from ``source`` (the same actors, destination and
    guard): an owner's addition the reliance check allows, since it adds a person's move
    and breaks no rule the definition states."""
    template = next(t for t in spec.transitions if t.trigger == trigger)
    return replace(spec, transitions=(*spec.transitions, replace(template, source=source)))


class Venue:
    """Takes every withdrawal and never says how it ended."""

    def prepare(self, node: object) -> str:
        return "submit"

    def submit(self, node: object) -> str:
        return "accepted"

    def observe(self, node: object) -> str:
        return "pending"


def test_a_person_cannot_fail_a_transfer_with_money_moving_by_an_added_move(
    opener: Callable[..., Store],
) -> None:
    """Outsider batch 19 (b12): a request definition adding an operator's
    ``confirm_failed`` from ``executing`` (the reliance check allows additions) let
    ``confirm_failed`` (and the desk, which offers the definition's moves) mark a
    transfer failed and release its reservation while its withdrawal was out at the
    venue. The engine makes only the bundled definition's moves: refused, nothing
    written; the same for ``approve`` added from ``received`` (b12v: a transfer never
    validated)."""
    from machines.errors import InvalidStateTransition

    request = with_person_move(machines.load("request"), "confirm_failed", "executing")
    request = with_person_move(request, "approve", "received")
    store = opener(machines.load("effect"), machines.load("node"), request)
    engine = TransferEngine(store, {"venue": Venue()}, engine_id="e1")
    engine.submit(
        "t1", [{"name": "withdraw", "kind": "action", "has_side_effect": True, "executor": "venue"}]
    )
    with pytest.raises(InvalidStateTransition, match="only the bundled definition's moves"):
        engine.approve("t1", by="alice")
    assert engine.request("t1").state == "received"
    engine.validate("t1")
    engine.request_approval("t1")
    engine.approve("t1", by="alice")
    engine.start("t1")
    for _ in range(3):
        engine.step("t1")
    assert engine.nodes("t1")["withdraw"].state == "observing"
    before = engine.request("t1")
    seen = engine.transfer_version("t1")
    with pytest.raises(InvalidStateTransition, match="only the bundled definition's moves"):
        engine.confirm_failed("t1", by="bob", evidence="looks failed", seen=seen)
    after = engine.request("t1")
    assert (after.state, after.version, after.data["reservation"]) == (
        "executing",
        before.version,
        "held",
    )


def test_a_person_cannot_reject_a_call_in_flight_by_an_added_move(
    opener: Callable[..., Store],
) -> None:
    """Outsider batch 19 (b11): an effect definition adding a human's ``reject`` from
    ``executing`` let ``EffectLog.reject`` record a wire that was sent and timed out as
    "rejected: it never runs". Refused now, nothing written."""
    from machines.errors import InvalidStateTransition
    from machines.systems.effectlog import EffectAwaitingApproval, EffectOutcomeUnknown

    effect = with_person_move(machines.load("effect"), "reject", "executing")
    log = EffectLog(opener(effect, machines.load("outcome")))
    with pytest.raises(EffectAwaitingApproval):
        log.call("wire-1", lambda: 1, tier="irreversible", tool="wire")
    log.approve("wire-1", by="ann", reason="ok")

    def wire() -> None:
        raise TimeoutError("sent, no answer")

    with pytest.raises(EffectOutcomeUnknown):
        log.call("wire-1", wire, tier="irreversible", tool="wire")
    before = log.effect("wire-1")
    assert before.state == "executing"
    with pytest.raises(InvalidStateTransition, match="only the bundled definition's moves"):
        log.reject("wire-1", by="bob", reason="looks stuck")
    assert log.effect("wire-1").version == before.version


@pytest.mark.parametrize(
    ("machine", "source", "dest", "actor", "system"),
    [
        ("effect", "executing", "pending", "proxy", "EffectLog"),
        ("node", "submitting", "ready", "executor", "TransferEngine"),
    ],
)
def test_a_move_back_to_where_an_effect_starts_is_refused(
    opener: Callable[..., Store], machine: str, source: str, dest: str, actor: str, system: str
) -> None:
    """Outsider batch 22 (B4): a definition adding moves from a started effect back to a
    state the system starts it from (executing -> halted -> pending by the automatic proxy;
    a node's submitting -> paused -> ready) passed check, diff, migrate and the reliance
    check; after two legal moves an effect whose outcome was unknown ran again, and a node
    already submitted was submitted a second time. A system refuses such a definition."""
    spec = machines.load(machine)
    template = next(t for t in spec.transitions if t.source == source)
    extra = replace(template, trigger="requeue", dest=dest, actors=(actor,), when={})
    others = [machines.load(m) for m in ("effect", "outcome", "node", "request") if m != machine]
    store = opener(replace(spec, transitions=(*spec.transitions, extra)), *others)
    with pytest.raises(InvalidArgument, match="from which the system starts its effect"):
        build(system, store)


def with_detour(name: str, folder: Path, source: str, dest: str, actor: str) -> MachineSpec:
    """The bundled ``name`` with a state of the owner's, tagged effect-started, that the
    automatic ``actor`` reaches from ``source`` and leaves for ``dest``, neither move with
    evidence."""
    import yaml

    from machines.spec.loader import bundled_spec_dir

    doc = yaml.safe_load((bundled_spec_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
    doc["states"]["confirming"] = {"description": "Ours.", "tags": ["effect-started"]}
    doc["transitions"] += [
        {"trigger": "confirm_later", "source": source, "dest": "confirming", "actor": actor,
         "description": "Ours."},
        {"trigger": "assume", "source": "confirming", "dest": dest, "actor": actor,
         "description": "Ours."},
    ]  # fmt: skip
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return machines.load(folder / f"{name}.yaml")


@pytest.mark.parametrize(
    ("system", "machine", "source", "dest", "actor"),
    [
        ("ExactlyOnce", "outcome", "in_flight", "succeeded", "worker"),
        ("TransferEngine", "node", "observing", "completed", "observer"),
    ],
)
def test_an_unknown_outcome_cannot_be_settled_through_a_state_of_the_owners(
    opener: Callable[..., Store],
    tmp_path: Path,
    system: str,
    machine: str,
    source: str,
    dest: str,
    actor: str,
) -> None:
    """Outsider batch 31 (a): through a state of the owner's, tagged effect-started, the
    automatic worker settled a key whose effect was still running as succeeded with a
    result of its own, no evidence: every later caller was told it, and machines check,
    the system and the audit said OK. Such a move into a terminal state is refused. (The
    effect definition's own rule, no-skipping-commit, refuses the same detour as it
    loads.)"""
    specs = {name: machines.load(name) for name in ("outcome", "effect", "request", "node")}
    specs[machine] = with_detour(machine, tmp_path, source, dest, actor)
    store = opener(*specs.values())
    with pytest.raises(InvalidArgument, match=rf"{system} cannot run") as refused:
        build(system, store)
    assert f"settles it in '{dest}' by the automatic '{actor}'" in str(refused.value)


@pytest.mark.parametrize(
    ("actor", "evidence", "says"),
    [
        ("worker", " ", "by the automatic 'worker' with no evidence"),
        ("worker", "\u200b", "by the automatic 'worker' with no evidence"),
        ("worker", "\u3164", "by the automatic 'worker' with no evidence"),  # batch 33
        ("worker", "\u2800\u034f", "by the automatic 'worker' with no evidence"),
        ("worker", "\U0001d159\u303f\u1806", "by the automatic 'worker' with no evidence"),
        ("caller", None, "a state of yours that says it did not"),
    ],
    ids=[
        "a-space",
        "a-zero-width-space",
        "a-hangul-filler",
        "blank-braille",
        "blank-symbols",  # batch 35
        "a-person",
    ],
)
def test_an_effect_cannot_be_forgotten_by_blank_evidence_or_a_persons_added_state(
    opener: Callable[..., Store], tmp_path: Path, actor: str, evidence: str | None, says: str
) -> None:
    """Outsider batch 32 (a 1, a 2): evidence that was a space (or a zero-width space) let
    the automatic actor move an effect that may have happened into an added untagged state;
    a person's move there did the same without a word. A transfer then released its
    reservation with a withdrawal out. Evidence must show something, and a person's word
    that an effect did not happen goes to a state of the bundled definition."""
    import yaml

    from machines.spec.loader import bundled_spec_dir

    doc = yaml.safe_load((bundled_spec_dir() / "outcome.yaml").read_text(encoding="utf-8"))
    doc["states"]["limbo"] = {"description": "Ours.", "terminal": True}
    move = {"trigger": "give_up", "source": "in_flight", "dest": "limbo", "actor": actor}
    if evidence is not None:
        move["evidence"] = evidence
    doc["transitions"].append({**move, "description": "Ours."})
    (tmp_path / "outcome.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
    if evidence is not None:  # batch 36 (c 7): the loader refuses it before any system
        with pytest.raises(SpecError, match=r"evidence says nothing|something in it besides"):
            machines.load(tmp_path / "outcome.yaml")
        return
    store = opener(machines.load(tmp_path / "outcome.yaml"))
    with pytest.raises(InvalidArgument, match="ExactlyOnce cannot run") as refused:
        ExactlyOnce(store)
    assert says in str(refused.value)


def test_a_route_back_to_before_sending_is_refused(
    opener: Callable[..., Store], tmp_path: Path
) -> None:
    """Outsider batch 33 (a 2): an owner's route from a sent node back to ``blocked``
    (observing -> returned, on evidence, then returned -> blocked) was accepted, since only
    the states one move before sending were guarded; the engine woke, prepared and
    submitted the withdrawal again, and the audit said OK. Every state on the bundled way
    to sending is guarded against a move from outside it."""
    import yaml

    from machines.spec.loader import bundled_spec_dir

    doc = yaml.safe_load((bundled_spec_dir() / "node.yaml").read_text(encoding="utf-8"))
    doc["states"]["returned"] = {"description": "The venue gave it back."}
    doc["transitions"] += [
        {"trigger": "give_back", "source": "observing", "dest": "returned",
         "actor": "observer", "evidence": "the venue returned it", "description": "Ours."},
        {"trigger": "requeue", "source": "returned", "dest": "blocked", "actor": "planner",
         "description": "Ours."},
    ]  # fmt: skip
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
    specs = {name: machines.load(name) for name in ("outcome", "effect", "request")}
    store = opener(*specs.values(), machines.load(tmp_path / "node.yaml"))
    with pytest.raises(InvalidArgument, match="TransferEngine cannot run") as refused:
        TransferEngine(store, {})
    assert "the move 'requeue' from 'returned' leads to 'blocked'" in str(refused.value)


def released_by_a_timer(
    spec: MachineSpec, dest: str, when: dict[str, tuple[str, ...]]
) -> MachineSpec:
    """``spec`` with a timer's move out of ``executing`` into ``dest`` (a state of the
    owner's, terminal and releasing the reservation, when ``dest`` is not one of
    ``spec``'s), guarded by ``when``."""
    states = dict(spec.states)
    if dest not in states:
        states[dest] = replace(spec.states["expired"], name=dest, db_value=dest)
    template = next(t for t in spec.transitions if t.trigger == "expire")
    extra = replace(template, trigger="time_out", source="executing", dest=dest, when=when)
    return replace(spec, states=states, transitions=(*spec.transitions, extra))


@pytest.mark.parametrize("dest", ["timed_out", "expired"])
def test_an_automatic_release_the_bundled_rule_does_not_name_is_refused(
    opener: Callable[..., Store], dest: str
) -> None:
    """Outsider batch 34 (c B1): a request definition with a timer's unguarded move from
    ``executing`` into a releasing state of its own (``timed_out``), or into ``expired``,
    passed machines check, diff, migrate and the engine: the bundled rule
    ``no-auto-release-with-money-in-flight`` names failed and cancelled only, and a
    reservation was then released with the withdrawal of unknown fate. The engine now
    refuses any automatic move of the owner's into a releasing state that is not guarded
    as the bundled releases are; guarded so, it is accepted."""
    request = released_by_a_timer(machines.load("request"), dest, {})
    store = opener(machines.load("effect"), machines.load("node"), request)
    says = "'time_out' from 'executing' by the automatic 'timer' releases the reservation"
    with pytest.raises(InvalidArgument, match=f"{says} \\('{dest}'\\)"):
        TransferEngine(store, {})
    guarded = released_by_a_timer(
        machines.load("request"), dest, {"side_effects": frozenset({"none"})}
    )
    TransferEngine(opener(machines.load("effect"), machines.load("node"), guarded), {})


@pytest.mark.parametrize("dest", ["timed_out", "expired"])
def test_machines_check_proves_an_unguarded_automatic_release_unsafe(
    spec_copy: SpecCopy, dest: str
) -> None:
    """Outsider batch 34 (c B1), at the definition gate: the derivation's proof took only
    the releases guarded by the derived context, so machines check passed a timer's
    unguarded move from executing into a releasing state. It is now a counterexample of
    ``context-matches-money`` for every rule set, at the plan with money moving."""
    from machines.derive.proof import check_derivation
    from machines.spec.loader import load

    def add(doc: Document) -> None:
        if dest not in doc["states"]:
            doc["states"][dest] = {"terminal": True, "tags": ["releases-reservation"]}
        doc["transitions"].append(
            {
                "trigger": "time_out",
                "source": "executing",
                "dest": dest,
                "actor": "timer",
                "description": "The timer gave up.",
            }
        )

    spec_copy.edit("request", add)
    report = check_derivation(load(spec_copy.file("request")), load(spec_copy.file("node")), 2)
    broken = {(r.name, c.invariant) for r in report.results for c in r.counterexamples}
    assert {("money-safe", "context-matches-money"), ("qtg-v3", "context-matches-money")} <= broken
