"""The ``machines`` command line. Nothing in the package imports this module."""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from machines.checks.report import Report, check
from machines.derive.proof import DERIVATION_INVARIANTS, MAX_NODES
from machines.errors import MachinesError, SpecError, SpecUnreadable
from machines.explore import SYSTEMS, ProgressBar, build_model, explore, scopes_of
from machines.render.export import FORMATS, export
from machines.spec.loader import bundled_spec_dir, definition_paths, load, read_definition

if TYPE_CHECKING:
    from machines.render.site import SiteFacts
    from machines.spec import MachineSpec

HELP_WIDTH = 100
"""Help is wrapped at a fixed width, so the generated CLI page is the same everywhere."""

"""The largest ``check --max-nodes``. The derivation check enumerates every multiset of up
to N node kinds, C(kinds + N, N) plans: over the bundled 48 kinds that is 2.9 million
plans at 5 (about 2 s), 26 million at 6 (about 15 s), 200 million at 7 and 1.4 billion at
8 (minutes to hours). The bundled signatures are closed under adding a node by 5, so a
larger bound proves nothing more for them."""

MAX_EXAMPLES = 1_000_000
"""The largest ``mutate --examples``: the work grows linearly with it, and a larger count
is a typo rather than a plan (the default is 300)."""

EXIT_INTERRUPTED = 130
"""Ctrl-C: the shell's code for a process ended by SIGINT (128 + 2)."""

EXIT_BROKEN_PIPE = 141
"""The reader of the output went away (``machines check | head``): the shell's code for a
process ended by SIGPIPE (128 + 13), as other command-line tools end."""

