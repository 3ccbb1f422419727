"""mkdocs hook: publish the generated diagrams (``diagrams/`` at the repository root)
under ``diagrams/`` in the site, so pages link the very files ``machines diagrams`` wrote
and nothing is copied into ``docs/`` by hand; and the JSON Schemas of the reports
(``machines/cli/schemas/``, shipped in the package) under ``schemas/``, the very files
the tests validate real outputs against."""

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
    for path in sorted((ROOT / "machines" / "cli" / "schemas").glob("*.schema.json")):
        files.append(
            File(
                f"schemas/{path.name}",
                src_dir=str(path.parent.parent),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
