"""The contract between a property suite and the implementation it judges: its adapter.

A suite talks to the system under test only through an adapter, a class the user writes.
Every method of the adapter's base class is required, and a class that leaves one out
fails when it is *defined*, naming the method and what it must do (the way Hypothesis
refuses a broken rule at definition time), instead of being a silent no-op halfway
through a run. A duck-typed adapter (one that does not subclass the base) is checked the
same way when the suite builds it.
"""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Mapping
from typing import Any

from machines.errors import InvalidArgument, MachinesError
from machines.spec.jsonvalue import describe
from machines.spec.registry import GUARANTEE, INVARIANTS
from machines.spec.routing import suggest


class AdapterContractError(MachinesError, TypeError):
    """An adapter lacks a method its suite calls, or has one that is not callable, or one
    of its methods answers in a shape its contract does not allow (a history that is not a
    sequence of events, a state that is not a ``str``); or a suite class lacks what its
    suite needs (the conformance suite's ``spec``)."""


def required(cls: type) -> dict[str, str]:
    """The methods an adapter of ``cls``'s contract must have: name -> what it must do
    (the first paragraph of the contract's docstring for it)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for name, attribute in vars(klass).items():
            if getattr(attribute, "__isabstractmethod__", False):
                out[name] = _duty(attribute)
    return out


def _duty(method: Any) -> str:
    doc = inspect.getdoc(method) or "(no description)"
    return " ".join(doc.split("\n\n")[0].split())


def _missing(cls: type, contract: dict[str, str]) -> list[str]:
    """The contract's methods ``cls`` leaves abstract, or has as something not callable."""
    out = []
    for name in contract:
        attribute = getattr(cls, name, None)
        if not callable(attribute) or getattr(attribute, "__isabstractmethod__", False):
            out.append(name)
    return out


def _refusal(who: str, contract_name: str, missing: list[str], contract: dict[str, str]) -> str:
    lines = "\n".join(f"  - {name}: {contract[name]}" for name in missing)
    return (
        f"{who} does not implement {len(missing)} method(s) of {contract_name}, which its "
        f"suite calls; write them (each is required, even as an explicit no-op where the "
        f"contract allows one):\n{lines}"
    )


class Adapter(abc.ABC):  # noqa: B024 - the contracts below it declare the methods
    """Base of every suite's adapter contract. A subclass that is not marked
    ``abstract=True`` must implement every abstract method, or its ``class`` statement
    raises ``AdapterContractError``."""

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract or any(base is Adapter for base in cls.__bases__):
            return  # a contract itself, or a partial base the user declares abstract
        contract = required(cls)
        missing = _missing(cls, contract)
        if missing:
            contract_name = _contract_of(cls).__name__
            raise AdapterContractError(
                _refusal(f"adapter class {cls.__qualname__}", contract_name, missing, contract)
            )


def _contract_of(cls: type) -> type:
    """The contract ``cls`` implements: the class right below ``Adapter`` in its MRO."""
    for klass in cls.__mro__:
        if Adapter in klass.__bases__:
            return klass
    return cls


def check_adapter(adapter: object, contract: type[Adapter]) -> None:
    """Refuse (``AdapterContractError``) an adapter object, subclass of ``contract`` or not,
    that lacks one of its methods: for adapters that are duck-typed."""
    if not isinstance(contract, type) or not issubclass(contract, Adapter):
        raise InvalidArgument(
            f"check_adapter: contract must be an adapter class (such as ExactlyOnceAdapter), "
            f"not {describe(contract)}"
        )
    if isinstance(adapter, contract):
        return  # its class statement already checked it
    duties = required(contract)
    missing = [name for name in duties if not callable(getattr(adapter, name, None))]
    if missing:
        raise AdapterContractError(
            _refusal(f"adapter {type(adapter).__qualname__}", contract.__name__, missing, duties)
        )


