"""mkdocs hook: publish the generated diagrams (``diagrams/`` at the repository root)
under ``diagrams/`` in the site, so pages link the very files ``machines diagrams`` wrote
and nothing is copied into ``docs/`` by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent


def on_files(files: Files, config: Any) -> Files:
    for path in sorted((ROOT / "diagrams").glob("*")):
        if path.suffix in (".svg", ".dot", ".mmd"):
            files.append(
                File(
                    f"diagrams/{path.name}",
                    src_dir=str(ROOT),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files
