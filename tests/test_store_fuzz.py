"""Garbage at every public method of every store (issue 13: the store boundary).

Each test replaces one argument of one method in turn with ``tests.garbage.garbage()``
(with near-misses: real machine names, keys, states, triggers, actors, tiers, so that
garbage gets past the first check) and asserts that only ``MachinesError`` subclasses
escape and that, when one does, the store's full contents (every row and its history,
read through a fresh transaction) are unchanged, even though the caller caught the error
inside the transaction and committed it. One store of each kind serves a whole run, on
memory, SQLite and the real PostgreSQL server (skipped loudly without one, failed in CI).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import machines
from machines.errors import InvalidArgument, MachinesError
from machines.store import Row, Store, Transaction, open_store
from machines.store.migration import StateMap, migrate
from machines.testing.profiles import scaled
from tests.conftest import postgres_schema
from tests.garbage import garbage
from tests.migration_stores import raw_snapshot
from tests.test_store_values import contents

FUZZ = settings(
    scaled(100),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Examples per method and store: 100 at full size (the garbage is cheap, the stores are
local)."""

READ = object()
"""The default ``row`` of a move or update: the fixture's row, read fresh in the call."""

MADE_UP = Row("outcome", "o", "indeterminate", {}, {}, None, 2, 1, 1, 0.0, 0.0)
ALIEN = Row("effect", "o", "in_flight", {"tier": "x"}, {}, "s", 1, 0, 1, 0.0, 0.0)

NEAR_MISSES: tuple[Any, ...] = (
    "effect",
    "outcome",
    "node",
    "request",
    "e",
    "o",
    "u",
    "s",
    "pending",
    "executing",
    "in_flight",
    "indeterminate",
    "execute",
    "park",
    "reclaim",
    "succeed",
    "proxy",
    "worker",
    "caller",
    "tier",
    "compensable",
    "irreversible",
    "lease_until",
    {"tier": "compensable"},
    {"tier": "irreversible"},
    {"lease_until": 1.0},
    MADE_UP,
    ALIEN,
    100,
    1.5,
)

GARBAGE = garbage(extra=NEAR_MISSES)
"""Built once: a recursive strategy built afresh for each example draws inconsistently
(Hypothesis reports ``FlakyStrategyDefinition`` when it replays one)."""


def seed(store: Store) -> Store:
    """An effect that moved once (``e``, scope ``s``), an outcome that moves back and
    forth (``o``), and one whose data is rewritten (``u``)."""
    row, _ = store.insert("effect", "e", context={"tier": "compensable"}, scope="s")
    store.move(row, "execute", actor="proxy")
    store.insert("outcome", "o", data={"lease_until": 5.0})
    store.insert("outcome", "u", data={"n": 0})
    return store


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgres"])
def fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    if request.param == "postgres":
        with postgres_schema() as url:
            store = seed(open_store(url))
            yield store
            store.close()
        return
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    store = seed(open_store("memory://" if request.param == "memory" else f"sqlite:///{path}"))
    yield store
    store.close()


def fresh(tx: Transaction, key: str, row: Any) -> Any:
    """``row`` itself, or the fixture's row ``key`` as stored now."""
    return tx.get("outcome", key) if row is READ else row


def next_move(row: Any) -> tuple[str, str]:
    """A legal (trigger, actor) for outcome ``o`` as it stands: park it, reclaim it."""
    return (
        ("reclaim", "caller")
        if getattr(row, "state", "") == "indeterminate"
        else ("park", "worker")
    )


Call = Callable[[Transaction, dict[str, Any]], object]

METHODS: dict[str, tuple[dict[str, Any], Call]] = {
    "insert": (
        {
            "machine": "effect",
            "key": "e",
            "context": {"tier": "compensable"},
            "data": {"n": 1},
            "scope": "s",
        },
        lambda tx, a: tx.insert(
            a["machine"], a["key"], context=a["context"], data=a["data"], scope=a["scope"]
        ),
    ),
    "get": ({"machine": "outcome", "key": "o"}, lambda tx, a: tx.get(a["machine"], a["key"])),
    "history": (
        {"machine": "effect", "key": "e"},
        lambda tx, a: tx.history(a["machine"], a["key"]),
    ),
    "scope": (
        {"machine": "effect", "scope": "s"},
        lambda tx, a: tx.scope(a["machine"], a["scope"]),
    ),
    "rows": ({"machine": "outcome"}, lambda tx, a: tx.rows(a["machine"])),
    "due": (
        {
            "machine": "outcome",
            "state": "in_flight",
            "field": "lease_until",
            "before": 10.0,
            "limit": 5,
        },
        lambda tx, a: tx.due(
            a["machine"], a["state"], field=a["field"], before=a["before"], limit=a["limit"]
        ),
    ),
    "in_states": (
        {"machine": "outcome", "states": ["in_flight"], "limit": 5, "offset": 0},
        lambda tx, a: tx.in_states(a["machine"], a["states"], limit=a["limit"], offset=a["offset"]),
    ),
    "counts": ({"machine": "outcome"}, lambda tx, a: tx.counts(a["machine"])),
    "move": (
        {
            "row": READ,
            "trigger": None,
            "actor": None,
            "context": None,
            "detail": {"by": "fuzz"},
            "data": None,
        },
        lambda tx, a: move(tx, a, tx.get("outcome", "o")),
    ),
    "update": (
        {"row": READ, "data": {"n": 2}},
        lambda tx, a: tx.update(fresh(tx, "u", a["row"]), a["data"]),
    ),
}


