"""The transfer engine's own errors: each says what was refused and whether anything was
written, so a caller knows whether to fix the input, retry, or look at the store."""

from __future__ import annotations

from collections.abc import Sequence

from machines.errors import MachinesError
from machines.spec.jsonvalue import describe


class TransferError(MachinesError):
    """Base class of the transfer engine's own errors."""


class PlanError(TransferError, ValueError):
    """A plan that cannot run; ``problems`` lists every problem, each naming its node.
    Raised before anything is written."""

    def __init__(self, request_id: object, problems: Sequence[str]) -> None:
        self.request_id = request_id
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            text = f"{len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"plan of request {describe(request_id)}: {text}")


class TransferConfigError(TransferError, ValueError):
    """The engine was built with an executor or callback it cannot use."""


class UnknownTransfer(TransferError, LookupError):
    """No request, or no node of that request, under this name."""


class TransferRefused(TransferError):
    """The engine refuses an operation the current situation does not allow (a signature
    for a request that stopped executing, a manual completion of a normal node, ...).
    Nothing was written."""


class CallbackFailed(TransferError):
    """A callback raised. The state change it announced is committed; every other
    callback of the same change was still called."""

    def __init__(self, request_id: str, failures: Sequence[tuple[str, BaseException]]) -> None:
        self.request_id = request_id
        self.failures = tuple(failures)
        names = ", ".join(f"{name} ({type(e).__name__}: {e})" for name, e in failures)
        super().__init__(f"request '{request_id}': callbacks raised after the commit: {names}")
