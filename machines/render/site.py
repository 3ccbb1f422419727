"""Every generated page of the documentation site, by its path under ``docs/``."""

from __future__ import annotations

from collections.abc import Sequence

from machines.render.pages import cli_page, findings_page, invariants_page, machine_page
from machines.spec import MachineSpec


def site_pages(specs: Sequence[MachineSpec]) -> dict[str, str]:
    from machines.cli import build_parser
    from machines.explore_outcome import WHAT as OUTCOME_WHAT
    from machines.explore_transfer import SCOPES, TransferModel
    from machines.mutation import CATALOG

    by_name = {spec.name: spec for spec in specs}
    pages = {f"machines/{spec.name}.md": machine_page(spec) for spec in specs}
    explorer: dict[str, dict[str, str]] = {}
    if "request" in by_name and "node" in by_name:
        model = TransferModel(by_name["request"], by_name["node"], SCOPES["withdraw"])
        explorer["transfer"] = dict(model.what)
    explorer["exactly-once"] = dict(OUTCOME_WHAT)
    rules_by_id: dict[str, list[str]] = {}
    for spec in specs:
        for rule in spec.invariants:
            rules_by_id.setdefault(rule.id, []).append(spec.name)
    mutations = [(m.id, m.machine, m.description, m.breaks) for m in CATALOG]
    pages["invariants.md"] = invariants_page(explorer, mutations, rules_by_id)
    pages["findings.md"] = findings_page(specs)
    parser, commands = build_parser()
    helps = [("machines", parser.format_help())]
    helps += [(f"machines {name}", command.format_help()) for name, command in commands.items()]
    pages["cli.md"] = cli_page(helps)
    return pages
