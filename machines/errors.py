"""The typed errors of the package.

Every failure a user can cause is one of these, so a service can catch ``MachinesError`` at
its edge and never see a bare traceback from YAML, jsonschema or ``transitions``. Messages
name the file, machine, state or trigger involved and say what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

DISTRIBUTION = "effect-machines"
"""The name this package is published under on the package index (the name ``machines``
there is another project's); the import name is ``machines``."""


def install_command(extra: str) -> str:
    """The command that installs this package with its optional ``extra``, for a message
    that tells the user how to get what is missing."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MachinesError(Exception):
    """Base class of every error this package raises on purpose."""


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` as a message says them: "1 entity", "2 entities", "0 events"
    (``plural`` where adding an s is wrong)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def shown_time(value: object) -> str:
    """A time read from a store, for a message: seconds to three places, or, for what is
    not a time a float can hold (a row changed outside machines), the value as written."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return f"{float(value):.3f}"
        except OverflowError:
            pass
    text = repr(value)
    return printable(text if len(text) <= 80 else f"{text[:77]}...")


def message_of(error: BaseException, limit: int = 500) -> str:
    """``str(error)`` for a message or a stored record (``storable_text``), and never an
    exception of its own: an error's ``__str__`` is user code, and may raise or be huge."""
    try:
        text = str(error)
    except Exception:
        return f"(the message of this {type(error).__name__} could not be read)"
    return storable_text(text, limit)


def storable_text(text: str, limit: int = 500) -> str:
    """``text`` cut to ``limit`` characters, with NUL and lone surrogates escaped, so that
    any store can keep it and any terminal can show it."""
    if len(text) > limit:
        text = f"{text[: limit - 3]}..."
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def printable(line: str, *, lines: bool = False) -> str:
    """``line`` as a terminal shows it safely: every character that is not printable (an
    escape sequence's ESC, a carriage return, a line break, a right-to-left override)
    written as its Python escape; with ``lines``, line breaks are kept (a message of
    several lines). Text a report prints from a store (a key, a person's name, a recorded
    repair, an object's name in a difference) is anyone's with the right to write there."""
    if line.isprintable():
        return line
    kept = "\n" if lines else ""
    return "".join(ch if ch.isprintable() or ch in kept else ascii(ch)[1:-1] for ch in line)


class InvalidArgument(MachinesError, ValueError):
    """An argument of a public call is not what the call takes (its type, range or form).
    Raised before anything is done, so nothing changed."""


class SpecError(MachinesError):
    """A definition cannot be used: unreadable, malformed, or inconsistent.

    ``problems`` holds one line per problem found; the message lists them all so that a
    broken file is fixed in one pass instead of one error at a time.
    """

    def __init__(self, path: Path | str | None, problems: Sequence[str]) -> None:
        self.path = Path(path) if path is not None else None
        self.problems = tuple(problems)
        where = f"{self.path}: " if self.path is not None else ""
        if len(self.problems) == 1:
            text = f"{where}{self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"{where}{len(self.problems)} problems:\n{lines}"
        super().__init__(text)


class SpecUnreadable(SpecError):
    """The input could not be read at all: a missing file, an I/O error, or YAML that does
    not parse. ``machines check`` exits 2 for these and 1 for every other ``SpecError``."""


class SpecViolation(SpecError):
    """The definition parses but breaks one of its own structural rules or forbidden moves.

    Raised by ``machines.load`` so that a spec which fails ``machines check`` can never be
    put to use by accident.
    """


class UnknownName(MachinesError, ValueError):
    """A name that is not defined: a state, actor or trigger of a machine, a system or a
    scope of the explorer."""


class ContextError(MachinesError, ValueError):
    """A guard context was missing, unknown, or holds a value the machine refuses."""


class InvalidStateTransition(MachinesError):
    """A move the definition does not allow. The entity's state is unchanged.

    The message names the machine, the current state, the trigger (or destination) and,
    when the definition records one, the reason the move is forbidden.
    """

    def __init__(
        self,
        machine: str,
        state: str,
        *,
        trigger: str | None = None,
        dest: str | None = None,
        actor: str | None = None,
        reason: str,
    ) -> None:
        self.machine = machine
        self.state = state
        self.trigger = trigger
        self.dest = dest
        self.actor = actor
        self.reason = reason
        move = f"trigger '{trigger}'" if trigger is not None else f"move to '{dest}'"
        by = f" by actor '{actor}'" if actor is not None else ""
        super().__init__(f"{machine}: {move}{by} refused in state '{state}': {reason}")


class InvalidNodeState(MachinesError, ValueError):
    """A node handed to the request derivation is not in a state the node machine defines."""


class EffectError(MachinesError):
    """How an effect under an idempotency key stands, when that is not a result."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class EffectFailed(EffectError):
    """The effect provably did not happen; the recorded error is replayed to every caller."""

    def __init__(self, key: str, error_type: str, error_message: str) -> None:
        self.error_type = error_type
        self.error_message = error_message
        super().__init__(key, f"effect '{key}' failed: {error_type}: {error_message}")


class EffectIndeterminate(EffectError):
    """Nobody can tell whether the effect happened. It is parked: nothing runs it again
    until a caller reclaims it or a person decides at the gate."""

    def __init__(self, key: str, reason: str, *, gate_open: bool = False) -> None:
        self.reason = reason
        self.gate_open = gate_open
        hint = (
            "a person decides at the gate (decide)"
            if gate_open
            else "reclaim it if repeating is safe, or decide it"
        )
        super().__init__(key, f"effect '{key}' is indeterminate ({reason}); {hint}")


class EffectInProgress(EffectError):
    """Another worker holds a live lease on the key; try again later."""

    def __init__(self, key: str, owner: str, lease_until: float) -> None:
        self.owner = owner
        self.lease_until = lease_until
        super().__init__(
            key, f"effect '{key}' is running under {owner}'s lease until {shown_time(lease_until)}"
        )
