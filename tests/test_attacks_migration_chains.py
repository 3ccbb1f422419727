"""No chain of versions opens what the first one closed (issue 27, outsider's third batch).

Each version of the outsider's chains was harmless alone, and each migration exited 0:

- v2 tags ``failed`` ``effect-started`` (a widening), v3 removes ``succeeded`` and maps
  ``succeeded=failed`` (v2's tags made it look faithful): a landed charge read as failed;
- v2 drops ``fail-closed`` / ``needs-human`` and both exit rules from ``indeterminate``
  while keys wait there, v3 maps ``indeterminate=succeeded``: "we do not know" became "it
  landed";
- v2 drops the rules that keep a request with money in flight out of ``failed``, v3 maps
  ``executing=failed`` with a withdrawal started: the reservation released.

Now a new version keeps what a populated state means (its reserved tags and exit rules
included), and a map is judged by every version under which the entities may have lived in
the state it leaves; the audit judges a recorded migration event the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from machines.checks.audit import judge_snapshot
from machines.checks.snapshots import Snapshot
from machines.spec.loader import load
from machines.spec.migration_moves import EARLIER, lineage, migration_breaks
from machines.spec.vocabulary import MIGRATION_ACTOR, MIGRATION_TRIGGER
from machines.store import open_store
from tests.conftest import Document, SpecCopy, rename_everywhere
from tests.hand_built import entity, event
from tests.migration_stores import load_dir, raw_snapshot
from tests.test_attacks_migration import migrate, put, request_with_node, shortest

Change = Callable[[Document], None]


@pytest.fixture
def url(database_url: str) -> str:
    """A URL where no store is yet, on SQLite and on PostgreSQL."""
    return database_url


def tag_failed_started(doc: Document) -> None:
    doc["states"]["failed"]["tags"] = ["effect-started"]


def without_succeeded(doc: Document) -> None:
    """``succeeded`` removed; the moves into it lead to ``failed``."""
    del doc["states"]["succeeded"]
    for t in doc["transitions"]:
        if t["dest"] == "succeeded":
            t["dest"] = "failed"
    doc["forbidden"] = [f for f in doc["forbidden"] if f["source"] != "succeeded"]
    for rule in doc["invariants"]:
        if rule["id"] == "failed-means-proven":
            rule["dests"] = ["failed"]


def untag_indeterminate(tag: str) -> Change:
    def change(doc: Document) -> None:
        tags = doc["states"]["indeterminate"]["tags"]
        doc["states"]["indeterminate"]["tags"] = [t for t in tags if t != tag]

    return change


def drop_rule(rule_id: str) -> Change:
    def change(doc: Document) -> None:
        doc["invariants"] = [r for r in doc["invariants"] if r["id"] != rule_id]

    return change


def widen_exit_actors(doc: Document) -> None:
    """The worker may leave ``indeterminate`` too; a new actor the rule leaves out keeps
    the rule one that can fail (naming every actor, it would keep nothing: ``check``
    refuses such a rule before any migration judges it)."""
    doc["actors"]["auditor"] = {"automatic": False, "description": "Someone who reads."}
    for rule in doc["invariants"]:
        if rule["id"] == "fail-closed-indeterminate":
            rule["actors"] = [*rule["actors"], "worker"]


def unreserve_indeterminate(doc: Document) -> None:
    """``indeterminate`` no longer kept for people: tags and exit rules dropped, and a
    worker's retry out of it."""
    doc["states"]["indeterminate"]["tags"] = ["effect-started"]
    gone = {"fail-closed-indeterminate", "indeterminate-exits"}
    doc["invariants"] = [r for r in doc["invariants"] if r["id"] not in gone]
    doc["transitions"].append(
        {
            "trigger": "retry_auto",
            "source": "indeterminate",
            "dest": "in_flight",
            "actor": "worker",
            "description": "retry.",
        }
    )


def without_indeterminate(doc: Document) -> None:
    unreserve_indeterminate(doc)
    del doc["states"]["indeterminate"]
    doc["transitions"] = [
        t for t in doc["transitions"] if "indeterminate" not in (t["source"], t["dest"])
    ]
    doc["forbidden"] = [f for f in doc["forbidden"] if f["source"] != "indeterminate"]
    doc["invariants"] = [
        r for r in doc["invariants"] if "indeterminate" not in str(r.get("state", r.get("states")))
    ]


def both(*changes: Change) -> Change:
    def change(doc: Document) -> None:
        for c in changes:
            c(doc)

    return change


def version(root: Path, name: str, machine: str, change: Change) -> Path:
    return SpecCopy(root / name).edit(machine, change).path


