"""The mutation check: every mutation of the catalog is caught, by ``machines check`` or
by a stateful suite, and the catalog is as wide as it claims."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from machines.mutation.catalog import CATALOG, Mutation, kill, run_catalog, summary, write_mutant
from machines.testing.profiles import scaled


def test_the_catalog_is_wide() -> None:
    assert len(CATALOG) >= 15
    assert len({m.id for m in CATALOG}) == len(CATALOG)
    assert set(Counter(m.machine for m in CATALOG)) == {"effect", "outcome", "node", "request"}


def test_the_catalog_applies_operators_of_the_one_operator_catalog() -> None:
    """Issue 28: one catalog of operators for both detectors. Every bundled mutation names an
    operator ``machines mutate`` knows or one kept for the bundled catalog, and every operator
    kept for it is used (none is dead)."""
    from machines.mutation.edits import BUNDLED_OPERATORS, OPERATORS

    used = {m.change.operator for m in CATALOG}
    assert used <= set(OPERATORS) | set(BUNDLED_OPERATORS)
    assert set(BUNDLED_OPERATORS) <= used
    assert used & set(OPERATORS), "the bundled catalog shares operators with machines mutate"
    assert not set(OPERATORS) & set(BUNDLED_OPERATORS)


def test_an_unknown_operator_or_a_missing_move_is_refused_with_a_typed_error() -> None:
    from machines.errors import MachinesError
    from machines.mutation.edits import Edit, drop_guard, transition

    with pytest.raises(MachinesError, match="unknown mutation operator 'drop-everything'"):
        Edit("drop-everything", lambda doc: None)
    doc = yaml.safe_load((Path(__file__).parents[1] / "spec" / "outcome.yaml").read_text())
    with pytest.raises(MachinesError, match="the definition has no move rerun from succeeded"):
        transition(doc, "succeeded", "rerun")
    index = transition(doc, "in_flight", "succeed")
    assert doc["transitions"][index]["trigger"] == "succeed"
    before = yaml.safe_dump(doc)
    drop_guard(index)  # an edit is made, not applied
    assert yaml.safe_dump(doc) == before


@pytest.mark.parametrize("mutation", CATALOG, ids=[m.id for m in CATALOG])
def test_each_mutation_really_changes_its_definition(mutation, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = write_mutant(mutation, tmp_path)
    original = (Path(__file__).parents[1] / "spec" / f"{mutation.machine}.yaml").read_text()
    assert yaml.safe_load((folder / f"{mutation.machine}.yaml").read_text()) != yaml.safe_load(
        original
    )


def _covering(catalog: Sequence[Mutation]) -> list[Mutation]:
    """The first mutation of each invariant the catalog breaks, and of each detector that
    catches one (an explored machine and a suite's machine of each system): the fast set
    that still breaks every promise the catalog does."""
    chosen: dict[str, Mutation] = {}
    for mutation in catalog:
        for promise in mutation.breaks:
            chosen.setdefault(promise, mutation)
    chosen.setdefault("EffectLogSuite", _named(catalog, "effect-no-provable-failure"))
    chosen.setdefault("TransferSuite", _named(catalog, "node-observer-cannot-lose-track"))
    return list({m.id: m for m in chosen.values()}.values())


def _named(catalog: Sequence[Mutation], mutation_id: str) -> Mutation:
    (found,) = [m for m in catalog if m.id == mutation_id]
    return found


COVERING = _covering(CATALOG)


def test_the_fast_set_breaks_every_promise_the_catalog_breaks() -> None:
    broken = {promise for m in CATALOG for promise in m.breaks}
    assert {promise for m in COVERING for promise in m.breaks} == broken
    assert len(COVERING) < len(CATALOG)


@pytest.mark.parametrize("mutation", COVERING, ids=[m.id for m in COVERING])
def test_a_mutation_of_every_promise_is_caught(mutation: Mutation) -> None:
    """One mutation per promise the catalog breaks, and one per suite detector: each is
    caught (the whole catalog: ``test_every_mutation_is_caught``, under ``--thorough``)."""
    kill_ = kill(mutation, examples=scaled(300, 60).max_examples)
    assert kill_.caught_by is not None, kill_.evidence
    if mutation.id in ("effect-no-provable-failure", "node-observer-cannot-lose-track"):
        assert kill_.caught_by in ("EffectLogSuite", "TransferSuite"), kill_


@pytest.mark.thorough
def test_every_mutation_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    kills = run_catalog(examples=scaled(300, 60).max_examples)
    with capsys.disabled():
        print("\n" + summary(kills))
    survivors = [k.mutation.id for k in kills if k.caught_by is None]
    assert not survivors, summary(kills)
    assert {k.caught_by for k in kills} >= {"machines check", "EffectLogSuite", "TransferSuite"}


def test_a_harmless_change_survives_so_the_detectors_are_not_trivially_loud() -> None:
    """The control: a mutation that changes only a description must not be 'caught'."""

    def reword(doc: dict) -> None:  # type: ignore[type-arg]
        doc["description"] = doc["description"] + " (reworded)"

    control = Mutation("control-reword", "outcome", "a reworded description", reword, ())
    result = kill(control, examples=scaled(20, 60).max_examples)
    assert result.caught_by is None, result.evidence


def test_the_mutate_command(capsys: pytest.CaptureFixture[str]) -> None:
    from machines.cli import main

    assert main(["mutate", "outcome-terminal-exit"]) == 0
    out = capsys.readouterr().out
    assert "caught by machines check" in out and "killed 1/1 mutations (100%)" in out
    assert main(["mutate", "no-such-mutation"]) == 2
    assert "unknown mutation(s) no-such-mutation" in capsys.readouterr().err
    assert main(["mutate", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["mutation", "machine", "operator", "the", "change"]
    assert len(listed) == len(CATALOG) + 1  # a header, then one row per mutation
    at = listed[0].index("machine")
    assert all(line[at:].startswith(m.machine) for line, m in zip(listed[1:], CATALOG, strict=True))


def test_a_survivor_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """If a detector goes blind, the command (and so CI) says so with exit 1."""
    from machines.cli import main
    from machines.mutation import catalog as mutation

    monkeypatch.setattr(mutation, "check", lambda spec_dir: type("R", (), {"exit_code": 0})())
    assert main(["mutate", "node-submitting-not-started", "--examples", "5"]) == 1


def test_every_mutation_names_invariants_that_exist() -> None:
    """``breaks`` feeds the invariants page: each id must be a named invariant, a
    derivation invariant, an explorer invariant or a structural rule of some machine."""
    from machines.checks.invariants import PREDICATES
    from machines.derive.proof import DERIVATION_INVARIANTS
    from machines.explore.outcome import WHAT as OUTCOME_WHAT
    from machines.explore.transfer import WHAT as TRANSFER_WHAT
    from machines.spec.loader import bundled_spec_dir, definition_paths, read_definition

    known = {*PREDICATES, *DERIVATION_INVARIANTS, *OUTCOME_WHAT, *TRANSFER_WHAT}
    for path in definition_paths(bundled_spec_dir()):
        known |= {rule.id for rule in read_definition(path).invariants}
    for mutation in CATALOG:
        assert mutation.breaks, mutation.id
        assert set(mutation.breaks) <= known, (mutation.id, set(mutation.breaks) - known)
