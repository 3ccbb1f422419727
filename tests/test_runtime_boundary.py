"""Issue 13, items 8, 9 and 17: the definition layer and the runtime refuse bad input
before acting, with a typed error, and a move's state and its history event change as
one act (both or neither), whatever fails on the way.

These reach the behaviour through the API that exists before the fix (the errors are
asserted as ``MachinesError`` subclasses), so that each one fails on the old code for the
behaviour, not for a missing name.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

import machines
from machines.errors import (
    ContextError,
    InvalidArgument,
    InvalidStateTransition,
    MachinesError,
    UnknownName,
)
from machines.runtime import Hooks
from machines.runtime.history import History
from machines.spec import MachineSpec
from tests.garbage import Hostile, StrSubclass, posing_as

EFFECT = machines.load("effect")
NOT_AN_OBJECT: Any = [1, 2]
NOT_STRINGS: tuple[Any, ...] = (None, 5, 1.5, [], ["pending"], {}, ("pending",), b"pending")
NOT_STRINGS_IDS = [type(v).__name__ for v in NOT_STRINGS]
BAD_DETAILS: tuple[Any, ...] = (
    [1, 2],
    "text",
    {"at": datetime.datetime(2026, 1, 1)},
    {"n": 10**5000},
    {"x": float("nan")},
    {1: "a"},
    {"t": (1, 2)},
    {"s": {1, 2}},
    Hostile(),
)


def consistent(m: Any, start: str) -> None:
    """The history tells the state: consecutive seqs, each move starts where the last one
    ended, and the last one ends in the current state."""
    events = list(m.history)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    at = start
    for event in events:
        assert event.source == at
        at = event.dest
    assert m.state == at


def unchanged(m: Any, state: str, moves: int) -> None:
    assert m.state == state and len(m.history) == moves


class TestStateAndEventAreOneAct:
    """Item 8: everything a move needs is checked before the state changes."""

    def test_a_detail_that_is_not_an_object_changes_nothing(self) -> None:
        """issue 13 item 8: ``detail=[1, 2]`` raised TypeError after the state had changed,
        without a history event, and the next move was recorded as seq 1."""
        m = EFFECT.machine(tier="compensable")
        with pytest.raises(MachinesError):
            m.trigger("execute", actor="proxy", detail=NOT_AN_OBJECT)
        unchanged(m, "pending", 0)
        m.trigger("execute", actor="proxy")
        m.trigger("fail", actor="proxy")
        consistent(m, "pending")
        assert [(e.seq, e.source) for e in m.history] == [(1, "pending"), (2, "executing")]

    def test_async_a_detail_that_is_not_an_object_changes_nothing(self) -> None:
        """issue 13 item 8 (async)."""

        async def scenario() -> None:
            m = EFFECT.async_machine(tier="compensable")
            with pytest.raises(MachinesError):
                await m.trigger("execute", actor="proxy", detail=NOT_AN_OBJECT)
            unchanged(m, "pending", 0)
            await m.trigger("execute", actor="proxy")
            consistent(m, "pending")

        asyncio.run(scenario())

    @pytest.mark.parametrize(
        "clock",
        [lambda: 1 / 0, lambda: "noon", lambda: None, lambda: float("nan"), lambda: 10**400],
        ids=["raises", "str", "none", "nan", "huge"],
    )
    def test_a_clock_that_fails_changes_nothing(self, clock: Callable[[], Any]) -> None:
        """issue 13 item 8: a clock that raised left the state changed without an event;
        one that answered a non-number was recorded as the time."""
        m = EFFECT.machine(tier="compensable", clock=clock)
        with pytest.raises(MachinesError, match="clock"):
            m.trigger("execute", actor="proxy")
        unchanged(m, "pending", 0)

    def test_async_a_clock_that_raises_changes_nothing(self) -> None:
        """issue 13 item 8 (async)."""

        async def scenario() -> None:
            m = EFFECT.async_machine(tier="compensable", clock=lambda: 1 / 0)
            with pytest.raises(MachinesError, match="clock"):
                await m.trigger("execute", actor="proxy")
            unchanged(m, "pending", 0)

        asyncio.run(scenario())

    def test_an_integer_clock_reads_as_seconds(self) -> None:
        m = EFFECT.machine(tier="compensable", clock=lambda: 7)
        m.trigger("execute", actor="proxy")
        assert m.history[0].at == 7.0 and type(m.history[0].at) is float


class _Raising:
    """A model whose callbacks raise where the test says."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.state = "pending"

    def _maybe(self, where: str) -> None:
        if self.where == where:
            raise RuntimeError(f"callback broke in {where}")

    def on_exit_pending(self, event: Any) -> None:
        self._maybe("on_exit")

    def on_enter_executing(self, event: Any) -> None:
        self._maybe("on_enter")

    def prepare(self, event: Any) -> None:
        self._maybe("prepare")

    def before(self, event: Any) -> None:
        self._maybe("before")

    def after(self, event: Any) -> None:
        self._maybe("after")

    def finalize(self, event: Any) -> None:
        self._maybe("finalize")


