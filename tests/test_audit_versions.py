"""``machines audit --from-store`` judges each event by the definition version it was made
under (issue 17): a store migrated across a widening change, a breaking change that
removes states live entities occupy (with ``--map``) and a breaking change that removes a
transition old events used passes the audit, on SQLite and PostgreSQL, while the same
events judged by the newest version alone would not; and what a forger writes into the
history behind the store's back (an old event changed, a migration event out of a
terminal state into a live one, a version going back, a version the registry lacks, a
stored definition changed) is still caught. Each rule of a migration event is also broken
on purpose in a snapshot built by hand."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from machines.checks.audit import audit_events, audit_store, judge_snapshot, judge_store
from machines.checks.breaches import Breach
from machines.checks.invariants import check_invariants
from machines.checks.snapshots import Entity, Snapshot, snapshot
from machines.cli import main
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.spec.loader import definition_paths, read_definition
from machines.spec.vocabulary import MIGRATION_ACTOR, MIGRATION_TRIGGER
from machines.store import open_store
from machines.store.migration import StateMap, migrate
from machines.store.names import name
from machines.store.versions import DefinitionChanged
from tests.conftest import Document, SpecCopy, transition
from tests.hand_built import entity, event

Specs = dict[str, MachineSpec]
WHY = {"by": "ops-1", "reason": "a test"}
OH, OE = name("outcome", "history"), name("outcome", "entities")

# -- the versions of outcome ----------------------------------------------------------------


def widen(doc: Document) -> None:
    """v2, widening: an operator may reclaim too."""
    transition(doc, "indeterminate", "in_flight")["actor"] = ["caller", "operator"]


def add_hold(doc: Document) -> None:
    """v3, widening: a person may hold an attempt, then resume or abandon it; a worker
    may release a hold too (so a migration, automatic, may map a held attempt out)."""
    doc["states"]["on_hold"] = {"description": "Held by a person."}
    doc["states"]["abandoned"] = {"terminal": True, "description": "Given up by a person."}
    doc["transitions"] += [
        {"trigger": t, "source": s, "dest": d, "actor": "operator", "description": f"{t}."}
        for t, s, d in [
            ("hold", "in_flight", "on_hold"),
            ("resume", "on_hold", "in_flight"),
            ("abandon", "on_hold", "abandoned"),
        ]
    ]
    doc["transitions"].append(
        {
            "trigger": "release",
            "source": "on_hold",
            "dest": "in_flight",
            "actor": "worker",
            "description": "release.",
        }
    )


def remove_hold(doc: Document) -> None:
    """v4, breaking: on_hold and abandoned are gone (live entities are mapped out)."""
    del doc["states"]["on_hold"], doc["states"]["abandoned"]
    doc["transitions"] = [
        t
        for t in doc["transitions"]
        if t["trigger"] not in ("hold", "resume", "abandon", "release")
    ]


def remove_fail(doc: Document) -> None:
    """v5, breaking: a worker can no longer fail an attempt (old events did)."""
    doc["transitions"] = [t for t in doc["transitions"] if t["trigger"] != "fail"]


CHANGES: list[Callable[[Document], None]] = [widen, add_hold, remove_hold, remove_fail]
MAPS = [StateMap("outcome", "on_hold", "indeterminate"), StateMap("outcome", "abandoned", "failed")]


@dataclass(frozen=True)
class Versions:
    specs: list[Specs]  # specs[0] is version 1 (the bundled definitions)
    dirs: list[Path]

    def outcome(self, version: int) -> MachineSpec:
        return self.specs[version - 1]["outcome"]

    def definitions(self, upto: int) -> dict[tuple[str, int], MachineSpec]:
        return {("outcome", v): self.outcome(v) for v in range(1, upto + 1)}


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Versions:
    root = tmp_path_factory.mktemp("versions")
    dirs = [SpecCopy(root / "v1").path]
    for number in range(2, len(CHANGES) + 2):
        copy = SpecCopy(root / f"v{number}")
        for change in CHANGES[: number - 1]:
            copy.edit("outcome", change)
        dirs.append(copy.path)
    specs = [{s.name: s for s in map(read_definition, definition_paths(d))} for d in dirs]
    return Versions(specs, dirs)


# -- a migrated store ---------------------------------------------------------------------


@pytest.fixture
def url(database_url: str) -> str:
    """A URL where no store is yet, on SQLite and on PostgreSQL."""
    return database_url


def moves(url: str, specs: Specs, *steps: tuple[str, str | None, str, dict[str, Any]]) -> None:
    """Each (key, trigger, actor, data) on the store (a None trigger: create the key)."""
    store = open_store(url, specs)
    try:
        with store.transaction() as tx:
            for key, trigger, actor, data in steps:
                if trigger is None:
                    tx.insert("outcome", key)
                    continue
                row = tx.get("outcome", key)
                assert row is not None
                tx.move(row, trigger, actor=actor, detail=WHY, data=data or None)
    finally:
        store.close()


NEW = None
RESULT: dict[str, Any] = {"result": 1}
ERROR: dict[str, Any] = {"error": "proven not sent"}


def migrated(url: str, versions: Versions, *, audited: bool = True) -> None:
    """A store taken from version 1 to version 5 of outcome, moves made under each;
    ``audited``: the audit passes after each migration."""
    v = versions.specs

    def audit(specs: Specs) -> None:
        if audited:
            assert audit_store(url, specs) == []

    moves(url, v[0], *[(k, NEW, "", {}) for k in ("k1", "k2", "k3", "k4")])
    moves(
        url,
        v[0],
        ("k1", "park", "worker", {}),
        ("k1", "reclaim", "caller", {}),
        ("k1", "succeed", "worker", RESULT),
        ("k2", "park", "worker", {}),
        ("k3", "fail", "worker", ERROR),  # version 5 has no fail
    )
    assert migrate(url, v[1]).applied  # (a) widening
    audit(v[1])
    moves(
        url,
        v[1],
        ("k2", "reclaim", "operator", {}),  # only versions 2 and later allow it
        ("k5", NEW, "", {}),
        ("k5", "park", "worker", {}),
    )
    assert migrate(url, v[2]).applied
    moves(
        url,
        v[2],
        ("k2", "park", "worker", {}),
        ("k6", NEW, "", {}),
        ("k6", "hold", "operator", {}),
        ("k7", NEW, "", {}),
        ("k7", "hold", "operator", {}),
        ("k7", "abandon", "operator", ERROR),
    )
    refused = migrate(url, v[3])  # (b) breaking: k6 and k7 sit in removed states
    assert refused.refused and not refused.applied
    assert migrate(url, v[3], MAPS).applied
    audit(v[3])
    moves(url, v[3], ("k6", "decide_not_landed", "operator", ERROR))
    assert migrate(url, v[4]).applied  # (c) breaking: k3's old event used fail
    moves(url, v[4], ("k4", "park", "worker", {}))


def breaches(url: str, specs: Specs) -> dict[str, set[tuple[str, str]]]:
    """The breaches of the store's audit: entity -> {(invariant, message)}."""
    out: dict[str, set[tuple[str, str]]] = {}
    for b in audit_store(url, specs):
        out.setdefault(b.key, set()).add((b.invariant, b.message))
    return out


