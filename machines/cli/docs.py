"""``machines docs``: the documentation site's pages about the machines, and the facts
they state beyond the definitions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from machines.cli.command import Parsers
from machines.cli.generated import generator

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
    from machines.mutation import CATALOG
    from machines.render.site import SiteFacts

    by_name = {spec.name: spec for spec in specs}
    explorer: dict[str, Mapping[str, str]] = {}
    if "request" in by_name and "node" in by_name:
        model = TransferModel(by_name["request"], by_name["node"], SCOPES["withdraw"])
        explorer["transfer"] = dict(model.what)
    explorer["exactly-once"] = dict(OUTCOME_WHAT)
    parser, commands = parsers
    helps = [("machines", parser.format_help())]
    helps += [(f"machines {name}", command.format_help()) for name, command in commands.items()]
    return SiteFacts(
        explorer=explorer,
        mutations=[(m.id, m.machine, m.description, m.breaks) for m in CATALOG],
        helps=helps,
    )


def _pages(specs: Sequence[MachineSpec], parsers: Parsers) -> dict[str, str]:
    from machines.render.site import site_pages

    return site_pages(specs, facts(specs, parsers))


COMMAND = generator(
    "docs",
    help="generate the documentation site's pages about the machines into docs/",
    what="page",
    files_of=_pages,
)
