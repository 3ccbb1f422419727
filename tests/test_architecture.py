"""docs/architecture.md matches the tree (issue 15): its layer table is the layers contract
of ``.importlinter``, in order, and its module list names every package and module under
``machines/``, and nothing else."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _layers_contract() -> list[list[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter", encoding="utf-8")
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [[f"machines.{name.strip()}" for name in line.split("|")] for line in lines if line]


def _layer_table() -> list[list[str]]:
    table = PAGE.split("## The layers", 1)[1].split("\n\n")[2]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    return [re.findall(r"`(machines\.[\w.]+)`", row.split("|")[2]) for row in rows]


def test_the_layer_table_is_the_layers_contract() -> None:
    assert _layer_table() == _layers_contract()


def _listed() -> set[str]:
    listing = PAGE.split("<!-- modules -->", 1)[1]
    return set(re.findall(r"^\s*- `(machines/[\w/]*(?:\.py)?)`", listing, re.M))


def _tree() -> set[str]:
    package = ROOT / "machines"
    found = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py":
            found.add(relative.removesuffix("__init__.py"))
        else:
            found.add(relative)
    return found


def test_the_module_list_is_the_tree() -> None:
    listed, tree = _listed(), _tree()
    assert sorted(tree - listed) == [], "modules missing from docs/architecture.md"
    assert sorted(listed - tree) == [], "docs/architecture.md lists what is not in the tree"


def test_the_page_is_in_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "architecture.md" in nav
