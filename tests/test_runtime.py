"""The object runtime: refusals leave everything unchanged, models and callbacks behave as
``transitions`` users expect, history is append-only, and entities scale."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

import machines
from machines.errors import ContextError, InvalidStateTransition, MachinesError, UnknownName
from machines.runtime import Hooks, templates
from machines.runtime.templates import templates_of
from machines.spec import MachineSpec, Transition

MACHINES = ("effect", "outcome", "node", "request")


def spec_of(name: str) -> MachineSpec:
    return machines.load(name)


def admitted_context(spec: MachineSpec, t: Transition) -> dict[str, str]:
    """A full context valuation that ``t``'s guard admits."""
    return {
        var: (sorted(t.when[var])[0] if var in t.when else v.values[0])
        for var, v in spec.context.items()
    }


def assert_refused_unchanged(m: Any, trigger: str, actor: str, **context: str) -> str:
    before_state, before_len = m.state, len(m.history)
    with pytest.raises(InvalidStateTransition) as info:
        m.trigger(trigger, actor=actor, **context)
    assert m.state == before_state
    assert len(m.history) == before_len
    message = str(info.value)
    assert m.spec.name in message and f"'{before_state}'" in message and f"'{trigger}'" in message
    return message


class TestEveryKindOfIllegalMove:
    """Wrong actor, failed guard, terminal state, unknown trigger: for all four machines."""

    @pytest.mark.parametrize("name", MACHINES)
    def test_wrong_actor(self, name: str) -> None:
        spec = spec_of(name)
        tried = 0
        for t in spec.transitions:
            wrong = [a for a in spec.actors if a not in t.actors]
            if not wrong:
                continue
            m = spec.machine(state=t.source, **admitted_context(spec, t))
            message = assert_refused_unchanged(m, t.trigger, wrong[0])
            assert f"actor '{wrong[0]}' may not fire" in message
            tried += 1
        assert tried == len(spec.transitions)

    @pytest.mark.parametrize("name", MACHINES)
    def test_failed_guard(self, name: str) -> None:
        spec = spec_of(name)
        guarded = [t for t in spec.transitions if t.when]
        if name == "outcome":
            assert not guarded and not spec.context  # nothing to guard in this machine
            return
        assert guarded
        tried = 0
        for t in guarded:
            var = next(iter(t.when))
            outside = [v for v in spec.context[var].values if v not in t.when[var]]
            if not outside:
                continue
            others = [
                u
                for u in spec.transitions
                if u.source == t.source and u.trigger == t.trigger and u is not t
            ]
            if others:
                continue
            context = admitted_context(spec, t) | {var: outside[0]}
            m = spec.machine(state=t.source, **context)
            message = assert_refused_unchanged(m, t.trigger, t.actors[0])
            assert "guard not met" in message
            tried += 1
        assert tried >= 2

    @pytest.mark.parametrize("name", MACHINES)
    def test_terminal_state(self, name: str) -> None:
        spec = spec_of(name)
        terminals = [s for s, st in spec.states.items() if st.terminal]
        assert terminals
        context = {var: v.values[0] for var, v in spec.context.items()}
        for state in terminals:
            m = spec.machine(state=state, **context)
            for t in spec.transitions:
                message = assert_refused_unchanged(m, t.trigger, t.actors[0])
                reason = spec.forbidden_reason(state, t.dest)
                assert reason is not None and reason in message

    @pytest.mark.parametrize("name", MACHINES)
    def test_unknown_trigger(self, name: str) -> None:
        spec = spec_of(name)
        m = spec.machine(**{var: v.values[0] for var, v in spec.context.items()})
        message = assert_refused_unchanged(m, "teleport", next(iter(spec.actors)))
        assert "is not a trigger" in message

    def test_forbidden_reason_is_named(self) -> None:
        m = spec_of("effect").machine(tier="compensable")
        message = assert_refused_unchanged(m, "commit", "proxy")
        assert "no skipping: a call must execute before it can commit" in message