def test_a_tag_added_in_one_version_does_not_open_a_map_in_the_next(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-42", "succeeded", {}, data={"result": {"charged": 100}})
    v2 = version(tmp_path, "v2", "outcome", tag_failed_started)
    v3 = version(tmp_path, "v3", "outcome", both(tag_failed_started, without_succeeded))
    code, out = migrate(capsys, url, v2)
    assert code == 0, out
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, v3, "outcome:succeeded=failed")
    assert code == 1, out
    assert (
        "'succeeded' is tagged effect-started (the effect may have run) and 'failed' is not: "
        f"the map would say it never ran {EARLIER}"
    ) in out
    assert raw_snapshot(url) == before


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (untag_indeterminate("fail-closed"), "'indeterminate' loses the tag fail-closed"),
        (untag_indeterminate("needs-human"), "'indeterminate' loses the tag needs-human"),
        (
            drop_rule("fail-closed-indeterminate"),
            "rule 'fail-closed-indeterminate' (only_actors_exit) is dropped or widened",
        ),
        (
            widen_exit_actors,
            "rule 'fail-closed-indeterminate' (only_actors_exit) is dropped or widened",
        ),
        (
            drop_rule("indeterminate-exits"),
            "rule 'indeterminate-exits' (only_triggers_exit) is dropped or widened",
        ),
    ],
    ids=["fail-closed", "needs-human", "actors-rule", "actors-widened", "triggers-rule"],
)
def test_a_new_version_keeps_a_populated_state_kept_for_people(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Change, why: str
) -> None:
    put(url, "outcome", "charge-7", "indeterminate", {})
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, version(tmp_path, "v2", "outcome", change))
    assert code == 1, out
    assert (
        f"1 entity in state 'indeterminate', and the new version changes what it means: {why}"
    ) in out
    assert raw_snapshot(url) == before


