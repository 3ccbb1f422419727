"""The SQLite store's file on disk: what must hold of it and of the files SQLite keeps
beside it before a connection opens it, and how a message names it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from machines.store.records import StoreError


def require_file_or_nothing(path: str) -> None:
    """The database file and the files SQLite keeps beside it (its rollback journal, its
    write-ahead log and its index) are regular files or nothing: a FIFO there would make
    SQLite wait for a writer for ever."""
    for each in (path, *(path + suffix for suffix in ("-journal", "-wal", "-shm"))):
        try:
            mode = os.stat(each).st_mode
        except (OSError, ValueError):
            continue  # nothing there (SQLite makes it), or a name SQLite refuses itself
        if not (stat.S_ISREG(mode) or (each == path and stat.S_ISDIR(mode))):
            raise StoreError(
                f"SQLite database {shown_path(path)}: {shown_path(each)} is not a file (a FIFO, a "
                "device or a socket); remove it, or name the store's database file"
            )


def second_name(path: str, links: int) -> StoreError:
    """The refusal of a database file with more than one name (a hard link): SQLite keeps
    its lock and its write-ahead log beside each name, so two processes opening the file by
    two names take two write locks and keep two logs, neither sees the other's claim, and
    one log is later written over the other (outsider batch 41, a 13: an effect ran twice,
    one acknowledged result was lost, and the audit said OK). A symbolic link is not such
    a name: SQLite follows it to the file."""
    return StoreError(
        f"SQLite database {shown_path(path)}: the file has {links} names (hard links), and "
        "SQLite locks and logs it beside each name, so a writer under another name "
        "would not see this one's writes; nothing was written. Remove the other names "
        f"(find them with: find / -xdev -samefile {shown_path(path)}), or copy the file"
    )


def identity(path: str) -> tuple[int, int] | None:
    """The (device, inode) of the file at ``path``; ``None`` when there is none."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


LOGS = ("-wal", "-shm")
"""The files SQLite keeps beside a store in WAL mode."""


def require_owner_or_logs(path: str) -> None:
    """A read of a store by a user who does not own its file, while its ``-wal`` and
    ``-shm`` files are not there, is refused: SQLite would make them as that user, and
    the store's owner could then not write them (outsider batch 46, b 43: an audit run as
    another user locked the service out of its store)."""
    try:
        owner = os.stat(path).st_uid
    except (OSError, ValueError):
        return  # nothing there: the open says so
    if owner == os.geteuid() or all(os.path.exists(path + log) for log in LOGS):
        return
    raise StoreError(
        f"SQLite database {shown_path(path)}: this user (uid {os.geteuid()}) does not own the "
        f"store's file (uid {owner}), and reading it would make its -wal and -shm files as "
        "this user, which its owner could then not write; nothing was opened: read it as "
        "the file's owner (or while its service has it open), or audit a copy"
    )


def foreign_logs(path: str) -> str | None:
    """The first of a store's ``-wal`` and ``-shm`` files that this user cannot write."""
    for log in LOGS:
        try:
            if os.path.exists(path + log) and not os.access(path + log, os.W_OK):
                return f"{Path(path).name}{log} file"
        except (OSError, ValueError):
            continue
    return None


def unwritable_folder(path: str) -> bool:
    """Whether the file at ``path`` exists and its folder cannot be written by this user."""
    file = Path(path)
    try:
        return file.is_file() and not os.access(file.parent, os.W_OK)
    except (OSError, ValueError):
        return False


def is_directory(path: str) -> bool:
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def shown_path(path: str, limit: int = 200) -> str:
    """A path for a message, cut: it may be thousands of characters long."""
    return path if len(path) <= limit else f"{path[: limit - 3]}..."