HOOKS = Hooks(
    prepare_event=("prepare",),
    before_state_change=("before",),
    after_state_change=("after",),
    finalize_event=("finalize",),
)
BEFORE_THE_CHANGE = ("prepare", "before", "on_exit")
AFTER_THE_CHANGE = ("on_enter", "after")


class TestCallbacksThatRaise:
    """Item 8: a callback that raises before the state changes leaves both unchanged; one
    that raises after leaves both changed; the history never disagrees with the state."""

    @pytest.mark.parametrize("where", BEFORE_THE_CHANGE + AFTER_THE_CHANGE + ("finalize",))
    def test_sync(self, where: str) -> None:
        """issue 13 item 8: state and history agree whichever callback raises."""
        model = _Raising(where)
        m = EFFECT.machine(model, hooks=HOOKS, tier="compensable", entity_id="e")
        if where == "finalize":  # transitions logs and swallows a finalize failure
            m.trigger("execute", actor="proxy")
        else:
            with pytest.raises(RuntimeError, match=where):
                m.trigger("execute", actor="proxy")
        moved = where not in BEFORE_THE_CHANGE
        unchanged(m, "executing" if moved else "pending", int(moved))
        consistent(m, "pending")
        model.where = ""
        m.trigger("fail", actor="proxy") if moved else m.trigger("execute", actor="proxy")
        consistent(m, "pending")

    @pytest.mark.parametrize("where", BEFORE_THE_CHANGE + AFTER_THE_CHANGE)
    def test_async(self, where: str) -> None:
        """issue 13 item 8 (async)."""

        async def scenario() -> None:
            model = _Raising(where)
            m = EFFECT.async_machine(model, hooks=HOOKS, tier="compensable", entity_id="e")
            with pytest.raises(RuntimeError, match=where):
                await m.trigger("execute", actor="proxy")
            moved = where not in BEFORE_THE_CHANGE
            unchanged(m, "executing" if moved else "pending", int(moved))
            consistent(m, "pending")

        asyncio.run(scenario())


