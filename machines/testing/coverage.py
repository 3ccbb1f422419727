"""Edge coverage: which spec transitions a property run really exercised.

A suite records every move it saw an implementation make; ``table`` shows, per machine,
how many of its definition's transitions were taken, and ``require`` fails
(``CoverageGap``) when one never was: a green run that never took an edge says nothing
about it.
"""

from __future__ import annotations

import threading
from collections import Counter

from machines.errors import MachinesError
from machines.spec import MachineSpec
from machines.spec.structure import Graph
from machines.testing.contract import expect

Edge = tuple[str, str, str]
"""(source, trigger, dest)."""
Probe = tuple[str, str, str]
"""(state, trigger, actor): one move fired from a state, whatever came of it."""


class CoverageGap(MachinesError, AssertionError):
    """A run never took some transition of a definition: what it passed says nothing about
    those moves. Give it more runs or steps (a larger Hypothesis profile), or find what keeps
    the run from getting there."""


class Coverage:
    """Counts taken edges per machine; thread-safe, shared by the suites of one run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: dict[str, Counter[Edge]] = {}
        self._probed: dict[str, dict[Probe, bool]] = {}
        self._resumed: set[str] = set()

    def record(self, machine: str, source: str, trigger: str, dest: str) -> None:
        for name, value in (("machine", machine), ("source", source), ("trigger", trigger)):
            expect(value, str, f"Coverage.record: {name}")
        expect(dest, str, "Coverage.record: dest")
        with self._lock:
            self._taken.setdefault(machine, Counter())[(source, trigger, dest)] += 1

    def record_resumed(self, machine: str) -> None:
        """An entity of ``machine`` was started in a state of the run's choosing
        (``ResumableAdapter``): any state, under any context, may be a source."""
        expect(machine, str, "Coverage.record_resumed: machine")
        with self._lock:
            self._resumed.add(machine)

    def record_probe(self, machine: str, state: str, trigger: str, actor: str, moved: bool) -> None:
        """A move fired from ``state``: ``moved`` when it was accepted, else refused."""
        for name, value in (("machine", machine), ("state", state), ("trigger", trigger)):
            expect(value, str, f"Coverage.record_probe: {name}")
        expect(actor, str, "Coverage.record_probe: actor")
        expect(moved, bool, "Coverage.record_probe: moved")
        with self._lock:
            probed = self._probed.setdefault(machine, {})
            probed[(state, trigger, actor)] = probed.get((state, trigger, actor), False) or moved

    def probed(self, machine: str) -> dict[Probe, bool]:
        """Every (state, trigger, actor) fired, and whether it ever moved."""
        with self._lock:
            return dict(self._probed.get(machine, {}))

    def taken(self, machine: str) -> Counter[Edge]:
        with self._lock:
            return Counter(self._taken.get(machine, Counter()))

    def missing(self, spec: MachineSpec) -> list[Edge]:
        """Edges of ``spec`` never taken, in definition order."""
        expect(spec, MachineSpec, "Coverage.missing: spec")
        taken = self.taken(spec.name)
        edges = dict.fromkeys((t.source, t.trigger, t.dest) for t in spec.transitions)
        return [edge for edge in edges if edge not in taken]

    def table(self, specs: list[MachineSpec]) -> str:
        """A short report: per machine, edges covered out of all, and the missing ones."""
        expect(specs, (list, tuple), "Coverage.table: specs")
        for spec in specs:
            expect(spec, MachineSpec, "Coverage.table: each spec")
        lines = []
        width = max([10, *(len(spec.name) + 2 for spec in specs)])
        for spec in specs:
            total = len({(t.source, t.trigger, t.dest) for t in spec.transitions})
            missing = self.missing(spec)
            lines.append(f"{spec.name:<{width}}{total - len(missing):>4}/{total} edges")
            lines.extend(f"    missing: {s} --{t}--> {d}" for s, t, d in missing)
            probed = self.probed(spec.name)
            if probed:
                moved = sum(probed.values())
                lines.append(
                    f"    probes: {len(probed)} (state, trigger, actor) fired: {moved} moved, "
                    f"{len(probed) - moved} refused"
                )
        return "\n".join(lines)

    def out_of_reach(self, spec: MachineSpec) -> list[Edge]:
        """Edges of ``spec`` no run could take: under no context is the source reached from
        the initial state with the edge's guard admitting that context (a definition may
        opt out of ``all_reachable``, and a guard may admit only contexts its source is
        never reached under), unless a run resumed entities in states of its choosing and
        reached the source (its edges count again). Outsider batches 38 (c S5) and 40
        (c B2): a correct service failed with a gap it could never close."""
        expect(spec, MachineSpec, "Coverage.out_of_reach: spec")
        graph = Graph(spec)
        takeable = {
            (t.source, t.trigger, t.dest)
            for index, context in enumerate(graph.valuations)
            for t in spec.transitions
            if t.admits(context) and t.source in graph.reachable(index)
        }
        with self._lock:
            reached = {state for state, _, _ in self._probed.get(spec.name, {})}
            reached |= {source for source, _, _ in self._taken.get(spec.name, Counter())}
            resumed = spec.name in self._resumed
        edges = dict.fromkeys((t.source, t.trigger, t.dest) for t in spec.transitions)
        return [e for e in edges if e not in takeable and not (resumed and e[0] in reached)]

    def require(self, spec: MachineSpec) -> None:
        """Raise ``CoverageGap`` naming every edge of ``spec`` never taken (with the
        table), or return when every one was; an edge out of every run's reach
        (``out_of_reach``) is not asked for."""
        expect(spec, MachineSpec, "Coverage.require: spec")
        beyond = set(self.out_of_reach(spec))
        missing = [edge for edge in self.missing(spec) if edge not in beyond]
        if missing:
            raise CoverageGap(
                f"{len(missing)} transition(s) of '{spec.name}' were never taken, so the run "
                "says nothing about them; run more examples or steps (HYPOTHESIS_PROFILE="
                "thorough), or find what keeps the run from getting there:\n" + self.table([spec])
            )

    def require_probes(self, spec: MachineSpec, also_try: MachineSpec | None = None) -> None:
        """Raise ``CoverageGap`` unless, from every state ``spec`` reaches, every move
        ``spec`` or ``also_try`` declares from there was fired by each of its actors, and
        some move was fired and refused there (a run that never tried a refusal, or never
        tried the moves of the definition the implementation runs on, says nothing about
        them)."""
        expect(spec, MachineSpec, "Coverage.require_probes: spec")
        if also_try is not None:
            expect(also_try, MachineSpec, "Coverage.require_probes: also_try")
        probed = self.probed(spec.name)
        reached = {state for state, _, _ in probed}
        missing = [
            f"    never fired: {t.trigger} by {actor} in '{t.source}'"
            for definition in (spec, also_try)
            if definition is not None
            for t in definition.transitions
            if t.source in reached
            for actor in t.actors
            if (t.source, t.trigger, actor) not in probed
        ]
        refused = {state for (state, _, _), moved in probed.items() if not moved}
        missing += [f"    never refused anything in '{s}'" for s in sorted(reached - refused)]
        missing = list(dict.fromkeys(missing))
        if missing:
            raise CoverageGap(
                f"{len(missing)} probe(s) of '{spec.name}' were never fired, so the run says "
                "nothing about them; take the tour (tour_first = True) or run more examples:\n"
                + "\n".join(missing)
            )
