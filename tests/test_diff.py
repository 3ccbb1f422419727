"""``machines diff`` (issue 17, part 1): a catalog of definition changes on each bundled
machine, each with the classification ``diff`` must give (kinds and change ids) and the
exit code of the command; then what must not be a change (the same definition, written in
another order), wording alone, unreadable input, ``--base`` against a real git repository,
the JSON document held to its schema, and ``machines check`` printing the digests."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from machines.cli import main
from machines.cli.output import schema
from machines.errors import InvalidArgument
from machines.spec import diff as diff_module
from machines.spec.admits import Cube, minus
from machines.spec.canonical import (
    presentation_digest,
    presentation_form,
    semantic_digest,
    semantic_form,
)
from machines.spec.diff import (
    BREAKING,
    CHANGE_KINDS,
    KINDS,
    REWRITTEN,
    WIDENING,
    WORDING,
    Change,
    Kind,
    change,
    diff_report,
    diff_sets,
    diff_specs,
)
from machines.spec.diff_wording import WORDING_SECTIONS
from machines.spec.loader import bundled_spec_dir, read_definition
from machines.spec.structure import check_structure
from machines.store.versions import summary
from tests.conftest import Document, SpecCopy

MACHINES = ("effect", "outcome", "node", "request")
BUNDLED = bundled_spec_dir()

Edit = Callable[[Document], None]
Expected = tuple[tuple[Kind, str], ...]


def b(*ids: str) -> Expected:
    return tuple((BREAKING, i) for i in ids)


def w(*ids: str) -> Expected:
    return tuple((WIDENING, i) for i in ids)


def t(*ids: str) -> Expected:
    return tuple((WORDING, i) for i in ids)


def edge(doc: Document, trigger: str, source: str) -> Document:
    """The one YAML transition entry of ``trigger`` from ``source``."""
    found = [
        e
        for e in doc["transitions"]
        if e["trigger"] == trigger
        and source in ([e["source"]] if isinstance(e["source"], str) else e["source"])
    ]
    assert len(found) == 1, (trigger, source, found)
    return found[0]


def rule(doc: Document, rule_id: str) -> Document:
    (found,) = [r for r in doc["invariants"] if r["id"] == rule_id]
    return found


def finding(doc: Document, finding_id: str) -> Document:
    (found,) = [f for f in doc["findings"] if f["id"] == finding_id]
    return found


def rule_set(doc: Document, name: str) -> Document:
    found: Document = doc["derivation"]["rule_sets"][name]
    return found


def does(*edits: Edit) -> Edit:
    def all_of(doc: Document) -> None:
        for e in edits:
            e(doc)

    return all_of


def drop_transition(trigger: str, source: str) -> Edit:
    """Remove the edge of ``trigger`` from ``source`` (only that source of a list entry)."""

    def drop(doc: Document) -> None:
        entry = edge(doc, trigger, source)
        if isinstance(entry["source"], list) and len(entry["source"]) > 1:
            entry["source"] = [s for s in entry["source"] if s != source]
        else:
            doc["transitions"].remove(entry)

    return drop


def add_transition(**entry: Any) -> Edit:
    return lambda doc: doc["transitions"].append({"description": "added by a test", **entry})


def set_in(path: tuple[Any, ...], value: Any) -> Edit:
    def put(doc: Document) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return put


def pop_in(path: tuple[Any, ...]) -> Edit:
    def pop(doc: Document) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return pop


def on_edge(trigger: str, source: str, **fields: Any) -> Edit:
    """Set (or, with ``None``, remove) fields of one transition entry."""

    def change_it(doc: Document) -> None:
        entry = edge(doc, trigger, source)
        for key, value in fields.items():
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value

    return change_it


@dataclass(frozen=True)
class Case:
    """A change to one bundled definition (``edit`` on a copy of it; ``before`` edits the
    old side too, for a change that needs a starting point the bundled one lacks), the
    changes ``diff`` must list, and words their messages must hold."""

    id: str
    machine: str
    edit: Edit
    expected: Expected
    mentions: tuple[str, ...] = ()
    before: Edit | None = None


CATALOG = [
    # -- effect ---------------------------------------------------------------------------
    Case(
        "effect-state-removed",
        "effect",
        does(
            pop_in(("states", "replayed")),
            drop_transition("replay", "pending"),
            lambda d: d["forbidden"].remove(
                next(f for f in d["forbidden"] if f["source"] == "replayed")
            ),
        ),
        b("state-removed", "transition-removed"),
        ("state 'replayed' removed", "'pending' --replay--> 'replayed' removed"),
    ),
    Case(
        "effect-terminal-state-added",
        "effect",
        does(
            set_in(("states", "abandoned"), {"terminal": True, "description": "Given up."}),
            add_transition(trigger="abandon", source="pending", dest="abandoned", actor="human"),
            lambda d: d["forbidden"].append(
                {"source": "abandoned", "dest": "*", "reason": "abandoned is terminal"}
            ),
        ),
        w("state-added", "transition-added"),
        (
            "state 'abandoned' added",
            "'pending' --abandon--> 'abandoned' added: actor human in any context",
        ),
    ),
    Case(
        "effect-initial-changed",
        "effect",
        set_in(("initial",), "approved"),
        b("initial-changed"),
        ("from 'pending' to 'approved'",),
    ),
    Case(
        "effect-guard-added",
        "effect",
        on_edge("replay", "pending", when={"tier": ["compensable"]}),
        b("guard-narrowed"),
        ("'pending' --replay--> 'replayed' no longer admits actor engine when tier=irreversible",),
    ),
    Case(
        "effect-guard-widened",
        "effect",
        on_edge("execute", "pending", when={"tier": ["compensable", "irreversible"]}),
        w("guard-widened"),
        ("now admits actor proxy when tier=irreversible",),
    ),
    Case(
        "effect-guard-removed",
        "effect",
        on_edge("approve", "pending", when=None),
        w("guard-widened"),
        ("'pending' --approve--> 'approved' now admits actor human when tier=compensable",),
    ),
    Case(
        "effect-actor-swapped-on-an-edge",
        "effect",
        on_edge("fail", "executing", actor="saga"),
        b("actors-narrowed") + w("actors-widened"),
        ("no longer admits actor proxy in any context", "now admits actor saga in any context"),
    ),
    Case(
        "effect-actor-made-non-automatic",
        "effect",
        set_in(("actors", "engine", "automatic"), False),
        b("actor-made-non-automatic"),
        ("actor 'engine' made non-automatic",),
    ),
    Case(
        "effect-context-value-added",
        "effect",
        lambda d: d["context"]["tier"]["values"].append("reversible"),
        w("context-value-added"),
        ("context variable 'tier' gains value 'reversible'",),
    ),
    Case(
        "effect-context-value-excluded",
        "effect",
        set_in(("context", "tier", "excluded", "experimental"), "not logged yet"),
        b("context-value-excluded"),
        ("now refuses value 'experimental' by name",),
    ),
    Case(
        "effect-exclusion-removed",
        "effect",
        pop_in(("context", "tier", "excluded")),
        w("context-exclusion-removed"),
        ("no longer refuses value 'safe' by name",),
    ),
    Case(
        "effect-tag-removed",
        "effect",
        set_in(("states", "compensating", "tags"), ["compensation"]),
        b("tag-removed"),
        ("state 'compensating' loses tag 'effect-started'",),
    ),
    Case(
        "effect-tag-added",
        "effect",
        set_in(("states", "pending", "tags"), ["x-queued", "x-cheap"]),
        w("tag-added"),
        ("state 'pending' gains tags 'x-cheap', 'x-queued'",),
    ),
    Case(
        "effect-annotation-removed",
        "effect",
        set_in(("states", "committed", "annotations"), ["replay_count"]),
        b("annotation-removed"),
        ("state 'committed' loses annotation 'last_replayed_at'",),
    ),
    Case(
        "effect-annotation-added",
        "effect",
        lambda d: d["states"]["rejected"].update(annotations=["reviewed_at"]),
        w("annotation-added"),
        ("state 'rejected' gains annotation 'reviewed_at'",),
    ),
    Case(
        "effect-db-value-changed",
        "effect",
        set_in(("states", "pending", "db_value"), "waiting"),
        b("db-value-changed"),
        ("state 'pending' stored as 'waiting' instead of 'pending'",),
    ),
    Case(
        "effect-forbidden-added",
        "effect",
        lambda d: d["forbidden"].append(
            {"source": "approved", "dest": ["replayed", "rejected"], "reason": "a test"}
        ),
        b("forbidden-added"),
        ("forbidden moves added: 'approved' -> 'rejected'|'replayed'",),
    ),
    Case(
        "effect-forbidden-removed",
        "effect",
        lambda d: d["forbidden"].pop(),
        w("forbidden-removed"),
        ("'approved'|'pending' -> 'compensated'|'compensation_failed'",),
    ),
    Case(
        "effect-rule-added",
        "effect",
        lambda d: d["invariants"].append(
            {
                "id": "replay-from-pending",
                "rule": "only_from",
                "state": "replayed",
                "sources": ["pending"],
                "description": "A replay is of a pending call.",
            }
        ),
        b("rule-added"),
        ("rule 'replay-from-pending' (only_from) added",),
    ),
    Case(
        "effect-rule-changed",
        "effect",
        lambda d: rule(d, "irreversible-executes-from-approved").update(sources=["approved"]),
        b("rule-changed"),
        ("rule 'irreversible-executes-from-approved' changed: sources",),
    ),
    Case(
        "effect-rule-removed",
        "effect",
        lambda d: d["invariants"].remove(rule(d, "commit-needs-result")),
        w("rule-removed"),
        ("rule 'commit-needs-result' (automatic_needs_evidence) removed",),
    ),
    Case(
        "effect-state-description",
        "effect",
        set_in(("states", "pending", "description"), "Waiting."),
        t("description-changed"),
        ("state 'pending' description reworded",),
    ),
    Case(
        "effect-evidence",
        "effect",
        on_edge("commit", "executing", evidence="the tool said so"),
        t("evidence-changed"),
        ("transition 'executing' --commit--> 'committed' evidence reworded",),
    ),
    Case(
        "effect-reasons",
        "effect",
        does(
            lambda d: d["forbidden"][0].update(reason="never again"),
            set_in(("context", "tier", "excluded", "safe"), "not logged"),
        ),
        t("reason-changed", "reason-changed"),
        (
            "forbidden move 'committed' -> * reason reworded",
            "value 'safe': reason it is refused reworded",
        ),
    ),
    Case(
        "effect-finding-references",
        "effect",
        does(
            on_edge("replay", "pending", unreachable_in_systems="diagram-replayed-unreachable"),
            on_edge("execute", "pending", amendment=None),
        ),
        t("finding-reference-changed", "finding-reference-changed"),
        ("amendment changed from 'irreversible-bypasses-approval' to none",),
    ),
    # -- outcome --------------------------------------------------------------------------
    Case(
        "outcome-state-made-terminal",
        "outcome",
        set_in(("states", "indeterminate", "terminal"), True),
        b("state-made-terminal"),
        ("state 'indeterminate' made terminal",),
    ),
    Case(
        "outcome-terminal-given-exit",
        "outcome",
        does(
            pop_in(("states", "succeeded", "terminal")),
            add_transition(trigger="undo", source="succeeded", dest="in_flight", actor="caller"),
            lambda d: d["forbidden"].pop(0),
        ),
        w("terminal-given-exit", "transition-added", "forbidden-removed"),
        ("terminal state 'succeeded' given an exit: 'succeeded' --undo--> 'in_flight'",),
    ),
    Case(
        "outcome-state-made-non-terminal",
        "outcome",
        pop_in(("states", "failed", "terminal")),
        w("state-made-non-terminal"),
        ("state 'failed' no longer terminal",),
    ),
    Case(
        "outcome-transition-removed",
        "outcome",
        drop_transition("park", "in_flight"),
        b("transition-removed"),
        ("'in_flight' --park--> 'indeterminate' removed",),
    ),
    Case(
        "outcome-transition-added",
        "outcome",
        add_transition(trigger="abort", source="in_flight", dest="failed", actor="operator"),
        w("transition-added"),
        ("'in_flight' --abort--> 'failed' added: actor operator in any context",),
    ),
    Case(
        "outcome-actor-removed",
        "outcome",
        does(
            pop_in(("actors", "caller")),
            on_edge("reclaim", "indeterminate", actor="operator"),
            lambda d: rule(d, "fail-closed-indeterminate").update(actors=["operator"]),
        ),
        b("actor-removed", "actors-narrowed", "rule-changed") + w("actors-widened"),
        ("actor 'caller' removed", "no longer admits actor caller in any context"),
    ),
    Case(
        "outcome-actor-added",
        "outcome",
        set_in(("actors", "auditor"), {"automatic": False, "description": "Reads only."}),
        w("actor-added"),
        ("actor 'auditor' added",),
    ),
    Case(
        "outcome-actor-made-automatic",
        "outcome",
        set_in(("actors", "caller", "automatic"), True),
        b("actor-made-automatic"),
        ("actor 'caller' made automatic",),
    ),
    Case(
        "outcome-context-variable-added",
        "outcome",
        set_in(("context",), {"region": {"values": ["eu", "us"], "description": "Where."}}),
        b("context-variable-added"),
        ("context variable 'region' added",),
    ),
    Case(
        "outcome-context-variable-added-and-guarded",
        "outcome",
        does(
            set_in(("context",), {"region": {"values": ["eu", "us"], "description": "Where."}}),
            on_edge("park", "in_flight", when={"region": ["eu"]}),
        ),
        b("context-variable-added", "guard-narrowed"),
        ("'in_flight' --park--> 'indeterminate' no longer admits actor worker when region=us",),
    ),
    Case(
        "outcome-context-variable-removed",
        "outcome",
        lambda d: None,
        b("context-variable-removed"),
        ("context variable 'region' removed",),
        before=set_in(("context",), {"region": {"values": ["eu"], "description": "Where."}}),
    ),
    Case(
        "outcome-title-and-origin",
        "outcome",
        does(set_in(("title",), "Outcome"), set_in(("origin",), "seed 004")),
        t("title-changed", "origin-changed"),
        ("title changed from 'Exactly-once outcome' to 'Outcome'",),
    ),
    Case(
        "outcome-findings",
        "outcome",
        does(
            lambda d: d["findings"].append(
                {"id": "new-one", "seed": "004", "text": "A.", "resolution": "B."}
            ),
            lambda d: d["findings"].remove(finding(d, "lease-expiry-owner")),
            lambda d: finding(d, "exhausted-retries").update(resolution="Retry less."),
        ),
        t("finding-added", "finding-removed", "finding-changed"),
        ("finding 'new-one' added", "finding 'exhausted-retries' resolution changed"),
    ),
    Case(
        "outcome-descriptions",
        "outcome",
        does(
            set_in(("description",), "Short."),
            set_in(("actors", "operator", "description"), "A person."),
            lambda d: rule(d, "terminal-final").update(description="Final."),
            on_edge("park", "in_flight", description="Parked."),
        ),
        t(*["description-changed"] * 4),
        ("machine description reworded", "rule 'terminal-final' description reworded"),
    ),
    # -- node -----------------------------------------------------------------------------
    Case(
        "node-state-removed",
        "node",
        does(
            pop_in(("states", "skipped")),
            lambda d: d["transitions"].remove(edge(d, "skip", "blocked")),
            lambda d: rule(d, "no-auto-terminal-money-in-flight").update(
                dests=["completed", "failed", "cancelled"]
            ),
            lambda d: [
                f.update(dest=[x for x in f["dest"] if x != "skipped"])
                for f in d["forbidden"]
                if isinstance(f["dest"], list)
            ],
            lambda d: d["forbidden"][0].update(source=["completed", "failed", "cancelled"]),
        ),
        b("state-removed", "transition-removed", "transition-removed", "rule-changed"),
        ("'blocked' --skip--> 'skipped' removed", "'ready' --skip--> 'skipped' removed"),
    ),
    Case(
        "node-context-value-removed",
        "node",
        does(
            set_in(("context", "kind", "values"), ["action"]),
            drop_transition("start_observing", "ready"),
        ),
        b("context-value-removed", "transition-removed"),
        ("context variable 'kind' loses value 'observe'",),
    ),
    Case(
        "node-context-value-added",
        "node",
        lambda d: d["context"]["kind"]["values"].append("watch"),
        w("context-value-added"),
        ("gains value 'watch'",),
    ),
    Case(
        "node-guard-moved",
        "node",
        on_edge("sign", "awaiting_signature", when={"kind": ["observe"]}),
        b("guard-narrowed") + w("guard-widened"),
        (
            "no longer admits actor signer when kind=action",
            "now admits actor signer when kind=observe",
        ),
    ),
    Case(
        "node-guard-added-for-one-edge-of-a-list",
        "node",
        lambda d: (
            d["transitions"].append(
                edge(d, "retry", "preparing")
                | {"source": "awaiting_signature", "when": {"kind": ["action"]}}
            )
            or edge(d, "retry", "preparing").update(source="preparing")
        ),
        b("guard-narrowed"),
        (
            "'awaiting_signature' --retry--> 'ready' "
            "no longer admits actor executor when kind=observe",
        ),
    ),
    Case(
        "node-actors-narrowed",
        "node",
        on_edge("fail", "awaiting_signature", actor="signer"),
        b("actors-narrowed"),
        (
            "'awaiting_signature' --fail--> 'failed' "
            "no longer admits actor executor when kind=action",
        ),
    ),
    Case(
        "node-actors-widened",
        "node",
        on_edge("wake", "blocked", actor=["planner", "operator"]),
        w("actors-widened"),
        ("'blocked' --wake--> 'ready' now admits actor operator in any context",),
    ),
    Case(
        "node-transition-removed-from-a-list",
        "node",
        drop_transition("skip", "ready"),
        b("transition-removed"),
        ("'ready' --skip--> 'skipped' removed",),
    ),
    Case(
        "node-tag-removed",
        "node",
        set_in(("states", "skipped", "tags"), []),
        b("tag-removed"),
        ("state 'skipped' loses tag 'done'",),
    ),
    Case(
        "node-forbidden-moved",
        "node",
        does(
            lambda d: d["forbidden"][2]["dest"].remove("blocked"),
            lambda d: d["forbidden"].append(
                {"source": "ready", "dest": "unknown", "reason": "nothing was sent yet"}
            ),
        ),
        b("forbidden-added") + w("forbidden-removed"),
        ("forbidden move added: 'ready' -> 'unknown'", "removed: 'observing' -> 'blocked'"),
    ),
    Case(
        "node-forbidden-regrouped",
        "node",
        lambda d: d["forbidden"][1].update(dest="preparing"),  # the first entry covers both
        t("forbidden-regrouped"),
        ("regrouped: 'failed' -> 'ready' now 'failed' -> 'preparing'",),
    ),
    Case(
        "node-wording",
        "node",
        does(
            set_in(("states", "unknown", "description"), "Nobody knows."),
            on_edge("lose_track", "submitting", description="Lost."),
            on_edge("complete", "observing", evidence=None),
        ),
        t("description-changed", "description-changed", "evidence-changed"),
        ("'observing' --complete--> 'completed' evidence removed",),
    ),
    # -- request --------------------------------------------------------------------------
    Case(
        "request-derivation-default",
        "request",
        set_in(("derivation", "default"), "qtg-v3"),
        b("derivation-changed"),
        ("derivation default changed from 'money-safe' to 'qtg-v3'",),
    ),
    Case(
        "request-derivation-removed",
        "request",
        pop_in(("derivation",)),
        b("derivation-changed"),
        ("derivation removed",),
    ),
    Case(
        "request-derivation-context",
        "request",
        lambda d: d["derivation"]["context"]["side_effects"][0]["when"][0]["any"].update(
            state=["submitting", "submitted", "observing", "completed"]
        ),
        b("derivation-changed"),
        ("derivation of context variable 'side_effects' changed",),
    ),
    Case(
        "request-rule-set-removed",
        "request",
        pop_in(("derivation", "rule_sets", "qtg-v3")),
        b("rule-set-removed"),
        ("rule set 'qtg-v3' removed",),
    ),
    Case(
        "request-rule-set-added",
        "request",
        lambda d: d["derivation"]["rule_sets"].update(
            cautious=json.loads(json.dumps(rule_set(d, "money-safe")))
        ),
        b("rule-set-added"),
        ("rule set 'cautious' added",),
    ),
    Case(
        "request-rule-set-rule-removed",
        "request",
        lambda d: rule_set(d, "money-safe")["rules"].pop(5),
        b("rule-set-changed"),
        ("rule set 'money-safe' changed: rule 'unknown-awaits-reconciliation' removed",),
    ),
    Case(
        "request-rule-set-reordered",
        "request",
        lambda d: rule_set(d, "qtg-v3")["rules"].reverse(),
        b("rule-set-changed"),
        ("rule set 'qtg-v3' changed: rules reordered",),
    ),
    Case(
        "request-known-violation-removed",
        "request",
        pop_in(("derivation", "rule_sets", "qtg-v3", "known_violations", "derivation-settles")),
        b("rule-set-changed"),
        ("known violation 'derivation-settles' no longer recorded",),
    ),
    Case(
        "request-guard-removed",
        "request",
        on_edge("fail_validation", "received", when=None),
        w("guard-widened"),
        ("now admits actor system when side_effects=started",),
    ),
    Case(
        "request-cancel-widened-and-narrowed",
        "request",
        on_edge("cancel", "executing", actor="system"),
        b("actors-narrowed", "actors-narrowed") + w("actors-widened", "actors-widened"),
        (
            "'executing' --cancel--> 'cancelled' "
            "no longer admits actor operator when side_effects=none",
        ),
    ),
    Case(
        "request-wording",
        "request",
        does(
            lambda d: rule_set(d, "money-safe").update(description="The default."),
            lambda d: rule_set(d, "qtg-v3")["rules"][0].update(description="1."),
            set_in(
                ("derivation", "rule_sets", "qtg-v3", "known_violations", "derivation-settles"),
                "in-progress-undefined",
            ),
        ),
        t("description-changed", "description-changed", "finding-reference-changed"),
        ("rule set 'qtg-v3' rule 'all-done' description reworded",),
    ),
]


@dataclass
class Versions:
    """Two copies of the bundled definitions, old and new, for a test to change."""

    old: SpecCopy
    new: SpecCopy

    def apply(self, case: Case) -> None:
        if case.before is not None:
            self.old.edit(case.machine, case.before)
        self.new.edit(case.machine, case.edit)

    def files(self, machine: str) -> list[str]:
        return [str(self.old.file(machine)), str(self.new.file(machine))]

    def dirs(self) -> list[str]:
        return [str(self.old.path), str(self.new.path)]


@pytest.fixture
def versions(tmp_path: Path) -> Versions:
    return Versions(SpecCopy(tmp_path / "old"), SpecCopy(tmp_path / "new"))


def classified(changes: tuple[Change, ...]) -> Counter[tuple[str, str]]:
    return Counter((c.kind, c.what) for c in changes)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``main(argv + --format json)``: the exit code and the one document, held to the
    shipped schema, its ``exit_code`` the process's."""
    code, out, _ = run([*argv, "--format", "json"], capsys)
    doc: dict[str, Any] = json.loads(out)
    jsonschema.Draft202012Validator(schema("diff")).validate(doc)
    assert doc["exit_code"] == code
    return code, doc


