"""``machines.check``: judge a whole directory of definitions and report.

Reads every definition without refusing broken ones (so each problem can be shown), runs
the structural rules, and runs the exhaustive derivation check for every machine that has
a derivation. A rule set's violation is a *finding* when its ``known_violations`` names
the finding that records it, and a *violation* otherwise; the default rule set may have
none at all. Every violation names its file and line: the loader's problem at the line
it names, a structural rule where ``check_structure`` says, a rule set's violation at the
rule set's entry (a ``known_violations`` problem at its own entry).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from machines.derive.proof import (
    DERIVATION_INVARIANTS,
    Counterexample,
    DerivationReport,
    check_derivation,
    check_max_nodes,
)
from machines.errors import SpecError, SpecUnreadable
from machines.spec import Finding, MachineSpec
from machines.spec.canonical import semantic_digest
from machines.spec.files import as_path
from machines.spec.loader import bundled_spec_dir, definition_paths, read_definition
from machines.spec.structure import Violation, check_structure, file_of, line_of
from machines.spec.yamlsource import split_line


@dataclass(frozen=True)
class MachineSummary:
    name: str
    path: Path
    states: int
    transitions: int
    rules: int
    forbidden: int
    findings: int
    semantic_digest: str
    """What a store compares to tell versions apart (``machines.spec.canonical``)."""


@dataclass(frozen=True)
class KnownViolation:
    """A rule set's violation that a finding records (e.g. the seed's own algorithm)."""

    machine: str
    rule_set: str
    finding: str
    counterexample: Counterexample


@dataclass
class Report:
    spec_dir: Path
    machines: list[MachineSummary] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    known: list[KnownViolation] = field(default_factory=list)
    derivations: dict[str, DerivationReport] = field(default_factory=dict)
    found: int = 0
    """How many definition files were found (some may not have loaded)."""
    notes: list[str] = field(default_factory=list)
    """What loads but is written an old way (a rule's ``state:``, now ``states:``)."""

    @property
    def exit_code(self) -> int:
        """0 clean, 1 on any violation, 2 when some input could not be read at all."""
        if self.unreadable:
            return 2
        return 1 if self.violations else 0


def check(
    spec_dir: str | Path | None = None,
    max_nodes: int = 5,
    *,
    files: Sequence[str | Path] | None = None,
) -> Report:
    """Check every definition in ``spec_dir`` (default: the bundled ones), or the
    definition ``files`` alone (each a ``.yaml``, ``.yml`` or ``.json`` file; checked
    together, so a request's derivation is judged when its node machine is among them).
    ``max_nodes`` (1 to ``machines.derive.proof.MAX_NODES``) bounds the derivation check;
    a bad one is ``InvalidArgument``, an unusable ``spec_dir`` or file is reported as
    unreadable."""
    check_max_nodes(max_nodes)
    try:
        if files is not None:
            paths = [as_path(f) for f in files]
            directory = Path(os.path.commonpath([p.absolute().parent for p in paths]))
        else:
            directory = as_path(spec_dir) if spec_dir is not None else bundled_spec_dir()
    except (SpecUnreadable, ValueError) as exc:
        report = Report(Path("<not a path>"))
        report.unreadable.append(str(exc) or "no definition given")
        return report
    report = Report(directory)
    if files is None:
        try:
            paths = definition_paths(directory)
        except SpecUnreadable as exc:
            report.unreadable.append(str(exc))
            return report
    specs: dict[str, MachineSpec] = {}
    report.found = len(paths)
    for path in paths:
        try:
            spec = read_definition(path)
        except SpecUnreadable as exc:
            report.unreadable.append(str(exc))
            continue
        except SpecError as exc:
            report.violations.extend(_definition_problem(path, p) for p in exc.problems)
            continue
        if spec.name in specs:
            report.unreadable.append(
                f"{path}: a second definition of machine {spec.name!r} (first: "
                f"{file_of(specs[spec.name])}); give each machine one file"
            )
            continue
        specs[spec.name] = spec
        report.machines.append(
            MachineSummary(
                spec.name,
                path,
                len(spec.states),
                len(spec.transitions),
                len(spec.invariants),
                len(spec.forbidden),
                len(spec.findings),
                semantic_digest(spec),
            )
        )
        report.findings.extend(spec.findings)
        report.violations.extend(check_structure(spec))
        report.notes.extend(_old_spellings(spec, path))
    for spec in specs.values():
        if spec.derivation is not None and spec.derivation.node_machine in specs:
            _judge_derivation(report, spec, specs[spec.derivation.node_machine], max_nodes)
    return report


def _old_spellings(spec: MachineSpec, path: Path) -> list[str]:
    """Each rule written with ``state:``, the old spelling of ``states:`` (it still loads,
    to the same rule: ``machines diff`` sees no change between the two)."""
    lines = spec.source.lines if spec.source is not None else {}
    out = []
    for i, rule in enumerate(spec.invariants):
        line = lines.get(("invariants", i, "state"))
        if line is not None:
            state = rule.states[0]
            out.append(
                f"{path}:{line}: rule '{rule.id}' writes state: {state}, the old spelling; "
                f"write states: [{state}] (the same rule)"
            )
    return out


def _definition_problem(path: Path, problem: str) -> Violation:
    """A problem the loader found in ``path``, at the line it names."""
    line, text = split_line(problem)
    return Violation(path.stem, "definition", "definition", text, file=str(path), line=line)


def _judge_derivation(
    report: Report, request: MachineSpec, nodes: MachineSpec, max_nodes: int
) -> None:
    assert request.derivation is not None
    derivation = request.derivation
    result = check_derivation(request, nodes, max_nodes)
    report.derivations[request.name] = result
    file = file_of(request)
    for outcome in result.results:
        rule_set = derivation.rule_sets[outcome.name]
        at = ("derivation", "rule_sets", outcome.name)
        set_line = line_of(request, at)
        is_default = outcome.name == derivation.default
        broken = {c.invariant: c for c in outcome.counterexamples}
        for invariant in rule_set.known_violations:
            if invariant not in DERIVATION_INVARIANTS:
                report.violations.append(
                    Violation(
                        request.name,
                        f"derivation/{outcome.name}",
                        "derivation",
                        f"known_violations names '{invariant}', which is not a derivation "
                        f"invariant; known: {', '.join(DERIVATION_INVARIANTS)}",
                        file=file,
                        line=line_of(request, (*at, "known_violations", invariant)),
                    )
                )
            elif invariant not in broken:
                report.violations.append(
                    Violation(
                        request.name,
                        f"derivation/{outcome.name}",
                        "derivation",
                        f"known_violations says '{invariant}' is broken, but no plan breaks it; "
                        "remove the entry (and update its finding)",
                        file=file,
                        line=line_of(request, (*at, "known_violations", invariant)),
                    )
                )
        for invariant, example in broken.items():
            recorded = rule_set.known_violations.get(invariant)
            if recorded is not None and not is_default:
                report.known.append(KnownViolation(request.name, outcome.name, recorded, example))
                continue
            why = " (the default rule set may break nothing)" if recorded is not None else ""
            report.violations.append(
                Violation(
                    request.name,
                    f"derivation/{outcome.name}/{invariant}",
                    "derivation",
                    f"rule set '{outcome.name}' breaks {invariant}{why}: "
                    f"{DERIVATION_INVARIANTS[invariant]}; counterexample: {example.describe()}"
                    + (f"; {example.plans:,} of {result.plans:,} plans" if example.plans else ""),
                    file=file,
                    line=set_line,
                )
            )