class TestContext:
    def test_excluded_tier_is_refused_at_creation(self) -> None:
        with pytest.raises(ContextError, match="Safe-tier calls run directly"):
            spec_of("effect").machine(tier="safe")

    def test_unknown_context_variable_is_refused(self) -> None:
        with pytest.raises(ContextError, match="'teir' is not a context variable"):
            spec_of("effect").machine(teir="compensable")

    def test_missing_context_for_a_guard_is_a_context_error(self) -> None:
        m = spec_of("effect").machine()
        with pytest.raises(ContextError, match="pass tier="):
            m.trigger("execute", actor="proxy")
        assert m.state == "pending" and len(m.history) == 0

    def test_per_move_context_gives_a_derived_variable(self) -> None:
        m = spec_of("request").machine(state="executing", side_effects="none")
        assert_refused_unchanged(m, "cancel", "operator", side_effects="started")
        assert m.trigger("cancel", actor="operator") == "cancelled"
        assert m.history[0].context == {"side_effects": "none"}

    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    def test_a_move_cannot_change_a_fixed_variable(self, asynchronous: bool) -> None:
        """issue 27 item 8: ``trigger(..., tier=other)`` passed the other tier's guard (the
        bound context was merged under the move's); the stores refuse the same move."""
        spec = spec_of("effect")
        m = (spec.async_machine if asynchronous else spec.machine)(tier="irreversible")

        def fire(trigger: str, actor: str, **context: str) -> Any:
            move = m.trigger(trigger, actor=actor, **context)
            return asyncio.run(move) if asynchronous else move

        for call in (
            lambda: fire("execute", "proxy", tier="compensable"),
            lambda: m.can("execute", actor="proxy", tier="compensable"),
        ):
            with pytest.raises(ContextError, match="'tier' is fixed when the entity is made"):
                call()
        assert (m.state, len(m.history)) == ("pending", 0)
        assert fire("approve", "human", tier="irreversible") == "approved"  # repeating is fine
        assert [e.context for e in m.history] == [{"tier": "irreversible"}]

    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    def test_a_value_that_lies_about_its_equality_cannot_change_a_fixed_variable(
        self, asynchronous: bool
    ) -> None:
        """Outsider batch 17 (b08): a ``str`` whose ``__ne__`` always said "equal" passed
        the fixed-variable check, and the move was judged under its text; it is compared
        as its exact text now, and the bound value judges the move."""

        class Liar(str):
            def __ne__(self, other: object) -> bool:
                return False

            def __eq__(self, other: object) -> bool:
                return True

            __hash__ = str.__hash__

        spec = spec_of("effect")
        m = (spec.async_machine if asynchronous else spec.machine)(tier="compensable")

        def fire() -> Any:
            move = m.trigger("approve", actor="human", tier=Liar("irreversible"))
            return asyncio.run(move) if asynchronous else move

        for call in (fire, lambda: m.can("approve", actor="human", tier=Liar("irreversible"))):
            with pytest.raises(ContextError, match="'tier' is fixed when the entity is made"):
                call()
        assert (m.state, len(m.history)) == ("pending", 0)

    def test_a_fixed_variable_is_bound_when_the_entity_is_made(self) -> None:
        m = spec_of("effect").machine()
        with pytest.raises(ContextError, match=r"was not bound; bind it there: spec.machine\(tier"):
            m.trigger("execute", actor="proxy", tier="compensable")
        assert (m.state, len(m.history)) == ("pending", 0)

    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    def test_a_move_without_an_actor_is_refused_by_name(self, asynchronous: bool) -> None:
        """issue 27 item 8: a trigger without ``actor=`` raised Python's ``TypeError``."""
        spec = spec_of("effect")
        m = (spec.async_machine if asynchronous else spec.machine)(tier="compensable")
        calls: list[Any] = [
            lambda: m.trigger("execute"),
            lambda: m.execute(),
            lambda: m.can("execute"),
        ]
        for call in calls:
            with pytest.raises(
                InvalidStateTransition, match=r"no actor was given.*actor="
            ) as raised:
                result = call()
                if asynchronous and not isinstance(result, bool):
                    asyncio.run(result)
            assert not isinstance(raised.value, TypeError)
        assert (m.state, len(m.history)) == ("pending", 0)

    def test_a_step_without_an_actor_is_refused_by_name(self) -> None:
        """Outsider batch 18 (b26): ``spec.step`` without ``actor=`` raised Python's
        ``TypeError`` (the object runtime said why since item 8)."""
        spec = spec_of("effect")
        with pytest.raises(InvalidStateTransition, match=r"no actor was given.*actors: "):
            spec.step("pending", "execute", tier="compensable")
        with pytest.raises(InvalidStateTransition, match="no actor was given"):
            spec.step("pending", "execute")
        assert spec.step("pending", "execute", actor="proxy", tier="compensable") == "executing"


@dataclass
class TransferRow:
    """Stands in for an ORM row: its own id and its own state column."""

    id: int
    status: str | None = None
    seen: list[tuple[str, str, Any]] = field(default_factory=list)

    def on_enter_executing(self, event: Any) -> None:
        self.seen.append(("enter executing", event.kwargs["actor"], event.kwargs["detail"]))

    def on_exit_pending(self, event: Any) -> None:
        self.seen.append(("exit pending", event.kwargs["actor"], event.transition.dest))

    def audit(self, event: Any) -> None:
        self.seen.append(("after", event.event.name, event.kwargs["machine"].state))


