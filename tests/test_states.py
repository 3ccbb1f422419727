"""The hand-written StrEnums must match the definitions exactly (names, values, order)."""

from __future__ import annotations

import pytest

import machines
from machines.spec.states import STATE_ENUMS


@pytest.mark.parametrize("machine", sorted(STATE_ENUMS))
def test_enum_matches_definition(machine: str) -> None:
    spec = machines.load(machine)
    enum = STATE_ENUMS[machine]
    assert [(m.name, m.value) for m in enum] == [
        (state.enum_name, state.db_value) for state in spec.states.values()
    ]


def test_every_bundled_machine_has_an_enum() -> None:
    from machines.spec.loader import bundled_spec_dir

    assert {p.stem for p in bundled_spec_dir().glob("*.yaml")} == set(STATE_ENUMS)


def test_enum_values_are_the_canonical_names() -> None:
    assert machines.EffectState.COMPENSATION_FAILED == "compensation_failed"
    assert machines.RequestState("manual_intervention") is machines.RequestState.MANUAL_INTERVENTION
