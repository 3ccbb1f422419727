"""Recorded runs of a suite with many rules: every step kept, replayed, and minimised.

Hypothesis shrinks a failing stateful run by trying smaller choices, which on the transfer
suite took up to 41 s for one bug; and its report of a rule that draws from ``st.data()``
cannot be replayed as printed. So the effect-log and transfer suites record each step they
take as a ``Step`` (the rule, its arguments, every value it drew), and ``run()``:

1. takes the suite's tour (its ``tour()``: deterministic runs, each a list of steps whose
   draws, where not given, take the first choice of each ``sampled_from``);
2. rolls the dice: Hypothesis' random runs under the active profile, without its shrinking;
3. reports a broken rule as the shortest run the suites' own ``ddmin`` finds within
   ``minimise_seconds``, each candidate replayed on a fresh implementation; the report
   lists its steps, which ``Suite.replay(steps)`` replays as they stand.

Replaying a step checks its rule's preconditions (read from the rule Hypothesis keeps on
the method) and the suite's invariants after it, as Hypothesis does; a replayed draw that
its strategy no longer offers, or a draw past the recorded ones outside a tour, makes the
candidate ``Diverged``, not a pass.
"""

from __future__ import annotations

import enum
import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from hypothesis import Phase
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine

from machines.errors import MachinesError, message_of
from machines.testing.contract import chosen_seconds
from machines.testing.minimise import MINIMISE_SECONDS, ddmin
from machines.testing.profiles import run_suite
from machines.testing.verdict import RuleBroken

F = TypeVar("F", bound=Callable[..., None])

SHRINKING = (Phase.shrink, Phase.explain)
"""Hypothesis' phases these suites replace by their own minimiser."""
_RULE = "hypothesis_stateful_rule"
_INITIALIZE = "hypothesis_stateful_initialize_rule"
_INVARIANT = "hypothesis_stateful_invariant"
"""Where Hypothesis keeps a rule (its preconditions), an initialize rule and an invariant
on the method."""


@dataclass(frozen=True)
class Step:
    """One step of a run: ``rule`` called with ``arguments``; ``draws``: the values it
    drew from its ``data`` argument, in order (None: the rule takes no ``data``)."""

    rule: str
    arguments: Mapping[str, object] = field(default_factory=dict)
    draws: tuple[object, ...] | None = None

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k!r}: {_code(v)}" for k, v in self.arguments.items())
        draws = "" if self.draws is None else f", draws={_code(self.draws)}"
        return f"Step({self.rule!r}, {{{arguments}}}{draws})"