@pytest.mark.parametrize("case", CATALOG, ids=lambda c: c.id)
def test_the_catalog(case: Case, versions: Versions, capsys: pytest.CaptureFixture[str]) -> None:
    versions.apply(case)
    old_file, new_file = versions.files(case.machine)
    old, new = read_definition(old_file), read_definition(new_file)
    changes = diff_specs(old, new)
    assert classified(changes) == Counter(case.expected), [c.message for c in changes]
    assert {c.machine for c in changes} == {case.machine}
    messages = "\n".join(c.message for c in changes)
    for words in case.mentions:
        assert words in messages
    # the semantic digest changes exactly when something is breaking or widening
    semantic = any(c.kind != WORDING for c in changes)
    assert (semantic_digest(old) != semantic_digest(new)) == semantic
    if any(c.kind == WORDING for c in changes):
        assert presentation_digest(old) != presentation_digest(new)
    breaking = any(c.kind == BREAKING for c in changes)
    code, out, err = run(["diff", old_file, new_file], capsys)
    broken = check_structure(new)  # no system loads it: the gate refuses it, naming why
    if broken:
        assert (code, out) == (2, "") and f"[{broken[0].rule}]" in err
        return
    assert (code, err) == (1 if breaking else 0, "")
    for c in changes:
        assert f"{case.machine}: {'BREAKING' if c.breaking else c.kind}: {c.message}\n" in out