def test_an_empty_state_may_stop_being_kept_for_people(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(url, "outcome", "charge-7", "succeeded", {})
    code, out = migrate(capsys, url, version(tmp_path, "v2", "outcome", unreserve_indeterminate))
    assert code == 0, out


def park(store_url: str, spec_dir: Path, key: str) -> None:
    """``key`` parked in ``indeterminate`` under the definitions of ``spec_dir``."""
    specs = load_dir(spec_dir)
    store = open_store(store_url, specs)
    try:
        with store.transaction() as tx:
            row, _ = tx.insert("outcome", key, context={}, data={})
            for trigger, actor in shortest(specs["outcome"], "indeterminate", {}):
                row = tx.move(row, trigger, actor=actor, detail={"by": "test"})
    finally:
        store.close()


def test_a_state_unreserved_while_empty_is_still_judged_by_the_version_that_reserved_it(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The conservative side of judging by every version: the key entered indeterminate
    under v2, which reserves nothing, yet v1 (whose indeterminate is fail-closed) judges
    the map too; the way out is v2's own retry, then the migration."""
    put(url, "outcome", "charge-1", "succeeded", {})
    v2 = version(tmp_path, "v2", "outcome", unreserve_indeterminate)
    assert migrate(capsys, url, v2)[0] == 0
    park(url, v2, "charge-7")
    before = raw_snapshot(url)
    v3 = version(tmp_path, "v3", "outcome", without_indeterminate)
    code, out = migrate(capsys, url, v3, "outcome:indeterminate=succeeded")
    assert code == 1, out
    assert (
        f"'indeterminate' is tagged fail-closed: only a person's decision leaves it {EARLIER}"
        in out
    )
    assert raw_snapshot(url) == before


MONEY_RULES = {"no-auto-release-with-money-in-flight", "cancel-only-before-money-moves"}


def drop_money_rules(doc: Document) -> None:
    doc["invariants"] = [r for r in doc["invariants"] if r["id"] not in MONEY_RULES]


def running_without_money_rules(doc: Document) -> None:
    drop_money_rules(doc)
    renamed = rename_everywhere(doc, "executing", "running")
    doc.clear()
    doc.update(renamed)


def test_a_rule_dropped_in_one_version_still_keeps_money_in_flight_from_a_later_map(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_with_node(url, "submitting", side_effect=True)
    v2 = version(tmp_path, "v2", "request", drop_money_rules)
    code, out = migrate(capsys, url, v2)
    assert code == 0, out
    before = raw_snapshot(url)
    v3 = version(tmp_path, "v3", "request", running_without_money_rules)
    code, out = migrate(capsys, url, v3, "request:executing=failed")
    assert code == 1, out  # batch 12: a derived state is left by the derivation alone
    assert "'executing' is derived from its node entities" in out
    assert raw_snapshot(url) == before
    said = "\n".join(
        migration_breaks(
            load_dir(v2)["request"],
            load_dir(v3)["request"],
            "executing",
            "failed",
            {"side_effects": "started"},
            [(load("request"), "executing")],
        )
    )
    assert (
        "rule 'no-auto-release-with-money-in-flight' (automatic_enters_only_when) admits "
        "'failed' only when side_effects in [none], not side_effects=started " + EARLIER
    ) in said


# -- the judgement itself, without a store ----------------------------------------------------


def edited(tmp_path: Path, name: str, machine: str, change: Change) -> Any:
    return load_dir(version(tmp_path, name, machine, change))[machine]


def test_the_lineage_stops_at_a_version_without_the_state(tmp_path: Path) -> None:
    v1 = load("outcome")
    v2 = edited(tmp_path, "v2", "outcome", without_indeterminate)
    v3 = edited(tmp_path, "v3", "outcome", unreserve_indeterminate)
    assert lineage([v1, v3, v3], "indeterminate") == [(v1, "indeterminate"), (v3, "indeterminate")]
    assert lineage([v1, v2, v3], "indeterminate") == []
    assert lineage([v3], "indeterminate") == []
    v4 = edited(tmp_path, "v4", "outcome", without_indeterminate)
    alone = migration_breaks(v3, v4, "indeterminate", "succeeded", earlier=[])
    assert not any(EARLIER in why for why in alone)  # v3's own rules only (batch 9: a
    # migration finishes no entity the definition finishes only by a person's move)
    assert any(
        EARLIER in why
        for why in migration_breaks(
            v3, v4, "indeterminate", "succeeded", earlier=[(v1, "indeterminate")]
        )
    )


def test_the_lineage_follows_a_recorded_rename(tmp_path: Path) -> None:
    """Outsider, seventh batch: a state renamed in v2 is the one v1 knew by its old name,
    and v1's rules judge a later map out of it (v2 had dropped the rule that only a human
    approves an irreversible call; v3 mapped the renamed pending into approved)."""
    v1 = load("outcome")
    v2 = edited(tmp_path, "v2", "outcome", without_indeterminate)
    assert lineage([v1, v2, v2], "gone", [set(), {("indeterminate", "gone")}, set()]) == []
    assert lineage([v1, v2], "gone", [set(), {("indeterminate", "gone")}]) == [
        (v1, "indeterminate")
    ]
    assert lineage([v1, v2], "gone", [set(), set()]) == []
    assert lineage([v1, v1, v2], "gone", [set(), set(), {("in_flight", "gone")}]) == [
        (v1, "in_flight"),
        (v1, "in_flight"),
    ]


def test_the_audit_judges_a_recorded_migration_by_the_earlier_versions(tmp_path: Path) -> None:
    """A store migrated by a release that judged a map by the last version alone: v2
    unreserved indeterminate, v3 mapped the parked key to succeeded."""
    v1 = load("outcome")
    v2 = edited(tmp_path, "v2", "outcome", unreserve_indeterminate)
    v3 = edited(tmp_path, "v3", "outcome", without_indeterminate)
    detail = {"from_version": 2, "to_version": 3, "reason": "state 'indeterminate' removed"}
    events = [
        event("outcome", "k", 1, "in_flight", "indeterminate", "park", "worker"),
        event(
            "outcome",
            "k",
            2,
            "indeterminate",
            "succeeded",
            MIGRATION_TRIGGER,
            MIGRATION_ACTOR,
            detail=detail,
        ),
    ]
    snap = Snapshot(
        MappingProxyType(
            {("outcome", "k"): entity("outcome", "k", "succeeded", events, data={"result": 1})}
        ),
        event_versions=MappingProxyType({("outcome", "k"): (1, 3)}),
        definitions=MappingProxyType({("outcome", 1): v1, ("outcome", 2): v2, ("outcome", 3): v3}),
    )
    found = [b.message for b in judge_snapshot({"outcome": v3}, snap)]
    assert any("rule 'fail-closed-indeterminate'" in m and EARLIER in m for m in found), found


def _parked_across(v2: Any, events_versions: tuple[int, ...], dest: str) -> list[str]:
    events = [event("outcome", "k", 1, "in_flight", "indeterminate", "park", "worker")]
    if dest != "indeterminate":
        events.append(event("outcome", "k", 2, "indeterminate", dest, "retry_auto", "worker"))
    snap = Snapshot(
        MappingProxyType({("outcome", "k"): entity("outcome", "k", dest, events)}),
        event_versions=MappingProxyType({("outcome", "k"): events_versions}),
        definitions=MappingProxyType({("outcome", 1): load("outcome"), ("outcome", 2): v2}),
    )
    return [b.message for b in judge_snapshot({"outcome": v2}, snap)]


def test_the_audit_names_a_version_installed_over_a_waiting_entity(tmp_path: Path) -> None:
    """Outsider, ninth batch (f09): the schema's owner installed outcome v2 with the
    store's own generator, skipping migrate's judgement: v2 unreserved ``indeterminate``
    while a key was parked there, and a worker then took it out. Every event was legal
    under its own version, so the audit passed. Now the audit judges each version an entity
    lived through while it waited in a state as migrate would have (kept_state_breaks),
    whether it has moved since or waits there still."""
    v2 = edited(tmp_path, "v2", "outcome", unreserve_indeterminate)
    moved = _parked_across(v2, (1, 2), "in_flight")
    assert any("it waited in 'indeterminate' while version 2 was installed" in m for m in moved)
    waiting = _parked_across(v2, (1,), "indeterminate")
    assert any("rule 'fail-closed-indeterminate'" in m for m in waiting), waiting
    kept = _parked_across(load("outcome"), (1,), "indeterminate")  # v2 changes nothing
    assert not any("while version 2 was installed" in m for m in kept), kept
