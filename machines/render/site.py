"""Every generated page of the documentation site, by its path under ``docs/``.

The pages take plain data: what the definitions say, and ``SiteFacts`` that only higher
layers know (what the explorers check, the mutation catalog, the command line's help),
gathered by the CLI, so that rendering imports neither the CLI nor the explorer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from machines.render.pages import cli_page, findings_page, invariants_page, machine_page
from machines.spec import MachineSpec


@dataclass(frozen=True)
class SiteFacts:
    """What the pages say beyond the definitions.

    ``explorer``: per model, what a breach of each invariant it checks is (id -> text);
    ``mutations``: (id, machine, description, the invariant ids it breaks) per catalogued
    mutation; ``helps``: (command, its ``--help`` text), the top-level one first."""

    explorer: Mapping[str, Mapping[str, str]]
    mutations: Sequence[tuple[str, str, str, tuple[str, ...]]]
    helps: Sequence[tuple[str, str]]


def site_pages(specs: Sequence[MachineSpec], facts: SiteFacts) -> dict[str, str]:
    pages = {f"machines/{spec.name}.md": machine_page(spec) for spec in specs}
    rules_by_id: dict[str, list[str]] = {}
    for spec in specs:
        for rule in spec.invariants:
            rules_by_id.setdefault(rule.id, []).append(spec.name)
    pages["invariants.md"] = invariants_page(facts.explorer, facts.mutations, rules_by_id)
    pages["findings.md"] = findings_page(specs)
    pages["cli.md"] = cli_page(facts.helps)
    return pages