class TestDetailIsJson:
    """Item 9: a detail is a JSON object or None, checked at the trigger and at record."""

    @pytest.mark.parametrize("detail", BAD_DETAILS, ids=lambda d: type(d).__name__)
    def test_trigger_refuses_a_detail_that_is_not_a_json_object(self, detail: Any) -> None:
        """issue 13 item 9: a datetime detail was accepted (and write_jsonl then failed)."""
        m = EFFECT.machine(tier="compensable")
        with pytest.raises(MachinesError):
            m.trigger("execute", actor="proxy", detail=detail)
        unchanged(m, "pending", 0)

    @pytest.mark.parametrize("detail", BAD_DETAILS, ids=lambda d: type(d).__name__)
    def test_record_refuses_a_detail_that_is_not_a_json_object(self, detail: Any) -> None:
        """issue 13 item 9: ``History.record`` is public and checks the same way."""
        history = History("effect", "e", clock=lambda: 1.0)
        history.record("a", "b", "t", "x")
        with pytest.raises(MachinesError):
            history.record("b", "c", "t", "x", detail=detail)
        assert len(history) == 1

    def test_the_recorded_detail_cannot_change_afterwards(self) -> None:
        """issue 13 item 9: the detail was copied one level deep, so changing a nested
        value afterwards rewrote the history (and could make it unwritable)."""
        detail: dict[str, Any] = {"items": [1, 2]}
        m = EFFECT.machine(tier="compensable", entity_id="e", clock=lambda: 1.0)
        m.trigger("execute", actor="proxy", detail=detail)
        detail["items"].append(datetime.datetime(2026, 1, 1))
        assert m.history[0].detail == {"items": [1, 2]}
        out = io.StringIO()
        assert m.history.write_jsonl(out) == 1
        assert json.loads(out.getvalue())["detail"] == {"items": [1, 2]}

    def test_record_refuses_names_and_contexts_that_are_not_strings(self) -> None:
        """issue 13 item 9: every field of a recorded event is checked before appending."""
        history = History("effect", "e", clock=lambda: 1.0)
        for args in (
            (None, "b", "t", "x"),
            ("a", 5, "t", "x"),
            ("a", "b", ["t"], "x"),
            ("a", "b", "t", Hostile()),
        ):
            with pytest.raises(MachinesError):
                history.record(*args)
        contexts: tuple[Any, ...] = ({"tier": 5}, {"tier": Hostile()}, [("tier", "x")], "tier")
        for context in contexts:
            with pytest.raises(MachinesError):
                history.record("a", "b", "t", "x", context)
        assert len(history) == 0

    def test_a_history_is_named_by_strings_and_read_contexts_are_checked(self) -> None:
        class Unreadable(dict[str, str]):
            def items(self) -> Any:
                raise RuntimeError("no")

        with pytest.raises(MachinesError):
            History(Hostile(), "e")  # type: ignore[arg-type]
        with pytest.raises(MachinesError):
            History("effect", None)  # type: ignore[arg-type]
        history = History("effect", "e", clock=lambda: 1.0)
        with pytest.raises(MachinesError):
            history.record("a", "b", "t", "x", Unreadable(tier="compensable"))
        history.record(StrSubclass("a"), "b", "t", "x", {StrSubclass("tier"): StrSubclass("c")})
        event = history[0]
        assert type(event.source) is str and type(next(iter(event.context))) is str

    def test_write_jsonl_is_all_or_nothing(self) -> None:
        """issue 13 item 9: write_jsonl wrote the lines before a bad event, then raised a
        raw TypeError: a partial file. A read-only context is taken as it is (the hot
        path), so it is how a bad value can still reach the history."""
        history = History("effect", "e", clock=lambda: 1.0)
        history.record("a", "b", "t", "x", {"tier": "compensable"})
        forged: Any = MappingProxyType({"tier": datetime.date(2026, 1, 1)})
        history.record("b", "c", "t", "x", forged)
        out = io.StringIO()
        with pytest.raises(MachinesError, match="nothing was written"):
            history.write_jsonl(out)
        assert out.getvalue() == ""

    @pytest.mark.parametrize("out", [None, 3, b"x", "/tmp/history.jsonl", io.BytesIO(), []])
    def test_write_jsonl_refuses_what_is_not_a_text_stream(self, out: Any) -> None:
        """Outsider batch 14: ``write_jsonl(None)`` raised a raw ``AttributeError``."""
        history = History("effect", "e", clock=lambda: 1.0)
        history.record("a", "b", "t", "x", {"tier": "compensable"})
        with pytest.raises(InvalidArgument, match="writes to a text stream"):
            history.write_jsonl(out)


