"""A map is an automatic move, judged as one (issue 27, outsider's ninth batch).

Each attack renamed or weakened a state in one version, while nothing lived there (so no
event recorded the rename), then mapped live entities into it in the next:

- f01: ``approved`` renamed ``cleared`` and dropped from ``approval-by-a-human``, then
  ``pending=cleared``: an irreversible call resumable with no human. Now a map never
  enters a state that only people's moves enter.
- f02, f08, f13, f14, f15: a running key, a submitted node, an unapproved call, a received
  transfer, a blocked node mapped into a final state (``succeeded`` renamed ``done``,
  ``committed``, ``completed``). Now a map finishes an entity only where the definition
  has an automatic move between the two states that needs no evidence, and never along a
  move the definition forbids.
- f06: ``committed=cached`` into a final state whose annotations include ``result``: a
  committed effect's cached result became writable. Now a map between final states lets no
  more of the entity's data change, whether or not it is a rename.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import yaml

from machines.spec.loader import load
from machines.spec.migration_moves import migration_breaks
from machines.spec.vocabulary import NEEDS_HUMAN
from tests.conftest import Document, rename_everywhere
from tests.test_attacks_migration import migrate
from tests.test_attacks_migration_chains import drop_rule, edited, url, version

__all__ = ["url"]


def _cached(doc: Document) -> None:
    """A final state ``cached`` like ``committed``, whose ``result`` may change."""
    doc["states"]["cached"] = {
        "terminal": True,
        "description": "A cached call.",
        "tags": ["effect-started"],
        "annotations": ["replay_count", "last_replayed_at", "result"],
    }
    doc["transitions"].append(
        {
            "trigger": "cache",
            "source": "executing",
            "dest": "cached",
            "actor": "proxy",
            "evidence": "the result",
            "description": "Cached.",
        }
    )
    doc["forbidden"].append({"source": "cached", "dest": "*", "reason": "terminal"})


def _breaks(spec: Any, source: str, dest: str) -> str:
    return "\n".join(migration_breaks(spec, spec, source, dest))


def test_a_map_enters_no_state_that_only_people_enter(tmp_path: Path) -> None:
    """f01's class: with the rule gone, the moves into ``approved`` still say who enters."""
    weakened = edited(tmp_path, "v2", "effect", drop_rule("approval-by-a-human"))
    said = _breaks(weakened, "pending", "approved")
    assert "only people's moves enter 'approved': nothing automatic does" in said


def test_a_map_finishes_no_entity_the_definition_finishes_only_on_evidence(
    tmp_path: Path,
) -> None:
    """f02's class: ``failed-means-proven`` gone, ``succeed`` still needs a result."""
    weakened = edited(tmp_path, "v2", "outcome", drop_rule("failed-means-proven"))
    said = _breaks(weakened, "in_flight", "succeeded")
    assert "'in_flight' is tagged effect-started and 'succeeded' is final" in said


def test_a_map_finishes_no_entity_whose_effect_may_be_running(tmp_path: Path) -> None:
    """Outsider batch 35 (b 4): the owner's v2 of ``node`` added ``held`` (tagged
    effect-started) with an automatic ``held -> completed`` needing no evidence; the map
    ``node:held=completed`` into the bundled definition followed that move, and a
    withdrawal nobody had seen land was completed, the deposit sent, the transfer
    completed. A migration never finishes an entity in an effect-started state."""

    def held(doc: Document) -> None:
        doc["states"]["held"] = {"description": "On hold.", "tags": ["effect-started"]}
        doc["transitions"] += [
            {
                "trigger": "hold",
                "source": "submitted",
                "dest": "held",
                "actor": "observer",
                "evidence": "the venue says it holds it",
                "description": "Held.",
            },
            {
                "trigger": "release_hold",
                "source": "held",
                "dest": "completed",
                "actor": "observer",
                "description": "Released.",
            },
        ]

    v2 = edited(tmp_path, "v2", "node", held)
    said = "\n".join(migration_breaks(v2, load("node"), "held", "completed"))
    assert "'held' is tagged effect-started and 'completed' is final" in said


