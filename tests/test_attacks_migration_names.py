"""Chains that reuse a name or rename a guard away (issue 27, outsider's fourth batch).

- f01: a rename of ``indeterminate`` that drops the rules keeping it for people and adds a
  worker's automatic exit was applied (the same change in place was refused); the audit's
  fail-closed check then looked for the name ``indeterminate`` and said nothing.
- f02: v2 renamed ``failed`` away, v3 brought back a ``failed`` tagged ``effect-started`` and
  mapped ``succeeded`` into it, v4 was the bundled outcome with that tag: ``ExactlyOnce``
  told the next caller a landed charge had failed.
- f03: v2 renamed ``succeeded`` away, v3 renamed ``indeterminate`` to a new, non-terminal
  ``succeeded``, v4 made it terminal: a parked key was replayed as succeeded.

Each link is closed on its own: a rename keeps what kept the state for people, a state
name is never reused for another meaning, a state entities wait in does not become final,
and a system refuses a definition whose states mean something else than the bundled ones'.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from machines.checks.audit import audit_store, judge_snapshot
from machines.checks.snapshots import Snapshot
from machines.errors import InvalidArgument
from machines.spec.loader import load
from machines.spec.migration_moves import migration_breaks
from machines.spec.vocabulary import MIGRATION_ACTOR, MIGRATION_TRIGGER, NEEDS_HUMAN
from machines.store import open_store
from machines.systems import ExactlyOnce
from tests.conftest import Document, SpecCopy, rename_everywhere
from tests.hand_built import entity, event
from tests.migration_stores import load_dir, raw_snapshot
from tests.test_attacks_migration import migrate, put, state_of

KEPT_FOR_PEOPLE = ("fail-closed-indeterminate", "indeterminate-exits")


@pytest.fixture
def url(database_url: str) -> str:
    """A URL where no store is yet, on SQLite and on PostgreSQL."""
    return database_url


def renaming(old: str, new: str) -> object:
    def change(doc: Document) -> None:
        renamed = rename_everywhere(doc, old, new)
        doc.clear()
        doc.update(renamed)

    return change


def version(root: Path, *changes: object) -> Path:
    """A copy of the bundled definitions with ``changes`` applied to ``outcome`` in turn."""
    copy = SpecCopy(root)
    for change in changes:
        copy.edit("outcome", change)  # type: ignore[arg-type]
    return copy.path


def unguarded(state: str, *, automatic_exit: bool) -> object:
    """``state``'s rules keeping it for people dropped (and a worker's exit added, with the
    ``needs-human`` tag, which would refuse it, dropped too)."""

    def change(doc: Document) -> None:
        doc["invariants"] = [r for r in doc["invariants"] if r["id"] not in KEPT_FOR_PEOPLE]
        if automatic_exit:
            tags = doc["states"][state]["tags"]
            doc["states"][state]["tags"] = [t for t in tags if t != NEEDS_HUMAN]
            doc["transitions"].append(
                {
                    "trigger": "auto_land",
                    "source": state,
                    "dest": "succeeded",
                    "actor": "worker",
                    "evidence": "the worker assumed it",  # without it, check refuses first
                    "description": "assume it landed.",
                }
            )

    return change


# -- f01: a rename keeps what kept the state for people ---------------------------------------


@pytest.mark.parametrize(
    ("automatic_exit", "why"),
    [
        (False, "rule 'fail-closed-indeterminate' (only_actors_exit) is dropped or widened"),
        (True, "rule 'fail-closed-indeterminate' (only_actors_exit) is dropped or widened"),
    ],
    ids=["rules-dropped", "automatic-exit-added"],
)
def test_a_rename_that_unguards_indeterminate_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], automatic_exit: bool, why: str
) -> None:
    put(url, "outcome", "charge-1", "indeterminate", {})
    spec_dir = version(
        tmp_path,
        renaming("indeterminate", "unsure"),
        unguarded("unsure", automatic_exit=automatic_exit),
    )
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, "outcome:indeterminate=unsure")
    assert code == 1, out
    assert "REFUSED: --map outcome:indeterminate=unsure: 1 entity would leave" in out
    assert why in out
    assert "rule 'indeterminate-exits' (only_triggers_exit) is dropped or widened" in out
    assert raw_snapshot(url) == before


def test_the_audit_judges_a_renamed_fail_closed_state_by_its_tag(tmp_path: Path) -> None:
    """A store migrated by such a rename before it was refused: the worker's exit from the
    renamed state is a fail-closed breach, found by the state's tag, not its old name."""
    old = load("outcome")
    spec_dir = version(
        tmp_path, renaming("indeterminate", "unsure"), unguarded("unsure", automatic_exit=True)
    )
    new = load_dir(spec_dir)["outcome"]
    detail = {"from_version": 1, "to_version": 2, "reason": "state 'indeterminate' removed"}
    events = [
        event("outcome", "k", 1, "in_flight", "indeterminate", "park", "worker"),
        event(
            "outcome",
            "k",
            2,
            "indeterminate",
            "unsure",
            MIGRATION_TRIGGER,
            MIGRATION_ACTOR,
            detail=detail,
        ),
        event("outcome", "k", 3, "unsure", "succeeded", "auto_land", "worker"),
    ]
    k = entity("outcome", "k", "succeeded", events, data={"result": 1})
    snap = Snapshot(
        MappingProxyType({("outcome", "k"): k}),
        event_versions=MappingProxyType({("outcome", "k"): (1, 2, 2)}),
        definitions=MappingProxyType({("outcome", 1): old, ("outcome", 2): new}),
    )
    found = {(b.invariant, b.message) for b in judge_snapshot({"outcome": new}, snap)}
    assert ("fail-closed-indeterminate", "automatic actor 'worker' left unsure") in found, found


