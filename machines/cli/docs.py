"""``machines docs``: the pages about a project's definitions, or this package's own
reference pages, and the facts they state beyond the definitions.

For a user's definitions it writes what the mkdocs plugin would add to a site, as files:
``machines/<name>.md`` each, with its diagrams under ``machines/diagrams/``, and the
findings and rules pages (``machines.render.site.definition_pages``). This package's own
pages (the invariants of its systems, its command line, the format reference) are made
only from this package's own machines in its own checkout: in any other project they would
be wrong, and they never land in a user's folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import yaml

from machines.cli.command import Parsers
from machines.cli.generated import generator
from machines.errors import MachinesError
from machines.spec.loader import bundled_spec_dir, definition_paths
from machines.spec.project import in_this_package

if TYPE_CHECKING:
    from machines.render.site import SiteFacts
    from machines.spec import MachineSpec


def facts(specs: Sequence[MachineSpec], parsers: Parsers) -> SiteFacts:
    """What the site says beyond the definitions, from the layers above rendering: what
    each explorer model checks, the mutation catalog, and the help of ``parsers`` (the
    ``machines`` parser and every command's)."""
    from machines.explore.outcome import WHAT as OUTCOME_WHAT
    from machines.explore.transfer import TransferModel
    from machines.explore.transfer_plans import SCOPES
    from machines.mutation.catalog import CATALOG
    from machines.render.format_page import rule_examples
    from machines.render.site import SiteFacts
    from machines.spec.files import read_text
    from machines.spec.loader import schema

    by_name = {spec.name: spec for spec in specs}
    explorer: dict[str, Mapping[str, str]] = {}
    if "request" in by_name and "node" in by_name:
        model = TransferModel(by_name["request"], by_name["node"], SCOPES["withdraw"])
        explorer["transfer"] = dict(model.what)
    explorer["exactly-once"] = dict(OUTCOME_WHAT)
    parser, commands = parsers
    helps = [("machines", parser.format_help())]
    helps += [(f"machines {name}", command.format_help()) for name, command in commands.items()]
    documents = [yaml.safe_load(read_text(p)) for p in definition_paths(bundled_spec_dir())]
    return SiteFacts(
        explorer=explorer,
        mutations=[(m.id, m.machine, m.change.operator, m.description, m.breaks) for m in CATALOG],
        helps=helps,
        schema=schema(),
        rule_examples=rule_examples(documents),
    )


def _pages(specs: Sequence[MachineSpec], parsers: Parsers) -> dict[str, str]:
    from machines.render.site import package_pages

    if _bundled(specs):
        return package_pages(specs, facts(specs, parsers))
    return project_pages(specs)


def _bundled(specs: Sequence[MachineSpec]) -> bool:
    """Whether ``specs`` are this package's own machines, in its own checkout (where a
    maintainer edits them, and the reference pages must follow)."""
    ours = sorted(path.stem for path in definition_paths(bundled_spec_dir()))
    return sorted(spec.name for spec in specs) == ours and in_this_package()


PAGES_FOLDER = "machines"
"""The folder, under the docs folder, that a project's machine pages go into: where the
mkdocs plugin puts them on a site by default, so the links between the pages are the same."""


def project_pages(specs: Sequence[MachineSpec]) -> dict[str, str]:
    """The pages about a user's ``specs`` and their diagrams, by their path under the docs
    folder; a ``MachinesError`` when Graphviz cannot draw the SVG the pages show."""
    from machines.render.files import INSTALL_GRAPHVIZ, diagram_files
    from machines.render.site import DIAGRAMS, definition_pages

    drawings, drawn = diagram_files(specs)
    if not drawn:
        raise MachinesError(f"cannot draw the diagrams the pages show: {INSTALL_GRAPHVIZ}")
    pages = {f"{PAGES_FOLDER}/{name}": text for name, text in definition_pages(specs).items()}
    return pages | {f"{PAGES_FOLDER}/{DIAGRAMS}/{name}": text for name, text in drawings.items()}


COMMAND = generator(
    "docs",
    help="write a page per machine, with its diagram, and the findings and rules pages "
    "into docs/machines/ (the pages the mkdocs plugin adds to a site, as files)",
    what="page",
    files_of=_pages,
)