def _calls(spec: MachineSpec, bad: Any) -> dict[str, Callable[[], object]]:
    """Each public question of a spec, with ``bad`` in place of one name."""
    return {
        "step state": lambda: spec.step(bad, "execute", actor="proxy", tier="compensable"),
        "step trigger": lambda: spec.step("pending", bad, actor="proxy", tier="compensable"),
        "step actor": lambda: spec.step("pending", "execute", actor=bad, tier="compensable"),
        "step context": lambda: spec.step("pending", "execute", actor="proxy", tier=bad),
        "allows source": lambda: spec.allows(bad, "executing"),
        "allows dest": lambda: spec.allows("pending", bad),
        "allows context": lambda: spec.allows("pending", "executing", tier=bad),
        "next_states": lambda: spec.next_states(bad),
        "next_states context": lambda: spec.next_states("pending", tier=bad),
        "triggers_from": lambda: spec.triggers_from(bad),
        "forbidden_reason source": lambda: spec.forbidden_reason(bad, "pending"),
        "forbidden_reason dest": lambda: spec.forbidden_reason("committed", bad),
        "is_terminal": lambda: spec.is_terminal(bad),
        "stepper context": lambda: spec.stepper(tier=bad),
        "stepper state": lambda: spec.stepper(tier="compensable")(bad, "execute", "proxy"),
        "stepper trigger": lambda: spec.stepper(tier="compensable")("pending", bad, "proxy"),
        "stepper actor": lambda: spec.stepper(tier="compensable")("pending", "execute", bad),
    }


EXPECTED: dict[str, type[MachinesError]] = {
    "step": InvalidStateTransition,
    "allows": UnknownName,
    "next_states": UnknownName,
    "triggers_from": UnknownName,
    "forbidden_reason": UnknownName,
    "is_terminal": UnknownName,
    "stepper": InvalidStateTransition,
}
CALLS = sorted(_calls(EFFECT, None))


class TestNamesThatAreNotStrings:
    """Item 17: every question of the definition layer refuses a name or a context value
    that is not a string with its typed error, naming the machine."""

    @pytest.mark.parametrize("bad", [*NOT_STRINGS, Hostile()], ids=[*NOT_STRINGS_IDS, "hostile"])
    @pytest.mark.parametrize("call", CALLS)
    def test_spec_questions(self, call: str, bad: Any) -> None:
        """issue 13 item 17: ``spec.step(None, ...)`` and friends raised raw TypeErrors."""
        expected = ContextError if "context" in call else EXPECTED[call.split()[0]]
        with pytest.raises(expected) as caught:
            _calls(EFFECT, bad)[call]()
        message = str(caught.value)
        assert "effect" in message and len(message) < 600

    def test_forbidden_reason_of_an_unknown_state_is_refused(self) -> None:
        """issue 13 item 17: an unknown state answered "nothing forbidden" (None)."""
        with pytest.raises(UnknownName, match=r"'comitted' is not a state.*'committed'"):
            EFFECT.forbidden_reason("comitted", "pending")

    def test_a_long_or_unprintable_name_is_cut_and_escaped(self) -> None:
        for name in ("x" * 100_000, "bad\nname\ud800"):
            with pytest.raises(InvalidStateTransition) as caught:
                EFFECT.step("pending", name, actor="proxy", tier="compensable")
            assert len(str(caught.value)) < 600 and "\n" not in str(caught.value)

    def test_a_model_keeps_its_own_state_object(self) -> None:
        class Row:
            def __init__(self) -> None:
                self.status = StrSubclass("pending")

        row = Row()
        original = row.status
        m = EFFECT.machine(row, state_attr="status", tier="compensable")
        assert row.status is original and m.state == "pending" and type(m.state) is str

    def test_string_subclasses_are_their_text(self) -> None:
        m = EFFECT.machine(state=StrSubclass("pending"), tier=StrSubclass("compensable"))
        assert EFFECT.step(StrSubclass("pending"), "execute", actor="proxy", tier="compensable")
        assert EFFECT.is_terminal(StrSubclass("committed"))
        assert m.trigger("execute", actor=StrSubclass("proxy")) == "executing"
        assert type(m.context["tier"]) is str and type(m.state) is str