def _code(value: object) -> str:
    """``value`` as Python that rebuilds it (an enum member or a class by its name)."""
    if isinstance(value, type):
        return value.__qualname__
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, tuple):
        inner = ", ".join(_code(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return f"[{', '.join(_code(v) for v in value)}]"
    if isinstance(value, (set, frozenset)):
        return "set()" if not value else f"{{{', '.join(sorted(_code(v) for v in value))}}}"
    if isinstance(value, dict):
        return f"{{{', '.join(f'{_code(k)}: {_code(v)}' for k, v in value.items())}}}"
    return repr(value)


class Diverged(MachinesError):
    """A replayed step could not be taken as recorded: its precondition no longer holds,
    or it drew what its strategy no longer offers, or more than was recorded."""


def first_choice(strategy: st.SearchStrategy[Any]) -> object:
    """The first value ``strategy`` offers (a ``sampled_from`` or ``just``): what a tour
    draws where its run gives no value."""
    elements = getattr(strategy, "elements", None)
    if not elements:
        raise Diverged(f"a tour cannot choose from {strategy!r}: give the draw in the step")
    return elements[0]


class _Draws:
    """Stands in for ``st.data()``: draws from ``data`` (a real run), or replays
    ``given`` (then, in a tour, the first choice), recording every value into ``seen``."""

    def __init__(self, data: Any, given: Sequence[object] = (), *, touring: bool = False):
        self.data, self.given, self.touring = data, list(given), touring
        self.seen: list[object] = []

    def draw(self, strategy: st.SearchStrategy[Any], label: object = None) -> Any:
        if self.data is not None:
            value = self.data.draw(strategy, label=label)
        elif self.given:
            value = self.given.pop(0)
            offered = getattr(strategy, "elements", None)
            if offered is not None and value not in offered:
                raise Diverged(f"{value!r} is no longer a choice of {label or strategy!r}")
        elif self.touring:
            value = first_choice(strategy)
        else:
            raise Diverged(f"the step draws more than was recorded ({label or strategy!r})")
        self.seen.append(value)
        return value


def recorded(method: F) -> F:
    """Record each call of a suite's rule as a ``Step`` (put it under ``@rule``)."""

    names = list(inspect.signature(method).parameters)[1:]

    @functools.wraps(method)
    def wrapper(self: RecordedSuite, *given: Any, **arguments: Any) -> None:
        arguments = {**dict(zip(names, given, strict=False)), **arguments}
        draws: _Draws | None = None
        if "data" in arguments:
            given = arguments.pop("data")
            draws = given if isinstance(given, _Draws) else _Draws(given)
        self.taken.append(_Taking(method.__name__, arguments, draws))
        if draws is None:
            method(self, **arguments)
        else:
            method(self, data=draws, **arguments)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class _Taking:
    """A step as it is taken: its draws grow while the rule runs."""

    rule: str
    arguments: Mapping[str, object]
    draws: _Draws | None

    def step(self) -> Step:
        draws = None if self.draws is None else tuple(self.draws.seen)
        return Step(self.rule, dict(self.arguments), draws)


class RecordedSuite(RuleBasedStateMachine):
    """A suite whose runs are recorded, replayable and minimised (see the module)."""

    minimise_seconds: ClassVar[float] = MINIMISE_SECONDS
    """How long ``run()`` spends shortening a report (the shortest run found by then)."""
    stray: ClassVar[str]
    """The rule an error that escapes a step breaks (a suite names its own): reported, as
    a broken rule is, with the shortest run that raises it (outsider batch 25: an engine
    that let the venue's ConnectionError out of ``step()`` was reported raw, with no
    steps to replay)."""
    last: ClassVar[list[_Taking] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Checks ``minimise_seconds`` where the class is defined (outsider batch 46, a 19c:
        a text there replaced a report with a raw ``TypeError``)."""
        super().__init_subclass__(**kwargs)
        cls.minimise_seconds = chosen_seconds(
            cls, "minimise_seconds", cls.minimise_seconds, zero=True
        )

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[_Taking] = []
        type(self).last = self.taken

    @classmethod
    def tour(cls) -> list[list[Step]]:
        """The runs ``run()`` takes before the dice; a suite overrides it."""
        return []

    @classmethod
    def replay(cls, steps: Sequence[Step]) -> None:
        """Take ``steps`` on a fresh implementation, judged after each as Hypothesis
        judges: a broken rule raises ``RuleBroken``, a step that cannot be taken as
        recorded ``Diverged``."""
        _take(cls, steps, touring=False)

    @classmethod
    def run(cls, settings: Settings | None = None) -> None:
        """The tour, then the random runs under the active profile (or ``settings``)
        without Hypothesis' shrinking; a broken rule is reported as the shortest run found.
        ``TestCase`` runs the random runs alone, shrunk by Hypothesis."""
        runs = cls.tour()
        for run in runs:
            try:
                _take(cls, run, touring=True)
            except RuleBroken as broken:
                found_by = f"the tour ({len(runs)} runs)"
                raise _minimised(cls, _recorded(cls), broken, found_by) from None
            except Diverged as error:
                raise MachinesError(f"{cls.__qualname__}.tour(): {error}") from None
        chosen = settings or Settings()
        phases = tuple(p for p in chosen.phases if p not in SHRINKING)
        try:
            run_suite(cls, Settings(chosen, phases=phases))
        except RuleBroken as broken:
            raise _minimised(cls, _recorded(cls), broken, "the random runs") from None
        except Exception as error:
            steps = _recorded(cls)
            escaped = _escaped(cls, steps[-1].rule if steps else "a step", error)
            raise _minimised(cls, steps, escaped, "the random runs") from error


def _recorded(suite: type[RecordedSuite]) -> list[Step]:
    return [taking.step() for taking in suite.last or []]


def _take(suite: type[RecordedSuite], steps: Sequence[Step], *, touring: bool) -> None:
    machine = suite()
    judges = [
        getattr(machine, name)
        for name in dir(suite)
        if getattr(getattr(suite, name, None), _INVARIANT, None) is not None
    ]
    try:
        for step in steps:
            method = getattr(suite, step.rule, None)
            rule = getattr(method, _RULE, None)
            if method is None:
                raise Diverged(f"{suite.__qualname__} has no rule {step.rule!r}")
            if rule is not None and not all(p(machine) for p in rule.preconditions):
                if touring:
                    return  # a tour's run goes as far as its steps can be taken
                raise Diverged(f"the precondition of {step.rule} does not hold")
            arguments = dict(step.arguments)
            if step.draws is not None:
                arguments["data"] = _Draws(None, step.draws, touring=touring)
            try:
                method(machine, **arguments)
                for judge in judges:
                    judge()
            except (RuleBroken, Diverged):
                raise
            except Exception as error:
                raise _escaped(suite, step.rule, error) from error
    finally:
        machine.teardown()


def _escaped(suite: type[RecordedSuite], rule: str, error: Exception) -> RuleBroken:
    """``error``, which escaped step ``rule`` (the implementation's, not a verdict), as the
    suite's ``stray`` rule broken."""
    return RuleBroken(
        suite.stray,
        f"{type(error).__name__} escaped the step {rule}: {message_of(error, 300)} (an error "
        "the adapter's contract does not name; catch it in the implementation, or translate "
        "it into one the contract names)",
    )


def _initializes(suite: type[RecordedSuite], step: Step) -> bool:
    """Whether ``step`` is one of the suite's ``@initialize`` rules: every run begins with
    them, so the minimiser keeps them (a run without its set-up is none Hypothesis makes)."""
    return getattr(getattr(suite, step.rule, None), _INITIALIZE, None) is not None


def _breaks(suite: type[RecordedSuite], steps: Sequence[Step]) -> str | None:
    """The rule ``steps`` break on a fresh implementation, or None (any other failure
    counts as None: it is not the failure being minimised)."""
    try:
        _take(suite, steps, touring=False)
    except RuleBroken as broken:
        return broken.rule
    except Exception:
        return None
    return None


def _minimised(
    suite: type[RecordedSuite], steps: list[Step], broken: RuleBroken, found_by: str
) -> RuleBroken:
    started = time.monotonic()
    if _breaks(suite, steps) != broken.rule:
        return RuleBroken(
            broken.rule,
            f"{broken}\n  found by {found_by}; its {len(steps)} steps do not break the rule "
            "again when replayed on a fresh implementation, so they are not minimised (does "
            "the implementation keep state between instances, or depend on time?)",
        )
    first = [step for step in steps if _initializes(suite, step)]
    rest = [step for step in steps if not _initializes(suite, step)]
    kept = ddmin(
        rest, lambda kept: _breaks(suite, [*first, *kept]) == broken.rule, suite.minimise_seconds
    )
    shortest = [*first, *kept]
    again = broken
    try:
        _take(suite, shortest, touring=False)
    except RuleBroken as error:
        again = error
    listed = "".join(f"\n      {step!r}," for step in shortest)
    return RuleBroken(
        broken.rule,
        f"{again}\n  found by {found_by}; the shortest run found has {len(shortest)} "
        f"step(s) (of {len(steps)} recorded; minimised in {time.monotonic() - started:.1f} s). "
        f"Replay it with {suite.__qualname__}.replay(steps), where\n  steps = [{listed}\n  ]",
    )
