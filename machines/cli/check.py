"""``machines check``: every definition validated (schema, structural rules, forbidden
moves, the exhaustive derivation check), and the report it prints: a summary a screen
holds by default (the recorded findings counted, printed with ``--findings``), or one JSON
document (``report_document``, its schema ``schemas/check.schema.json``)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from tabulate import tabulate

from machines.checks.report import Report, check
from machines.cli.command import Command, Parsers, whole
from machines.cli.output import (
    Document,
    add_format,
    command_line,
    document,
    flag,
    is_json,
    odd_names,
    printable_naming,
    write_json,
)
from machines.derive.proof import DERIVATION_INVARIANTS, MAX_NODES, Counterexample
from machines.errors import counted
from machines.spec.project import definitions_dir
from machines.spec.structure import Violation, format_path

DEFAULT_MAX_NODES = 5


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="check these definition files (.yaml, .yml or .json) together, instead of a "
        "folder of them",
    )
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="the folder of definitions to check (default: $MACHINES_SPEC_DIR, else "
        "[tool.machines] spec_dir in pyproject.toml, else the bundled ones)",
    )
    command.add_argument(
        "--max-nodes",
        type=whole(1, MAX_NODES),
        default=DEFAULT_MAX_NODES,
        metavar="N",
        help=f"largest plan the derivation check enumerates, 1 to {MAX_NODES} (default "
        f"{DEFAULT_MAX_NODES}): the plans grow as C(node kinds + N, N), 26 million at 6 for "
        "the bundled 48 node kinds",
    )
    command.add_argument(
        "--findings",
        action="store_true",
        help="print every recorded finding in full (by default only their count); not with "
        "--format json, whose document always holds them",
    )
    command.add_argument("--no-findings", action="store_true", help=argparse.SUPPRESS)
    add_format(command)


def _given(args: argparse.Namespace) -> list[str]:
    """The options of this run that change what is checked, to repeat in a suggestion."""
    return [
        *flag("--spec-dir", args.spec_dir),
        *flag("--max-nodes", args.max_nodes, DEFAULT_MAX_NODES),
    ]


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    if args.no_findings:  # the old default's opposite: refused, so no script keeps a no-op
        parsers[1]["check"].error(
            "--no-findings is gone: the findings are left out by default (--findings prints "
            f"them); run {command_line('check', _given(args))}"
        )
    if args.findings and is_json(args):
        parsers[1]["check"].error(
            "--findings is for the text report: the JSON document always holds the findings; "
            f"run {command_line('check', [*_given(args), '--format', 'json'])}"
        )
    if args.files and args.spec_dir is not None:
        parsers[1]["check"].error("give definition files or --spec-dir DIR, not both")
    if args.files:
        report = check(files=args.files, max_nodes=args.max_nodes)
        names = odd_names(*args.files)
    else:
        spec_dir = definitions_dir(args.spec_dir).spec_dir
        report = check(spec_dir, max_nodes=args.max_nodes)
        names = odd_names(spec_dir)
    if is_json(args):
        write_json(report_document(report))
    else:
        print_report(report, sys.stdout, args.findings, _given(args), names)
    return report.exit_code


COMMAND = Command(
    "check",
    help="validate every definition: schema, structural rules, forbidden moves, "
    "exhaustive derivation check",
    description="Exit 0 when clean, 1 on any violation, 2 on unreadable input. Prints a "
    "summary, the derivation verdicts and every violation; the recorded findings only with "
    "--findings.",
    arguments=_arguments,
    run=_run,
)


def print_report(
    report: Report,
    out: TextIO,
    findings: bool = False,
    given: Sequence[str] = (),
    names: Iterable[str] = (),
) -> None:
    """``report`` as ``machines check`` prints it; the recorded findings in full only with
    ``findings`` (``--findings``), else their count and the command that prints them
    (``given``: the options of this run, repeated in it). Every line is escaped
    (``printable_naming``, ``names`` whole): a definition's file name, and what it holds,
    are the text of whoever wrote the pull request, shown on a reviewer's terminal."""
    names = tuple(names)

    def w(text: str) -> None:
        out.write(printable_naming(text, names))

    loaded = len(report.machines)
    failed = max(report.found - loaded, 0)
    w(
        f"machines check: {report.spec_dir} ({counted(report.found, 'definition')}"
        f"{f', {failed} did not load' if failed else ''})\n\n"
    )
    if report.machines:
        rows = [
            (m.name, m.states, m.transitions, m.rules, m.forbidden, m.findings, m.semantic_digest)
            for m in report.machines
        ]
        headers = ("machine", "states", "transitions", "rules", "forbidden", "findings")
        table = tabulate(rows, (*headers, "semantic digest"), tablefmt="plain")
        w("".join(f"  {line.rstrip()}\n" for line in table.splitlines()))
        w("\n")
    for machine, d in report.derivations.items():
        w(
            f"derivation ({machine}): every plan of 0..{d.max_nodes} nodes over {d.kinds} node "
            f"kinds: {d.plans:,} plans, {d.signatures} distinct signatures, {d.seconds:.1f} s\n"
        )
        if d.closed:
            w(
                "  the signatures are closed under adding a node: the verdicts hold for plans "
                "of every size\n"
            )
        else:
            w(
                f"  the signatures are NOT closed under adding a node: verdicts hold up to "
                f"{d.max_nodes} nodes only\n"
            )
        for result in d.results:
            known = [k for k in report.known if k.rule_set == result.name]
            if not result.counterexamples:
                w(f"  {result.name}: all {len(DERIVATION_INVARIANTS)} invariants hold\n")
            elif known:
                w(f"  {result.name}: {len(known)} known violation(s), recorded as findings\n")
            else:
                w(f"  {result.name}: violations (listed below)\n")
            for k in known:
                c = k.counterexample
                w(
                    f"    {c.invariant} (finding {k.finding}): {c.describe()}; "
                    f"{c.plans:,} of {d.plans:,} plans\n"
                )
        w("\n")
    if findings and report.findings:
        w(f"findings ({len(report.findings)}):\n")
        for f in report.findings:
            w(f"  {f.machine}/{f.id} (seed {f.seed})\n")
            w(_wrap(f.text, "    "))
            w(_wrap(f"resolution: {f.resolution}", "    "))
        w("\n")
    elif report.findings:
        w(
            f"findings: {len(report.findings)} recorded in the definitions; "
            f"{command_line('check', [*given, '--findings'])} prints them\n\n"
        )
    if report.notes:
        w(f"notes ({len(report.notes)}):\n")
        w("".join(f"  {note}\n" for note in report.notes))
        w("\n")
    for problem in report.unreadable:
        w(f"UNREADABLE: {problem}\n")
    if report.violations:
        w(f"violations ({len(report.violations)}):\n")
        for v in report.violations:
            # escaped before indenting: the indent would split a name that holds a line break
            w(textwrap.indent(printable_naming(v.describe(), names), "  ") + "\n")
        w("\n")
    if report.exit_code == 0:
        w("OK: no violations\n")
    else:
        refused = f" ({counted(failed, 'definition')} did not load)" if failed else ""
        w(
            f"FAILED: {len(report.violations)} violation(s){refused}, "
            f"{len(report.unreadable)} unreadable\n"
        )


