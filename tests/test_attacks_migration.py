"""A migration map is a move by the automatic ``migration`` actor (issue 27, items 1-2).

The outsider's attacks: a v2 of ``outcome`` that renames ``indeterminate`` and a map that
sends every "we do not know" to ``succeeded``; a v2 of ``request`` that renames
``executing`` and a map that fails a request (its reservation released) while its
withdrawal node is ``unknown``. Both were applied with exit 0 and the audit said nothing.
Now each is refused before anything is written, naming the rule and the entities, on
SQLite and PostgreSQL; the same forged events, recorded, are breaches of the audit."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from machines.checks.audit import audit_store, judge_snapshot
from machines.checks.snapshots import Snapshot
from machines.cli import main
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.loader import load
from machines.spec.records import derived_variables
from machines.spec.vocabulary import MIGRATION_ACTOR, MIGRATION_TRIGGER
from machines.store import BUNDLED, open_store
from tests.conftest import Document, SpecCopy, rename_everywhere
from tests.hand_built import entity, event
from tests.migration_stores import load_dir, raw_snapshot


def renamed(root: Path, machine: str, old: str, new: str) -> Path:
    """A copy of the bundled definitions with ``machine``'s state ``old`` renamed ``new``
    everywhere (a breaking change: live entities in ``old`` need a map)."""
    copy = SpecCopy(root)

    def rename(doc: Document) -> None:
        doc.clear()
        doc.update(rename_everywhere(original, old, new))

    original = copy.read(machine)
    copy.edit(machine, rename)
    return copy.path


@pytest.fixture
def url(database_url: str) -> str:
    """A URL where no store is yet, on SQLite and on PostgreSQL."""
    return database_url


def shortest(spec: MachineSpec, state: str, valuation: Mapping[str, str]) -> list[tuple[str, str]]:
    """(trigger, actor) moves from the initial state to ``state`` under ``valuation``."""
    seen: dict[str, list[tuple[str, str]]] = {spec.initial: []}
    queue = collections.deque([spec.initial])
    while queue:
        here = queue.popleft()
        for t in spec.transitions:
            if t.source == here and t.admits(valuation) and t.dest not in seen:
                seen[t.dest] = [*seen[here], (t.trigger, t.actors[0])]
                queue.append(t.dest)
    return seen[state]


def put(
    url: str,
    machine: str,
    key: str,
    state: str,
    valuation: Mapping[str, str],
    *,
    scope: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> None:
    """``key`` moved to ``state`` by legal moves on the bundled definitions."""
    specs = {m: load(m) for m in BUNDLED}
    spec = specs[machine]
    derived = derived_variables(spec)
    fixed = {k: v for k, v in valuation.items() if k not in derived}
    given = {k: v for k, v in valuation.items() if k in derived} or None
    store = open_store(url, specs)
    try:
        with store.transaction() as tx:
            row, _ = tx.insert(machine, key, context=fixed, data=dict(data or {}), scope=scope)
            for trigger, actor in shortest(spec, state, valuation):
                row = tx.move(row, trigger, actor=actor, context=given, detail={"by": "test"})
    finally:
        store.close()


def migrate(
    capsys: pytest.CaptureFixture[str], url: str, spec_dir: Path, *maps: str
) -> tuple[int, str]:
    code = main(
        ["migrate", url, "--spec-dir", str(spec_dir), *[a for m in maps for a in ("--map", m)]]
    )
    return code, capsys.readouterr().out


def state_of(url: str, specs: dict[str, MachineSpec], machine: str, key: str) -> str:
    store = open_store(url, specs)
    try:
        with store.transaction() as tx:
            row = tx.get(machine, key)
    finally:
        store.close()
    assert row is not None
    return row.state


# -- outcome: indeterminate ------------------------------------------------------------------


@pytest.mark.parametrize("into", ["succeeded", "failed", "in_flight"])
def test_a_map_out_of_indeterminate_into_an_outcome_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], into: str
) -> None:
    put(url, "outcome", "charge-1", "indeterminate", {})
    spec_dir = renamed(tmp_path, "outcome", "indeterminate", "unsure")
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, f"outcome:indeterminate={into}")
    assert code == 1, out
    assert f"REFUSED: --map outcome:indeterminate={into}: 1 entity would leave" in out
    assert "rule 'fail-closed-indeterminate' (only_actors_exit)" in out
    assert "rule 'indeterminate-exits' (only_triggers_exit)" in out
    assert "tagged fail-closed" in out
    assert "settle them first through the definition (reclaim by caller" in out
    assert raw_snapshot(url) == before


def test_a_rename_of_indeterminate_keeps_the_key_undecided(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "indeterminate", {})
    spec_dir = renamed(tmp_path, "outcome", "indeterminate", "unsure")
    code, out = migrate(capsys, url, spec_dir, "outcome:indeterminate=unsure")
    assert code == 0, out
    new = load_dir(spec_dir)
    assert state_of(url, new, "outcome", "charge-1") == "unsure"
    assert audit_store(url, new) == []


def test_a_rename_into_a_final_state_or_dropping_the_tag_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "indeterminate", {})
    copy = SpecCopy(tmp_path / "final")

    def settle(doc: Document) -> None:
        renamed_doc = rename_everywhere(doc, "indeterminate", "settled")
        renamed_doc["states"]["settled"]["tags"] = []
        renamed_doc["states"]["settled"]["terminal"] = True
        renamed_doc["transitions"] = [
            t for t in renamed_doc["transitions"] if t["source"] != "settled"
        ]
        renamed_doc["invariants"] = [
            r for r in renamed_doc["invariants"] if r.get("states") != ["settled"]
        ]
        doc.clear()
        doc.update(renamed_doc)

    copy.edit("outcome", settle)
    code, out = migrate(capsys, url, copy.path, "outcome:indeterminate=settled")
    assert code == 1, out
    assert "'settled' is terminal" in out
    assert "'indeterminate' (now 'settled') loses the tag fail-closed" in out


# -- a finished entity keeps how it ended (outsider F7) ----------------------------------------


@pytest.mark.parametrize(
    ("removed", "valuation", "into", "why"),
    [
        ("succeeded", {}, "failed", "'succeeded' is tagged effect-started"),
        ("failed", {}, "succeeded", "tags [] against [effect-started]"),
    ],
)
def test_a_map_that_changes_how_an_outcome_ended_is_refused(
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    removed: str,
    valuation: dict[str, str],
    into: str,
    why: str,
) -> None:
    """v2 renames a terminal outcome; mapping its keys into the other outcome would turn
    "it landed" into "it did not happen" (the next caller told the charge failed) or the
    reverse. Both are terminal, so the old terminal-to-non-terminal check let it through."""
    put(url, "outcome", "charge-1", removed, valuation)
    spec_dir = renamed(tmp_path, "outcome", removed, "ended")
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, f"outcome:{removed}={into}")
    assert code == 1, out
    assert f"REFUSED: --map outcome:{removed}={into}" in out
    assert why in out
    assert raw_snapshot(url) == before


def test_a_map_of_a_released_transfer_into_a_completed_one_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "request", "transfer-1", "expired", {"side_effects": "none"})
    spec_dir = renamed(tmp_path, "request", "expired", "lapsed")
    code, out = migrate(capsys, url, spec_dir, "request:expired=completed")
    assert code == 1, out
    assert "tags [releases-reservation] against [consumes-reservation]" in out
    code, out = migrate(capsys, url, spec_dir, "request:expired=lapsed")
    assert code == 0, out


def test_a_rename_of_a_terminal_outcome_with_the_same_tags_is_applied(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "succeeded", {})
    spec_dir = renamed(tmp_path, "outcome", "succeeded", "landed")
    code, out = migrate(capsys, url, spec_dir, "outcome:succeeded=landed")
    assert code == 0, out
    new = load_dir(spec_dir)
    assert state_of(url, new, "outcome", "charge-1") == "landed"
    assert audit_store(url, new) == []


# -- request: money in flight ------------------------------------------------------------------


def request_with_node(url: str, node_state: str, *, side_effect: bool) -> None:
    put(url, "request", "transfer-1", "executing", {"side_effects": "none"})
    put(
        url,
        "node",
        "withdraw",
        node_state,
        {"kind": "action"},
        scope="transfer-1",
        data={"name": "withdraw", "has_side_effect": side_effect},
    )


def test_a_map_that_releases_a_reservation_with_money_in_flight_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_with_node(url, "unknown", side_effect=True)
    spec_dir = renamed(tmp_path, "request", "executing", "running")
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, "request:executing=failed")
    assert code == 1, out
    assert "--map request:executing=failed: 1 entity would leave 'executing'" in out
    assert "'executing' is derived from its node entities" in out
    assert raw_snapshot(url) == before


def test_the_same_map_with_no_money_moving_is_refused_too(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider, twelfth batch (f08): ``executing=completed`` finished a transfer with its
    withdrawal in flight, along the derivation's own ``complete``. A derived state is left
    by the derivation alone, money or not; a rename of it is still allowed."""
    request_with_node(url, "unknown", side_effect=False)
    spec_dir = renamed(tmp_path, "request", "executing", "running")
    for dest in ("failed", "completed"):
        code, out = migrate(capsys, url, spec_dir, f"request:executing={dest}")
        assert code == 1 and "'executing' is derived from its node entities" in out, out
    code, out = migrate(capsys, url, spec_dir, "request:executing=running")
    assert code == 0, out
    assert state_of(url, load_dir(spec_dir), "request", "transfer-1") == "running"


