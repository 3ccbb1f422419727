"""Spec mutation of a user's own tests: ``machines mutate --spec-dir DIR -- COMMAND``.

The generic operators of ``operators`` mutate any definition, one change at a time; ``run``
hands each mutant to the user's test command and tells which ones the tests kill. A
mutant that survives is a change to the definitions the tests do not notice: a hole in
them. Where ``machines.mutation`` proves our own checks catch a catalog of breaks of the
bundled definitions, this judges the user's tests by their own definitions.
"""

from machines.mutation_user.operators import OPERATORS, Mutant, mutants_of
from machines.mutation_user.run import (
    DEFAULT_TIMEOUT,
    Outcome,
    baseline,
    check_command,
    eta,
    header,
    kill,
    plan,
    row,
    run,
    select,
    summary,
    table,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "OPERATORS",
    "Mutant",
    "Outcome",
    "baseline",
    "check_command",
    "eta",
    "header",
    "kill",
    "mutants_of",
    "plan",
    "row",
    "run",
    "select",
    "summary",
    "table",
]
