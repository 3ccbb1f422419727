"""What ``ExactlyOnce.arun`` awaits: the iterator of the awaitable ``fn`` returned, got
before it is driven, so that a failure of the object itself (not awaitable, an
``__await__`` that raises or gives no iterator) is told apart from the effect's own."""

from __future__ import annotations

import inspect
import types
from collections.abc import Generator, Iterator
from typing import Any


def steps_of(started: object) -> Iterator[Any] | None:
    """The iterator ``await started`` would drive, or None when it cannot be had: not an
    awaitable, or one whose ``__await__`` raises or gives no iterator. That failure is the
    object's, after ``fn`` ran, so it is no error of the effect for a classifier to judge
    (a classifier that retries ``TypeError`` would run ``fn`` again)."""
    if not inspect.isawaitable(started):
        return None
    try:
        steps = started.__await__()
    except Exception:
        return None
    return steps if isinstance(steps, Iterator) else None


@types.coroutine
def through(steps: Iterator[Any]) -> Generator[Any, Any, Any]:
    """Await what ``steps_of`` found."""
    return (yield from steps)