# -- the audit judges recorded migration events the same way -----------------------------------


def ev(seq: int, source: str, dest: str, trigger: str, actor: str, **kw: Any) -> TransitionEvent:
    return event("outcome", "k", seq, source, dest, trigger, actor, **kw)


def test_the_audit_names_a_migration_out_of_indeterminate(tmp_path: Path) -> None:
    old = load("outcome")
    new = load_dir(renamed(tmp_path, "outcome", "indeterminate", "unsure"))["outcome"]
    detail = {"from_version": 1, "to_version": 2, "reason": "state 'indeterminate' removed"}
    events = [
        ev(1, "in_flight", "indeterminate", "park", "worker"),
        ev(2, "indeterminate", "succeeded", MIGRATION_TRIGGER, MIGRATION_ACTOR, detail=detail),
    ]
    k = entity("outcome", "k", "succeeded", events, data={"result": 1})
    snap = Snapshot(
        MappingProxyType({("outcome", "k"): k}),
        event_versions=MappingProxyType({("outcome", "k"): (1, 2)}),
        definitions=MappingProxyType({("outcome", 1): old, ("outcome", 2): new}),
    )
    found = {(b.invariant, b.message) for b in judge_snapshot({"outcome": new}, snap)}
    assert any(
        i == "append-only-history" and "rule 'fail-closed-indeterminate'" in m for i, m in found
    ), found
    renamed_events = [
        events[0],
        ev(2, "indeterminate", "unsure", MIGRATION_TRIGGER, MIGRATION_ACTOR, detail=detail),
    ]
    k = entity("outcome", "k", "unsure", renamed_events)
    snap = Snapshot(
        MappingProxyType({("outcome", "k"): k}),
        event_versions=MappingProxyType({("outcome", "k"): (1, 2)}),
        definitions=snap.definitions,
    )
    assert list(judge_snapshot({"outcome": new}, snap)) == []


