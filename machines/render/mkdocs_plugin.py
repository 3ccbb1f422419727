"""The ``machines`` mkdocs plugin: a site's pages about a directory of definitions, made as
the site builds, so that no generated file is committed and no page can be stale.

A user adds ``- machines: {spec_dir: specs}`` to the ``plugins`` of their ``mkdocs.yml``
(``pip install 'effect-machines[site]'``; the guide is ``docs/guide/site.md``). For every
definition in ``spec_dir`` the site gets a page (states, actors, context, transitions with
their actors and guards, forbidden moves, its rules and findings) and its diagram (SVG drawn
by Graphviz, with the DOT and Mermaid sources beside it), and one page of every finding and
one of every rule, all under ``pages_dir``. Everything fails closed: an unknown option, a
missing ``spec_dir``, a definition that does not load (named with its file and line), a page
of the user's own at a generated path, or no Graphviz ``dot`` binary stops the build with a
message that says what to do.

mkdocs is an optional dependency: nothing else in the package imports this module.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.config import base
from mkdocs.config import config_options as c
from mkdocs.config.base import ValidationError
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin
from mkdocs.structure import StructureItem
from mkdocs.structure.files import File, Files
from mkdocs.structure.nav import Navigation, Section
from mkdocs.structure.pages import Page

from machines.errors import SpecError, install_command
from machines.render.dot import to_dot
from machines.render.files import INSTALL_GRAPHVIZ, render_svg
from machines.render.mermaid import to_mermaid
from machines.render.site import DIAGRAMS, FINDINGS_PAGE, RULES_PAGE, definition_pages
from machines.spec import MachineSpec
from machines.spec.loader import definition_paths, load
from machines.spec.routing import suggest

NAME = "machines"
"""The plugin's name in ``mkdocs.yml`` (the ``mkdocs.plugins`` entry point)."""


class _Folder(c.Type[str]):
    """A folder inside the site, written with ``/``: relative, and never above the site."""

    def __init__(self, default: str) -> None:
        super().__init__(str, default=default)

    def run_validation(self, value: object) -> str:
        text = super().run_validation(value)
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if not parts or text.startswith("/") or "\\" in text or ".." in parts:
            raise ValidationError(
                f"{text!r} is not a folder inside the site: give a relative path such as "
                "'machines', with / between folders and no '..'"
            )
        return "/".join(parts)


class MachinesConfig(base.Config):  # type: ignore[no-untyped-call]
    """The plugin's options, validated by mkdocs before anything is built."""

    spec_dir = c.Dir(exists=True)
    """Required: the directory of the definitions (``*.yaml``), relative to mkdocs.yml."""
    pages_dir = _Folder(default="machines")
    """The folder of the site the pages go into (``<pages_dir>/<machine>.md``,
    ``findings.md``, ``rules.md``, and the diagrams under ``diagrams/``)."""
    nav_section = c.Type(str, default="Machines")
    """The title of the navigation's section of the pages: of the section mkdocs makes of
    their folder when there is no ``nav``, or of the one added to a ``nav`` that names none
    of them (a ``nav`` that names one is left as it is)."""


OPTIONS = tuple(name for name, _ in MachinesConfig._schema)
"""The names of the options, from their declarations above."""


