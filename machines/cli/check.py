"""``machines check``: every definition validated (schema, structural rules, forbidden
moves, the exhaustive derivation check), and the report it prints."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import TextIO

from machines.checks.report import Report, check
from machines.cli.command import Command, Parsers, whole
from machines.derive.proof import DERIVATION_INVARIANTS, MAX_NODES


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="check another copy of the definitions (default: the bundled ones)",
    )
    command.add_argument(
        "--max-nodes",
        type=whole(1, MAX_NODES),
        default=5,
        metavar="N",
        help=f"largest plan the derivation check enumerates, 1 to {MAX_NODES} (default 5): "
        "the plans grow as C(node kinds + N, N), 26 million at 6 for the bundled 48 node kinds",
    )
    command.add_argument(
        "--no-findings",
        action="store_true",
        help="do not print the findings, only the summary and violations",
    )


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    report = check(args.spec_dir, max_nodes=args.max_nodes)
    print_report(report, sys.stdout, findings=not args.no_findings)
    return report.exit_code


COMMAND = Command(
    "check",
    help="validate every definition: schema, structural rules, forbidden moves, "
    "exhaustive derivation check",
    description="Exit 0 when clean, 1 on any violation, 2 on unreadable input.",
    arguments=_arguments,
    run=_run,
)


def print_report(report: Report, out: TextIO, findings: bool = True) -> None:
    """``report`` as ``machines check`` prints it; ``findings=False`` leaves out the
    recorded findings (``--no-findings``)."""
    w = out.write
    w(f"machines check: {report.spec_dir} ({len(report.machines)} definitions)\n\n")
    if report.machines:
        w(
            f"  {'machine':<10}{'states':>7}{'transitions':>13}{'rules':>7}{'forbidden':>11}"
            f"{'findings':>10}\n"
        )
        for m in report.machines:
            w(
                f"  {m.name:<10}{m.states:>7}{m.transitions:>13}{m.rules:>7}{m.forbidden:>11}"
                f"{m.findings:>10}\n"
            )
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
    for problem in report.unreadable:
        w(f"UNREADABLE: {problem}\n")
    if report.violations:
        w(f"violations ({len(report.violations)}):\n")
        for v in report.violations:
            w(textwrap.indent(v.describe(), "  ") + "\n")
        w("\n")
    if report.exit_code == 0:
        w("OK: no violations\n")
    else:
        w(f"FAILED: {len(report.violations)} violation(s), {len(report.unreadable)} unreadable\n")


def _wrap(text: str, indent: str) -> str:
    return (
        textwrap.fill(
            " ".join(text.split()), width=100, initial_indent=indent, subsequent_indent=indent
        )
        + "\n"
    )