def test_the_audit_names_a_recorded_migration_that_released_money_in_flight(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store migrated by a release before the maps were judged (the refusal switched
    off here): the audit names the release, made by the automatic migration actor."""
    import machines.store.migration as migration_module

    request_with_node(url, "unknown", side_effect=True)
    spec_dir = renamed(tmp_path, "request", "executing", "running")
    monkeypatch.setattr(migration_module, "map_refusals", lambda *args: [])
    code, out = migrate(capsys, url, spec_dir, "request:executing=failed")
    assert code == 0, out
    found = {(b.invariant, b.key, b.message) for b in audit_store(url, load_dir(spec_dir))}
    assert (
        "no-auto-terminal-money-in-flight",
        "transfer-1",
        "'migration' moved it to failed after side-effect nodes started (withdraw)",
    ) in found, found


# -- stored contexts the new version cannot hold (issue 28, item 6) ---------------------------


def with_region(doc: Document) -> None:
    doc["context"] = {"region": {"description": "where the charge runs", "values": ["eu", "us"]}}


@pytest.mark.parametrize("change", ["a variable removed", "a variable added", "a value removed"])
def test_stored_contexts_the_new_version_cannot_hold_are_refused_either_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    """A mutant that only checked for missing variables passed entities that hold one the
    new version removed: they could never move again. Each way is refused, naming it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    v1 = SpecCopy(tmp_path / "v1")
    if change != "a variable added":
        v1.edit("outcome", with_region)
    store = open_store(url, load_dir(v1.path))
    try:
        context = {} if change == "a variable added" else {"region": "eu"}
        store.insert("outcome", "charge-1", context=context)
    finally:
        store.close()
    v2 = SpecCopy(tmp_path / "v2")
    if change == "a variable added":
        v2.edit("outcome", with_region)
    elif change == "a value removed":

        def us_only(doc: Document) -> None:
            with_region(doc)
            doc["context"]["region"]["values"] = ["us"]

        v2.edit("outcome", us_only)
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, v2.path)
    assert code == 1, out
    assert "1 entity with a context the new version refuses" in out
    assert "region" in out
    assert raw_snapshot(url) == before


# -- the outsider's third batch: a v2 that retags the state it maps into ----------------------


def succeeded_folded_into_failed(doc: Document) -> None:
    """v2: ``succeeded`` removed, ``failed`` retagged ``effect-started`` and entered by the
    moves that led to ``succeeded``: the retag made succeeded=failed look faithful."""
    del doc["states"]["succeeded"]
    doc["states"]["failed"]["tags"] = ["effect-started"]
    for t in doc["transitions"]:
        if t["dest"] == "succeeded":
            t["dest"] = "failed"
    doc["forbidden"] = [f for f in doc["forbidden"] if f["source"] != "succeeded"]
    for rule in doc["invariants"]:
        if rule["id"] == "failed-means-proven":
            rule["dests"] = ["failed"]