EPILOG = (
    "Exit codes: 0 when all is well, 1 when a check finds a problem, 2 on a bad argument or "
    f"unreadable input, {EXIT_INTERRUPTED} when interrupted (Ctrl-C), {EXIT_BROKEN_PIPE} "
    "when the output pipe closed early."
)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=HELP_WIDTH)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``machines`` parser and each command's own (for the generated CLI page)."""
    parser = argparse.ArgumentParser(
        prog="machines",
        description="Formally tested state machine definitions for side effects.",
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check_cmd = commands.add_parser(
        "check",
        help="validate every definition: schema, structural rules, forbidden moves, "
        "exhaustive derivation check",
        description="Exit 0 when clean, 1 on any violation, 2 on unreadable input.",
    )
    check_cmd.add_argument(
        "--spec-dir",
        type=Path,
        default=None,
        help="check another copy of the definitions (default: the bundled ones)",
    )
    check_cmd.add_argument(
        "--max-nodes",
        type=_whole(1, MAX_NODES),
        default=5,
        metavar="N",
        help=f"largest plan the derivation check enumerates, 1 to {MAX_NODES} (default 5): "
        "the plans grow as C(node kinds + N, N), 26 million at 6 for the bundled 48 node kinds",
    )
    check_cmd.add_argument(
        "--no-findings",
        action="store_true",
        help="do not print the findings, only the summary and violations",
    )
    export_cmd = commands.add_parser(
        "export",
        help="print one machine for other tools: json (any language), sql or postgresql (the "
        "store schema for SQLite or PostgreSQL), mermaid or dot (its diagram)",
    )
    export_cmd.add_argument("machine", help="a bundled machine name or a path to a YAML file")
    export_cmd.add_argument("--format", choices=FORMATS, default="json")
    mutate_cmd = commands.add_parser(
        "mutate",
        help="break the definitions on purpose (a catalog of mutations) and show that "
        "machines check or the stateful suites catch every one",
        description="Exit 0 when every mutation is caught, 1 when one survives.",
    )
    mutate_cmd.add_argument("ids", nargs="*", metavar="ID", help="only these mutations")
    mutate_cmd.add_argument(
        "--examples",
        type=_whole(1, MAX_EXAMPLES),
        default=300,
        metavar="N",
        help="most suite runs per mutation before it counts as surviving, 1 to "
        f"{MAX_EXAMPLES:,} (default 300)",
    )
    mutate_cmd.add_argument("--list", action="store_true", help="list the catalog and exit")
    explore_cmd = commands.add_parser(
        "explore",
        help="exhaustively explore every reachable state of a reference system in small "
        "scopes, checking the invariants on every move",
        description="Exit 0 when every scope holds every invariant, 1 on a violation (its "
        "shortest trace is printed), 2 on a bad argument or unreadable definitions.",
    )
    explore_cmd.add_argument("system", choices=SYSTEMS)
    explore_cmd.add_argument(
        "--scope",
        action="append",
        metavar="NAME",
        help="a scope to explore (repeatable; default: the system's default scopes; "
        "'all' for every scope)",
    )
    explore_cmd.add_argument(
        "--rules", default=None, help="transfer only: the derivation rule set (e.g. qtg-v3)"
    )
    explore_cmd.add_argument("--spec-dir", type=Path, default=None)
    explore_cmd.add_argument(
        "--max-states",
        type=_whole(1),
        default=None,
        metavar="N",
        help="stop a scope after N distinct states, N >= 1 (it is then reported as not exhausted)",
    )
    explore_cmd.add_argument(
        "--no-symmetry", action="store_true", help="explore symmetric twins separately"
    )
    audit_cmd = commands.add_parser(
        "audit",
        help="check a recorded history (JSON Lines of transition events) or a whole store "
        "against the definitions and the invariants",
        description="Exit 0 when every event is legal and every invariant holds, 1 on any "
        "breach (each printed with the events involved; an event naming a state, trigger, "
        "actor or context variable the definition lacks is one), 2 on unreadable input (a "
        "line that is not a well-formed event, named by its number; a missing store).",
    )
    audit_cmd.add_argument(
        "file", nargs="?", type=Path, help="JSON Lines as History.write_jsonl writes them"
    )
    audit_cmd.add_argument(
        "--from-store",
        metavar="URL",
        help="audit a store instead (sqlite:///path or postgresql://...): rows, data and "
        "histories; opened read-only, it is never created or changed",
    )
    audit_cmd.add_argument("--spec-dir", type=Path, default=None)
    diagrams_cmd = commands.add_parser(
        "diagrams",
        help="draw every machine as Graphviz DOT and SVG and as Mermaid, into diagrams/",
        description="Exit 0 when written (or, with --check, current), 1 when --check finds "
        "a stale or missing file, 2 on unreadable definitions.",
    )
    docs_cmd = commands.add_parser(
        "docs",
        help="generate the documentation site's pages about the machines into docs/",
        description="Exit 0 when written (or, with --check, current), 1 when --check finds "
        "a stale or missing page, 2 on unreadable definitions.",
    )
    for cmd, folder in ((diagrams_cmd, "diagrams"), (docs_cmd, "docs")):
        cmd.add_argument(
            "--out", type=Path, default=Path(folder), help=f"where to write (default {folder}/)"
        )
        cmd.add_argument(
            "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
        )
        cmd.add_argument("--spec-dir", type=Path, default=None)
    for command in commands.choices.values():
        command.formatter_class = _formatter
    return parser, dict(commands.choices)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Every failure ends in a one-line message and exit
    2 (or the codes of ``EPILOG``), never in a traceback: a typed error of the package or
    an operating-system error is reported with what it names, and argparse refuses bad
    arguments with its usage line."""
    parser, _ = build_parser()
    arguments = _arguments(parser, argv)
    _tolerate_unencodable(sys.stdout)
    args = parser.parse_args(arguments)
    try:
        code = _reported(parser, args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:  # from the output or from a message about a failure
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _reported(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``_run``, with Ctrl-C and every error it may raise told in one line of stderr."""
    try:
        return _run(parser, args)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print(f"machines {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (MachinesError, OSError) as exc:
        print(f"machines {args.command}: {_problem(exc)}", file=sys.stderr)
        return 2


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "audit":
        if (args.file is None) == (args.from_store is None):
            parser.error("audit needs a FILE or --from-store URL (one of them)")
        return _audit(args.file, args.from_store, args.spec_dir)
    if args.command in ("diagrams", "docs"):
        return _generate(args.command, args.out, args.check, args.spec_dir)
    if args.command == "export":
        return _export(args.machine, args.format)
    if args.command == "mutate":
        return _mutate(args.ids or None, args.examples, args.list)
    if args.command == "explore":
        return _explore(args)
    report = check(args.spec_dir, max_nodes=args.max_nodes)
    print_report(report, sys.stdout, findings=not args.no_findings)
    return report.exit_code


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (no upper bound: None)."""
    bounds = f"from {low:,} to {high:,}" if high is not None else f"of at least {low:,}"

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{_shown(text)} is not a whole number {bounds}"
            ) from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number {bounds}")
        return value

    return whole


def _arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> list[str]:
    """The command line, refused (exit 2) if an argument is not one a shell can pass: not
    a string, a NUL character, or text no file name can hold (a lone surrogate)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    for number, argument in enumerate(arguments, start=1):
        if not isinstance(argument, str):
            parser.error(f"argument {number} is a {type(argument).__name__}, not a string")
        if "\x00" in argument:
            parser.error(f"argument {number} ({_shown(argument)}) holds a NUL character")
        try:
            os.fsencode(argument)
        except UnicodeEncodeError:
            parser.error(
                f"argument {number} ({_shown(argument)}) holds a lone surrogate, which no "
                "file name or text can hold"
            )
    return arguments


def _tolerate_unencodable(stream: TextIO) -> None:
    """Let ``stream`` print any text (a file name of undecodable bytes, echoed back) by
    escaping what its encoding cannot hold, instead of raising in the middle of a report."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="backslashreplace")


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still
    buffered does not fail again on the closed pipe (the recipe of Python's signal docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing to flush into a pipe


def _shown(text: str, limit: int = 120) -> str:
    """``text`` quoted and cut for a message: an argument may be megabytes long."""
    return repr(text if len(text) <= limit else f"{text[: limit - 3]}...")


def _problem(exc: MachinesError | OSError) -> str:
    """What went wrong, for one line of stderr: an OS error names its file and reason."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{_shown(os.fsdecode(exc.filename))}: " if exc.filename is not None else ""
        return f"{where}{exc.strerror}"
    return str(exc)


def site_facts(specs: Sequence[MachineSpec]) -> SiteFacts:
    """What the site says beyond the definitions, from the layers above rendering: what
    each explorer model checks, the mutation catalog, and every command's help."""
    from machines.explore.outcome import WHAT as OUTCOME_WHAT
    from machines.explore.transfer import SCOPES, TransferModel
    from machines.mutation import CATALOG
    from machines.render.site import SiteFacts

    by_name = {spec.name: spec for spec in specs}
    explorer: dict[str, Mapping[str, str]] = {}
    if "request" in by_name and "node" in by_name:
        model = TransferModel(by_name["request"], by_name["node"], SCOPES["withdraw"])
        explorer["transfer"] = dict(model.what)
    explorer["exactly-once"] = dict(OUTCOME_WHAT)
    parser, commands = build_parser()
    helps = [("machines", parser.format_help())]
    helps += [(f"machines {name}", command.format_help()) for name, command in commands.items()]
    return SiteFacts(
        explorer=explorer,
        mutations=[(m.id, m.machine, m.description, m.breaks) for m in CATALOG],
        helps=helps,
    )


def _generate(what: str, out: Path, check_only: bool, spec_dir: Path | None) -> int:
    from machines.render.files import INSTALL_GRAPHVIZ, diagram_files, sync
    from machines.render.site import site_pages

    if out.exists() and not out.is_dir():
        print(f"machines {what}: --out {_shown(str(out))} is not a directory", file=sys.stderr)
        return 2
    try:
        specs = [read_definition(p) for p in definition_paths(spec_dir or bundled_spec_dir())]
    except SpecError as exc:
        print(f"machines {what}: {exc}", file=sys.stderr)
        return 2
    if what == "diagrams":
        files, drawn = diagram_files(specs)
        if not drawn:
            print(f"machines diagrams: {INSTALL_GRAPHVIZ}", file=sys.stderr)
    else:
        files = site_pages(specs, site_facts(specs))
    try:
        changed = sync(files, out, check=check_only)
    except OSError as exc:
        doing = "read" if check_only else "write"
        print(
            f"machines {what}: cannot {doing} {_problem(exc)}; choose an --out directory "
            f"you can {doing}",
            file=sys.stderr,
        )
        return 2
    if check_only:
        if changed:
            names = ", ".join(str(p) for p in changed)
            print(f"machines {what}: stale or missing: {names}; run: machines {what}")
            return 1
        print(f"machines {what}: {len(files)} generated files in {out}/ are current")
        return 0
    print(f"machines {what}: {len(changed)} of {len(files)} files written into {out}/")
    return 0


def _audit(file: Path | None, url: str | None, spec_dir: Path | None) -> int:
    from machines.checks.audit import audit_events, audit_store, read_log
    from machines.store.records import shown_url

    try:
        paths = definition_paths(spec_dir or bundled_spec_dir())
        specs = {spec.name: spec for spec in map(read_definition, paths)}
        if file is not None:
            events = read_log(file)
            breaches = audit_events(events, specs)
            what = (
                f"{len(events)} events of {len({(e.machine, e.entity) for e in events})} entities"
            )
        else:
            assert url is not None
            breaches = audit_store(url, specs)
            what = f"the store {shown_url(url)}"
    except (OSError, MachinesError) as exc:
        print(f"machines audit: {_problem(exc)}", file=sys.stderr)
        return 2
    for breach in breaches:
        print(breach.describe())
    verdict = f"FAILED: {len(breaches)} breach(es)" if breaches else "OK: no breach"
    print(f"machines audit: {what}: {verdict}")
    return 1 if breaches else 0


def _export(machine: str, fmt: str) -> int:
    try:
        spec = load(machine)
    except SpecUnreadable as exc:
        print(f"machines export: {exc}", file=sys.stderr)
        return 2
    except SpecError as exc:
        print(f"machines export: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(export(spec, fmt))
    return 0


def _mutate(ids: list[str] | None, examples: int, list_only: bool) -> int:
    from machines.mutation import CATALOG, Kill, run_catalog, summary

    if not list_only and importlib.util.find_spec("hypothesis") is None:
        print(
            "machines mutate: the stateful suites need Hypothesis; "
            "install it with: pip install 'machines[testing]'",
            file=sys.stderr,
        )
        return 2

    if list_only:
        for m in CATALOG:
            print(f"{m.id:<42} {m.machine:<8} {m.description}")
        return 0

    def progress(k: Kill) -> None:
        verdict = f"caught by {k.caught_by}" if k.caught_by else "SURVIVED"
        print(f"{k.mutation.id:<42} {verdict:<32} {k.seconds:6.2f} s", flush=True)
        print(f"    {k.evidence[:160]}", flush=True)

    try:
        kills = run_catalog(ids, examples=examples, progress=progress)
    except KeyError as exc:
        print(f"machines mutate: {exc.args[0]}", file=sys.stderr)
        return 2
    print("\n" + summary(kills))
    return 0 if all(k.caught_by for k in kills) else 1


def _explore(args: argparse.Namespace) -> int:
    every, default = scopes_of(args.system)
    chosen = args.scope or list(default)
    if "all" in chosen:
        chosen = list(every)
    try:
        models = [
            build_model(
                args.system,
                scope,
                rules=args.rules,
                spec_dir=args.spec_dir,
                symmetry=not args.no_symmetry,
            )
            for scope in chosen
        ]
    except MachinesError as exc:  # an unknown scope or rule set, unreadable definitions
        print(f"machines explore: {exc}", file=sys.stderr)
        return 2
    results = []
    for model in models:
        bar = ProgressBar(sys.stderr, f"{model.name} / {model.scope}")
        result = explore(model, max_states=args.max_states, progress=bar)
        bar.done()
        results.append(result)
        print(result.summary(), flush=True)
        for violation in result.violations:
            print(violation.render(), flush=True)
    states = sum(r.states for r in results)
    seconds = sum(r.seconds for r in results)
    broken = sum(len(r.violations) for r in results)
    exhausted = sum(r.complete for r in results)
    print(
        f"\n{'FAILED' if broken else 'OK'}: {exhausted} of {len(results)} scope(s) exhausted, "
        f"{states:,} distinct states in {seconds:.2f} s ({states / max(seconds, 1e-9):,.0f} "
        f"states/s); {broken} invariant violation(s)"
    )
    return 1 if broken else 0


def print_report(report: Report, out: TextIO, findings: bool = True) -> None:
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