def report_document(report: Report) -> Document:
    """``report`` as the JSON document of ``machines check --format json``: every machine
    with its counts and findings, every violation with its file and line (when known) and
    its shortest path, every derivation verdict with its counterexamples."""
    known = {(k.machine, k.rule_set, k.counterexample.invariant): k.finding for k in report.known}
    return document(
        "check",
        report.exit_code,
        spec_dir=str(report.spec_dir),
        machines=[
            {
                "name": m.name,
                "file": str(m.path),
                "states": m.states,
                "transitions": m.transitions,
                "rules": m.rules,
                "forbidden": m.forbidden,
                "findings_count": m.findings,
                "semantic_digest": m.semantic_digest,
                "findings": [
                    {"id": f.id, "seed": f.seed, "text": f.text, "resolution": f.resolution}
                    for f in report.findings
                    if f.machine == m.name
                ],
            }
            for m in report.machines
        ],
        findings_count=len(report.findings),
        derivations=[
            {
                "machine": machine,
                "max_nodes": d.max_nodes,
                "node_kinds": d.kinds,
                "plans": d.plans,
                "signatures": d.signatures,
                "closed": d.closed,
                "seconds": round(d.seconds, 3),
                "rule_sets": [
                    {
                        "name": result.name,
                        "holds": not result.counterexamples,
                        "counterexamples": [
                            _counterexample(c, known.get((machine, result.name, c.invariant)))
                            for c in result.counterexamples
                        ],
                    }
                    for result in d.results
                ],
            }
            for machine, d in report.derivations.items()
        ],
        violations=[_violation(v) for v in report.violations],
        unreadable=list(report.unreadable),
    )


def _counterexample(c: Counterexample, finding: str | None) -> Document:
    return {
        "invariant": c.invariant,
        "finding": finding,
        "plan": [
            {"state": state, "side_effect": side_effect, "manual": manual}
            for state, side_effect, manual in c.nodes
        ],
        "result": c.decision.result,
        "rule": c.decision.rule,
        "plans": c.plans,
        "description": c.describe(),
    }


def _violation(v: Violation) -> Document:
    path = None
    if v.path is not None:
        path = {
            "context": dict(v.context),
            "steps": [
                {"source": t.source, "trigger": t.trigger, "actors": list(t.actors), "dest": t.dest}
                for t in v.path
            ],
            "text": format_path(v.path, v.context),
        }
    return {
        "machine": v.machine,
        "rule": v.rule,
        "kind": v.kind,
        "message": v.message,
        "file": v.file,
        "line": v.line,
        "path": path,
    }


def _wrap(text: str, indent: str) -> str:
    return (
        textwrap.fill(
            " ".join(text.split()), width=100, initial_indent=indent, subsequent_indent=indent
        )
        + "\n"
    )
