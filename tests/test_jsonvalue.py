"""The one rule for values stored as JSON: stored only if they come back equal."""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from machines.errors import MachinesError
from machines.spec.jsonvalue import (
    MAX_DEPTH,
    UnstorableValue,
    describe,
    dumps,
    dumps_object,
    loads_object,
)
from tests.garbage import Hostile, garbage

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text().filter(lambda s: "\x00" not in s),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6).filter(lambda s: "\x00" not in s), inner, max_size=4)
    ),
    max_leaves=12,
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@given(JSON)
def test_plain_json_values_come_back_equal(value: Any) -> None:
    import json

    assert json.loads(dumps(value)) == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ((1, 2), "come back the same"),
        ({1: "a"}, "come back the same"),
        ({"a": (1,)}, "come back the same"),
        ({True: 1}, "come back the same"),
        ({1: "a", "b": 2}, "JSON cannot hold it"),
        ({"a", "b"}, "JSON cannot hold it"),
        (math.nan, "JSON cannot hold it"),
        (math.inf, "JSON cannot hold it"),
        (10**5000, "JSON cannot hold it"),
        ("\ud800", "lone surrogate"),
        ({"k": "a\x00b"}, "NUL"),
        (_nested(MAX_DEPTH + 1), "levels deep"),
        (_nested(5000), "nests (too deeply|5000 levels deep)"),  # as the recursion limit lets
        (Hostile(), "JSON cannot hold it"),
        (object(), "JSON cannot hold it"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_values_that_would_not_come_back_are_refused(value: Any, why: str) -> None:
    """issue 13 item 10: a replay must be faithful, so what would change is refused."""
    with pytest.raises(UnstorableValue, match=why) as caught:
        dumps(value, what="the result of 'k'")
    assert "the result of 'k'" in str(caught.value)
    assert isinstance(caught.value, MachinesError)


def test_backslashes_before_u0000_are_not_a_nul() -> None:
    assert dumps("\\u0000") == '"\\\\u0000"'
    with pytest.raises(UnstorableValue):
        dumps("\\\x00")


def test_nesting_at_the_limit_is_stored() -> None:
    """At the limit a value is stored and comes back equal; one level more is refused
    (``test_values_that_would_not_come_back_are_refused``)."""
    deepest = _nested(MAX_DEPTH)
    assert json.loads(dumps(deepest)) == deepest
    assert dumps(deepest).count("[") == MAX_DEPTH
    brackets = '"[[[[' * 200  # brackets inside a string are not nesting
    assert json.loads(dumps(brackets)) == brackets


@given(garbage())
def test_any_value_is_stored_or_refused_with_a_typed_error(value: Any) -> None:
    try:
        dumps(value)
    except UnstorableValue as refused:
        assert len(str(refused)) < 600


def test_objects_only_where_an_object_is_stored() -> None:
    assert dumps_object(MappingProxyType({"b": 1, "a": [1]})) == '{"a":[1],"b":1}'
    for value in ([], "x", None, (("a", 1),)):
        with pytest.raises(UnstorableValue, match="must be a mapping"):
            dumps_object(value)
    assert loads_object('{"a":1}') == {"a": 1}
    with pytest.raises(UnstorableValue):
        loads_object("[1]")


def test_describe_never_raises_and_stays_short() -> None:
    assert describe(10**5000) == "a int (its repr failed)"
    assert describe("x" * 1000).endswith("...")
    assert len(describe("x" * 1000)) == 80


def test_an_integer_longer_than_python_reads_is_refused_whatever_this_process_allows() -> None:
    """Outsider batch 39 (a E2): a process that raised Python's limit on integer digits
    (``sys.set_int_max_str_digits(0)``) stored ``10**5000``; every other process refused
    the row as one written outside the store, and the key never reached a person. The
    limit is Python's default, whatever this process's own."""
    import sys

    from machines.store.stored_json import Unreadable, read_json

    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        with pytest.raises(UnstorableValue, match="an integer of about 5001 digits"):
            dumps({"n": 10**5000}, what="the result of 'k'")
        read = read_json('{"n": 1' + "0" * 5000 + "}")
        assert isinstance(read, Unreadable) and "5001 digits" in read.reason
        assert dumps({"n": 10**4299}) == '{"n":1' + "0" * 4299 + "}"
        sys.set_int_max_str_digits(640)  # batch 40 (a 4): lower than the writer's
        assert read_json('{"n": -' + "9" * 4300 + "}") == {"n": -(10**4300 - 1)}
    finally:
        sys.set_int_max_str_digits(before)
