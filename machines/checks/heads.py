"""Kept heads: a store's histories chained and hashed, kept outside the database, and
checked later, so that a rewrite the database accepted (by its owner, with the guards
off and back on) is found even where every event still looks legal.

Each entity's history is a hash chain: the first link hashes the entity itself (its
machine, key, context and scope), and each event's link hashes the link before it and
the event as stored (sequence, source, destination, trigger, actor, detail, context,
time, definition version). The entity's *head* is the link of its last event, with its
move count, the row's version and a digest of its data at that version; for an entity in
a terminal state also a digest of its data without the fields that state lets change
(its annotations), which never changes.

``machines audit --from-store URL --save-heads FILE`` writes every entity's head (keep
the file, or its digest, where the database's owner cannot write); ``--check-heads FILE``
later recomputes each kept entity's chain over its first events and reports, as breaches
of ``history-kept``, an entity gone, events gone, any event at or before the kept head
edited, inserted, deleted or reordered, finished data changed, a row's version gone
back, and data changed at the same version (no write). Events after the head
are new moves and are judged by the audit as usual.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machines.checks.breaches import Breach
from machines.checks.snapshots import Entity, Snapshot
from machines.errors import MachinesError
from machines.runtime.history import TransitionEvent
from machines.spec import MachineSpec
from machines.store.records import DefinitionVersion

FORMAT = "machines-heads/1"
"""What a heads file says it is (a later format gets a new number)."""

INVARIANT = "history-kept"

RECORD_OF_REPAIRS = ("", "repairs")
"""Where the heads keep the store's record of repairs (no machine is named ""): its count
and the chain of its lines, so that a record dropped or emptied is found too."""


class HeadsError(MachinesError):
    """A heads file that cannot be read, written or trusted: named, with what to do."""


@dataclass(frozen=True)
class Head:
    """One entity's chain at the moment it was kept."""

    moves: int
    link: str
    state: str
    finished: str | None = None
    """A digest of the data of an entity in a terminal state, without ``annotations``."""
    annotations: tuple[str, ...] = ()
    version: int | None = None
    """The row's version (every write raises it by one); None outside a store."""
    data: str | None = None
    """A digest of the row's whole data at that version."""
    origin: str | None = None
    """A digest of the row's creation order and time, which never change."""


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def first_link(entity: Entity) -> str:
    return _hash(
        _canonical([entity.machine, entity.key, dict(entity.context), entity.scope]),
    )


def next_link(previous: str, event: TransitionEvent, version: int | None) -> str:
    detail = None if event.detail is None else dict(event.detail)
    fields = [event.seq, event.source, event.dest, event.trigger, event.actor, detail]
    return _hash(
        previous.encode(),
        _canonical([*fields, dict(event.context), event.at, version]),
    )


def chain(entity: Entity, versions: Sequence[int] = (), upto: int | None = None) -> str:
    """The link of ``entity``'s first ``upto`` events (all of them by default)."""
    link = first_link(entity)
    events = entity.history if upto is None else entity.history[:upto]
    for i, event in enumerate(events):
        link = next_link(link, event, versions[i] if i < len(versions) else None)
    return link


def _origin(entity: Entity) -> str | None:
    row = entity.row
    return None if row is None else _hash(_canonical([row.ordinal, row.created_at]))


def _finished(data: Mapping[str, Any], annotations: Iterable[str]) -> str:
    kept = set(annotations)
    return _hash(_canonical({k: v for k, v in data.items() if k not in kept}))


DEFINITIONS = ""
"""The machine name under which the heads keep each machine's registry rows (key
``definitions MACHINE``): its versions only ever grow, and none is ever rewritten."""