def executing_renamed_releasing(doc: Document) -> None:
    renamed_doc = rename_everywhere(doc, "executing", "running")
    renamed_doc["states"]["running"]["tags"] = ["releases-reservation"]
    doc.clear()
    doc.update(renamed_doc)


def test_a_map_made_to_look_faithful_by_retagging_the_new_version_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "succeeded", {})
    spec_dir = SpecCopy(tmp_path / "v2").edit("outcome", succeeded_folded_into_failed).path
    assert main(["check", "--spec-dir", str(spec_dir)]) == 0
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, "outcome:succeeded=failed")
    assert code == 1, out
    assert "'succeeded' is tagged effect-started (the effect may have run) and 'failed'" in out
    assert raw_snapshot(url) == before


def test_a_rename_that_releases_the_reservation_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_with_node(url, "submitting", side_effect=True)
    spec_dir = SpecCopy(tmp_path / "v2").edit("request", executing_renamed_releasing).path
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, "request:executing=running")
    assert code == 1, out
    assert "a rename never changes a reservation's fate" in out
    assert raw_snapshot(url) == before


@pytest.mark.parametrize("into", ["expired", "rejected", "failed"])
def test_no_map_releases_a_reservation_while_money_may_be_moving(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], into: str
) -> None:
    """Outsider, second batch: the rule that keeps failed and cancelled from releasing a
    reservation with money in flight did not name expired, so --map executing=expired was
    applied with a withdrawal submitting."""
    request_with_node(url, "submitting", side_effect=True)
    spec_dir = renamed(tmp_path, "request", "executing", "running")
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, f"request:executing={into}")
    assert code == 1, out
    assert raw_snapshot(url) == before


def untag_succeeded(doc: Document) -> None:
    doc["states"]["succeeded"]["tags"] = []


def reopen_succeeded(doc: Document) -> None:
    """succeeded made non-terminal, with an operator's way back to failed."""
    doc["states"]["succeeded"].pop("terminal", None)
    doc["forbidden"] = [f for f in doc["forbidden"] if f["source"] != "succeeded"]
    doc["transitions"].append(
        {
            "trigger": "retract",
            "source": "succeeded",
            "dest": "failed",
            "actor": "operator",
            "description": "retract.",
        }
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (untag_succeeded, "'succeeded' loses the tag effect-started"),
        (reopen_succeeded, "'succeeded' is no longer terminal"),
    ],
    ids=["untagged", "reopened"],
)
def test_a_new_version_cannot_change_the_meaning_of_a_state_entities_live_in(
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any,
    why: str,
) -> None:
    """Outsider, second batch: v2 dropped effect-started from succeeded (accepted, as a
    plain change), then v3 removed it and mapped succeeded=failed, judged by v2's tags
    alone; or v2 made succeeded non-terminal, an operator retracted a finished charge, and
    v1 came back. A state's meaning stays while entities live in it."""
    put(url, "outcome", "charge-1", "succeeded", {})
    spec_dir = SpecCopy(tmp_path / "v2").edit("outcome", change).path
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir)
    assert code == 1, out
    assert f"1 entity in state 'succeeded', and the new version changes what it means: {why}" in out
    assert raw_snapshot(url) == before


def test_the_meaning_of_an_empty_state_may_change(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "failed", {})
    spec_dir = SpecCopy(tmp_path / "v2").edit("outcome", untag_succeeded).path
    code, out = migrate(capsys, url, spec_dir)
    assert code == 0, out


class _Rows:
    """A database as a map's judgement reads it, holding one hostile row."""

    param = "?"

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.rows

    def has_table(self, table: str) -> bool:
        return True


@pytest.mark.parametrize(
    "text", ["[" * 5000 + "]" * 5000, "not json", '{"tier": "a", "tier": "a"}']
)
def test_a_stored_text_a_migration_cannot_read_is_named_never_a_traceback(text: str) -> None:
    """Outsider batch 17 (a09): a live node's data nested 3000 deep made machines migrate
    end in a RecursionError traceback. A text the store would not read is a StoreError
    naming the entity; nothing is migrated."""
    from machines.spec.loader import load
    from machines.store.migration_maps import _contexts, context_refusals
    from machines.store.records import StoreError

    request = load("request")
    with pytest.raises(StoreError, match="request 'r-1': its stored JSON"):
        _contexts(_Rows([("r-1", text, "{}")]), request, "executing")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="its stored JSON"):
        context_refusals(_Rows([(text, 3)]), request)  # type: ignore[arg-type]