class TestModels:
    def test_own_model_and_state_column(self) -> None:
        row = TransferRow(id=42)
        m = spec_of("effect").machine(row, state_attr="status", tier="compensable")
        assert row.status == "pending" and m.entity_id == "42"
        m.execute(actor="proxy", detail={"attempt": 1})
        assert row.status == "executing" == m.state
        assert row.seen == [
            ("exit pending", "proxy", "executing"),
            ("enter executing", "proxy", {"attempt": 1}),
        ]

    def test_row_loaded_in_a_later_state_resumes_there(self) -> None:
        row = TransferRow(id=1, status="executing")
        m = spec_of("effect").machine(row, state_attr="status", tier="compensable")
        assert m.commit(actor="proxy") == "committed"
        assert m.history[0].source == "executing"

    def test_row_in_an_unknown_state_is_refused(self) -> None:
        with pytest.raises(UnknownName, match="'done' is not a state"):
            spec_of("effect").machine(TransferRow(id=1, status="done"), state_attr="status")

    def test_conflicting_start_state_is_refused(self) -> None:
        with pytest.raises(MachinesError, match="pass one or the other"):
            spec_of("effect").machine(
                TransferRow(id=1, status="executing"), state_attr="status", state="pending"
            )

    def test_nothing_is_injected_into_the_model(self) -> None:
        row = TransferRow(id=3)
        spec_of("effect").machine(row, state_attr="status", tier="compensable").execute(
            actor="proxy"
        )
        injected = [
            a
            for a in vars(row)
            if a.startswith(("is_", "to_", "may_")) or a in {"trigger", "execute", "commit"}
        ]
        assert injected == []

    def test_entities_of_one_kind_share_one_template(self) -> None:
        spec = spec_of("outcome")
        before = templates_of(spec)
        entities = [spec.machine(entity_id=str(i)) for i in range(2_000)]
        added = templates_of(spec) - before
        assert len(added) <= 1
        template = entities[0]._template
        assert all(e._template is template for e in entities)
        assert template.models == []  # add_model (quadratic) is never called

    def test_a_spec_that_dies_takes_its_templates_with_it(self) -> None:
        """The runtime's template cache keeps a spec's templates only while the spec lives
        (it is keyed by the spec's id, so a stale entry could be found by a new spec)."""
        import dataclasses
        import gc

        copy = dataclasses.replace(spec_of("outcome"))
        copy.machine(entity_id="e")
        assert len(templates_of(copy)) == 1
        ident = id(copy)
        del copy
        gc.collect()
        assert ident not in templates._TEMPLATES

    def test_hooks_run_in_transitions_order(self) -> None:
        order: list[str] = []
        hooks = Hooks(
            before_state_change=(lambda e: order.append("before"),), after_state_change=("audit",)
        )
        row = TransferRow(id=5)
        m = spec_of("effect").machine(row, state_attr="status", hooks=hooks, tier="compensable")
        m.execute(actor="proxy")
        assert order == ["before"]
        assert row.seen[-1] == ("after", "execute", "executing")