def _definitions(rows: Sequence[DefinitionVersion]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        text = hashlib.sha256(row.definition.encode("utf-8", "surrogatepass")).hexdigest()
        line = f"{row.version} {row.digest} {row.fingerprint} {text} {row.installed_at!r}"
        out.setdefault((DEFINITIONS, f"definitions {row.machine}"), []).append(line)
    return out


def _repairs_link(lines: Sequence[str]) -> str:
    link = _hash(b"repairs")
    for line in lines:
        link = _hash(link.encode(), line.encode())
    return link


def heads(
    specs: Mapping[str, MachineSpec],
    snap: Snapshot,
    repairs: Sequence[str] = (),
    registry: Sequence[DefinitionVersion] = (),
) -> dict[tuple[str, str], Head]:
    """Every entity's head in ``snap``, the record of ``repairs`` (its lines) and each
    machine's rows of the ``registry``."""
    out = {RECORD_OF_REPAIRS: Head(len(repairs), _repairs_link(repairs), "repairs")}
    for place, lines in _definitions(registry).items():
        out[place] = Head(len(lines), _repairs_link(lines), "definitions")
    for (machine, key), entity in snap.entities.items():
        versions = snap.event_versions.get((machine, key), ())
        state = specs[machine].states.get(entity.state) if machine in specs else None
        finished = annotations = None
        if state is not None and state.terminal:
            annotations = tuple(state.annotations)
            finished = _finished(entity.data, annotations)
        out[(machine, key)] = Head(
            len(entity.history),
            chain(entity, versions),
            entity.state,
            finished,
            annotations or (),
            entity.version,
            _finished(entity.data, ()),
            _origin(entity),
        )
    return out


def check(
    machines: Collection[str],
    snap: Snapshot,
    kept: Mapping[tuple[str, str], Head],
    repairs: Sequence[str] = (),
    registry: Sequence[DefinitionVersion] = (),
) -> list[Breach]:
    """What changed in ``snap`` (of ``machines``) since ``kept`` was taken, each a
    ``history-kept`` breach naming the entity and, as near as the chain can tell, the
    place. Heads of a machine not judged are one breach: they cannot be checked."""
    out = []
    record = kept.get(RECORD_OF_REPAIRS)
    if record is not None and (
        len(repairs) < record.moves or _repairs_link(repairs[: record.moves]) != record.link
    ):
        out.append(
            Breach(
                INVARIANT,
                "store",
                "repairs",
                f"the record of repairs held {record.moves} when kept and now holds "
                f"{len(repairs)}, or they differ: it was dropped, emptied or rewritten",
            )
        )
    now = _definitions(registry)
    for place, head in sorted(kept.items()):
        if place[0] != DEFINITIONS or place == RECORD_OF_REPAIRS:
            continue
        lines = now.get(place, [])
        if len(lines) < head.moves or _repairs_link(lines[: head.moves]) != head.link:
            out.append(
                Breach(
                    INVARIANT,
                    "store",
                    place[1],
                    f"the registry held {head.moves} versions of it when kept and now holds "
                    f"{len(lines)}, or one of them changed: a definition was rewritten",
                )
            )
    kept = {k: v for k, v in kept.items() if k[0] != DEFINITIONS}
    unjudged = Counter(m for m, _ in kept if m not in machines)
    for machine, count in sorted(unjudged.items()):
        out.append(
            Breach(
                INVARIANT,
                machine,
                "*",
                f"the kept heads hold {count} entities of machine '{machine}', whose "
                "definition was not given: give it to check them",
            )
        )
    for (machine, key), head in sorted(kept.items()):
        if machine in unjudged:
            continue
        if (machine, key) in snap.unreadable:  # the audit names it (append-only-history)
            message = (
                f"was kept with {head.moves} moves and cannot be read now, so its kept head "
                "could not be checked"
            )
            out.append(Breach(INVARIANT, machine, key, message))
            continue
        entity = snap.entities.get((machine, key))
        versions = snap.event_versions.get((machine, key), ())
        for message, events in _changes(entity, versions, head):
            out.append(Breach(INVARIANT, machine, key, message, events))
    return out


def _changes(
    entity: Entity | None, versions: Sequence[int], head: Head
) -> Iterator[tuple[str, tuple[TransitionEvent, ...]]]:
    if entity is None:
        yield f"was kept with {head.moves} moves and is gone: deleted outside machines", ()
        return
    moves = len(entity.history)
    if moves < head.moves:
        yield (
            f"has {moves} events, the kept head {head.moves}: events were deleted",
            entity.history,
        )
        return
    if chain(entity, versions, head.moves) != head.link:
        yield (
            f"its first {head.moves} events are not the ones kept: an event at or before "
            f"#{head.moves} was edited, inserted, deleted or reordered",
            entity.history[: head.moves],
        )
    if head.origin is not None and _origin(entity) not in (None, head.origin):
        yield "its creation order or time changed since it was kept (they never change)", ()
    if head.version is not None and entity.version is not None:
        if entity.version < head.version:
            yield (
                f"its version went back from {head.version} to {entity.version}: the row "
                "was rewritten",
                (),
            )
        elif entity.version == head.version and _finished(entity.data, ()) != head.data:
            yield (
                f"its data changed without a write (its version is still {head.version})",
                (),
            )
    if head.finished is None:
        return
    if entity.state != head.state or moves != head.moves:
        yield (
            f"was finished in {head.state} with {head.moves} moves when kept, and is now in "
            f"{entity.state} with {moves}: a finished entity never moves",
            entity.history[head.moves :],
        )
    elif _finished(entity.data, head.annotations) != head.finished:
        kept = ", ".join(head.annotations) or "no field"
        yield (
            f"its data changed since it was kept finished in {head.state} (only {kept} may "
            "change there)",
            (),
        )


# -- the file ------------------------------------------------------------------------------


def _opening(kept_format: str) -> bytes:
    return b'{\n "format": ' + json.dumps(kept_format).encode()


def check_replaceable(path: Path) -> None:
    """``HeadsError`` unless ``path`` is free or holds heads this release wrote: saving
    replaces the file, and a path given by mistake (the store's own database file, say)
    would be lost. Checked before the audit starts, and again as the heads are saved. A
    FIFO, a device or a socket is refused before it is opened (opening a FIFO waits for a
    writer that never comes)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise HeadsError(f"{path}: cannot read what is there: {exc.strerror or exc}") from exc
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise HeadsError(
            f"{path}: is not a regular file (a FIFO, a device or a socket); --save-heads needs "
            "a path for a new file, or an earlier heads file"
        )
    try:
        with open(path, "rb") as handle:
            start = handle.read(len(_opening(FORMAT)))
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise HeadsError(f"{path}: is a folder; --save-heads needs a file path") from None
    except OSError as exc:
        raise HeadsError(f"{path}: cannot read what is there: {exc.strerror or exc}") from exc
    if start != _opening(FORMAT):
        raise HeadsError(
            f"{path}: exists and is not a heads file, and saving would replace it (is it the "
            "store itself?); give a new path, or remove the file first"
        )


def save(path: Path, kept: Mapping[tuple[str, str], Head]) -> str:
    """Write ``kept`` to ``path`` (atomically: a crash leaves the old file or the new one)
    and return the file's sha256, to be kept apart. Only a free path or an earlier heads
    file is replaced (``check_replaceable``)."""
    check_replaceable(path)
    document = {
        "format": FORMAT,
        "heads": [
            {"machine": m, "key": k, **_as_dict(head)} for (m, k), head in sorted(kept.items())
        ],
    }
    text = json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"
    temporary: Path | None = None
    try:  # a new file of its own (O_EXCL), never a name someone planted a link at
        descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        temporary = Path(name)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise HeadsError(f"{path}: cannot write the kept heads: {exc.strerror or exc}") from exc
    return hashlib.sha256(text).hexdigest()


def _as_dict(head: Head) -> dict[str, Any]:
    return {
        "moves": head.moves,
        "link": head.link,
        "state": head.state,
        "finished": head.finished,
        "annotations": list(head.annotations),
        "version": head.version,
        "data": head.data,
        "origin": head.origin,
    }


def load(path: Path) -> tuple[dict[tuple[str, str], Head], str]:
    """The heads kept in ``path`` and the sha256 of the very bytes they were read from, to
    compare with the one kept apart; ``HeadsError`` names what is wrong with the file. The
    file is read once: a digest read again later would be of whatever is there by then
    (outsider batch 38, a A4: a forged file was judged, the genuine one put back, and its
    digest printed)."""
    try:
        if path.exists() and not path.is_file():
            raise HeadsError(f"{path}: not a regular file; give the heads file kept earlier")
        text = path.read_bytes()
        document = json.loads(text)
    except OSError as exc:
        raise HeadsError(f"{path}: cannot read the kept heads: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise HeadsError(f"{path}: not a heads file (not JSON: {exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise HeadsError(
            f"{path}: not a heads file of this release (its format must be {FORMAT!r}); "
            "write one with machines audit --from-store URL --save-heads FILE"
        )
    entries = document.get("heads")
    if not isinstance(entries, list):
        raise HeadsError(f"{path}: 'heads' must be a list")
    out: dict[tuple[str, str], Head] = {}
    for number, entry in enumerate(entries, 1):
        head = _head(entry)
        if head is None or not isinstance(entry, dict):
            raise HeadsError(f"{path}: head {number} is not one machines writes")
        place = (entry["machine"], entry["key"])
        if place in out:
            raise HeadsError(f"{path}: head {number} names {place[0]} '{place[1]}' again")
        out[place] = head
    return out, hashlib.sha256(text).hexdigest()


def _head(entry: object) -> Head | None:
    if not isinstance(entry, dict):
        return None
    texts = ("machine", "key", "link", "state")
    if not all(type(entry.get(f)) is str for f in texts):
        return None
    moves, finished, annotations = (
        entry.get("moves"),
        entry.get("finished"),
        entry.get("annotations"),
    )
    if type(moves) is not int or moves < 0 or not (finished is None or type(finished) is str):
        return None
    if not isinstance(annotations, list) or not all(type(a) is str for a in annotations):
        return None
    version, data, origin = entry.get("version"), entry.get("data"), entry.get("origin")
    if not (version is None or (type(version) is int and version >= 1)):
        return None
    if not all(v is None or type(v) is str for v in (data, origin)):
        return None
    return Head(
        moves, entry["link"], entry["state"], finished, tuple(annotations), version, data, origin
    )
