"""Edge coverage: which spec transitions a property run really exercised."""

from __future__ import annotations

import threading
from collections import Counter

from machines.spec import MachineSpec

Edge = tuple[str, str, str]
"""(source, trigger, dest)."""


class Coverage:
    """Counts taken edges per machine; thread-safe, shared by the suites of one run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: dict[str, Counter[Edge]] = {}

    def record(self, machine: str, source: str, trigger: str, dest: str) -> None:
        with self._lock:
            self._taken.setdefault(machine, Counter())[(source, trigger, dest)] += 1

    def taken(self, machine: str) -> Counter[Edge]:
        with self._lock:
            return Counter(self._taken.get(machine, Counter()))

    def missing(self, spec: MachineSpec) -> list[Edge]:
        """Edges of ``spec`` never taken, in definition order."""
        taken = self.taken(spec.name)
        edges = dict.fromkeys((t.source, t.trigger, t.dest) for t in spec.transitions)
        return [edge for edge in edges if edge not in taken]

    def table(self, specs: list[MachineSpec]) -> str:
        """A short report: per machine, edges covered out of all, and the missing ones."""
        lines = []
        for spec in specs:
            total = len({(t.source, t.trigger, t.dest) for t in spec.transitions})
            missing = self.missing(spec)
            lines.append(f"{spec.name:<10}{total - len(missing):>4}/{total} edges")
            lines.extend(f"    missing: {s} --{t}--> {d}" for s, t, d in missing)
        return "\n".join(lines)
