"""The store's public API takes only what it can vouch for (issue 13, items 10, 12, 13 and
17 on the store side): one key rule, one way to encode values exactly, typed errors for
garbage arguments, the same decision on memory, SQLite and PostgreSQL, and nothing
changed when a call is refused. The new error names (``InvalidArgument``,
``UnstorableData``) are imported inside the tests that need them, so that on a store
without them these tests fail on the behaviour, not on an import."""

from __future__ import annotations

import enum
import itertools
import math
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import machines
from machines.errors import InvalidArgument, MachinesError
from machines.runtime.history import TransitionEvent
from machines.store import Row, Store, StoreError, open_store
from machines.systems import EffectLog, ExactlyOnce
from machines.testing.profiles import scaled
from tests.conftest import opened_store, store_url

Contents = list[tuple[Row, list[TransitionEvent]]]
EXAMPLE_NUMBERS = itertools.count()  # a fresh key for each example that shares a store


def contents(store: Store) -> Contents:
    """Every row of every machine with its history, read through a fresh transaction."""
    with store.transaction() as tx:
        return [
            (row, tx.history(machine, row.key))
            for machine in sorted(store.specs())
            for row in tx.rows(machine)
        ]


def seeded(store: Store) -> Row:
    """A store with an effect that moved once (``e``, scope ``s``) and an outcome in
    flight (``o``); the outcome's row."""
    row, _ = store.insert("effect", "e", context={"tier": "compensable"}, scope="s")
    store.move(row, "execute", actor="proxy", detail={"by": "w1"})
    outcome, _ = store.insert("outcome", "o", data={"lease_until": 5.0, "result": None})
    return outcome


def refused(store: Store, call: Callable[[], object]) -> MachinesError:
    """``call`` raises a ``MachinesError`` and changes nothing, even when the caller
    catches the error inside the transaction and commits it."""
    before = contents(store)
    with pytest.raises(MachinesError) as raised:
        call()
    assert contents(store) == before
    return raised.value


def refused_in_tx(store: Store, call: Callable[[Any], object]) -> MachinesError:
    """As ``refused``, with ``call(tx)`` run inside a transaction that then commits."""
    before = contents(store)
    error: MachinesError | None = None
    with store.transaction() as tx:
        try:
            call(tx)
        except MachinesError as caught:
            error = caught
    assert error is not None, "the call was accepted"
    assert contents(store) == before
    return error


# -- item 12: one key rule, on every store ----------------------------------------------


class Tag(enum.StrEnum):
    CHARGE = "charge-1"


BAD_KEYS: list[Any] = [
    None,
    42,
    4.2,
    b"k",
    ["k"],
    ("k",),
    {"k": 1},
    "",
    "\ud800",  # a lone surrogate: not UTF-8
    "a\x00b",  # PostgreSQL TEXT cannot hold NUL
    "k" * 1001,  # one byte past the limit
    "\U0001f600" * 250 + "k",  # 1001 bytes of UTF-8 in 251 characters
]
BAD_KEY_IDS = [
    "None",
    "int",
    "float",
    "bytes",
    "list",
    "tuple",
    "dict",
    "empty",
    "lone-surrogate",
    "NUL",
    "1001-ascii",
    "1001-bytes-of-utf8",
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=BAD_KEY_IDS)
def test_a_key_is_refused_alike_by_every_method_that_takes_one(store: Store, key: Any) -> None:
    """issue 13 item 12: keys are not validated (``None``, ``42`` next to ``"42"``, a lone
    surrogate, NUL, a list, an over-long key): one rule, checked by insert, get and
    history, on every store, before anything is read or written."""
    seeded(store)
    calls: list[Callable[[Any], object]] = [
        lambda tx: tx.insert("outcome", key),
        lambda tx: tx.get("outcome", key),
        lambda tx: tx.history("outcome", key),
    ]
    for call in calls:
        error = refused_in_tx(store, call)
        assert isinstance(error, InvalidArgument) and "key" in str(error), error
        assert len(str(error)) < 300  # the key is described, never echoed whole
    error = refused(store, lambda: store.insert("outcome", key))
    assert isinstance(error, InvalidArgument)


