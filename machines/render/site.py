"""The generated pages of a site, by their path: those about a set of definitions (what the
mkdocs plugin adds to a user's site) and this package's own reference pages (what
``machines docs`` writes under ``docs/``).

The pages take plain data: what the definitions say, and ``SiteFacts`` that only higher
layers know (what the explorers check, the mutation catalog, the command line's help),
gathered by the CLI, so that rendering imports neither the CLI nor the explorer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from machines.render.format_page import FORMAT_PAGE, format_page
from machines.render.pages import (
    cli_page,
    findings_page,
    invariants_page,
    machine_page,
    rules_page,
)
from machines.spec import MachineSpec
from machines.spec.vocabulary import FINDINGS_PAGE_NAME, RULES_PAGE_NAME

DIAGRAMS = "diagrams"
"""The folder, beside the definition pages, that their diagrams go into."""

FINDINGS_PAGE = f"{FINDINGS_PAGE_NAME}.md"
RULES_PAGE = f"{RULES_PAGE_NAME}.md"
SCHEMA_PATH = "<site-packages>/machines/_spec/machine.schema.json"
"""Where an installed package keeps the schema, as the format page says it."""


@dataclass(frozen=True)
class SiteFacts:
    """What the pages say beyond the definitions.

    ``explorer``: per model, what a breach of each invariant it checks is (id -> text);
    ``mutations``: (id, machine, operator, description, the invariant ids it breaks) per catalogued
    mutation; ``helps``: (command, its ``--help`` text), the top-level one first; ``schema``
    and ``rule_examples``: what the definition format page is made of."""

    explorer: Mapping[str, Mapping[str, str]]
    mutations: Sequence[tuple[str, str, str, str, tuple[str, ...]]]
    helps: Sequence[tuple[str, str]]
    schema: Mapping[str, Any]
    """The parsed JSON Schema of a definition, which the format page is made from."""
    rule_examples: Mapping[str, Mapping[str, Any]]
    """A rule of each kind, as a bundled definition writes it (kind -> the rule)."""


def definition_pages(specs: Sequence[MachineSpec]) -> dict[str, str]:
    """The pages about ``specs``, by their path in one folder: ``<machine>.md`` each (its
    diagrams under ``DIAGRAMS/``), ``FINDINGS_PAGE`` and ``RULES_PAGE``."""
    pages = {f"{spec.name}.md": machine_page(spec, DIAGRAMS) for spec in specs}
    pages[FINDINGS_PAGE] = findings_page(specs)
    pages[RULES_PAGE] = rules_page(specs)
    return pages


def package_pages(specs: Sequence[MachineSpec], facts: SiteFacts) -> dict[str, str]:
    """This package's own reference pages, by their path under ``docs/``: the invariants of
    its systems (which of ``specs`` declare each) and its command line."""
    rules_by_id: dict[str, list[str]] = {}
    for spec in specs:
        for rule in spec.invariants:
            rules_by_id.setdefault(rule.id, []).append(spec.name)
    return {
        "invariants.md": invariants_page(facts.explorer, facts.mutations, rules_by_id),
        "cli.md": cli_page(facts.helps),
        FORMAT_PAGE: format_page(facts.schema, facts.rule_examples, SCHEMA_PATH),
    }
