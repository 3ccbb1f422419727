"""mkdocs hook of this repository's site: publish the JSON Schemas of the reports
(``machines/cli/schemas/``, shipped in the package) under ``schemas/``, the very files the
tests validate real outputs against. The machine pages and diagrams come from the
``machines`` plugin, which users have too; this hook is the site's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

SCHEMAS = Path(__file__).resolve().parent / "machines" / "cli" / "schemas"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        files.append(
            File(
                f"schemas/{path.name}",
                src_dir=str(path.parent.parent),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