def test_a_store_migrated_across_three_changes_passes_judged_by_each_events_version(
    url: str, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    migrated(url, versions)
    found = judge_store(url, versions.specs[4])
    assert found.breaches == []
    assert found.versions["outcome"] == (1, 2, 3, 4, 5)
    assert found.judged_by() == "effect v1, node v1, outcome v1-v5, request v1"
    store = open_store(url, versions.specs[4], read_only=True)
    try:
        snap = snapshot(store)
        with store.transaction() as tx:
            migration_events = [
                (e, v)
                for key in ("k6", "k7")
                for e, v in zip(
                    tx.history("outcome", key), tx.event_versions("outcome", key), strict=True
                )
                if e.actor == MIGRATION_ACTOR
            ]
    finally:
        store.close()
    assert [(e.entity, e.source, e.dest, v) for e, v in migration_events] == [
        ("k6", "on_hold", "indeterminate", 4),
        ("k7", "abandoned", "failed", 4),
    ]
    assert snap.event_versions[("outcome", "k1")] == (1, 1, 1)
    assert snap.event_versions[("outcome", "k2")] == (1, 2, 3)
    # The same events judged by the newest version alone: k3's fail, k6's and k7's hold
    # and abandon and their states are not in it.
    stripped = replace(snap, event_versions=MappingProxyType({}), definitions=MappingProxyType({}))
    alone = {b.key: b.message for b in judge_snapshot(versions.specs[4], stripped)}
    assert set(alone) == {"k3", "k6", "k7"}, alone
    assert "trigger 'fail'" in alone["k3"] and "state 'on_hold'" in alone["k6"], alone
    # ... and the command says which versions it judged by.
    capsys.readouterr()
    assert main(["audit", "--from-store", url, "--spec-dir", str(versions.dirs[4])]) == 0
    assert "judged by effect v1, node v1, outcome v1-v5, request v1: OK" in capsys.readouterr().out


def test_an_audit_with_other_definitions_than_the_stores_current_ones_is_refused(
    url: str, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    """The audit does not take the store's word for its definitions: given version 1 of
    outcome while the store serves version 2, it stops (exit 2) and says what to do."""
    moves(url, versions.specs[0], ("k1", NEW, "", {}))
    assert migrate(url, versions.specs[1]).applied
    with pytest.raises(DefinitionChanged, match="machine 'outcome' is stored at definition"):
        audit_store(url, versions.specs[0])
    capsys.readouterr()
    assert main(["audit", "--from-store", url]) == 2  # the bundled (version 1) definitions
    err = capsys.readouterr().err
    assert "machine 'outcome' is stored at definition version 2" in err, err
    assert "the definition given is its version 1, which the store was migrated away" in err
    assert "what changed since: 0 breaking, 1 widening (transition" in err, err
    assert "an audit judges a store by the definitions it serves now: give those" in err, err


# -- forgeries ----------------------------------------------------------------------------


def forge(url: str, *statements: str) -> None:
    """Run ``statements`` as the database's owner, every guard off: SQLite drops the
    triggers and puts them back as they were (so the guards look intact), PostgreSQL runs
    them with ``session_replication_role = replica``."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        try:
            triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
            kept = triggers.fetchall()
            for trigger, _ in kept:
                conn.execute(f'DROP TRIGGER "{trigger}"')
            for sql in statements:
                conn.execute(sql)
            for _, sql in kept:
                conn.execute(sql)
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(b"SET session_replication_role = replica")
        for sql in statements:
            pg.execute(sql.encode())


def test_forged_events_are_caught_each_judged_by_its_own_version(
    url: str, versions: Versions
) -> None:
    """Four forgeries, one entity each, written with every guard off:

    - k1's reclaim, made by its caller under version 1, rewritten as an operator's: the
      newest version allows that move, version 1 does not;
    - k7 was abandoned (terminal) and mapped to failed: its migration now leads to
      indeterminate, a map the migration itself refuses;
    - k2's third event (a park under version 3) relabelled as version 1's: the move is
      legal there, but versions never go back;
    - k5's event relabelled with a version the registry does not have."""
    migrated(url, versions, audited=False)
    forge(
        url,
        f"UPDATE {OH} SET actor = 'operator' WHERE entity = 'k1' AND seq = 2",
        f"UPDATE {OH} SET dest = 'indeterminate' WHERE entity = 'k7' AND seq = 3",
        f"UPDATE {OE} SET state = 'indeterminate' WHERE key = 'k7'",
        f"UPDATE {OH} SET definition_version = 1 WHERE entity = 'k2' AND seq = 3",
        f"UPDATE {OH} SET definition_version = 9 WHERE entity = 'k5' AND seq = 1",
    )
    found = breaches(url, versions.specs[4])
    assert set(found) == {"k1", "k2", "k5", "k7"}, found
    ((invariant, message),) = found["k1"]
    assert invariant == "append-only-history"
    assert message.startswith("an event the spec does not allow (version 1)"), message
    assert found["k7"] == {
        (
            "terminal-final",
            "left terminal state 'abandoned' by a migration into non-terminal 'indeterminate'",
        )
    }
    assert found["k2"] == {
        (
            "append-only-history",
            "made under definition version 1 after an event of version 2: versions never "
            "go back along a history",
        )
    }
    ((invariant, message),) = found["k5"]
    assert invariant == "known-names"
    assert "event #1 names definition version 9, which the store does not record" in message
    assert "(it has v1-v5)" in message


def test_a_stored_definition_changed_behind_the_stores_back_is_unreadable(
    url: str, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    """Version 1's text is the one judge of the events made under it: a text that no
    longer has its recorded digest makes the audit stop (exit 2), not judge by it."""
    moves(url, versions.specs[0], ("k1", NEW, "", {}), ("k1", "park", "worker", {}))
    assert migrate(url, versions.specs[1]).applied
    assert audit_store(url, versions.specs[1]) == []
    forge(
        url,
        "UPDATE machines_definitions SET definition = "
        "(SELECT definition FROM machines_definitions WHERE machine = 'outcome' AND "
        "version = 2) WHERE machine = 'outcome' AND version = 1",
    )
    capsys.readouterr()
    assert main(["audit", "--from-store", url, "--spec-dir", str(versions.dirs[1])]) == 2
    err = capsys.readouterr().err
    assert "machine 'outcome' version 1 does not have the digest recorded with it" in err, err


# -- each rule, broken in a snapshot built by hand ------------------------------------------


ev = partial(event, "outcome")
"""An event of outcome: ``ev(key, seq, source, dest, trigger, actor, detail=...)``."""


def outcome_k(state: str, *events: TransitionEvent, data: dict[str, Any] | None = None) -> Entity:
    """Outcome entity ``k`` in ``state`` with ``events``."""
    return entity("outcome", "k", state, list(events), data=data)


def versioned(
    k: Entity, numbers: tuple[int, ...], definitions: dict[tuple[str, int], MachineSpec]
) -> Snapshot:
    """A snapshot of ``k`` alone, its events made under versions ``numbers``."""
    return Snapshot(
        MappingProxyType({("outcome", "k"): k}),
        event_versions=MappingProxyType({("outcome", "k"): numbers}),
        definitions=MappingProxyType(definitions),
    )


PARKED = ev("k", 1, "in_flight", "indeterminate", "park", "worker")


def reclaimed_by(actor: str) -> list[TransitionEvent]:
    return [PARKED, ev("k", 2, "indeterminate", "in_flight", "reclaim", actor, detail=WHY)]


def migration(key: str, seq: int, source: str, dest: str, a: int, b: int) -> TransitionEvent:
    detail = {"from_version": a, "to_version": b, "reason": f"state '{source}' removed"}
    return ev(key, seq, source, dest, MIGRATION_TRIGGER, MIGRATION_ACTOR, detail=detail)


def judged(
    versions: Versions,
    state: str,
    events: list[TransitionEvent],
    numbers: list[int] | None,
    upto: int = 5,
) -> set[tuple[str, str]]:
    """(invariant, message) of every breach of one outcome entity in ``state`` with
    ``events`` made under versions ``numbers`` (None: a snapshot without versions), the
    store recording versions 1 to ``upto``; judged by the audit (known-names first)."""
    data = {"failed": ERROR, "succeeded": RESULT}.get(state, {})
    k = outcome_k(state, *events, data=data)
    if numbers is None:
        snap = Snapshot(MappingProxyType({("outcome", "k"): k}))
    else:
        snap = versioned(k, tuple(numbers), versions.definitions(upto))
    specs = versions.specs[upto - 1]
    return {(b.invariant, b.message) for b in judge_snapshot(specs, snap)}


HELD = [ev("k", 1, "in_flight", "on_hold", "hold", "operator")]
"""A hold under version 3: k is then on_hold, which version 4 removes."""


def test_a_clean_migration_event_passes(versions: Versions) -> None:
    events = [*HELD, migration("k", 2, "on_hold", "indeterminate", 3, 4)]
    assert judged(versions, "indeterminate", events, [3, 4]) == set()
    abandoned = [*HELD, ev("k", 2, "on_hold", "abandoned", "abandon", "operator")]
    to_failed = [*abandoned, migration("k", 3, "abandoned", "failed", 3, 4)]
    assert judged(versions, "failed", to_failed, [3, 3, 4]) == set()  # terminal to terminal


def only(found: set[tuple[str, str]], invariant: str, *says: str) -> None:
    assert {i for i, _ in found} == {invariant}, found
    for text in says:
        assert any(text in message for _, message in found), (text, found)


@pytest.mark.parametrize(
    ("events", "numbers", "state", "says"),
    [
        pytest.param(
            [*HELD, migration("k", 2, "on_hold", "indeterminate", 3, 4)],
            [3, 3],
            "indeterminate",
            "a migration to version 3 after an event of version 3",
            id="version-not-raised",
        ),
        pytest.param(
            [*HELD, migration("k", 2, "on_hold", "indeterminate", 2, 4)],
            [3, 4],
            "indeterminate",
            "must name from_version 3 and to_version 4",
            id="detail-names-other-versions",
        ),
        pytest.param(
            [*HELD, ev("k", 2, "on_hold", "indeterminate", MIGRATION_TRIGGER, MIGRATION_ACTOR)],
            [3, 4],
            "indeterminate",
            "its detail records no reason",
            id="no-detail",
        ),
        pytest.param(
            [PARKED, migration("k", 2, "indeterminate", "failed", 3, 4)],
            [3, 4],
            "failed",
            "version 4 keeps state 'indeterminate'",
            id="source-kept-by-the-new-version",
        ),
        pytest.param(
            [migration("k", 1, "in_flight", "failed", 0, 1)],
            [1],
            "failed",
            "version 0, which it migrates from, is not recorded",
            id="no-version-before",
        ),
        pytest.param(
            [PARKED, migration("k", 2, "on_hold", "indeterminate", 3, 4)],
            [3, 4],
            "indeterminate",
            "event 2 does not continue from 'indeterminate'",
            id="chain-broken",
        ),
        pytest.param(
            reclaimed_by("operator"),
            [1, 1],
            "in_flight",
            "an event the spec does not allow (version 1)",
            id="a-move-only-a-later-version-allows",
        ),
        pytest.param(
            reclaimed_by("caller"),
            [2, 1],
            "in_flight",
            "made under definition version 1 after an event of version 2",
            id="version-decreases",
        ),
    ],
)
def test_each_rule_of_a_history_with_versions_breaks_append_only_history(
    versions: Versions,
    events: list[TransitionEvent],
    numbers: list[int],
    state: str,
    says: str,
) -> None:
    only(judged(versions, state, events, numbers), "append-only-history", says)


def test_a_move_its_version_removed_is_a_breach_and_legal_under_the_versions_before(
    versions: Versions,
) -> None:
    failed = [ev("k", 1, "in_flight", "failed", "fail", "worker")]
    for version in (1, 2, 3, 4):
        assert judged(versions, "failed", failed, [version]) == set()
    only(judged(versions, "failed", failed, [5]), "known-names", "(version 5) names trigger 'fail'")


def test_a_migration_out_of_a_terminal_state_into_a_live_one_breaks_terminal_final(
    versions: Versions,
) -> None:
    abandoned = [*HELD, ev("k", 2, "on_hold", "abandoned", "abandon", "operator")]
    events = [*abandoned, migration("k", 3, "abandoned", "indeterminate", 3, 4)]
    only(
        judged(versions, "indeterminate", events, [3, 3, 4]),
        "terminal-final",
        "left terminal state 'abandoned' by a migration into non-terminal 'indeterminate'",
    )


def test_a_migration_event_names_a_state_its_version_has(versions: Versions) -> None:
    events = [*HELD, migration("k", 2, "on_hold", "abandoned", 3, 4)]
    only(
        judged(versions, "abandoned", events, [3, 4]),
        "known-names",
        "event #2 (version 4) names state 'abandoned'",
        "its state 'abandoned'",
    )


def test_an_event_of_an_unrecorded_version_breaks_append_only_history_for_the_predicates(
    versions: Versions,
) -> None:
    """Outside the audit (the suites' own checks) the predicates report it themselves."""
    snap = versioned(outcome_k("indeterminate", PARKED), (7,), versions.definitions(2))
    found = check_invariants(versions.specs[1], snap)
    assert [(b.invariant, b.message) for b in found] == [
        (
            "append-only-history",
            "made under definition version 7, which the store does not record (it has v1-v2)",
        )
    ]


def test_the_judges_definition_stands_for_the_current_version(versions: Versions) -> None:
    """The newest stored version is judged by the definition the auditor gives, not by
    the store's text of it: a system run on a broken definition is still caught."""
    failed = outcome_k("failed", ev("k", 1, "in_flight", "failed", "fail", "worker"), data=ERROR)
    lenient = {("outcome", 1): versions.outcome(1)}  # the store's own (it allows fail)
    snap = versioned(failed, (1,), lenient)
    found: list[Breach] = check_invariants({"outcome": versions.outcome(5)}, snap)
    assert [b.invariant for b in found] == ["append-only-history"]


def test_an_entity_may_start_from_the_initial_state_of_an_older_version(
    tmp_path: Path, versions: Versions
) -> None:
    """Version 2 starts new entities in queued; one created under version 1 is still in
    in_flight, and its first event, under version 2, leaves from there."""

    def queue(doc: Document) -> None:
        doc["initial"] = "queued"
        doc["states"]["queued"] = {"description": "Waiting for a worker."}
        doc["transitions"].append(
            {
                "trigger": "start",
                "source": "queued",
                "dest": "in_flight",
                "actor": "worker",
                "description": "A worker takes it.",
            }
        )

    copy = SpecCopy(tmp_path).edit("outcome", queue)
    queued = read_definition(copy.file("outcome"))
    both = {("outcome", 1): versions.outcome(1), ("outcome", 2): queued}
    snap = versioned(outcome_k("indeterminate", PARKED), (2,), both)
    assert check_invariants({"outcome": queued}, snap) == []
    without = replace(snap, event_versions=MappingProxyType({}), definitions=MappingProxyType({}))
    assert [b.invariant for b in check_invariants({"outcome": queued}, without)] == [
        "append-only-history"
    ]


def test_versions_rewritten_since_the_previous_snapshot_are_caught(versions: Versions) -> None:
    before = versioned(outcome_k("indeterminate", PARKED), (1,), versions.definitions(2))
    after = replace(before, event_versions=MappingProxyType({("outcome", "k"): (2,)}))
    assert check_invariants(versions.specs[1], after) == []
    found = check_invariants(versions.specs[1], after, before)
    assert [b.message for b in found] == [
        "the definition versions of its history were rewritten since the previous snapshot"
    ]


def test_a_migration_event_in_a_log_names_what_no_definition_has(versions: Versions) -> None:
    """A log carries no versions, and History.write_jsonl never writes a migration: the
    reserved actor and trigger are unknown names there."""
    events = [*HELD, migration("k", 2, "on_hold", "indeterminate", 3, 4)]
    found = {b.invariant for b in audit_events(events, versions.specs[2])}
    assert found == {"known-names"}


def test_an_audit_that_fell_back_on_the_bundled_definitions_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 46 (b 44): outside any project, an audit of a store of the user's
    own machine said "no tables for machine 'effect'", not that it judged by this
    package's bundled definitions for want of the project's."""
    from machines.spec.loader import load as load_definition

    refund = load_definition(Path(__file__).parent / "user_project" / "specs" / "refund.yaml")
    url = f"sqlite:///{tmp_path / 'refunds.db'}"
    open_store(url, [refund]).close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MACHINES_SPEC_DIR", raising=False)
    assert main(["audit", "--from-store", url]) == 2
    err = capsys.readouterr().err
    assert "no tables for machine" in err and "bundled definitions, for want of a project's" in err
