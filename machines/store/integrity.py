"""A store verifies its own guards on every open: what the database holds is compared
with what the definitions require, so a guard dropped, disabled or replaced, a legal move
forged into the frozen table, or a version forged into the registry between two opens is
named before anything is read or written.

What each dialect compares (``integrity_sqlite``, ``integrity_postgres``):

- every trigger, function, table and index generated for each machine's current version
  and for the registry (``machines.store.ddl``): present, unchanged, enabled, and no other
  trigger on those tables;
- each machine's legal-moves table, row for row, with the moves of its definition;
- the registry: the version of each machine is the one its installed history guard
  writes; a higher version is a row added outside machines (the database refuses one
  since this release; an earlier store may hold one), unless it is genuine (its definition
  loads with its digest and its fingerprint is the schema generated for it): then the
  guards were put back to an older version's, and the store serves the genuine row.

A writable store refuses to open with ``StoreTampered``, naming each difference and the
one command that puts the guards back, ``machines repair`` (recorded in the store, so an
audit shows it). A read-only store (an audit) opens, and the audit reports each
difference as a breach of ``guards-intact``, then judges the data as it is.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from machines.errors import MachinesError, printable
from machines.spec import MachineSpec
from machines.spec.vocabulary import CONTEXT_COLUMN
from machines.store.ddl import LATEST_REPAIR_TIME, legal_moves
from machines.store.records import DefinitionVersion, StoreError
from machines.store.versions import stored_spec

MOVES_TABLE = "legal-moves table"
"""How a difference names a machine's legal-moves table."""
CATALOG_SHADOW = "pg_catalog."
"""How a difference names an object in PostgreSQL's ``pg_catalog`` carrying a store name:
a repair does not touch the system catalog."""


def repair_lines(rows: Iterable[Sequence[object]]) -> tuple[tuple[str, ...], list[Difference]]:
    """The recorded repairs ((at, person, found as JSON)) as lines for a person, and a
    difference for each row no repair wrote as it is: a time no repair was made at, a
    person on more than one line, or what it found not a JSON list of texts. The database
    refuses such a row since this release; a store may hold one from before, or from
    whoever can write its file, and it is named, never a crash."""
    lines, odd = [], []
    for number, (at, person, found) in enumerate(rows, 1):
        recorded = _recorded(at, person, found)
        if recorded is None:
            values = zip(_REPAIR, (at, person, found), strict=True)
            shown = ", ".join(f"{k}={_cut(v)}" for k, v in values)
            lines.append(f"a row of the record of repairs that no repair wrote: {shown}")
            odd.append(
                Difference(
                    None,
                    f"record of repairs, row {number}",
                    f"not as machines repair writes one ({shown}): written by hand",
                )
            )
        else:
            lines.append(recorded)
    return tuple(lines), odd


_REPAIR = ("at", "person", "found")


def _recorded(at: object, person: object, found: object) -> str | None:
    """The line of one repair, or None when the row is not one a repair writes."""
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < LATEST_REPAIR_TIME:
        return None
    if not isinstance(person, str) or not person.strip() or not person.isprintable():
        return None
    try:
        items = json.loads(found) if isinstance(found, str) else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    return f"guards repaired {when} by {person}: {'; '.join(items)}"


