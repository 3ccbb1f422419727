"""``machines docs``: this package's own reference pages (the invariants of its bundled
systems, its command line), and the facts they state beyond the definitions.

They are about this package, so they are made only from its bundled definitions (or an
edited copy of them, which ``--spec-dir`` names for a test): for a user's own definitions
they would be wrong, and the command says to publish those with the mkdocs plugin instead.
The pages about each machine are the plugin's too (``machines.render.mkdocs_plugin``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import yaml

from machines.cli.command import Parsers
from machines.cli.generated import generator
from machines.errors import InvalidArgument, install_command
from machines.spec.loader import bundled_spec_dir, definition_paths

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

    ours = sorted(path.stem for path in definition_paths(bundled_spec_dir()))
    theirs = sorted(spec.name for spec in specs)
    if theirs != ours:
        raise InvalidArgument(
            f"--spec-dir holds {', '.join(theirs)}, not this package's machines "
            f"({', '.join(ours)}); machines docs writes this package's own pages (the "
            "invariants of its systems, its command line), nothing about yours. Publish your "
            "definitions with the mkdocs plugin: add '- machines: {spec_dir: <your spec "
            f"dir>}}' to the plugins of your mkdocs.yml ({install_command('site')}; guide: "
            "docs/guide/site.md)"
        )
    return package_pages(specs, facts(specs, parsers))


COMMAND = generator(
    "docs",
    help="write this package's own reference pages (its systems' invariants, its command "
    "line) into docs/; publish your definitions with the mkdocs plugin",
    what="page",
    files_of=_pages,
)