def test_42_and_the_text_42_are_never_one_key(store: Store) -> None:
    """issue 13 item 12: on SQLite ``42`` found the row of ``"42"``; in memory it did not."""
    store.insert("outcome", "42")
    refused_in_tx(store, lambda tx: tx.get("outcome", 42))
    refused(store, lambda: store.insert("outcome", 42))


def test_run_with_key_none_runs_nothing_on_any_store(store: Store) -> None:
    """issue 13 item 12: ``ExactlyOnce.run(None, f)`` twice on SQLite ran ``f`` twice."""
    runs: list[int] = []
    once = ExactlyOnce(store, worker="w")
    for _ in range(2):
        refused(store, lambda: once.run(None, lambda: runs.append(1)))  # type: ignore[arg-type]
    assert runs == []


def test_keys_and_scopes_at_the_limit_are_kept_and_found(store: Store) -> None:
    """The key rule's boundary, on the real database too: 1,000 bytes of UTF-8 are an
    index entry every store takes, as a key, a scope and a history's entity."""
    from machines.store.records import MAX_KEY_BYTES

    for key in ("k" * MAX_KEY_BYTES, "\U0001f600" * (MAX_KEY_BYTES // 4)):
        assert len(key.encode()) == MAX_KEY_BYTES
        row, created = store.insert("outcome", key, scope=key)
        assert created and row.key == key
        store.move(row, "succeed", actor="worker", data={"result": key})
        with store.transaction() as tx:
            assert [r.key for r in tx.scope("outcome", key)] == [key]
            assert [e.entity for e in tx.history("outcome", key)] == [key]


def test_a_str_subclass_key_is_stored_as_its_text(store: Store) -> None:
    """issue 13 item 12: a ``StrEnum`` key was kept as the enum in memory and as its text
    in SQL. Every store now keeps its text, an exact ``str``, and finds it by the text."""
    row, _ = store.insert("outcome", Tag.CHARGE, scope=Tag.CHARGE)
    assert type(row.key) is str and type(row.scope) is str
    with store.transaction() as tx:
        found = tx.get("outcome", "charge-1")
        assert found is not None and type(found.key) is str and found == row
        assert tx.scope("outcome", "charge-1") == [row]


# -- item 13: a scope is never None -----------------------------------------------------


def test_scope_none_is_refused_not_read_as_the_unscoped_rows(store: Store) -> None:
    """issue 13 item 13: ``scope(machine, None)`` matched the unscoped rows in memory and
    nothing in SQL."""
    store.insert("outcome", "unscoped")
    for scope in (None, "", 7, ["s"], "\x00"):
        refused_in_tx(store, lambda tx, scope=scope: tx.scope("outcome", scope))
    for scope in ("", 7, ["s"], "\x00"):  # None is an insert's "no scope"
        refused_in_tx(store, lambda tx, scope=scope: tx.insert("outcome", "k", scope=scope))


def test_compensate_a_session_of_none_is_refused_on_every_store(store: Store) -> None:
    """issue 13 item 13: ``EffectLog(memory).compensate(None, {})`` compensated the
    effects called without a session; SQLite and PostgreSQL found none."""
    log = EffectLog(store)

    def unknown() -> None:
        raise TimeoutError("no answer")

    with pytest.raises(MachinesError):
        log.call("sig", unknown, tool="refund")  # no session: left executing
    refused(store, lambda: log.compensate(None, {}))  # type: ignore[arg-type]
    effect = log.effect("sig")
    assert effect is not None and effect.state == "executing"


# -- item 17: garbage arguments are typed errors, and change nothing --------------------


def _forged(row: Row, **change: Any) -> Row:
    return replace(row, **change)


GARBAGE_CALLS: list[tuple[str, Callable[[Any, Row], object]]] = [
    ("machine a list", lambda tx, row: tx.rows(["outcome"])),
    ("insert context a list", lambda tx, row: tx.insert("effect", "k", context=[("tier", "x")])),
    ("insert context key 5", lambda tx, row: tx.insert("effect", "k", context={5: "x"})),
    ("insert data a list", lambda tx, row: tx.insert("outcome", "k", data=[("a", 1)])),
    ("move a dict", lambda tx, row: tx.move({}, "park", actor="worker")),
    ("move a str", lambda tx, row: tx.move("o", "park", actor="worker")),
    ("move trigger None", lambda tx, row: tx.move(row, None, actor="worker")),
    ("move trigger a list", lambda tx, row: tx.move(row, ["park"], actor="worker")),
    ("move actor None", lambda tx, row: tx.move(row, "park", actor=None)),
    ("move actor a set", lambda tx, row: tx.move(row, "park", actor={"worker"})),
    ("move data a str", lambda tx, row: tx.move(row, "park", actor="worker", data="x")),
    (
        "move a row with a list key",
        lambda tx, row: tx.move(_forged(row, key=["o"]), "park", actor="worker"),
    ),
    (
        "move a row with a forged state",
        lambda tx, row: tx.move(_forged(row, state="indeterminate"), "reclaim", actor="caller"),
    ),
    ("update data None", lambda tx, row: tx.update(row, None)),
    ("update data a list", lambda tx, row: tx.update(row, [("a", 1)])),
    ("update a row with a str version", lambda tx, row: tx.update(_forged(row, version="1"), {})),
    (
        "update a row with a forged state",
        lambda tx, row: tx.update(_forged(row, state="succeeded"), {"result": "forged"}),
    ),
    (
        "due limit '5'",
        lambda tx, row: tx.due("outcome", "in_flight", field="lease_until", before=9, limit="5"),
    ),
    (
        "due limit True",
        lambda tx, row: tx.due("outcome", "in_flight", field="lease_until", before=9, limit=True),
    ),
    (
        "due limit -1",
        lambda tx, row: tx.due("outcome", "in_flight", field="lease_until", before=9, limit=-1),
    ),
    (
        "due limit 10**30",
        lambda tx, row: tx.due("outcome", "in_flight", field="lease_until", before=9, limit=10**30),
    ),
    (
        "due before 'x'",
        lambda tx, row: tx.due("outcome", "in_flight", field="lease_until", before="x", limit=5),
    ),
    (
        "due before NaN",
        lambda tx, row: tx.due(
            "outcome", "in_flight", field="lease_until", before=math.nan, limit=5
        ),
    ),
    (
        "due before 10**400",
        lambda tx, row: tx.due(
            "outcome", "in_flight", field="lease_until", before=10**400, limit=5
        ),
    ),
    ("due field 5", lambda tx, row: tx.due("outcome", "in_flight", field=5, before=9, limit=5)),
    (
        "due field NUL",
        lambda tx, row: tx.due("outcome", "in_flight", field="\x00", before=9, limit=5),
    ),
    (
        "due state None",
        lambda tx, row: tx.due("outcome", None, field="lease_until", before=9, limit=5),
    ),
    (
        "due state unknown",
        lambda tx, row: tx.due("outcome", "flying", field="lease_until", before=9, limit=5),
    ),
]
REFUSED_ALREADY: list[tuple[str, Callable[[Any, Row], object]]] = [
    ("machine None", lambda tx, row: tx.get(None, "o")),
    ("machine bytes", lambda tx, row: tx.insert(b"outcome", "k")),
    ("insert context value 5", lambda tx, row: tx.insert("effect", "k", context={"tier": 5})),
    (
        "move context value None",
        lambda tx, row: tx.move(row, "park", actor="w", context={"a": None}),
    ),
    ("move detail a list", lambda tx, row: tx.move(row, "park", actor="worker", detail=[1, 2])),
    (
        "move a row of another machine",
        lambda tx, row: tx.move(_forged(row, machine="effect"), "park", actor="worker"),
    ),
    (
        "move a row with no machine",
        lambda tx, row: tx.move(_forged(row, machine=None), "park", actor="worker"),
    ),
]


@pytest.mark.parametrize(("name", "call"), GARBAGE_CALLS, ids=[name for name, _ in GARBAGE_CALLS])
def test_a_garbage_argument_is_a_typed_error_that_changes_nothing(
    store: Store, name: str, call: Callable[[Any, Row], object]
) -> None:
    """issue 13 item 17 (store side): non-string machine names, triggers, actors, context
    values; a context, detail or data that is not a mapping; a ``Row`` that is not one or
    was made up; ``due`` with a bad limit, bound, field or state: each is a
    ``MachinesError``, the same on every store, and nothing changes even when the caller
    catches it and commits."""
    row = seeded(store)
    refused_in_tx(store, lambda tx: call(tx, row))


@pytest.mark.parametrize(
    ("name", "call"), REFUSED_ALREADY, ids=[name for name, _ in REFUSED_ALREADY]
)
def test_a_garbage_argument_refused_before_is_still_refused(
    store: Store, name: str, call: Callable[[Any, Row], object]
) -> None:
    """The same promise for garbage every store refused already (through the spec or a
    failed lookup), kept by the store's own checks now."""
    row = seeded(store)
    refused_in_tx(store, lambda tx: call(tx, row))


def test_open_store_refuses_what_is_not_a_url_specs_or_clock(tmp_path: Path) -> None:
    """issue 13 item 17 (store side): ``open_store`` with a non-str URL, an unknown
    scheme, specs that are not specs, a clock that is not one."""
    spec = machines.load("outcome")
    for call in (
        lambda: open_store(5),  # type: ignore[arg-type]
        lambda: open_store(b"memory://"),  # type: ignore[arg-type]
        lambda: open_store("redis://localhost"),
        lambda: open_store("sqlite:///" + "\x00"),
        lambda: open_store("memory://", "outcome"),  # type: ignore[arg-type]
        lambda: open_store("memory://", [spec, "effect"]),  # type: ignore[list-item]
        lambda: open_store("memory://", {"payments": spec}),
        lambda: open_store("memory://", 5),  # type: ignore[arg-type]
        lambda: open_store("memory://", clock=5),  # type: ignore[arg-type]
    ):
        with pytest.raises(MachinesError):
            call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_clock_that_is_not_a_number_is_refused_before_writing(kind: str, tmp_path: Path) -> None:
    """issue 13 item 17 (store side): a clock returning a str was stored as the creation
    time in memory and SQLite, and refused by PostgreSQL; a clock that raises escaped."""
    for clock in (lambda: "late", lambda: math.nan, lambda: 1 / 0):
        store = open_store(store_url(kind, tmp_path), clock=clock)
        refused(store, lambda store=store: store.insert("outcome", "k"))
        store.close()


# -- item 10: one way to encode values exactly ------------------------------------------


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr")


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


UNSTORABLE: list[Any] = [
    (1, 2),
    {1: "a"},
    {"s": {1, 2}},
    math.nan,
    math.inf,
    10**5000,
    "\ud800",
    "a\x00b",
    ReprRaises(),
    _nested(150),
]


@pytest.mark.parametrize("value", UNSTORABLE, ids=lambda v: type(v).__name__)
def test_an_unstorable_value_is_refused_alike_naming_machine_key_and_column(
    store: Store, value: Any
) -> None:
    """issue 13 item 10 (store side): a tuple or a non-str key came back changed (``[1,
    2]``, ``{"1": "a"}``); every store now refuses what would not come back equal, with
    ``UnstorableData`` (a ``StoreError`` and an ``UnstorableValue``) naming the machine,
    the key and the column, in a short message."""
    row = seeded(store)
    calls: list[tuple[str, Callable[[Any], object]]] = [
        ("data", lambda tx: tx.insert("outcome", "new", data={"v": value})),
        ("data", lambda tx: tx.update(row, {"v": value})),
        ("data", lambda tx: tx.move(row, "succeed", actor="worker", data={"result": value})),
        ("detail", lambda tx: tx.move(row, "succeed", actor="worker", detail={"v": value})),
    ]
    for column, call in calls:
        error = refused_in_tx(store, call)
        message = str(error)
        assert isinstance(error, StoreError), error
        assert "outcome" in message and column in message and len(message) < 600, message
        assert "'new'" in message or "'o'" in message, message
        from machines.spec.jsonvalue import UnstorableValue
        from machines.store.records import UnstorableData

        assert type(error) is UnstorableData and isinstance(error, UnstorableValue)


def test_a_move_refused_for_its_data_writes_no_history_even_if_committed(store: Store) -> None:
    """issue 13 item 10: SQLite wrote the history event before it found the data
    unstorable, and memory kept the event: a caller that caught the error and committed
    was left with an event for a move that never happened."""
    row = seeded(store)
    refused_in_tx(
        store, lambda tx: tx.move(row, "succeed", actor="worker", data={"result": math.nan})
    )
    with store.transaction() as tx:
        assert tx.history("outcome", "o") == []


EXACT: list[Any] = [
    0.1,
    5e-324,
    2**53 + 1,
    -(2**63),
    10**4299,
    1.0,
    2.5e-7,
    "ü\u2028\U0001f600",
    "",
    [1, 2.0, True, None, "x"],
    {"b": {"a": [{}]}, "a": []},
]
"""Values every store keeps exactly today."""

NUMBERS_JSONB_CHANGES: list[Any] = [1e300, -0.0, 1e16, 1.7976931348623157e308, [1e22]]
"""Floats PostgreSQL's ``jsonb`` gives back as integers (or ``-0.0`` as ``0.0``)."""


def exactly(a: Any, b: Any) -> bool:
    """Equal and of the same JSON types all the way down (``1 == 1.0 == True`` is not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(exactly(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(exactly, a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def round_trips(store: Store, key: str, value: Any) -> None:
    """``value`` stored as data (insert, move, update) and as a detail comes back exactly
    from every read and from the write itself."""
    data = {"v": value}
    row, _ = store.insert("outcome", key, data=data)
    assert exactly(row.data["v"], value)
    with store.transaction() as tx:
        found = tx.get("outcome", key)
        assert found is not None and exactly(found.data["v"], value)
        row = tx.update(row, {"u": value})
        assert exactly(row.data["u"], value)
        row = tx.move(row, "succeed", actor="worker", detail={"d": value}, data={"m": value})
        assert exactly(row.data["m"], value)
    with store.transaction() as tx:
        found = tx.get("outcome", key)
        assert found is not None and exactly(dict(found.data), {"m": value})
        (event,) = tx.history("outcome", key)
        assert event.detail is not None and exactly(dict(event.detail), {"d": value})


@pytest.mark.parametrize("value", EXACT, ids=lambda value: repr(value)[:24])
def test_a_stored_value_comes_back_exactly(store: Store, value: Any) -> None:
    """What a store accepts comes back equal and of the same JSON types."""
    round_trips(store, "k", value)


@pytest.mark.parametrize("value", NUMBERS_JSONB_CHANGES, ids=repr)
def test_a_float_comes_back_a_float(store: Store, value: Any) -> None:
    """issue 13 item 10: ``1e300`` came back from PostgreSQL's ``jsonb`` as an integer and
    ``-0.0`` as ``0.0``, so a replay there was not the result stored (the columns are
    ``json`` now, which keeps the text as written)."""
    round_trips(store, "k", value)


TEXT = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
"""What a stored text may hold: no lone surrogate, no NUL (PostgreSQL's JSON refuses it),
in values and in keys alike."""

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**4300 - 1), max_value=10**4300 - 1)
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=TEXT),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet=TEXT, max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def every_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """One store of each kind for a whole Hypothesis run (keys tell the examples apart)."""
    with opened_store(request.param, tmp_path) as opened:
        yield opened


@settings(scaled(40), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON)
@example(value=1e300)
@example(value=-0.0)
@example(value=[2**53 + 1, 5e-324, 0.1, 10**4299])
def test_every_accepted_json_value_comes_back_exactly(every_store: Store, value: Any) -> None:
    """issue 13 item 10, the contract: any JSON value (nested dicts and lists, unicode,
    integers up to 4,300 digits, any finite float) comes back equal and of the same types
    on every store. PostgreSQL's ``jsonb`` turns ``1e300`` into an integer: expected to
    fail there until its columns keep the JSON text."""
    round_trips(every_store, f"k{next(EXAMPLE_NUMBERS)}", value)


def test_a_value_read_from_the_store_is_a_copy(store: Store) -> None:
    """issue 13 item 10: memory handed out the stored lists themselves, so changing a
    result read from it changed what every later reader (a replay) got."""
    row, _ = store.insert("outcome", "k", data={"result": [1, 2]})
    moved = store.move(row, "succeed", actor="worker", detail={"seen": [1]})
    for written in (row, moved):
        written.data["result"].append("changed")
    with store.transaction() as tx:
        found = tx.get("outcome", "k")
        assert found is not None
        found.data["result"].append("changed")
        tx.history("outcome", "k")[0].detail["seen"].append("changed")  # type: ignore[index]
    with store.transaction() as tx:
        found = tx.get("outcome", "k")
        assert found is not None and found.data == {"result": [1, 2]}
        assert tx.history("outcome", "k")[0].detail == {"seen": [1]}


def test_json_written_behind_the_stores_back_is_a_store_error(tmp_path: Path) -> None:
    """issue 13 item 10 (reading): data that is not a JSON object in the database (written
    with the guards dropped, as its owner can) is a ``StoreError``, not a raw
    ``JSONDecodeError`` or ``TypeError``."""
    store = open_store(f"sqlite:///{tmp_path}/raw.db")
    store.insert("outcome", "k")
    raw = sqlite3.connect(tmp_path / "raw.db", isolation_level=None)
    for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute("PRAGMA ignore_check_constraints = ON")
    for text in ("{not json", "[1, 2]", "null", "[" * 100_000):
        raw.execute("UPDATE outcome_entities SET data = ?", (text,))
        with pytest.raises(StoreError, match="JSON object"), store.transaction() as tx:
            tx.get("outcome", "k")
    raw.close()
    store.close()
    from machines.store.stored_json import frozen

    for value in ([1], "text", None, 5):
        with pytest.raises(StoreError, match="JSON object"):
            frozen(value)  # how PostgreSQL's driver hands a column over
    assert frozen({"a": 1}) == MappingProxyType({"a": 1})


def test_a_password_in_a_url_never_reaches_a_message() -> None:
    """A PostgreSQL URL's password was echoed in every error and in the audit's verdict."""
    from machines.store.records import shown_url

    assert shown_url("postgresql://bob:s3cr3t@db:5432/app") == "postgresql://bob:***@db:5432/app"
    assert (
        shown_url("postgresql://db/app?password=s3cr3t&a=1")
        == "postgresql://db/app?password=***&a=1"
    )
    assert shown_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    with pytest.raises(MachinesError) as refused:
        open_store("postgresql://bob:s3cr3t@127.0.0.1:1/app?connect_timeout=2")
    assert "s3cr3t" not in str(refused.value) and "bob:***@" in str(refused.value)


def test_a_transaction_used_after_its_block_refuses_every_call(store: Store) -> None:
    """A transaction object kept past its ``with`` block still ran statements on its
    connection: on PostgreSQL each one committed by itself, outside any transaction."""
    with store.transaction() as tx:
        row, _ = tx.insert("outcome", "k")
    calls: list[Callable[[], object]] = [
        lambda: tx.get("outcome", "k"),
        lambda: tx.insert("outcome", "k2"),
        lambda: tx.move(row, "park", actor="worker"),
        lambda: tx.update(row, {"a": 1}),
        lambda: tx.history("outcome", "k"),
        lambda: tx.scope("outcome", "s"),
        lambda: tx.rows("outcome"),
        lambda: tx.due("outcome", "in_flight", field="lease_until", before=1.0, limit=1),
    ]
    for call in calls:
        with pytest.raises(StoreError, match="transaction has ended"):
            call()
    with store.transaction() as fresh:
        assert [r.key for r in fresh.rows("outcome")] == ["k"]
        assert fresh.get("outcome", "k") == row