@pytest.mark.parametrize(
    ("machine", "source", "dest"),
    [
        ("effect", "pending", "committed"),
        ("request", "received", "completed"),
        ("node", "blocked", "completed"),
        ("node", "submitted", "completed"),
    ],
)
def test_a_map_finishes_no_entity_by_a_move_the_definition_lacks(
    machine: str, source: str, dest: str
) -> None:
    """f13, f14, f15, f08: a final state with no automatic move from the state left."""
    said = _breaks(load(machine), source, dest)
    assert (
        f"'{source}' is not terminal and '{dest}' is" in said
        or f"'{source}' is tagged effect-started and '{dest}' is final" in said
    )


def test_a_map_along_a_forbidden_move_is_refused() -> None:
    said = _breaks(load("effect"), "pending", "committed")
    assert "the move pending -> committed is forbidden (no skipping" in said


def test_a_map_the_definition_could_make_itself_is_still_applied() -> None:
    """A small refund may be sent by the service at once (``send``, no evidence): the map
    ``requested=sending`` does so too; a large one goes through approval (``only_via``,
    batch 12), and a map does not skip it."""
    refund = load(REFUND)
    assert migration_breaks(refund, refund, "requested", "sending", {"size": "small"}) == []
    large = "\n".join(migration_breaks(refund, refund, "requested", "sending", {"size": "large"}))
    assert "lets 'sending' be reached only by way of 'awaiting_approval'" in large


def test_a_map_between_final_states_lets_no_more_data_change(tmp_path: Path) -> None:
    """f06: ``cached`` exists in v2 (so the map is not a rename), v3 drops ``committed``."""
    v2 = edited(tmp_path, "v2", "effect", _cached)
    said = "\n".join(migration_breaks(v2, v2, "committed", "cached"))
    assert "'committed' (now 'cached') lets 'result' of its finished entities' data" in said


