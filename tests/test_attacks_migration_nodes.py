"""Outsider batch 41 (b M1 to M3): a migration map moved a plan's nodes as only their
engine may. A v2 of ``node`` that renames ``ready`` (or ``blocked``) came with a map that
skipped a ready manual gate (the deposit was then sent with nobody's action), skipped a
deposit while the withdrawal was out (the transfer completed with the deposit never
sent), or woke a deposit while the withdrawal was unknown; each was applied with exit 0
and the audit said OK. A node's definition cannot say all its engine decides (every
predecessor done, a person's skip, an operator's gate), so a map out of a node's state
that is not final is refused, on SQLite and PostgreSQL, and the audit names such a
migration event when a store holds one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from machines.checks.audit import audit_store
from machines.store import open_store
from machines.testing.transfer.suite import plan_node as node
from tests.conftest import Document, SpecCopy, rename_everywhere
from tests.migration_stores import load_dir, raw_snapshot
from tests.test_attacks_migration import migrate
from tests.test_transfer import FakeVenue, drive, engine_for, executing

RULE = "is a state of a plan's node, which only its engine leaves"
GATED = [
    node("w", "action", True),
    {**node("manual_ok", "observe", False, "w"), "executor": "gate"},
    node("d", "action", True, "manual_ok"),
]
TWO_LEGS = [node("w", "action", True), node("d", "action", True, "w")]


@pytest.fixture
def url(database_url: str) -> str:
    return database_url


def renamed(root: Path, old: str, new: str) -> Path:
    """A copy of the bundled definitions with the node's state ``old`` renamed ``new``
    everywhere, the request's derivation rules that name it too."""
    copy = SpecCopy(root)
    for machine in ("node", "request"):
        original = copy.read(machine)
        if machine == "request" and old in original["states"]:
            continue

        def rename(doc: Document, original: Document = original) -> None:
            doc.clear()
            doc.update(rename_everywhere(original, old, new))

        copy.edit(machine, rename)
    return copy.path


def transfer(
    url: str, plan: Sequence[Mapping[str, Any]], script: Mapping[str, Any], steps: int
) -> dict[str, str]:
    """Request ``t`` executing ``plan``, driven ``steps`` times: its nodes' states."""
    with open_store(url) as store:
        engine = engine_for(store, FakeVenue(script))
        executing(engine, "t", plan)
        drive(engine, "t", steps)
        return {name: n.state.value for name, n in engine.nodes("t").items()}


CASES = {
    "a ready gate skipped (M2)": (GATED, {}, 4, "ready", "skipped", "manual_ok"),
    "a deposit skipped while the withdrawal is out (M3)": (
        TWO_LEGS, {"w": {"observe": ["pending"]}}, 4, "blocked", "skipped", "d",
    ),
    "a deposit woken while the withdrawal is unknown (M1)": (
        TWO_LEGS, {"w": {"submit": [RuntimeError("timeout")]}}, 4, "blocked", "ready", "d",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_map_out_of_a_nodes_waiting_state_is_refused(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    plan, script, steps, source, dest, moved = CASES[case]
    nodes = transfer(url, plan, script, steps)
    assert nodes[moved] == source, nodes
    spec_dir = renamed(tmp_path, source, f"{source}_now")
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, f"node:{source}={dest}")
    assert code == 1, out
    assert f"--map node:{source}={dest}: 1 entity would leave '{source}'" in out, out
    assert RULE in out, out
    assert raw_snapshot(url) == before


def test_a_rename_of_a_nodes_waiting_state_is_applied(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rename keeps the node where it waits: the engine goes on with it."""
    transfer(url, TWO_LEGS, {"w": {"observe": ["pending"]}}, 4)
    spec_dir = renamed(tmp_path, "blocked", "waiting")
    code, out = migrate(capsys, url, spec_dir, "node:blocked=waiting")
    assert code == 0, out
    assert audit_store(url, load_dir(spec_dir)) == []


@pytest.mark.parametrize("case", CASES)
def test_the_audit_names_a_recorded_map_that_moved_a_node(
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    """A store migrated by a release that did not judge node maps (the refusal switched
    off here): the audit names the migration event."""
    import machines.store.migration as migration_module

    plan, script, steps, source, dest, moved = CASES[case]
    transfer(url, plan, script, steps)
    spec_dir = renamed(tmp_path, source, f"{source}_now")
    monkeypatch.setattr(migration_module, "map_refusals", lambda *args: [])
    code, out = migrate(capsys, url, spec_dir, f"node:{source}={dest}")
    assert code == 0, out
    found = [(b.key, b.message) for b in audit_store(url, load_dir(spec_dir))]
    assert any(key == f"t/{moved}" and RULE in message for key, message in found), found


def test_a_node_map_is_refused_with_its_request_left_out_of_the_definitions(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 42 (a 1): with ``request.yaml`` left out of ``--spec-dir``, no
    definition given named ``node`` as a derivation's node machine, and the map that
    wakes a deposit while the withdrawal is unknown was applied. The store's own
    definitions say which machines are nodes."""
    plan, script, steps, source, dest, _ = CASES[
        "a deposit woken while the withdrawal is unknown (M1)"
    ]
    transfer(url, plan, script, steps)
    spec_dir = renamed(tmp_path, source, f"{source}_now")
    (spec_dir / "request.yaml").unlink()
    before = raw_snapshot(url)
    code, out = migrate(capsys, url, spec_dir, f"node:{source}={dest}")
    assert code == 1 and RULE in out, out
    assert raw_snapshot(url) == before