class MachinesPlugin(BasePlugin[MachinesConfig]):  # type: ignore[no-untyped-call]
    """Adds the pages and diagrams of ``spec_dir``'s definitions to the site (``on_files``)
    and, to a hand-written ``nav`` that names none of them, a section of them; titles the
    section of them in a navigation mkdocs makes itself (``on_nav``)."""

    def __init__(self) -> None:
        super().__init__()
        self._pages: frozenset[str] = frozenset()
        self._auto_nav = False

    def load_config(
        self, options: dict[str, Any], config_file_path: str | None = None
    ) -> tuple[list[tuple[str, Exception]], list[tuple[str, str]]]:
        """mkdocs only warns about an unknown option (a typo such as ``specdir``); here it
        is an error, so a misspelled option never builds a site that ignores it."""
        errors, warnings = super().load_config(options, config_file_path)
        for key in options:
            if key not in OPTIONS:
                errors.append(
                    (
                        key,
                        ValidationError(
                            f"not an option of the {NAME} plugin{suggest(key, OPTIONS)}; "
                            f"its options: {', '.join(OPTIONS)}"
                        ),
                    )
                )
        warnings = [(k, w) for k, w in warnings if k in OPTIONS]
        return errors, warnings

    def on_config(self, config: MkDocsConfig) -> MkDocsConfig | None:
        """Refuse an mkdocs too old for in-memory pages (``File.generated``, mkdocs 1.6)."""
        if not hasattr(File, "generated"):
            raise PluginError(
                f"{NAME} plugin: needs mkdocs 1.6 or later (pages made in memory); "
                f"upgrade it: {install_command('site')}"
            )
        return config

    def on_files(self, files: Files, /, *, config: MkDocsConfig) -> Files:
        specs = _definitions(Path(self.config.spec_dir))
        folder = self.config.pages_dir
        made = {f"{folder}/{name}": text for name, text in definition_pages(specs).items()}
        diagrams: dict[str, str] = {}
        for spec in specs:
            dot = to_dot(spec)
            svg = render_svg(dot)
            if svg is None:
                raise PluginError(
                    f"{NAME} plugin: cannot draw the diagram of {spec.name!r}: {INSTALL_GRAPHVIZ}"
                )
            where = f"{folder}/{DIAGRAMS}/{spec.name}"
            diagrams |= {f"{where}.svg": svg, f"{where}.dot": dot, f"{where}.mmd": to_mermaid(spec)}
        for uri in [*made, *diagrams]:
            theirs = files.get_file_from_path(uri)
            if theirs is not None:
                raise PluginError(
                    f"{NAME} plugin: {theirs.abs_src_path or uri} is in the way of the page "
                    f"the plugin makes at {uri}; move it, or choose another pages_dir"
                )
        for uri, text in {**made, **diagrams}.items():
            files.append(File.generated(config, uri, content=text))
        pages = {spec.name: f"{folder}/{spec.name}.md" for spec in specs}
        pages |= {"Findings": f"{folder}/{FINDINGS_PAGE}", "Rules": f"{folder}/{RULES_PAGE}"}
        self._pages = frozenset(pages.values())
        self._auto_nav = config.nav is None
        if config.nav is not None and not self._pages & set(_named(config.nav)):
            section = [{title: page} for title, page in pages.items()]
            config.nav.append({self.config.nav_section: section})
        return files

    def on_nav(self, nav: Navigation, /, *, config: MkDocsConfig, files: Files) -> Navigation:
        """Without a ``nav``, mkdocs titles the folder of the pages by its name: the
        section holding them is given ``nav_section`` instead."""
        if self._auto_nav:
            for section in _sections(nav.items):
                if any(
                    isinstance(child, Page) and child.file.src_uri in self._pages
                    for child in section.children
                ):
                    section.title = self.config.nav_section
        return nav

    def on_serve(self, server: Any, /, *, config: MkDocsConfig, builder: Any) -> Any:
        """``mkdocs serve`` rebuilds when a definition changes."""
        server.watch(self.config.spec_dir)
        return server


def _definitions(spec_dir: Path) -> list[MachineSpec]:
    """Every definition of ``spec_dir``, fully checked as ``machines.load`` checks one."""
    try:
        return [load(path) for path in definition_paths(spec_dir)]
    except SpecError as exc:
        raise PluginError(f"{NAME} plugin: {exc}") from exc


def _sections(items: list[StructureItem]) -> Iterator[Section]:
    for item in items:
        if isinstance(item, Section):
            yield item
            yield from _sections(item.children)


def _named(nav: object) -> Iterator[str]:
    """Every page path a ``nav`` (as written in mkdocs.yml) names, normalized."""
    if isinstance(nav, str):
        yield posixpath.normpath(nav)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _named(value)
    elif isinstance(nav, list):
        for item in nav:
            yield from _named(item)
