"""What an exception proves about an effect: a ``Verdict`` (retry, failed, or indeterminate)
from a ``Classifier`` the caller gives. Nothing proves anything unless the caller says so:
the default, ``fail_closed``, takes every error for "it may have happened"."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class Verdict(StrEnum):
    """What an exception proves about the effect."""

    RETRY = "retry"  # it did not happen and may succeed if tried again (within the lease)
    FAILED = "failed"  # it did not happen and will not
    INDETERMINATE = "indeterminate"  # it may have happened


Classifier = Callable[[BaseException], Verdict]


def fail_closed(error: BaseException) -> Verdict:
    """The default classifier: no exception proves anything, so every one is indeterminate."""
    return Verdict.INDETERMINATE


def not_sent(
    *failed: type[BaseException], retry: tuple[type[BaseException], ...] = ()
) -> Classifier:
    """A classifier from exception types the caller knows are raised *before* sending:
    ``retry`` types may be tried again, ``failed`` types end the key failed; everything
    else stays indeterminate."""

    def classify(error: BaseException) -> Verdict:
        if isinstance(error, retry):
            return Verdict.RETRY
        if isinstance(error, failed):
            return Verdict.FAILED
        return Verdict.INDETERMINATE

    return classify


def verdict_of(classify: Classifier, error: BaseException) -> Verdict:
    """What ``classify`` says ``error`` proves. Only an ``Exception`` is classified; a
    classifier that raises, or answers anything but a ``Verdict``, proves nothing."""
    if not isinstance(error, Exception):
        return Verdict.INDETERMINATE
    try:
        verdict = classify(error)
    except Exception:
        return Verdict.INDETERMINATE
    return verdict if isinstance(verdict, Verdict) else Verdict.INDETERMINATE