class TestRuntimeOptionsAndArguments:
    """Item 17: ``spec.machine(...)`` / ``async_machine(...)`` options and the arguments of
    ``trigger`` and ``can``."""

    @pytest.mark.parametrize(
        "options",
        [
            {"state": []},
            {"state": Hostile()},
            {"state": 5},
            {"state_attr": 3},
            {"state_attr": Hostile()},
            {"entity_id": 5},
            {"entity_id": ""},
            {"clock": 5},
            {"hooks": [print]},
            {"hooks": Hostile()},
            {"tier": []},
            {"tier": Hostile()},
        ],
        ids=lambda o: f"{next(iter(o))}={type(next(iter(o.values()))).__name__}",
    )
    @pytest.mark.parametrize("factory", ["machine", "async_machine"])
    def test_bad_options_are_refused(self, factory: str, options: dict[str, Any]) -> None:
        """issue 13 item 17: bad options raised TypeError, or were silently accepted."""
        if "tier" not in options:
            options = {**options, "tier": "compensable"}
        with pytest.raises(MachinesError):
            getattr(EFFECT, factory)(**options)

    @pytest.mark.parametrize(
        "options",
        [
            {"state_attr": "__class__"},
            {"state_attr": "not an attribute"},
            {"state_attr": 7},
            {"hooks": Hooks(after_state_change=("no_such_method",))},
        ],
        ids=str,
    )
    def test_bad_options_with_a_model_leave_the_model_untouched(
        self, options: dict[str, Any]
    ) -> None:
        """issue 13 item 17: ``state_attr=7`` raised TypeError; the model is never touched
        by a refused construction."""

        class Row:
            pass

        row = Row()
        with pytest.raises(MachinesError):
            EFFECT.machine(row, tier="compensable", **options)
        assert vars(row) == {}

    def test_a_model_that_cannot_hold_a_state_is_refused(self) -> None:
        """issue 13 item 17: a model without settable attributes raised AttributeError."""
        with pytest.raises(MachinesError, match="cannot hold its state"):
            EFFECT.machine(42, state_attr="status", tier="compensable")

    def test_a_model_holding_garbage_is_refused(self) -> None:
        class Row:
            def __init__(self) -> None:
                self.status = ["pending"]

        with pytest.raises(UnknownName):
            EFFECT.machine(Row(), state_attr="status")

    def test_a_model_id_whose_str_raises_is_refused(self) -> None:
        class Row:
            id = Hostile()
            state = None

        with pytest.raises(MachinesError, match="entity_id"):
            EFFECT.machine(Row(), tier="compensable")

    def test_hooks_are_checked_when_made(self) -> None:
        """issue 13 item 17: a list of hooks was unhashable (TypeError at the first
        entity); a callback that is neither callable nor a name failed mid-move."""

        class Unhashable:
            __hash__ = None  # type: ignore[assignment]

            def __call__(self, event: Any) -> None:
                pass

        with pytest.raises(MachinesError, match="hashable"):
            Hooks(after_state_change=(Unhashable(),))
        assert Hooks(after_state_change=[print]).after_state_change == (print,)  # type: ignore[arg-type]
        bads: tuple[Any, ...] = ([1], print, "audit", [""])
        for bad in bads:
            with pytest.raises(MachinesError):
                Hooks(after_state_change=bad)

    @pytest.mark.parametrize("bad", [*NOT_STRINGS, Hostile()], ids=[*NOT_STRINGS_IDS, "hostile"])
    def test_trigger_and_can_refuse_names_that_are_not_strings(self, bad: Any) -> None:
        """issue 13 item 17: ``trigger``/``can`` with an unhashable name raised TypeError."""
        m = EFFECT.machine(tier="compensable")
        with pytest.raises(InvalidStateTransition):
            m.trigger(bad, actor="proxy")
        with pytest.raises(InvalidStateTransition):
            m.trigger("execute", actor=bad)
        with pytest.raises(ContextError):
            m.trigger("execute", actor="proxy", tier=bad)
        with pytest.raises(InvalidStateTransition):
            m.can(bad, actor="proxy")  # a mistake, not a "no"
        with pytest.raises(InvalidStateTransition):
            m.can("execute", actor=bad)
        with pytest.raises(ContextError):
            m.can("execute", actor="proxy", tier=bad)
        assert m.can("teleport", actor="proxy") is False
        unchanged(m, "pending", 0)

    @pytest.mark.parametrize("bad", [[], Hostile(), None], ids=["list", "hostile", "none"])
    def test_async_trigger_refuses_names_that_are_not_strings(self, bad: Any) -> None:
        """issue 13 item 17 (async)."""

        async def scenario() -> None:
            m = EFFECT.async_machine(tier="compensable")
            with pytest.raises(InvalidStateTransition):
                await m.trigger(bad, actor="proxy")
            with pytest.raises(InvalidStateTransition):
                await m.trigger("execute", actor=bad)
            with pytest.raises(ContextError):
                await m.trigger("execute", actor="proxy", tier=bad)
            with pytest.raises(InvalidStateTransition):
                m.can(bad, actor="proxy")
            unchanged(m, "pending", 0)

        asyncio.run(scenario())

    def test_a_model_state_changed_to_garbage_underneath_is_refused(self) -> None:
        class Row:
            status = "pending"

        row = Row()
        m = EFFECT.machine(row, state_attr="status", tier="compensable")
        row.status = ["pending"]  # type: ignore[assignment]
        with pytest.raises(InvalidStateTransition, match="must be a string"):
            m.trigger("execute", actor="proxy")
        with pytest.raises(InvalidStateTransition, match="must be a string"):
            m.can("execute", actor="proxy")
        assert "['pending']" in repr(m)