class TestCallbacksAndHistory:
    def test_before_hook_failure_leaves_everything_unchanged(self) -> None:
        def refuse(event: Any) -> None:
            raise RuntimeError("upstream said no")

        m = spec_of("effect").machine(
            hooks=Hooks(before_state_change=(refuse,)), tier="compensable"
        )
        with pytest.raises(RuntimeError, match="upstream said no"):
            m.execute(actor="proxy")
        assert m.state == "pending" and len(m.history) == 0
        assert m.can("execute", actor="proxy")  # nothing left half-done

    def test_failing_on_enter_callback_still_records_the_change(self) -> None:
        class Fussy(TransferRow):
            def on_enter_executing(self, event: Any) -> None:
                raise RuntimeError("callback broke")

        m = spec_of("effect").machine(Fussy(id=9), state_attr="status", tier="compensable")
        with pytest.raises(RuntimeError, match="callback broke"):
            m.execute(actor="proxy")
        assert m.state == "executing"
        assert [(e.source, e.dest) for e in m.history] == [("pending", "executing")]

    def test_trigger_fired_from_on_enter_is_recorded_after_its_cause(self) -> None:
        class Eager(TransferRow):
            def on_enter_executing(self, event: Any) -> None:
                event.kwargs["machine"].commit(actor="proxy")

        m = spec_of("effect").machine(Eager(id=2), state_attr="status", tier="compensable")
        assert m.execute(actor="proxy") == "executing"  # what this trigger did
        assert m.state == "committed"
        assert [(e.seq, e.source, e.dest) for e in m.history] == [
            (1, "pending", "executing"),
            (2, "executing", "committed"),
        ]

    def test_trigger_fired_before_the_state_changes_is_refused(self) -> None:
        seen: list[str] = []

        def meddle(event: Any) -> None:
            try:
                event.kwargs["machine"].commit(actor="proxy")
            except InvalidStateTransition as exc:
                seen.append(str(exc))

        m = spec_of("effect").machine(
            hooks=Hooks(before_state_change=(meddle,)), tier="compensable"
        )
        m.execute(actor="proxy")
        assert m.state == "executing" and len(m.history) == 1
        assert seen and "another transition of this entity is under way" in seen[0]

    def test_history_events_are_complete_and_immutable(self) -> None:
        ticks = iter([100.0, 101.5])
        detail = {"result": "ok"}
        m = spec_of("effect").machine(
            entity_id="e-1", clock=lambda: next(ticks), tier="compensable"
        )
        m.execute(actor="proxy")
        m.commit(actor="proxy", detail=detail)
        detail["result"] = "tampered"
        first, second = m.history
        assert first == machines.runtime.history.TransitionEvent(
            "effect",
            "e-1",
            1,
            "pending",
            "executing",
            "execute",
            "proxy",
            None,
            {"tier": "compensable"},
            100.0,
        )
        assert second.seq == 2 and second.at == 101.5 and second.detail == {"result": "ok"}
        with pytest.raises(AttributeError):
            second.dest = "pending"  # type: ignore[misc]
        with pytest.raises(TypeError):
            second.detail["result"] = "x"  # type: ignore[index]
        with pytest.raises(TypeError):
            second.context["tier"] = "irreversible"  # type: ignore[index]

    def test_history_cannot_be_rewritten_through_the_api(self) -> None:
        m = spec_of("outcome").machine()
        m.park(actor="worker")
        history = m.history
        for mutate in (
            lambda: history.append(None),  # type: ignore[attr-defined]
            lambda: history.__setitem__(0, None),  # type: ignore[index]
            lambda: history.__delitem__(0),  # type: ignore[attr-defined]
            lambda: setattr(m, "history", []),
            lambda: setattr(m, "state", "succeeded"),
        ):
            with pytest.raises((AttributeError, TypeError)):
                mutate()
        assert [e.dest for e in m.history] == ["indeterminate"] and m.state == "indeterminate"

    def test_history_writes_json_lines(self) -> None:
        m = spec_of("outcome").machine(entity_id="k", clock=lambda: 7.0)
        m.succeed(actor="worker", detail={"result": 3})
        out = io.StringIO()
        assert m.history.write_jsonl(out) == 1
        assert json.loads(out.getvalue()) == {
            "machine": "outcome",
            "entity": "k",
            "seq": 1,
            "source": "in_flight",
            "dest": "succeeded",
            "trigger": "succeed",
            "actor": "worker",
            "detail": {"result": 3},
            "context": {},
            "at": 7.0,
        }

    def test_bound_trigger_methods_and_suggestions(self) -> None:
        m = spec_of("outcome").machine()
        assert m.park(actor="worker") == "indeterminate"
        with pytest.raises(AttributeError, match="did you mean 'reclaim'"):
            m.reclam  # noqa: B018
        assert m.can("reclaim", actor="caller") and not m.can("reclaim", actor="worker")


class TestFiring:
    """The synchronous runtime fires a template's event through ``templates.fire``, not
    ``Event.trigger``: the same moves must run the same callbacks in the same order."""

    @staticmethod
    def logging_model(spec: MachineSpec, log: list[tuple[str, ...]]) -> type:
        def hook(what: str) -> Any:
            return lambda self, event: log.append(
                (what, event.event.name, event.kwargs["actor"], str(event.state.name))
            )

        methods = {kind: hook(kind) for kind in ("prepare", "before", "after", "finalize")}
        for name in spec.states:
            methods[f"on_enter_{name}"] = hook(f"enter {name}")
            methods[f"on_exit_{name}"] = hook(f"exit {name}")
        return type("Logged", (), methods)

    @pytest.mark.parametrize("name", MACHINES)
    def test_fire_runs_what_event_trigger_runs(
        self, name: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        spec = spec_of(name)
        hooks = Hooks(
            prepare_event=("prepare",),
            before_state_change=("before",),
            after_state_change=("after",),
            finalize_event=("finalize",),
        )

        def walk() -> list[object]:
            log: list[tuple[str, ...]] = []
            model = self.logging_model(spec, log)
            seen: list[object] = []
            for t in spec.transitions:
                m = spec.machine(model(), state=t.source, hooks=hooks, **admitted_context(spec, t))
                assert not m._template.has_queue  # fire skips the queue: there is none
                seen.append(m.trigger(t.trigger, actor=t.actors[0], detail={"t": t.trigger}))
                seen.append([(e.source, e.dest, e.trigger, e.actor, e.detail) for e in m.history])
            return [*seen, log]

        fast = walk()
        monkeypatch.setattr(
            "machines.runtime.entity.fire",
            lambda event, model, kwargs: event.trigger(model, **kwargs),
        )
        assert walk() == fast
