"""A record that must outlive the process writing it, even if it dies right after."""

from __future__ import annotations

import os
from pathlib import Path


def append_durably(path: Path, line: str) -> None:
    """Append one line and fsync it: an upstream effect's trace, a call history, written by
    a process that may be killed (``os._exit``) the next instant."""
    with path.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