def test_the_chain_of_f13_is_refused_end_to_end(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """v2 renames ``pending`` to ``queued``; the map ``pending=committed`` of an unapproved
    irreversible call is refused by the store's migration, on both databases."""
    from machines.store import open_store

    def renamed(doc: Document) -> None:
        doc.update(rename_everywhere(doc, "pending", "queued"))

    with closing(open_store(url)) as store:
        store.insert("effect", "irr-1", context={"tier": "irreversible"})
    v2 = version(tmp_path, "v2", "effect", renamed)
    code, out = migrate(capsys, url, v2, "effect:pending=committed")
    assert code == 1, out
    assert "'pending' is not terminal and 'committed' is" in out
    with closing(open_store(url)) as store, store.transaction() as tx:
        row = tx.get("effect", "irr-1")
        assert row is not None and row.state == "pending"


def _auto_approved(doc: Document) -> None:
    """``approved`` renamed ``cleared`` (rules and all), and a new ``approved``, tagged as
    the old one was, that the proxy enters on its own."""
    doc.update(rename_everywhere(doc, "approved", "cleared"))
    doc["states"]["approved"] = {"description": "Approved by the proxy.", "tags": ["approval"]}
    doc["transitions"].append(
        {
            "trigger": "auto_approve",
            "source": "pending",
            "dest": "approved",
            "actor": "proxy",
            "when": {"tier": ["irreversible"]},
            "description": "The proxy approves.",
        }
    )
    doc["transitions"].append(
        {
            "trigger": "go",
            "source": "approved",
            "dest": "executing",
            "actor": "proxy",
            "when": {"tier": ["irreversible"]},
            "description": "The proxy runs it.",
        }
    )
    for rule in doc["invariants"]:
        if rule["id"] == "irreversible-runs-only-after-approval":
            rule["via"] = ["cleared", "approved"]
        if rule["id"] == "irreversible-executes-from-approved":
            rule["sources"] = [*rule["sources"], "approved"]
        if rule["id"] == "approval-only-irreversible":
            rule["states"] = [*rule["states"], "approved"]
    doc["forbidden"].append({"source": "executing", "dest": "approved", "reason": "never back"})


def test_a_name_people_entered_is_not_reused_for_a_state_a_machine_enters(
    tmp_path: Path,
) -> None:
    """f22: the tags and terminality were the same, so the reuse passed; every v1 history
    that says a human approved would read like the proxy's approval."""
    from machines.spec.version_changes import reused_name_breaks

    def renamed(doc: Document) -> None:
        doc.update(rename_everywhere(doc, "approved", "cleared"))

    earlier = [(1, load("effect")), (2, edited(tmp_path, "v2", "effect", renamed))]
    v3 = edited(tmp_path, "v3", "effect", _auto_approved)
    said = "\n".join(reused_name_breaks(earlier, v3))
    assert "adds a state 'approved'" in said and "entered only by people" in said
    assert reused_name_breaks(earlier, load("effect")) == []  # the old meaning comes back


# -- outsider, tenth batch -------------------------------------------------------------------

REFUND = Path(__file__).parent / "user_project" / "specs" / "refund.yaml"


def _refund(tmp_path: Path, name: str, change: Callable[[Document], None]) -> Any:
    """The user project's refund machine (small, with a guard and a person), changed."""
    doc = yaml.safe_load(REFUND.read_text())
    change(doc)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "refund.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load(folder / "refund.yaml")


def _move(trigger: str, source: str, dest: str, actor: str, **more: Any) -> Document:
    move = {"trigger": trigger, "source": source, "dest": dest, "actor": actor}
    return move | {"description": "A move."} | more


def _granted(doc: Document) -> None:
    """A state ``granted`` that a person enters for large refunds and the service for small
    ones, and from which the service sends."""
    doc["states"]["granted"] = {"description": "Granted."}
    doc["transitions"] += [
        _move("grant", "awaiting_approval", "granted", "approver"),
        _move("fast_grant", "requested", "granted", "service", when={"size": ["small"]}),
        _move("go", "granted", "sending", "service"),
    ]


def test_a_rename_into_a_state_only_people_enter_is_refused(tmp_path: Path) -> None:
    """f01, f08: a map into a state only the new version has is a rename, which skipped
    the check that nothing automatic enters a state people alone enter: ``requested``
    (which nothing enters but creation) "renamed" a state only a person enters."""

    def people_only(doc: Document) -> None:
        doc["states"]["cleared"] = {"description": "Cleared by a person."}
        doc["transitions"] += [
            _move("clear", "awaiting_approval", "cleared", "approver"),
            _move("go", "cleared", "sending", "service"),
        ]

    v2 = _refund(tmp_path, "v2", people_only)
    said = "\n".join(migration_breaks(load(REFUND), v2, "requested", "cleared"))
    assert "only people's moves enter 'cleared', and automatic ones entered 'requested'" in said


def test_only_people_enter_is_judged_under_the_entitys_context(tmp_path: Path) -> None:
    """f02: an automatic way into a state for one context (small refunds) made every map
    into it look automatic, one of the other context (a large refund) included."""
    v2 = _refund(tmp_path, "v2", _granted)
    large = "\n".join(migration_breaks(v2, v2, "requested", "granted", {"size": "large"}))
    assert "only people's moves enter 'granted'" in large
    small = "\n".join(migration_breaks(v2, v2, "requested", "granted", {"size": "small"}))
    assert "only people's moves enter" not in small


def test_a_map_into_a_state_the_new_version_makes_final_finishes_nothing(
    tmp_path: Path,
) -> None:
    """f04: v2 made a state final while it was empty; a map into it then finished entities
    with no move, judged only by the versions under which they lived, where the state was
    not final. A move the entity's context does not admit is no move either."""

    def held_for_good(doc: Document) -> None:
        doc["states"]["awaiting_approval"] = {"terminal": True, "description": "Held."}
        doc["transitions"] = [t for t in doc["transitions"] if t["source"] != "awaiting_approval"]
        doc["invariants"] = [r for r in doc["invariants"] if "awaiting" not in str(r)]

    v1, v2 = load(REFUND), _refund(tmp_path, "v2", held_for_good)
    small = "\n".join(migration_breaks(v1, v2, "requested", "awaiting_approval", {"size": "small"}))
    assert "'requested' is not terminal and 'awaiting_approval' is" in small
    large = migration_breaks(v1, v2, "requested", "awaiting_approval", {"size": "large"})
    assert not any("is not terminal" in why for why in large)  # hold: the service's own move


# -- outsider, eleventh batch ----------------------------------------------------------------


def _cleared_by_size(doc: Document) -> None:
    """A state ``cleared`` the service enters for small refunds, a person for any."""
    doc["states"]["cleared"] = {"description": "Cleared."}
    doc["transitions"] += [
        _move("fast_clear", "requested", "cleared", "service", when={"size": ["small"]}),
        _move("clear", "awaiting_approval", "cleared", "approver"),
        _move("go", "cleared", "sending", "service"),
    ]


def test_a_rename_keeps_who_puts_entities_there_under_the_entitys_context(
    tmp_path: Path,
) -> None:
    """f02: the rename check read who enters the new state for every context at once: for
    a large refund, only a person enters ``cleared``."""
    v1, v2 = load(REFUND), _refund(tmp_path, "v2", _cleared_by_size)
    large = "\\n".join(migration_breaks(v1, v2, "requested", "cleared", {"size": "large"}))
    assert "only people's moves enter 'cleared', and automatic ones entered 'requested'" in large
    small = "\\n".join(migration_breaks(v1, v2, "requested", "cleared", {"size": "small"}))
    assert "only people's moves enter" not in small


def test_a_map_into_a_state_no_move_enters_for_the_entity_is_refused(tmp_path: Path) -> None:
    """f03: with no way in for the entity's context, the "only people enter" check passed
    by default."""

    def small_only(doc: Document) -> None:
        doc["states"]["granted"] = {"description": "Granted."}
        doc["transitions"] += [
            _move("fast_grant", "requested", "granted", "service", when={"size": ["small"]}),
            _move("go", "granted", "sending", "service"),
        ]

    v2 = _refund(tmp_path, "v2", small_only)
    large = "\\n".join(migration_breaks(v2, v2, "requested", "granted", {"size": "large"}))
    assert "no move of the definition enters 'granted' for such an entity" in large
    small = "\\n".join(migration_breaks(v2, v2, "requested", "granted", {"size": "small"}))
    assert "no move of the definition enters" not in small


def test_a_kept_state_does_not_become_one_only_people_enter(tmp_path: Path) -> None:
    """f04: v2 kept ``awaiting_approval`` (where the service puts large refunds) and made
    it a person's, with a rule: the waiting refunds would look put there by a person."""
    from machines.spec.version_changes import kept_state_breaks

    def asked_by_a_person(doc: Document) -> None:
        doc["transitions"] = [t for t in doc["transitions"] if t["trigger"] != "hold"]
        doc["transitions"].append(
            _move("ask", "requested", "awaiting_approval", "approver", when={"size": ["large"]})
        )
        doc["invariants"].append(
            {
                "id": "a-person-asks",
                "rule": "only_actors_enter",
                "states": ["awaiting_approval"],
                "actors": ["approver"],
                "description": "Only a person asks.",
            }
        )

    v2 = _refund(tmp_path, "v2", asked_by_a_person)
    said = "\\n".join(kept_state_breaks(load(REFUND), v2, "awaiting_approval"))
    assert "'awaiting_approval' gains a rule that only people enter it" in said
    assert kept_state_breaks(load(REFUND), load(REFUND), "awaiting_approval") == []


def test_a_name_brought_back_is_judged_under_every_context(tmp_path: Path) -> None:
    """f13: ``cleared``, which the service entered for every size, came back entered by a
    person for large refunds: old large refunds would read as a person's approval."""
    from machines.spec.version_changes import reused_name_breaks

    def cleared_by_the_service(doc: Document) -> None:
        doc["states"]["cleared"] = {"description": "Cleared."}
        waiting = doc["states"]["awaiting_approval"]  # the service leaves it: no person's
        waiting["tags"] = [t for t in waiting.get("tags", []) if t != NEEDS_HUMAN]
        doc["transitions"] += [
            _move("fast_clear", "requested", "cleared", "service", when={"size": ["small"]}),
            _move("clear", "awaiting_approval", "cleared", "service"),
            _move("go", "cleared", "sending", "service"),
        ]

    earlier = [(1, _refund(tmp_path, "v1", cleared_by_the_service)), (2, load(REFUND))]
    said = "\\n".join(reused_name_breaks(earlier, _refund(tmp_path, "v3", _cleared_by_size)))
    assert "entered only by people when size=large" in said


# -- outsider, twelfth batch -----------------------------------------------------------------


def test_a_map_does_not_skip_a_state_every_path_must_pass_through() -> None:
    """f01: ``pending=executing`` (``pending`` renamed) put an unapproved irreversible call
    in ``executing``: ``irreversible-runs-only-after-approval`` (only_via) was not judged."""
    effect = load("effect")
    said = "\\n".join(
        migration_breaks(effect, effect, "pending", "executing", {"tier": "irreversible"})
    )
    assert "lets 'executing' be reached only by way of 'approved'" in said


def test_an_actor_keeps_its_nature_across_versions(tmp_path: Path) -> None:
    """f10, f13: a person made automatic (or the reverse) changed what every history and
    every rule naming the actor says, and migrate let it through."""
    from machines.spec.version_changes import actor_breaks

    def approver_automatic(doc: Document) -> None:
        doc["actors"]["approver"]["automatic"] = True

    def service_a_person(doc: Document) -> None:
        doc["actors"]["service"]["automatic"] = False

    earlier = [(1, load(REFUND))]
    for change, actor in ((approver_automatic, "approver"), (service_a_person, "service")):
        try:
            changed = _refund(tmp_path, change.__name__, change)
        except Exception:
            continue
        said = "\\n".join(actor_breaks(earlier, changed))
        assert f"makes actor '{actor}'" in said and "add a new actor instead" in said
    assert actor_breaks(earlier, load(REFUND)) == []


def test_a_system_refuses_a_definition_whose_people_are_programs(tmp_path: Path) -> None:
    """f15: ``ExactlyOnce`` ran on an outcome whose ``operator`` and ``caller`` were
    automatic (its fail-closed state then left by programs)."""
    from machines.errors import InvalidArgument
    from machines.store import open_store
    from machines.systems import ExactlyOnce

    def people_automatic(doc: Document) -> None:
        for actor in ("operator", "caller"):
            doc["actors"][actor]["automatic"] = True

    try:
        outcome = edited(tmp_path, "v2", "outcome", people_automatic)
    except Exception:
        return
    store = open_store("memory://", {"outcome": outcome})
    with pytest.raises(InvalidArgument, match=r"actor '(operator|caller)' is automatic"):
        ExactlyOnce(store)


def test_a_rule_stating_what_was_already_true_is_no_change_of_meaning(tmp_path: Path) -> None:
    """f02, a false refusal: a rule that only people enter a state only people's moves
    already entered was refused while entities waited there."""
    from machines.spec.version_changes import kept_state_breaks

    def escalated(doc: Document) -> None:
        doc["states"]["escalated"] = {"description": "Escalated to a person."}
        doc["transitions"] += [
            _move("escalate", "awaiting_approval", "escalated", "approver"),
            _move("settle", "escalated", "declined", "approver"),
        ]

    def ruled(doc: Document) -> None:
        escalated(doc)
        doc["invariants"].append(
            {
                "id": "people-escalate",
                "rule": "only_actors_enter",
                "states": ["escalated"],
                "actors": ["approver"],
                "description": "Only a person escalates.",
            }
        )

    v1, v2 = _refund(tmp_path, "v1", escalated), _refund(tmp_path, "v2", ruled)
    assert kept_state_breaks(v1, v2, "escalated") == []


def test_a_renamed_rule_may_list_its_states_in_another_order(tmp_path: Path) -> None:
    """f16, a false refusal: a rule renamed with its states listed in another order was
    taken for a rule left behind."""

    def evidence(doc: Document) -> None:
        doc["invariants"].append(
            {
                "id": "sent-ends-on-evidence",
                "rule": "automatic_needs_evidence",
                "sources": ["sending"],
                "dests": ["refunded", "declined"],
                "description": "A sent refund ends only on the network's word.",
            }
        )

    def renamed_and_reordered(doc: Document) -> None:
        evidence(doc)
        doc.update(rename_everywhere(doc, "declined", "refused"))
        doc["invariants"][-1]["dests"] = ["refused", "refunded"]

    v1 = _refund(tmp_path, "v1", evidence)
    v2 = _refund(tmp_path, "v2", renamed_and_reordered)
    said = migration_breaks(v1, v2, "declined", "refused")
    assert not any("has no such rule" in why for why in said), said


# -- outsider, thirteenth batch --------------------------------------------------------------


def test_a_map_is_judged_by_the_new_versions_only_via_and_from_the_path_it_came(
    tmp_path: Path,
) -> None:
    """B1/B3: the new version's own ``only_via`` on the destination was never judged, nor a
    rename into a guarded state; F1/F2, false refusals: a rule limited by ``when`` refused
    entities outside it, and a source past the via state was taken for one before it."""

    def dispatched(doc: Document) -> None:
        doc["states"]["dispatched"] = {"description": "Sent.", "tags": ["effect-started"]}
        doc["transitions"] += [
            _move("dispatch", "awaiting_approval", "dispatched", "approver"),
            _move("dispatch_small", "requested", "dispatched", "service", when={"size": ["small"]}),
            _move("confirm2", "dispatched", "refunded", "service", evidence="the network"),
        ]
        doc["invariants"].append(
            {
                "id": "large-dispatch-approved",
                "rule": "only_via",
                "states": ["dispatched"],
                "via": ["awaiting_approval"],
                "when": {"size": ["large"]},
                "description": "A large refund is dispatched only after approval.",
            }
        )

    v1, v2 = load(REFUND), _refund(tmp_path, "v2", dispatched)
    large = "\\n".join(migration_breaks(v1, v2, "requested", "dispatched", {"size": "large"}))
    assert "lets 'dispatched' be reached only by way of 'awaiting_approval'" in large
    small = "\\n".join(migration_breaks(v1, v2, "requested", "dispatched", {"size": "small"}))
    assert "only by way of" not in small  # F1: the rule is for large refunds
    assert not any(
        "only by way of" in why for why in migration_breaks(v1, v2, "requested", "dispatched")
    )  # without a context, a rule limited by when waits for each entity's own
    past = "\\n".join(migration_breaks(v1, v2, "unknown", "dispatched", {"size": "large"}))
    assert "only by way of" not in past  # F2: every way to 'unknown' passed the approval


def test_a_rename_keeps_an_only_from_rule_judged_by_how_the_state_was_entered(
    tmp_path: Path,
) -> None:
    """A false refusal the thirteenth batch found: renaming ``executing`` (entered only from
    ``pending`` or ``approved``) was refused by its own renamed ``only_from`` rule."""

    def running(doc: Document) -> None:
        doc.update(rename_everywhere(doc, "executing", "running"))

    effect, renamed = load("effect"), edited(tmp_path, "v2", "effect", running)
    for tier in ("compensable", "irreversible"):
        said = migration_breaks(effect, renamed, "executing", "running", {"tier": tier})
        assert not any("entered only from" in why for why in said), said
