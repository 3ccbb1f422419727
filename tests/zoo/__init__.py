"""The bug zoo: implementations written from the outside, one bug each, that the suites
must catch (and a correct one per suite that they must pass)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping


def detection_table(suite: str, caught: Mapping[str, tuple[str, float]]) -> str:
    """The zoo's detection table for ``suite``: per bug, the rule named and the seconds it
    took, then the median and the maximum."""
    width = max(len(name) for name in caught) + 2
    rows = [
        f"{name:<{width}}{rule:<26}{seconds:>7.2f}s" for name, (rule, seconds) in caught.items()
    ]
    times = [seconds for _, seconds in caught.values()]
    return (
        f"\n{suite} zoo (ci profile, generate phase):\n  "
        + "\n  ".join(rows)
        + f"\n  {len(times)} bugs caught: median {statistics.median(times):.2f}s,"
        f" max {max(times):.2f}s"
    )