def test_most_of_the_catalog_loads_so_the_command_prints_its_changes() -> None:
    """The catalog's edits that break their definition's rules are refused by the command
    (above); the rest, most of them, are printed."""
    loading = 0
    for case in CATALOG:
        with tempfile.TemporaryDirectory() as tmp:
            copy = SpecCopy(Path(tmp))
            if case.before is not None:
                copy.edit(case.machine, case.before)
            copy.edit(case.machine, case.edit)
            loading += not check_structure(read_definition(copy.file(case.machine)))
    assert loading >= 0.6 * len(CATALOG), (loading, len(CATALOG))


DIRECTORY_CASES = {
    "outcome-machine-removed": (
        lambda v: v.new.file("outcome").unlink(),
        "outcome",
        b("machine-removed"),
    ),
    "outcome-machine-added": (
        lambda v: v.new.write("refund", v.new.read("outcome") | {"machine": "refund"}),
        "refund",
        w("machine-added"),
    ),
}


@pytest.mark.parametrize("name", DIRECTORY_CASES)
def test_machines_added_and_removed(
    name: str, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    layout, machine, expected = DIRECTORY_CASES[name]
    layout(versions)
    code, doc = run_json(["diff", *versions.dirs()], capsys)
    assert Counter((c["kind"], c["what"]) for c in doc["changes"]) == Counter(expected)
    assert {c["machine"] for c in doc["changes"]} == {machine}
    assert code == (1 if doc["breaking"] else 0) == (1 if expected[0][0] == BREAKING else 0)
    (entry,) = [m for m in doc["machines"] if m["name"] == machine]
    assert (entry["old"] is None) == (expected[0][1] == "machine-added")
    assert (entry["new"] is None) == (expected[0][1] == "machine-removed")


def test_the_catalog_covers_every_change_id_every_kind_and_every_machine() -> None:
    expected = [(c.machine, kind, what) for c in CATALOG for kind, what in c.expected]
    expected += [(m, kind, what) for _, m, e in DIRECTORY_CASES.values() for kind, what in e]
    assert len(CATALOG) + len(DIRECTORY_CASES) >= 25
    assert {what for _, _, what in expected} == set(CHANGE_KINDS)
    for machine in MACHINES:
        kinds = {kind for m, kind, _ in expected if m == machine}
        assert kinds == set(KINDS), machine


def test_the_docstring_table_is_the_table_of_kinds() -> None:
    doc = diff_module.__doc__ or ""
    rows = re.findall(r"^\| `([a-z-]+)` \| (\w+) \|", doc, re.MULTILINE)
    assert dict(rows) == dict(CHANGE_KINDS)
    assert len(rows) == len(CHANGE_KINDS)


def test_every_section_of_the_canonical_forms_is_compared() -> None:
    spec = read_definition(BUNDLED / "request.yaml")
    assert set(diff_module.SEMANTIC_SECTIONS) == set(semantic_form(spec)) - {"machine"}
    assert set(WORDING_SECTIONS) | {"transitions", "forbidden"} == set(presentation_form(spec))


# -- what is not a change -----------------------------------------------------------------


@pytest.mark.parametrize("machine", MACHINES)
def test_the_same_definition_is_no_change(
    machine: str, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["diff", *versions.files(machine)], capsys)
    assert code == 0
    assert out.startswith("machines diff: ") and "0 breaking, 0 widening, 0 wording" in out
    assert out.endswith("OK: no breaking change\n")


def test_the_same_directory_is_no_change(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = run_json(["diff", *versions.dirs()], capsys)
    assert code == 0 and doc["changes"] == [] and not doc["breaking"]
    assert [m["name"] for m in doc["machines"]] == sorted(MACHINES)
    for m in doc["machines"]:
        assert m["old"] == m["new"]
        assert m["old"]["semantic_digest"] == semantic_digest(
            read_definition(BUNDLED / f"{m['name']}.yaml")
        )


def _reordered(doc: Document) -> None:
    """Every section whose order says nothing written backwards: states, actors, context
    values, transitions (and the sources of a list entry), forbidden moves, rules,
    findings, tags, rule sets (never a rule set's rules: their order is their priority)."""

    def backwards(mapping: dict[str, Any]) -> dict[str, Any]:
        return dict(reversed(mapping.items()))

    for section in ("states", "actors", "context"):
        if section in doc:
            doc[section] = backwards(doc[section])
    for variable in doc.get("context", {}).values():
        variable["values"].reverse()
    for state in doc["states"].values():
        state.get("tags", []).reverse()
    for entry in doc["transitions"]:
        if isinstance(entry["source"], list):
            entry["source"].reverse()
        if isinstance(entry["actor"], list):
            entry["actor"].reverse()
    for section in ("transitions", "forbidden", "invariants", "findings"):
        doc.get(section, []).reverse()
    if "derivation" in doc:
        doc["derivation"]["rule_sets"] = backwards(doc["derivation"]["rule_sets"])


@pytest.mark.parametrize("machine", MACHINES)
def test_a_reordered_file_is_no_change(
    machine: str, versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    versions.new.edit(machine, _reordered)
    assert versions.new.file(machine).read_text() != versions.old.file(machine).read_text()
    old, new = (read_definition(f) for f in versions.files(machine))
    assert not old.same_definition(new)  # the order differs, and the records say so
    assert diff_specs(old, new) == ()
    assert semantic_digest(old) == semantic_digest(new)
    assert presentation_digest(old) == presentation_digest(new)
    assert run(["diff", *versions.files(machine)], capsys)[0] == 0


def test_an_edge_split_in_two_that_admits_the_same_is_no_change(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    """No change, but its semantic digest differs, so a store of it refuses it until a
    migration installs it: the command says so (batch 44 b 20: "OK", then the store
    refused it with "what changed: 0 breaking, 0 widening")."""

    def split(doc: Document) -> None:
        entry = edge(doc, "fail", "awaiting_signature")
        entry["actor"] = "signer"
        doc["transitions"].append(entry | {"actor": "executor"})

    versions.new.edit("node", split)
    old, new = (read_definition(f) for f in versions.files("node"))
    assert len(new.transitions) == len(old.transitions) + 1
    assert diff_specs(old, new) == ()
    assert semantic_digest(old) != semantic_digest(new)
    code, out, _ = run(["diff", *versions.files("node")], capsys)
    assert code == 0 and f"node: {REWRITTEN}\n" in out, out
    assert "machines migrate installs it as the next version and moves no entity" in summary(
        old, new
    )


def test_a_wording_change_alone_exits_0_and_keeps_the_semantic_digest(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    for machine in MACHINES:
        versions.new.edit(machine, lambda d: d.update(title=f"{d['title']} (v2)"))
    versions.new.edit("effect", set_in(("states", "pending", "description"), "Waiting."))
    code, doc = run_json(["diff", *versions.dirs()], capsys)
    assert code == 0 and not doc["breaking"]
    assert doc["counts"] == {"breaking": 0, "widening": 0, "wording": 5}
    assert {c["kind"] for c in doc["changes"]} == {WORDING}
    for m in doc["machines"]:
        assert m["old"]["semantic_digest"] == m["new"]["semantic_digest"]
        assert m["old"]["presentation_digest"] != m["new"]["presentation_digest"]
    code, out, _ = run(["diff", *versions.dirs()], capsys)
    assert code == 0 and "effect: wording: state 'pending' description reworded\n" in out
    assert out.count(" (same)\n") == len(MACHINES)


# -- the order, the records ---------------------------------------------------------------


def test_changes_are_ordered_by_machine_kind_and_message(versions: Versions) -> None:
    versions.new.edit("outcome", lambda d: d.update(title="Outcome"))
    versions.new.edit(
        "outcome",
        add_transition(trigger="abort", source="in_flight", dest="failed", actor="operator"),
    )
    versions.new.edit("outcome", drop_transition("park", "in_flight"))
    versions.new.edit("effect", drop_transition("replay", "pending"))
    versions.new.edit("effect", set_in(("actors", "human", "description"), "Someone."))
    old = {m: read_definition(versions.old.file(m)) for m in MACHINES}
    new = {m: read_definition(versions.new.file(m)) for m in MACHINES}
    changes = diff_sets(old, new)
    assert [(c.machine, c.kind) for c in changes] == [
        ("effect", BREAKING),
        ("effect", WORDING),
        ("outcome", BREAKING),
        ("outcome", WIDENING),
        ("outcome", WORDING),
    ]
    assert diff_sets(new, old) != changes  # the other way round is another list
    report = diff_report(old, new)
    assert report.changes == changes and report.breaking
    assert [report.count(k) for k in KINDS] == [2, 1, 2]
    by_name = {m.machine: m for m in report.machines}
    assert by_name["node"].same_semantics and not by_name["effect"].same_semantics
    assert by_name["outcome"].new_semantic == semantic_digest(new["outcome"])


def test_a_machine_on_one_side_only(versions: Versions) -> None:
    spec = read_definition(versions.old.file("outcome"))
    assert diff_specs(None, None) == ()
    assert [(c.kind, c.what) for c in diff_specs(None, spec)] == [(WIDENING, "machine-added")]
    assert [(c.kind, c.what) for c in diff_specs(spec, None)] == [(BREAKING, "machine-removed")]
    versions.new.write("refund", versions.new.read("outcome") | {"machine": "refund"})
    renamed = read_definition(versions.new.file("refund"))
    assert [c.what for c in diff_specs(spec, renamed)] == ["machine-removed", "machine-added"]


@pytest.mark.parametrize(
    ("what", "kind"), [("state-removed", WIDENING), ("no-such-change", BREAKING)]
)
def test_a_change_has_the_kind_of_its_id(what: str, kind: Kind) -> None:
    with pytest.raises(InvalidArgument, match=what):
        Change("effect", kind, what, "a test")
    assert change("effect", "state-removed", "x").kind == BREAKING
    with pytest.raises(InvalidArgument, match="not a change id"):
        change("effect", "no-such-change", "x")


MULTI = """\
spec_version: 1
machine: multi
title: Two guarded variables
origin: a test
description: A machine whose edge is guarded on two variables.
initial: a
context:
  mode: {values: [live, paper], description: The mode.}
  size: {values: [small, large], description: The size.}
actors:
  bot: {automatic: true, description: A bot.}
  person: {automatic: false, description: A person.}
states:
  a: {description: A.}
  b: {terminal: true, description: B.}
transitions:
  - {trigger: go, source: a, dest: b, actor: [bot, person], when: WHEN, description: Go.}
invariants:
  - {id: final, rule: terminal_final, description: B is final.}
"""


def _multi(tmp_path: Path, name: str, when: str) -> Any:
    path = tmp_path / name / "multi.yaml"
    path.parent.mkdir()
    path.write_text(MULTI.replace("WHEN", when))
    return read_definition(path)


def test_guards_on_two_variables_are_compared_value_by_value(tmp_path: Path) -> None:
    old = _multi(tmp_path, "old", "{mode: [live]}")
    new = _multi(tmp_path, "new", "{size: [small]}")
    changes = {c.what: c.message for c in diff_specs(old, new)}
    assert set(changes) == {"guard-narrowed", "guard-widened"}
    assert (
        "no longer admits actors bot, person when mode=live, size=large"
        in changes["guard-narrowed"]
    )
    assert "now admits actors bot, person when mode=paper, size=small" in changes["guard-widened"]
    same = _multi(tmp_path, "same", "{mode: [live, paper], size: [large, small]}")
    unguarded = _multi(tmp_path, "open", "{mode: [live, paper]}")
    assert diff_specs(unguarded, same) == ()  # every value of a variable is no guard on it


# -- unreadable input ---------------------------------------------------------------------


def test_an_unreadable_definition_is_exit_2_naming_the_file(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    versions.new.file("outcome").write_text("states: [unclosed\n")
    for argv in (versions.files("outcome"), versions.dirs()):
        code, out, err = run(["diff", *argv], capsys)
        assert (code, out) == (2, "")
        assert str(versions.new.file("outcome")) in err and "not valid YAML" in err
    code, doc = run_json(["diff", *versions.dirs()], capsys)
    assert code == 2 and "outcome.yaml" in doc["error"]


def test_an_invalid_definition_is_exit_2_naming_the_file(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    versions.new.edit("effect", on_edge("commit", "executing", actor="nobody"))
    code, _, err = run(["diff", *versions.dirs()], capsys)
    assert code == 2 and str(versions.new.file("effect")) in err and "nobody" in err


def add_give_up(doc: Document) -> None:
    """A worker settles "we do not know" as failed: the definition's own rules forbid it."""
    doc["transitions"].append(
        {
            "trigger": "give_up",
            "source": "indeterminate",
            "dest": "failed",
            "actor": "worker",
            "description": "A worker gives up.",
        }
    )


def test_a_new_definition_that_breaks_its_rules_is_exit_2_naming_them(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gate must not pass what no system can load: the change read alone is a widening,
    but the new definition breaks its rules (``machines.load`` refuses it). Batch 43 c 14."""
    versions.new.edit("outcome", add_give_up)
    for argv in (versions.files("outcome"), versions.dirs()):
        code, out, err = run(["diff", *argv], capsys)
        assert (code, out) == (2, "")
        assert str(versions.new.file("outcome")) in err
        assert "[fail-closed-indeterminate]" in err and "give_up" in err
    code, doc = run_json(["diff", *versions.dirs()], capsys)
    assert code == 2 and "fail-closed-indeterminate" in doc["error"]


def test_a_change_that_mends_an_old_definition_is_judged_as_a_change(
    versions: Versions, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the new side must load: a pull request that removes a move breaking the rules
    is compared (a transition removed is breaking), not refused."""
    versions.old.edit("outcome", add_give_up)
    code, out, _ = run(["diff", *versions.files("outcome")], capsys)
    assert code == 1 and "BREAKING" in out and "give_up" in out


@pytest.mark.parametrize("which", ["missing file", "missing directory", "file and directory"])
def test_a_path_that_cannot_be_compared_is_exit_2(
    which: str, versions: Versions, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = {
        "missing file": [str(versions.old.file("effect")), str(tmp_path / "nope.yaml")],
        "missing directory": [str(versions.old.path), str(tmp_path / "nowhere")],
        "file and directory": [str(versions.old.file("effect")), str(versions.new.path)],
    }[which]
    code, out, err = run(["diff", *argv], capsys)
    assert (code, out) == (2, "")
    assert argv[1].split("/")[-1] in err
    assert run_json(["diff", *argv], capsys)[0] == 2


@pytest.mark.parametrize(
    "argv", [["diff"], ["diff", "spec"], ["diff", "--base", "HEAD", "spec", "spec"]]
)
def test_a_wrong_command_line_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2


# -- --base: a real git repository --------------------------------------------------------


class Repository:
    """A git repository holding a copy of the bundled definitions in ``spec/``, committed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spec = SpecCopy(root)
        self.git("init", "-q")
        self.commit("the bundled definitions")

    def git(self, *arguments: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=a test", "-c", "user.email=test@example.com", *arguments],
            cwd=self.root,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    return Repository(tmp_path / "repo")


def test_base_without_a_change_is_exit_0(
    repository: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["diff", "--base", "HEAD", str(repository.spec.path)], capsys)
    assert code == 0 and "machines diff: HEAD:spec -> " in out
    code, doc = run_json(["diff", "--base", "HEAD", str(repository.spec.path)], capsys)
    assert code == 0 and doc["old"] == "HEAD:spec" and doc["changes"] == []


def test_base_in_the_repository_defaults_to_spec(
    repository: Repository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repository.spec.edit("effect", set_in(("states", "compensating", "tags"), ["compensation"]))
    monkeypatch.chdir(repository.root)
    code, out, _ = run(["diff", "--base", "HEAD"], capsys)
    assert code == 1
    assert "effect: BREAKING: state 'compensating' loses tag 'effect-started'\n" in out
    assert "FAILED: 1 breaking change(s)\n" in out


def test_base_with_a_widening_change_is_exit_0_and_a_breaking_one_exit_1(
    repository: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_dir = str(repository.spec.path)
    repository.spec.edit(
        "outcome",
        add_transition(trigger="abort", source="in_flight", dest="failed", actor="operator"),
    )
    code, doc = run_json(["diff", "--base", "HEAD", spec_dir], capsys)
    assert code == 0 and [c["what"] for c in doc["changes"]] == ["transition-added"]
    repository.commit("outcome: abort")
    repository.spec.edit(
        "outcome", set_in(("context",), {"region": {"values": ["eu", "us"], "description": "W."}})
    )
    code, doc = run_json(["diff", "--base", "HEAD", spec_dir], capsys)
    assert code == 1 and [c["what"] for c in doc["changes"]] == ["context-variable-added"]
    code, doc = run_json(["diff", "--base", "HEAD~1", spec_dir], capsys)  # both at once
    assert code == 1 and doc["counts"] == {"breaking": 1, "widening": 1, "wording": 0}


def test_base_of_one_file_reads_its_derivations_node_machine_at_the_revision(
    repository: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    repository.spec.edit("request", set_in(("derivation", "default"), "qtg-v3"))
    code, doc = run_json(["diff", "--base", "HEAD", str(repository.spec.file("request"))], capsys)
    assert code == 1 and doc["old"] == "HEAD:spec/request.yaml"
    assert [c["what"] for c in doc["changes"]] == ["derivation-changed"]


@pytest.mark.parametrize("revision", ["no-such-branch", "HEAD~5", "-rf", "HEAD:spec"])
def test_base_with_a_bad_revision_is_exit_2(
    revision: str, repository: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["diff", f"--base={revision}", str(repository.spec.path)]
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "") and f"'{revision}'" in err
    assert run_json(argv, capsys)[0] == 2


def test_base_with_a_path_git_does_not_know_is_exit_2(
    repository: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    later = repository.root / "later"
    shutil.copytree(repository.spec.path, later)
    code, _, err = run(["diff", "--base", "HEAD", str(later)], capsys)
    assert code == 2 and "HEAD:later: git knows no such directory at HEAD" in err
    repository.spec.write("refund", repository.spec.read("outcome") | {"machine": "refund"})
    code, _, err = run(["diff", "--base", "HEAD", str(repository.spec.file("refund"))], capsys)
    assert code == 2 and "HEAD:spec/refund.yaml: git knows no such file at HEAD" in err


def test_base_with_a_definition_broken_at_the_revision_names_it_by_revision(
    repository: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    good = repository.spec.file("outcome").read_text()
    repository.spec.file("outcome").write_text("states: [unclosed\n")
    repository.commit("broken")
    repository.spec.file("outcome").write_text(good)
    code, _, err = run(["diff", "--base", "HEAD", str(repository.spec.path)], capsys)
    assert code == 2 and "HEAD:spec/outcome.yaml" in err and "not valid YAML" in err


def test_base_outside_a_repository_or_without_git_is_exit_2(
    versions: Versions, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(versions.new.path.parent.parent))
    code, _, err = run(["diff", "--base", "HEAD", str(versions.new.path)], capsys)
    assert code == 2 and "not a git repository" in err
    monkeypatch.setenv("PATH", str(versions.new.path))  # no git on it
    code, doc = run_json(["diff", "--base", "HEAD", str(versions.new.path)], capsys)
    assert code == 2 and "--base needs git, which is not installed" in doc["error"]


# -- machines check prints the digests ----------------------------------------------------


def test_check_prints_each_machines_semantic_digest(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--max-nodes", "2", "--spec-dir", str(spec_copy.path)]
    digests = {m: semantic_digest(read_definition(spec_copy.file(m))) for m in MACHINES}
    code, out, _ = run(argv, capsys)
    assert code == 0 and "semantic digest" in out
    for machine, digest in digests.items():
        assert re.search(rf"^  {machine} .* {digest}$", out, re.MULTILINE), machine
    spec_copy.edit("outcome", lambda d: d.update(title="Reworded"))
    assert f" {digests['outcome']}\n" in run(argv, capsys)[1]  # wording: the same digest
    spec_copy.edit("outcome", set_in(("actors", "caller", "automatic"), True))
    assert f" {digests['outcome']}\n" not in run(argv, capsys)[1]


def test_check_json_holds_each_machines_semantic_digest(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_copy.edit("effect", drop_transition("replay", "pending"))
    code = main(
        ["check", "--format", "json", "--max-nodes", "2", "--spec-dir", str(spec_copy.path)]
    )
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema("check")).validate(doc)
    assert doc["exit_code"] == code
    for m in doc["machines"]:
        assert m["semantic_digest"] == semantic_digest(read_definition(m["file"]))
    effect = next(m for m in doc["machines"] if m["name"] == "effect")
    assert effect["semantic_digest"] != semantic_digest(read_definition(BUNDLED / "effect.yaml"))


# -- what edges admit: the cube difference against brute force ----------------------------

ACTORS = ("a", "b", "c")
UNIVERSE = (("x", "y", "z"), ("p", "q"))


def _subset(values: tuple[str, ...]) -> st.SearchStrategy[frozenset[str]]:
    return st.frozensets(st.sampled_from(values), min_size=1)


CUBE = st.tuples(_subset(ACTORS), st.tuples(*(_subset(u) for u in UNIVERSE)))
CUBES = st.lists(CUBE, max_size=4)


def _points(cubes: list[Cube]) -> list[tuple[str, ...]]:
    return [
        point
        for actors, values in cubes
        for point in itertools.product(sorted(actors), *(sorted(v) for v in values))
    ]


@given(before=CUBES, after=CUBES)
def test_what_one_group_admits_and_another_does_not_is_exact(
    before: list[Cube], after: list[Cube]
) -> None:
    """``minus`` is the set difference, as a brute-force enumeration of every (actor,
    value, value) point says."""
    assert set(_points(minus(before, after))) == set(_points(before)) - set(_points(after))


@given(cube=CUBE, others=CUBES)
def test_the_pieces_of_one_cube_do_not_overlap(cube: Cube, others: list[Cube]) -> None:
    points = _points(minus([cube], others))
    assert len(points) == len(set(points))