PosingAsCompensable = posing_as("compensable")
"""A tier whose text is its own but that compares and hashes as 'compensable'."""
PosingAsPending = posing_as("pending")
"""A state whose text is its own but that compares and hashes as 'pending'."""


@pytest.mark.parametrize("honest_first", [True, False], ids=["honest first", "posing first"])
def test_a_context_value_is_judged_by_its_characters(honest_first: bool) -> None:
    """Outsider batch 21 (b16, b17): an 'irreversible' tier that compared and hashed as
    'compensable' let ``spec.step`` execute a call without its approval, and
    ``spec.machine`` took the stepper cached for an honest compensable entity made before
    it (the outcome depended on what other callers did first). Every lookup is by the
    characters now, so it is irreversible whatever came before."""
    from machines.errors import InvalidStateTransition

    spec = machines.load("effect")
    posing = PosingAsCompensable("irreversible")
    if honest_first:
        assert spec.machine(tier="compensable").execute(actor="proxy") is not None
    with pytest.raises(InvalidStateTransition):
        spec.step("pending", "execute", actor="proxy", tier=posing)
    m = spec.machine(tier=posing)
    assert dict(m.context) == {"tier": "irreversible"}
    with pytest.raises(InvalidStateTransition):
        m.execute(actor="proxy")
    stepper = spec.stepper(tier="compensable")
    with pytest.raises(InvalidStateTransition):
        stepper(PosingAsPending("committed"), "execute", "proxy")
    assert spec.step("pending", "execute", actor="proxy", tier="compensable") == "executing"


def test_a_synchronous_entity_refuses_an_async_callback() -> None:
    """Outsider batch 22 (B3): an ``async def on_enter_executing`` on a synchronous
    entity's model (or an async hook, an object with an async ``__call__``, a partial of
    an async function) was accepted, the move made and recorded, and the coroutine never
    awaited: the user's side effect never happened. Refused before the entity exists."""
    import functools

    from machines.runtime.templates import Hooks

    spec = machines.load("effect")

    class Model:
        state = "pending"

        async def on_enter_executing(self, event: object) -> None:
            return None

    async def hook(event: object) -> None:
        return None

    class AsyncCall:
        async def __call__(self, event: object) -> None:
            return None

    with pytest.raises(machines.MachinesError, match="on_enter_executing is an async function"):
        spec.machine(Model(), tier="compensable")
    for callback in (hook, AsyncCall(), functools.partial(hook)):
        with pytest.raises(machines.MachinesError, match="async function"):
            spec.machine(tier="compensable", hooks=Hooks(after_state_change=(callback,)))
    assert spec.async_machine(Model(), tier="compensable") is not None