# -- f02: a name is never reused for another meaning ------------------------------------------


def failed_renamed_refused(doc: Document) -> None:
    renaming("failed", "refused")(doc)  # type: ignore[operator]


def succeeded_becomes_a_new_failed(doc: Document) -> None:
    """succeeded removed; a new terminal 'failed' tagged effect-started takes its moves."""
    doc["states"]["failed"] = doc["states"].pop("succeeded")
    renaming("succeeded", "failed")(doc)  # type: ignore[operator]


def test_a_state_name_an_earlier_version_used_for_another_meaning_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "succeeded", {}, data={"result": {"charge": "ch_1"}})
    v2 = version(tmp_path / "v2", failed_renamed_refused)
    code, out = migrate(capsys, url, v2)
    assert code == 0, out
    v3 = version(tmp_path / "v3", failed_renamed_refused, succeeded_becomes_a_new_failed)
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, v3, "outcome:succeeded=failed")
    assert code == 1, out
    assert (
        "the new version adds a state 'failed' (terminal, tags [effect-started], entered by "
        "automatic moves), and version 1 had a state of that name that meant something else "
        "(terminal, tags [], entered by automatic moves)"
    ) in out
    assert raw_snapshot(url) == before


def test_a_state_name_brought_back_with_its_meaning_is_applied(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Migrating backwards: v2 renames failed away, v3 is v1 again."""
    put(url, "outcome", "charge-1", "failed", {}, data={"error": {"type": "Declined"}})
    v2 = version(tmp_path / "v2", failed_renamed_refused)
    code, out = migrate(capsys, url, v2, "outcome:failed=refused")
    assert code == 0, out
    code, out = migrate(capsys, url, version(tmp_path / "v3"), "outcome:refused=failed")
    assert code == 0, out
    assert state_of(url, load_dir(tmp_path / "v3" / "spec"), "outcome", "charge-1") == "failed"


# -- f03: a state entities wait in does not become final --------------------------------------


def unsure_made_final(doc: Document) -> None:
    doc["states"]["unsure"]["terminal"] = True
    doc["states"]["unsure"]["tags"] = ["effect-started", "needs-human"]  # not fail-closed
    doc["transitions"] = [t for t in doc["transitions"] if t["source"] != "unsure"]
    doc["invariants"] = [r for r in doc["invariants"] if r["id"] not in KEPT_FOR_PEOPLE]


def test_a_state_entities_wait_in_cannot_become_terminal(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "indeterminate", {})
    v2 = version(tmp_path / "v2", renaming("indeterminate", "unsure"))
    code, out = migrate(capsys, url, v2, "outcome:indeterminate=unsure")
    assert code == 0, out
    v3 = version(tmp_path / "v3", renaming("indeterminate", "unsure"), unsure_made_final)
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, v3)
    assert code == 1, out
    assert (
        "1 entity in state 'unsure', and the new version changes what it means: 'unsure' "
        "becomes terminal: its entities would be finished where they wait, with no move"
    ) in out
    assert raw_snapshot(url) == before


def test_the_rename_of_indeterminate_to_a_reused_name_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-1", "indeterminate", {})
    code, out = migrate(capsys, url, version(tmp_path / "v2", renaming("succeeded", "landed")))
    assert code == 0, out
    v3 = version(
        tmp_path / "v3", renaming("succeeded", "landed"), renaming("indeterminate", "succeeded")
    )
    code, out = migrate(capsys, url, v3, "outcome:indeterminate=succeeded")
    assert code == 1, out
    assert "the new version adds a state 'succeeded' (not terminal, tags [effect-started, " in out


# -- a system reads a state by its name ------------------------------------------------------


def failed_tagged_started(doc: Document) -> None:
    doc["states"]["failed"]["tags"] = ["effect-started"]


def succeeded_kept_for_people(doc: Document) -> None:
    doc["states"]["succeeded"]["tags"] = ["effect-started", "needs-human"]


def user_tag_on_failed(doc: Document) -> None:
    doc["states"]["failed"]["tags"] = ["x-billing"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            failed_tagged_started,
            "state 'failed' is tagged [effect-started], and the bundled one []",
        ),
        (
            succeeded_kept_for_people,
            "state 'succeeded' is tagged [effect-started, needs-human], and the bundled one "
            "[effect-started]",
        ),
    ],
    ids=["failed-started", "succeeded-for-people"],
)
def test_exactly_once_refuses_a_state_that_means_something_else(
    tmp_path: Path, change: object, why: str
) -> None:
    specs = load_dir(version(tmp_path, change))
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", specs)
    try:
        with pytest.raises(InvalidArgument, match="ExactlyOnce cannot run") as refused:
            ExactlyOnce(store)
        assert why in str(refused.value)
    finally:
        store.close()


def test_exactly_once_accepts_the_owners_own_tags(tmp_path: Path) -> None:
    specs = load_dir(version(tmp_path, user_tag_on_failed))
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", specs)
    try:
        assert ExactlyOnce(store).run("k", lambda: 1) == 1
    finally:
        store.close()


# -- outsider, fifth batch: a rename keeps every rule; a finished state stays closed -----------


def in_flight_unproven(doc: Document) -> None:
    doc["invariants"] = [r for r in doc["invariants"] if r["id"] != "failed-means-proven"]


def test_a_rename_that_leaves_an_evidence_rule_behind_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """f01: v2 renamed in_flight to running without the rule that a worker finishes it
    only on evidence; v3 (the bundled outcome) then mapped running=succeeded, judged by v2
    alone: an undecided key replayed as succeeded."""
    put(url, "outcome", "charge-1", "in_flight", {})
    v2 = version(tmp_path / "v2", renaming("in_flight", "running"), in_flight_unproven)
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, v2, "outcome:in_flight=running")
    assert code == 1, out
    assert (
        "rule 'failed-means-proven' (automatic_needs_evidence) names 'in_flight', and the new "
        "version has no such rule naming 'running'"
    ) in out
    assert raw_snapshot(url) == before
    faithful = version(tmp_path / "v2b", renaming("in_flight", "running"))
    code, out = migrate(capsys, url, faithful, "outcome:in_flight=running")
    assert code == 0, out


def result_annotated(doc: Document) -> None:
    doc["states"]["succeeded"]["annotations"] = ["result"]


def test_a_finished_state_opened_for_rewrites_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """f02: v2 let 'result' of a succeeded key change (an annotation, taken as a
    widening); a raw UPDATE then rewrote the result every later caller was told."""
    put(url, "outcome", "charge-1", "succeeded", {}, data={"result": {"amount": 10}})
    v2 = version(tmp_path / "v2", result_annotated)
    code, out = migrate(capsys, url, v2)
    assert code == 1, out
    assert "'succeeded' lets 'result' of its finished entities' data change" in out


def test_exactly_once_refuses_a_result_that_may_change(tmp_path: Path) -> None:
    specs = load_dir(version(tmp_path, result_annotated))
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", specs)
    try:
        with pytest.raises(InvalidArgument, match="state 'succeeded' lets 'result'"):
            ExactlyOnce(store)
    finally:
        store.close()


# -- outsider, seventh batch: the lineage follows a rename ---------------------------------


def no_human_approval(doc: Document) -> None:
    doc["invariants"] = [r for r in doc["invariants"] if r["id"] != "approval-by-a-human"]


def test_a_renamed_state_is_judged_by_the_rules_it_lived_under(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """v2 renamed the effect's pending to waiting (every rule of the state kept) and
    dropped the rule that only a human approves; v3 mapped waiting=approved, judged by v2
    alone (the lineage stopped at the rename): an irreversible call nobody approved ran."""
    from machines.systems import EffectLog
    from machines.systems.effectlog_errors import EffectAwaitingApproval

    store = open_store(url)
    try:
        with pytest.raises(EffectAwaitingApproval):
            EffectLog(store).call("wire-1", lambda: "sent", tier="irreversible")
    finally:
        store.close()

    def v2_change(doc: Document) -> None:
        renaming("pending", "waiting")(doc)  # type: ignore[operator]
        no_human_approval(doc)

    v2 = SpecCopy(tmp_path / "v2").edit("effect", v2_change).path
    code, out = migrate(capsys, url, v2, "effect:pending=waiting")
    assert code == 0, out
    v3 = SpecCopy(tmp_path / "v3").edit("effect", no_human_approval).path
    code, out = migrate(capsys, url, v3, "effect:waiting=approved")
    assert code == 1, out
    assert (
        "rule 'approval-by-a-human' (only_actors_enter) lets only human enter 'approved' (by an "
        "earlier version under which the entities may have lived there)"
    ) in out
    # a store an earlier release migrated so: the audit follows the entity's own renames
    import machines.store.migration as migration_module

    monkeypatch.setattr(migration_module, "map_refusals", lambda *args: [])
    code, out = migrate(capsys, url, v3, "effect:waiting=approved")
    assert code == 0, out
    found = {(b.invariant, b.message) for b in audit_store(url, load_dir(v3))}
    assert any(
        i == "append-only-history" and "rule 'approval-by-a-human'" in m for i, m in found
    ), found


# -- outsider, eighth batch: a state that left and came back is judged by every version -------


def _pruned(node: Any, state: str) -> Any:
    if isinstance(node, list):
        return [_pruned(v, state) for v in node if v != state]
    if isinstance(node, dict):
        return {k: _pruned(v, state) for k, v in node.items()}
    return node


def without_approved(doc: Document) -> None:
    """The effect definition with no state 'approved' (nothing left naming it)."""
    del doc["states"]["approved"]
    doc["transitions"] = [
        t for t in doc["transitions"] if "approved" not in (t["source"], t["dest"])
    ]
    for part in ("forbidden", "invariants"):
        kept = []
        for item in doc.get(part, []):
            if "approved" in (item.get("dest"), item.get("source"), item.get("state")):
                continue
            item = _pruned(item, "approved")
            if not any(isinstance(v, list) and not v for v in item.values()):
                kept.append(item)
        doc[part] = kept


def test_an_entry_rule_of_any_version_the_entity_lived_under_is_judged(tmp_path: Path) -> None:
    """v2 renamed pending to waiting, v3 removed 'approved', v4 brought it back without
    the rule that only a human enters it: a map waiting=approved was judged only by the
    versions that had 'approved' without a gap since, and v1's rule was never asked."""
    v1 = load("effect")
    v2_doc = SpecCopy(tmp_path / "v2").edit("effect", renaming("pending", "waiting")).path  # type: ignore[arg-type]
    v2 = load_dir(v2_doc)["effect"]

    def v3_change(doc: Document) -> None:
        renaming("pending", "waiting")(doc)  # type: ignore[operator]
        without_approved(doc)

    v3 = load_dir(SpecCopy(tmp_path / "v3").edit("effect", v3_change).path)["effect"]

    def v4_change(doc: Document) -> None:
        renaming("pending", "waiting")(doc)  # type: ignore[operator]
        no_human_approval(doc)

    v4 = load_dir(SpecCopy(tmp_path / "v4").edit("effect", v4_change).path)["effect"]
    v5 = load_dir(SpecCopy(tmp_path / "v5").edit("effect", no_human_approval).path)["effect"]
    found = migration_breaks(
        v4, v5, "waiting", "approved", earlier=[(v1, "pending"), (v2, "waiting"), (v3, "waiting")]
    )
    assert any("rule 'approval-by-a-human' (only_actors_enter)" in why for why in found), found