def chosen_policies(suite: type, policies: object, known: frozenset[str]) -> frozenset[str]:
    """``policies`` as a suite class set them: a set of ids among the suite's own policies
    (``machines.spec.registry``), else ``AdapterContractError`` saying which are known. A
    guarantee cannot be left out: every correct implementation keeps it."""
    where = f"suite class {suite.__qualname__} sets policies to"
    if not isinstance(policies, frozenset | set | tuple | list) or not all(
        type(p) is str for p in policies
    ):
        raise AdapterContractError(
            f"{where} {policies!r:.80}, not a set of rule names; its policies: "
            f"{', '.join(sorted(known)) or 'none'}"
        )
    for policy in policies:
        if policy in known:
            continue
        found = INVARIANTS.get(policy)
        if found is not None and found.kind == GUARANTEE:
            raise AdapterContractError(
                f"{where} include '{policy}', a guarantee, not a policy: every correct "
                "implementation keeps it, and the suite always judges it"
            )
        raise AdapterContractError(
            f"{where} include '{policy}', which is none of its policies"
            f"{suggest(policy, sorted(known))}; its policies: "
            f"{', '.join(sorted(known)) or 'none'}"
        )
    return frozenset(policies)


SETTINGS: Mapping[str, frozenset[str]] = {
    "ExactlyOnceSuite": frozenset({"policies", "lease_seconds"}),
    "EffectLogSuite": frozenset({"policies", "minimise_seconds"}),
    "TransferSuite": frozenset({"policies", "follow_within", "minimise_seconds", "starts"}),
}
"""The settings each adapter suite reads from a subclass (the conformance suite checks its
own, by name, where it is defined)."""


def unknown_settings(suite: type, base: str) -> None:
    """``AdapterContractError`` for a class attribute of ``suite`` that looks like a setting
    its base ``base`` does not read: another suite's (``lease_seconds`` on the transfer
    suite), or a misspelt one of its own (``follow_with``), which would be silently
    ignored (outsider batch 46, a 19b). Other names are the user's own."""
    own = SETTINGS[base]
    every = frozenset().union(*SETTINGS.values())
    for name, value in vars(suite).items():
        if (
            name.startswith("_")
            or name in own
            or callable(value)
            or isinstance(value, classmethod | staticmethod | property)
        ):
            continue
        if name in every:
            raise AdapterContractError(
                f"suite class {suite.__qualname__} sets {name}, which {base} does not read "
                f"(another suite's setting); its settings: {', '.join(sorted(own))}"
            )
        if hint := suggest(name, own):
            raise AdapterContractError(
                f"suite class {suite.__qualname__} sets {name}, which {base} does not "
                f"read{hint}; its settings: {', '.join(sorted(own))}"
            )


def chosen_seconds(
    suite: type, name: str, seconds: object, most: float = math.inf, *, zero: bool = False
) -> float:
    """A duration a suite class declares (``name``), in seconds on the suite's clock: a
    finite number above zero (or zero, with ``zero``) and at most ``most``, else
    ``AdapterContractError`` where the class is defined. An infinite bound would turn the
    guarantee it sets into one that cannot fail."""
    least = 0.0
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    try:  # a float's subclass too (numpy.float64: outsider batch 46, a 19a)
        value = float(seconds) if number else math.nan  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):  # an int too large for a float
        value = math.inf
    if not math.isfinite(value) or value < least or (value == least and not zero):
        raise AdapterContractError(
            f"suite class {suite.__qualname__} sets {name} to {describe(seconds)}, not a "
            f"finite number of seconds {'of zero or more' if zero else 'above zero'}: "
            "declare it in seconds of the suite's clock"
        )
    if value > most:
        raise AdapterContractError(
            f"suite class {suite.__qualname__} sets {name} to {value:g}, more than the "
            f"suite's {most:g} s: have your adapter scale its clock (advance_clock) so that "
            f"it is at most {most:g} seconds of it"
        )
    return value


def expect(value: object, kind: type | tuple[type, ...], what: str) -> None:
    """``value`` is a ``kind``, or ``InvalidArgument`` naming ``what`` and what it got:
    every public helper of the suites checks what it is given before it uses it."""
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        value_ok = False
    else:
        value_ok = isinstance(value, kind)
    if not value_ok:
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise InvalidArgument(f"{what} must be a {names}, not {describe(value)}")