def test_a_hook_named_by_its_dotted_path_is_resolved_and_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 24 (b 2): ``Hooks(after_state_change=("asynchooks.after",))`` naming
    an ``async def`` was accepted by a synchronous entity, the move recorded and the hook
    never run: the async check skipped every dotted name. A dotted name is resolved before
    the entity exists; a typo there fails then too, not in the middle of a move."""
    from machines.runtime.templates import Hooks

    (tmp_path / "asynchooks.py").write_text(
        "async def after(event):\n    pass\n\ndef plain(event):\n    pass\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = machines.load("effect")
    with pytest.raises(machines.MachinesError, match=r"'asynchooks\.after' is an async function"):
        spec.machine(tier="compensable", hooks=Hooks(after_state_change=("asynchooks.after",)))
    for typo in ("asynchooks.aftr", "no_such_module_here.after"):
        with pytest.raises(machines.MachinesError, match="names no function by its dotted"):
            spec.machine(tier="compensable", hooks=Hooks(after_state_change=(typo,)))
    m = spec.machine(tier="compensable", hooks=Hooks(after_state_change=("asynchooks.plain",)))
    assert m.execute(actor="proxy") == "executing"
    assert spec.async_machine(
        tier="compensable", hooks=Hooks(after_state_change=("asynchooks.after",))
    )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("with_context", [False, True], ids=["bound", "given"])
def test_a_model_set_outside_its_entity_moves_no_more(
    asynchronous: bool, with_context: bool
) -> None:
    """Outsider batch 24 (b 1): a committed charge whose model was set back to pending
    (a stale row reloaded, other code) was executed and committed again, the history
    showing a move out of the terminal state. A move starts where the entity's history
    ends; the model is left as it is, and a new entity bound to it starts from there."""

    class Charge:
        status: object = None

    spec = machines.load("effect")
    charge = Charge()
    make = spec.async_machine if asynchronous else spec.machine
    m = make(charge, state_attr="status", tier="compensable")
    extra = {"tier": "compensable"} if with_context else {}

    def fire(trigger: str) -> object:
        result = m.trigger(trigger, actor="proxy", **extra)
        return asyncio.run(result) if asynchronous else result

    fire("execute")
    fire("commit")
    for outside in ("pending", StrSubclass("committed"), 3):
        charge.status = outside
        with pytest.raises(InvalidStateTransition):
            fire("execute")
    charge.status = "pending"
    with pytest.raises(InvalidStateTransition, match="set outside this entity"):
        fire("execute")
    assert len(m.history) == 2 and charge.status == "pending"
    fresh = make(charge, state_attr="status", tier="compensable")
    assert fresh.state == "pending"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_model_set_outside_before_the_first_move_moves_no_more(asynchronous: bool) -> None:
    """Outsider batch 25 (b 4): the same before the entity's first move: made in pending,
    its model set to executing by other code, the entity accepted commit and its history
    began with a move out of a state it never entered. The first move starts where the
    entity was made."""

    class Charge:
        status: object = None

    spec = machines.load("effect")
    charge = Charge()
    make = spec.async_machine if asynchronous else spec.machine
    m = make(charge, state_attr="status", tier="compensable")
    charge.status = "executing"
    assert not m.can("commit", actor="proxy")
    with pytest.raises(InvalidStateTransition, match="set outside this entity"):
        result = m.trigger("commit", actor="proxy")
        if asynchronous:
            asyncio.run(result)
    assert len(m.history) == 0
    charge.status = "pending"
    fired = m.trigger("execute", actor="proxy")
    assert (asyncio.run(fired) if asynchronous else fired) == "executing"


def test_a_model_whose_state_reads_otherwise_mid_move_is_a_typed_error() -> None:
    """Outsider batch 25 (b, noted): a model whose state read differently on the second
    read (another writer mid-move) let transitions' own MachineError out of a trigger."""

    class Flip:
        def __init__(self) -> None:
            self.reads = 0
            self._status = "executing"

        @property
        def status(self) -> str:
            self.reads += 1
            return self._status if self.reads != 2 else "compensating"

        @status.setter
        def status(self, value: str) -> None:
            self._status = value

    flip = Flip()
    m = machines.load("effect").machine(flip, state_attr="status", tier="compensable")
    flip.reads = 0
    with pytest.raises(InvalidStateTransition, match="changed while the move was being made"):
        m.fail(actor="proxy")
    assert m.history == [] and flip._status == "executing"


