"""Versioned definitions in a store: what a database records of each definition it has
served, and how a store opened with a definition decides whether its tables fit.

A database's registry (``machines.store.ddl.REGISTRY``) holds every version of every
machine's definition it has served, numbered 1, 2, 3, ... per machine, each with its
semantic digest (``machines.spec.canonical``), the fingerprint of the schema generated for
it and its loadable text; every history event names the version under which it was made.
A store opened with a definition compares it with the machine's current (highest)
version:

- no version: the machine is new here, and its tables are made as version 1;
- the same semantic digest and schema: the store opens (a change of wording alone needs
  no migration, and the stored text keeps the wording it was installed with);
- another semantic digest: ``DefinitionChanged``, naming what changed and the
  ``machines migrate`` command to run;
- the same digest but another generated schema (a release of machines that generates it
  differently): ``SchemaOutdated``, and the same command reinstalls it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence

from machines.errors import MachinesError
from machines.spec import MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.diff import KINDS, REWRITTEN, WORDING, diff_specs
from machines.spec.loader import read_definition_text
from machines.store.ddl import LEGACY_REGISTRY, REGISTRY
from machines.store.records import DefinitionVersion, StoreError

VERSION_COLUMNS = "machine, version, digest, fingerprint, definition, installed_at"

__all__ = ["DefinitionChanged", "DefinitionVersion", "SchemaOutdated"]


class DefinitionChanged(StoreError):
    """The store holds a machine's tables for another version of its definition than the
    one given (their semantic digests differ); nothing was written. Run the migration the
    message names, or open the store with the definition it serves."""


class SchemaOutdated(StoreError):
    """The store's tables of a machine were generated, for this very definition, by a
    release of machines that writes its schema differently; nothing was written. Run the
    migration the message names to reinstall them."""


def migrate_command(where: str) -> str:
    return f"machines migrate '{where}' --spec-dir DIR (machines diff shows the changes)"


def summary(old: MachineSpec, new: MachineSpec, shown: int = 3) -> str:
    """What changed from ``old`` to ``new``, in a line: the count of each kind of change
    (``machines.spec.diff``) and the first few breaking or widening ones; with none, that
    it allows the same, written otherwise (``REWRITTEN``)."""
    changes = [c for c in diff_specs(old, new) if c.kind != WORDING]
    counts = ", ".join(f"{sum(c.kind == kind for c in changes)} {kind}" for kind in KINDS[:2])
    first = "; ".join(c.message for c in changes[:shown])
    more = f"; and {len(changes) - shown} more" if len(changes) > shown else ""
    return f"{counts} ({first}{more})" if changes else f"{counts}: {REWRITTEN}"


def fits(
    where: str,
    spec: MachineSpec,
    current: DefinitionVersion | None,
    fingerprint: Callable[[MachineSpec, int], str],
    nodes: Mapping[str, MachineSpec],
    served_before: Callable[[], Sequence[DefinitionVersion]] = tuple,
) -> None:
    """Unless the machine of ``spec`` has no version here yet, its current version must
    be this definition under this schema, or ``DefinitionChanged`` / ``SchemaOutdated``
    says what to do. ``served_before``: every version the store has served, read only
    when the digests differ, so that a definition the store was migrated away from is
    named as the old one (outsider batch 45, b 38: "migrate the store first", to a desk
    started with the definitions of before the migration)."""
    if current is None:
        return
    digest = semantic_digest(spec)
    if current.digest == digest:
        pass
    elif was := [v.version for v in served_before() if v.digest == digest and v != current]:
        raise DefinitionChanged(
            f"{where}: machine '{spec.name}' is stored at definition version "
            f"{current.version}; the definition given is its version {was[-1]}, which the "
            f"store was migrated away from{_changes(where, current, spec, nodes, since=True)}; "
            "open it with the definitions it serves now, as your service's are since the "
            "migration; nothing was written"
        )
    else:
        what = _changes(where, current, spec, nodes, since=False)
        raise DefinitionChanged(
            f"{where}: machine '{spec.name}' is stored at definition version "
            f"{current.version} (digest {current.digest}), but the definition given has "
            f"digest {digest}{what}; migrate the store first: {migrate_command(where)}"
        )
    if current.fingerprint != fingerprint(spec, current.version):
        raise SchemaOutdated(
            f"{where}: the tables of machine '{spec.name}' (definition version "
            f"{current.version}) were generated by another release of machines; reinstall "
            f"them: {migrate_command(where)}"
        )


def _changes(
    where: str,
    current: DefinitionVersion,
    spec: MachineSpec,
    nodes: Mapping[str, MachineSpec],
    *,
    since: bool,
) -> str:
    """What changed between ``spec`` and the stored ``current`` version, for a message:
    from ``spec`` to it (``since``, ``spec`` is older) or from it to ``spec``."""
    try:
        stored = stored_spec(where, current, nodes)
    except MachinesError:
        return ""  # a node-dependent definition: the digests still tell them apart
    old, new = (spec, stored) if since else (stored, spec)
    return f"; what changed{' since' if since else ''}: {summary(old, new)}"


def stored_spec(
    where: str, version: DefinitionVersion, nodes: Mapping[str, MachineSpec]
) -> MachineSpec:
    """The definition of ``version`` loaded from its stored text (a derivation's node
    machine taken from ``nodes``), which must still have the digest recorded with it."""
    try:
        spec = read_definition_text(
            version.definition, version.machine, f"{where} version {version.version}", nodes
        )
    except MachinesError as exc:
        raise StoreError(
            f"{where}: the stored definition of machine '{version.machine}' version "
            f"{version.version} does not load: {exc}"
        ) from exc
    if semantic_digest(spec) != version.digest:
        raise StoreError(
            f"{where}: the stored definition of machine '{version.machine}' version "
            f"{version.version} does not have the digest recorded with it "
            f"({version.digest}); the registry was changed outside machines"
        )
    return spec


def legacy(where: str) -> StoreError:
    return StoreError(
        f"{where}: this database was made by a release of machines before versioned "
        f"definitions (it has a {LEGACY_REGISTRY} table and no {REGISTRY}); it cannot be "
        "migrated: audit it with that release, and start a new store"
    )


def no_registry(where: str) -> StoreError:
    return StoreError(
        f"{where}: no machines tables (a new or foreign database?); a read-only store "
        "creates nothing, so there is nothing to read"
    )


def no_store(where: str, machines: Sequence[str] = ()) -> StoreError:
    """A store opened with ``create=False`` where there is none, or that lacks the tables
    of ``machines``: such an open makes nothing."""
    if machines:
        return StoreError(
            f"{where}: the store has no tables for {', '.join(map(repr, machines))}, and this "
            "store is opened only to act on what is there (create=False), making nothing: "
            "check the URL and the definitions given (the project's, or --spec-dir), or "
            "let your service open the store with them first"
        )
    return StoreError(
        f"{where}: no store is there (no machines tables), and this store is opened only "
        "if it exists (create=False): check the URL, or let your service make the store "
        "first"
    )


def no_tables(where: str, machine: str) -> StoreError:
    return StoreError(
        f"{where}: no tables for machine '{machine}'; a read-only store creates nothing, "
        "so there is nothing to read"
    )


def load_versions(
    where: str,
    versions: Mapping[str, Sequence[DefinitionVersion]],
    wanted: Collection[str] | None = None,
) -> dict[tuple[str, int], MachineSpec]:
    """Each stored version loaded (``stored_spec``), by (machine, version). A derivation's
    node machine is the version of it that was in force when the version naming it was
    installed (a migration installs them together), else the oldest one there is. Given
    ``wanted``, only the versions of those machines are loaded (each costs a parse of its
    text), and of the node machines their derivations name."""
    if wanted is not None:
        keep = set(wanted) | {
            node
            for machine in wanted
            for version in versions.get(machine, ())
            if (node := node_machine_of(version)) is not None
        }
        versions = {m: v for m, v in versions.items() if m in keep}
    out: dict[tuple[str, int], MachineSpec] = {}
    later: list[DefinitionVersion] = []
    for machine_versions in versions.values():
        for version in machine_versions:
            if node_machine_of(version) is None:
                out[(version.machine, version.version)] = stored_spec(where, version, {})
            else:
                later.append(version)
    for version in later:
        node = node_machine_of(version)
        candidates = [v for v in versions.get(node or "", ()) if (v.machine, v.version) in out]
        before = [v for v in candidates if v.installed_at <= version.installed_at]
        chosen = (before or candidates)[-1:] if candidates else []
        nodes = {v.machine: out[(v.machine, v.version)] for v in chosen}
        out[(version.machine, version.version)] = stored_spec(where, version, nodes)
    return out


def node_machine_of(version: DefinitionVersion) -> str | None:
    """The node machine a stored definition's derivation names, if it has one."""
    try:
        document = json.loads(version.definition)
        nodes = document.get("derivation", {}).get("nodes")
    except (ValueError, AttributeError):
        return None  # stored_spec reports the text as it fails to load
    return nodes if isinstance(nodes, str) else None