def move(mover: Any, a: dict[str, Any], row: Any = READ) -> object:
    """``mover.move`` (a transaction's or a store's) of outcome ``o`` with ``a``; a
    trigger or actor left None is the legal next one."""
    row = a["row"] if a["row"] is not READ else row
    trigger, actor = next_move(row)
    return mover.move(
        row,
        trigger if a["trigger"] is None else a["trigger"],
        actor=actor if a["actor"] is None else a["actor"],
        context=a["context"],
        detail=a["detail"],
        data=a["data"],
    )


def with_garbage(draw: st.DataObject, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` with one argument, drawn, replaced by garbage."""
    args = dict(defaults)
    name = draw.draw(st.sampled_from(sorted(args)), label="argument")
    args[name] = draw.draw(GARBAGE, label=name)
    return args


CHANGED_BY_A_REFUSAL = "a call that raised a MachinesError changed the store"


def attempt(
    store: Store, call: Callable[[], object], in_tx: Callable[[Transaction], object] | None
) -> None:
    """Run the call (in a transaction the caller commits even if the call raised); only
    a ``MachinesError`` may escape, and then nothing may have changed."""
    before = contents(store)
    raised = False
    try:
        if in_tx is None:
            call()
        else:
            with store.transaction() as tx:
                try:
                    in_tx(tx)
                except MachinesError:
                    raised = True
    except MachinesError:
        raised = True
    if raised:
        after = contents(store)
        assert after == before, f"{CHANGED_BY_A_REFUSAL}: before {before!r}, after {after!r}"


@pytest.mark.parametrize("method", sorted(METHODS))
@FUZZ
@given(draw=st.data())
def test_a_transaction_method_takes_garbage_in_every_argument(
    fuzzed: Store, method: str, draw: st.DataObject
) -> None:
    defaults, call = METHODS[method]
    args = with_garbage(draw, defaults)
    attempt(fuzzed, lambda: None, lambda tx: call(tx, args))


@FUZZ
@given(draw=st.data())
def test_store_insert_takes_garbage_in_every_argument(fuzzed: Store, draw: st.DataObject) -> None:
    defaults, _ = METHODS["insert"]
    a = with_garbage(draw, defaults)
    attempt(
        fuzzed,
        lambda: fuzzed.insert(
            a["machine"], a["key"], context=a["context"], data=a["data"], scope=a["scope"]
        ),
        None,
    )


@FUZZ
@given(draw=st.data())
def test_store_move_takes_garbage_in_every_argument(fuzzed: Store, draw: st.DataObject) -> None:
    defaults, _ = METHODS["move"]
    args = with_garbage(draw, defaults)
    with fuzzed.transaction() as tx:
        row = tx.get("outcome", "o")
    attempt(fuzzed, lambda: move(fuzzed, args, row), None)


SPECS = (machines.load("outcome"),)


def time_now() -> float:
    return 1_000.0


OPEN_GARBAGE_EXTRA = (
    "memory://",
    "sqlite:///",
    "redis://x",
    SPECS,
    list(SPECS),
    {"outcome": SPECS[0]},
    time_now,
)
OPEN_GARBAGE = garbage(extra=OPEN_GARBAGE_EXTRA)


@FUZZ
@given(draw=st.data())
def test_open_store_takes_garbage_in_every_argument(draw: st.DataObject) -> None:
    """The URL, the specs and the clock; a store that opens must then work or refuse
    with a ``MachinesError`` (a garbage clock is called at the first write)."""
    args: dict[str, Any] = {"url": "memory://", "specs": SPECS, "clock": None}
    name = draw.draw(st.sampled_from(sorted(args)), label="argument")
    args[name] = draw.draw(OPEN_GARBAGE, label=name)
    try:
        store = open_store(args["url"], args["specs"], clock=args["clock"])
    except MachinesError:
        return
    try:
        if "outcome" in store.specs():
            store.insert("outcome", "k")
    except MachinesError:
        pass
    finally:
        store.close()


def test_the_fixture_rows_are_what_the_fuzz_moves(tmp_path: Path) -> None:
    """The defaults are legal, so that garbage in one argument is what a refusal is
    about: each method with no garbage at all succeeds."""
    store = seed(open_store(f"sqlite:///{tmp_path}/defaults.db"))
    for defaults, call in METHODS.values():
        with store.transaction() as tx:
            call(tx, dict(defaults))
    with store.transaction() as tx:
        assert [e.trigger for e in tx.history("outcome", "o")] == ["park"]
        assert tx.get("outcome", "u").data == {"n": 2}  # type: ignore[union-attr]
    store.close()


def test_the_check_sees_a_change_left_behind_by_a_refusal() -> None:
    """The fuzz's own check can fail: a call that writes, then raises, is caught."""
    store = seed(open_store("memory://"))

    def half_write(tx: Transaction) -> None:
        tx.insert("outcome", "half")
        raise MachinesError("refused after writing")

    with pytest.raises(AssertionError, match=CHANGED_BY_A_REFUSAL):
        attempt(store, lambda: None, half_write)


MIGRATE_GARBAGE = garbage(
    extra=(
        *OPEN_GARBAGE_EXTRA,
        (),
        [StateMap("outcome", "in_flight", "failed")],
        [StateMap("outcome", "gone", "nowhere")],
        [StateMap("outcome", "in_flight", 7)],  # type: ignore[arg-type]
        [StateMap("outcome\x00", "in_flight", "failed")],
        [("outcome", "in_flight", "failed")],
        ["outcome:in_flight=failed"],
        "outcome:in_flight=failed",
        lambda name: None,
    )
)


@pytest.fixture(scope="module")
def migrated_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('migrate')}/store.db"
    store = open_store(url, SPECS)
    store.insert("outcome", "k")
    store.close()
    return url


@FUZZ
@given(draw=st.data())
def test_migrate_takes_garbage_in_every_argument(migrated_url: str, draw: st.DataObject) -> None:
    """Every argument of ``migrate``: a ``MachinesError`` or a plan, and the store's every
    row and schema object as they were (the definitions given are the store's own, so no
    migration has anything to do)."""
    args: dict[str, Any] = {
        "url": migrated_url,
        "specs": SPECS,
        "maps": (),
        "dry_run": True,
        "boundary": None,
        "clock": time_now,
    }
    name = draw.draw(st.sampled_from(sorted(args)), label="argument")
    args[name] = draw.draw(MIGRATE_GARBAGE, label=name)
    before = raw_snapshot(migrated_url)
    try:
        plan = migrate(
            args["url"],
            args["specs"],
            args["maps"],
            dry_run=args["dry_run"],
            boundary=args["boundary"],
            clock=args["clock"],
        )
    except MachinesError:
        pass
    else:
        assert not plan.applied, plan.lines()
    assert raw_snapshot(migrated_url) == before


def test_migrate_refuses_each_wrong_type_by_name(migrated_url: str) -> None:
    """The fuzz's refusals name the argument: each wrong type is one clear message."""
    cases: list[tuple[dict[str, Any], str]] = [
        ({"url": 7}, "a store URL must be a str, not a int"),
        ({"url": "sqlite:///a\x00b"}, "holds a NUL character"),
        ({"specs": "outcome"}, "specs must be loaded MachineSpecs"),
        ({"specs": [object()]}, "specs must be loaded MachineSpecs, not a object"),
        ({"maps": "outcome:a=b"}, "maps must be an iterable of StateMap, not a str"),
        ({"maps": [("outcome", "a", "b")]}, "maps must hold StateMap values"),
        ({"maps": [StateMap("outcome", "a", 7)]}, "must be a str, not a int"),  # type: ignore[arg-type]
        ({"dry_run": "yes"}, "dry_run must be True or False, not 'yes'"),
        ({"boundary": 3}, "boundary must be a function or None, not a int"),
        ({"clock": 3}, "clock must be a function"),
    ]
    for change, says in cases:
        args: dict[str, Any] = {"url": migrated_url, "specs": SPECS, "dry_run": True, **change}
        with pytest.raises(InvalidArgument, match=re.escape(says)):
            migrate(
                args["url"],
                args["specs"],
                args.get("maps", ()),
                dry_run=args["dry_run"],
                boundary=args.get("boundary"),
                clock=args.get("clock", time_now),
            )
    with pytest.raises(InvalidArgument, match="--map must be text, not a int"):
        StateMap.parse(7)  # type: ignore[arg-type]