def test_a_cancelled_async_move_is_cancelled_not_a_machines_bug() -> None:
    """Outsider batch 26 (b 4): a task cancelled (or timed out) while an async
    ``on_enter_`` callback awaited was told "transitions did not apply 'execute' ... a bug
    in machines", and the cancellation was lost, although the move was made and recorded.
    The caller is told it was cancelled; the history says what was made."""

    class Charge:
        status: object = None

        async def on_enter_executing(self, event: object) -> None:
            await asyncio.sleep(1.0)

    spec = machines.load("effect")

    async def main() -> None:
        m = spec.async_machine(Charge(), state_attr="status", tier="compensable")
        task = asyncio.ensure_future(m.trigger("execute", actor="proxy"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled() and m.state == "executing" and len(m.history) == 1
        m2 = spec.async_machine(Charge(), state_attr="status", tier="compensable")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(m2.trigger("execute", actor="proxy"), 0.05)

    asyncio.run(main())


def test_a_task_a_hook_starts_cannot_move_beside_another_move() -> None:
    """Outsider batch 27 (b 1): a task started by ``on_enter_indeterminate`` fired
    ``confirm`` while the caller fired ``refute`` (here decide_landed and decide_not_landed):
    both were accepted from indeterminate,
    the caller was told succeeded while the model ended failed, and the history's third
    event copied its first. The task had inherited the moving mark and skipped the lock for
    good. A move started under the mark ends before the move that holds the lock does, and
    a mark outlives no move."""
    spec = machines.load("outcome")

    class Charge:
        def __init__(self) -> None:
            self.state: object = None
            self.m: Any = None
            self.spawned: Any = None

        async def on_enter_indeterminate(self, event: object) -> None:
            self.spawned = asyncio.ensure_future(
                self.m.trigger("decide_landed", actor="operator", detail={"by": "bot"})
            )

        async def on_exit_indeterminate(self, event: object) -> None:
            await asyncio.sleep(0.01)

    async def main() -> None:
        charge = Charge()
        charge.m = spec.async_machine(charge)
        await charge.m.trigger("park", actor="worker")
        await asyncio.sleep(0)
        outcomes = []
        refute = charge.m.trigger("decide_not_landed", actor="operator")
        for pending in (refute, charge.spawned):
            try:
                outcomes.append(await pending)
            except InvalidStateTransition:
                outcomes.append("refused")
        chain = [(e.source, e.trigger, e.dest) for e in charge.m.history]
        assert chain[0] == ("in_flight", "park", "indeterminate") and len(chain) == 2, chain
        assert chain[1][0] == "indeterminate" and charge.state == chain[1][2]
        assert sorted(outcomes) == sorted(["refused", chain[1][2]]), outcomes

    asyncio.run(main())


def test_a_model_whose_state_cannot_be_read_is_a_typed_error_on_a_move() -> None:
    """Outsider batch 22 (b B6): a model whose state attribute raised when read let a raw
    RuntimeError out of a trigger (making the entity wrapped the same failure already)."""

    class Flaky:
        def __init__(self) -> None:
            self.reads = 0
            self._state = "pending"

        @property
        def state(self) -> str:
            self.reads += 1
            if self.reads > 1:
                raise RuntimeError("the database behind the model is down")
            return self._state

        @state.setter
        def state(self, value: str) -> None:
            self._state = value

    m = machines.load("effect").machine(Flaky(), tier="compensable")
    with pytest.raises(machines.MachinesError, match="reading the model's state raised"):
        m.execute(actor="proxy")
    assert m.history == []