def _cut(value: object, limit: int = 200) -> str:
    """``value`` as Python writes it (every control character escaped), cut to ``limit``."""
    text = repr(value[: limit + 1] if isinstance(value, str | bytes) else value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


@dataclass(frozen=True)
class Difference:
    """One way the database differs from what the definitions require: ``where`` names
    the object (a trigger, a function, a table, the registry), ``what`` says how."""

    machine: str | None  # None: the store's own (registry, repairs, settings)
    where: str
    what: str
    forged_version: tuple[str, int] | None = None
    """A registry row no migration added: (machine, version)."""

    def describe(self) -> str:
        owner = f"machine '{self.machine}'" if self.machine else "the store"
        return f"{owner}: {self.where}: {self.what}"


@dataclass(frozen=True)
class GuardsReport:
    """What a store opened read-only found of its guards (``tampering``), the repairs
    recorded in it (``repairs``, as lines), and the rows of that record no repair wrote
    (``forged_repairs``: an audit names them; they say nothing of the guards as they are
    now, so they do not stop a command that trusts the guards)."""

    tampering: tuple[Difference, ...] = ()
    repairs: tuple[str, ...] = ()
    forged_repairs: tuple[Difference, ...] = ()


def guards_report(store: object) -> GuardsReport:
    """The ``GuardsReport`` of ``store``; a store without guards of its own
    (``memory://``, a store of your own) reports none."""
    return GuardsReport(
        tuple(getattr(store, "tampering", ())),
        tuple(getattr(store, "repairs", ())),
        tuple(getattr(store, "forged_repairs", ())),
    )


class StoreTampered(StoreError):
    """The store's guards are not the ones machines installed (a trigger dropped, disabled
    or replaced, a forged legal move, a registry row added by hand); nothing was written.
    ``differences`` lists each; run ``machines repair`` to put them back (recorded), then
    ``machines audit --from-store`` to judge the data written meanwhile."""

    def __init__(self, message: str, differences: Sequence[Difference]) -> None:
        super().__init__(message)
        self.differences = tuple(differences)


def repair_command(where: str) -> str:
    return f"machines repair '{where}' --spec-dir DIR"


def tampered(where: str, differences: Sequence[Difference], shown: int = 5) -> StoreTampered:
    listed = printable("; ".join(d.describe() for d in differences[:shown]))
    more = f"; and {len(differences) - shown} more" if len(differences) > shown else ""
    return StoreTampered(
        f"{where}: the store's guards are not the ones machines installed ({listed}{more}); "
        f"nothing was read or written. Put them back with {repair_command(where)} (the "
        "repair is recorded; what it cannot put back, such as a table's columns, an "
        "object's owner, another role's right to create in the schema or its functions, a "
        "role's grant of TRIGGER on a table or UPDATE on a sequence, it names for you to "
        "undo by hand first), then judge the data written meanwhile with "
        f"machines audit --from-store '{where}'",
        differences,
    )


_VERSION = re.compile(r"definition_version IS (?:NOT|DISTINCT FROM) (\d+) OR")


def installed_version(history_guard: str | None) -> int | None:
    """The definition version an installed history guard writes (None: no guard, or one
    that names no version)."""
    found = _VERSION.search(history_guard or "")
    return int(found.group(1)) if found else None


def versions_served(
    specs: Mapping[str, MachineSpec],
    versions_of: Callable[[str], Sequence[DefinitionVersion]],
    guard_of: Callable[[str], str | None],
    fingerprint: Callable[[MachineSpec, int], str],
) -> tuple[dict[str, DefinitionVersion | None], list[Difference]]:
    """Each machine's version as its installed history guard (``guard_of``: its text)
    says, unless the registry (``versions_of``) holds a genuine later one, and the
    registry rows that disagree with it."""
    served: dict[str, DefinitionVersion | None] = {}
    out: list[Difference] = []
    for machine in specs:

        def genuine(version: DefinitionVersion) -> bool:
            return is_genuine(version, specs, fingerprint)

        served[machine], wrong = registry_differences(
            machine, versions_of(machine), installed_version(guard_of(machine)), genuine
        )
        out += wrong
    return served, out


def is_genuine(
    version: DefinitionVersion,
    nodes: Mapping[str, MachineSpec],
    fingerprint: Callable[[MachineSpec, int], str],
) -> bool:
    """Whether a registry row is one a migration wrote: its definition loads with the
    digest recorded with it, and its fingerprint is the schema generated for it."""
    try:
        spec = stored_spec("the registry", version, nodes)
    except MachinesError:
        return False
    return version.fingerprint == fingerprint(spec, version.version)


def registry_differences(
    machine: str,
    versions: Sequence[DefinitionVersion],
    installed: int | None,
    genuine: Callable[[DefinitionVersion], bool],
) -> tuple[DefinitionVersion | None, list[Difference]]:
    """The version the store serves for ``machine`` and the registry rows that disagree
    with its installed history guard (which writes version ``installed``).

    A row above ``installed`` that ``genuine`` vouches for was written by a migration: the
    guards were put back to an older version's, and the store serves the newest such row
    (a repair reinstalls its guards; the row is never removed). Any other row above it was
    added outside machines (``forged_version``: a repair removes it)."""
    if not versions:
        return None, []
    if installed is None:
        return versions[-1], []  # the guard itself is missing: the object check names it
    above = [v for v in versions if v.version > installed]
    newest = next((v for v in reversed(above) if genuine(v)), None)
    served = newest or next((v for v in versions if v.version == installed), None)
    out = []
    if newest is not None:
        out.append(
            Difference(
                None,
                f"machine {machine}",
                f"its installed guards are those of version {installed}, but the store was "
                f"migrated to version {newest.version} (its registry row is genuine): the "
                "guards were replaced by an older version's",
            )
        )
    for v in above:
        if newest is not None and v.version <= newest.version:
            if not genuine(v):
                out.append(
                    Difference(
                        None,
                        f"row {v.machine} version {v.version}",
                        "does not match its definition (changed outside machines)",
                    )
                )
            continue
        out.append(
            Difference(
                None,
                f"row {v.machine} version {v.version}",
                f"added outside machines: the installed schema serves version {installed}",
                (v.machine, v.version),
            )
        )
    if served is None:
        out.append(
            Difference(
                None,
                f"machine {machine}",
                f"no row for version {installed}, which its installed schema serves",
            )
        )
        return versions[-1], out
    return served, out


def moves_differences(
    spec: MachineSpec, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> list[Difference]:
    """The legal-moves table against the definition: the same columns, the same rows."""
    where = MOVES_TABLE
    variables = [CONTEXT_COLUMN + v for v in spec.context]
    expected_columns = ["source", "dest", "trigger", "actor", *variables]
    if list(columns) != expected_columns:
        return [
            Difference(
                spec.name,
                where,
                f"columns {', '.join(columns)}, not {', '.join(expected_columns)}",
            )
        ]
    expected: Counter[tuple[object, ...]] = Counter(
        (s, d, t, a, *values) for s, d, t, a, values in legal_moves(spec)
    )
    found = Counter(tuple(row) for row in rows)
    out = []
    for row in sorted(found - expected, key=repr)[:5]:
        out.append(Difference(spec.name, where, f"a move the definition lacks: {_move(row)}"))
    for row in sorted(expected - found, key=repr)[:5]:
        out.append(Difference(spec.name, where, f"a legal move is missing: {_move(row)}"))
    return out


def _move(row: Sequence[object]) -> str:
    source, dest, trigger, actor, *values = row
    guard = f" when {values}" if any(v is not None for v in values) else ""
    return f"{source} --{trigger} ({actor})--> {dest}{guard}"


def object_differences(
    machine: str | None,
    expected: Mapping[str, tuple[str, object]],
    found: Mapping[str, tuple[str, object]],
) -> list[Difference]:
    """Objects by name, each (kind, definition): missing, changed, or not generated."""
    out = []
    for name, (kind, definition) in expected.items():
        if name not in found:
            out.append(Difference(machine, f"{kind} {name}", "missing (dropped?)"))
        elif found[name] != (kind, definition):
            disabled = found[name][0] == f"disabled {kind}"
            what = "disabled" if disabled else "changed from the one generated"
            out.append(Difference(machine, f"{kind} {name}", what))
    for name, (kind, _) in found.items():
        if name not in expected:
            out.append(Difference(machine, f"{kind} {name}", "not generated by machines"))
    return out
