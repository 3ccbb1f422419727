"""One machine in forms other tools load: the definition itself in YAML or JSON (which
``machines.load`` reads back), SQL (the store schema), Mermaid and Graphviz DOT (the
diagrams)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from machines.render.dot import to_dot
from machines.render.mermaid import to_mermaid
from machines.spec import MachineSpec
from machines.spec.document import as_document, as_json

__all__ = ["DEFINITION_FORMATS", "FORMATS", "as_document", "as_json", "as_yaml", "export"]

FORMATS = ("yaml", "json", "sql", "postgresql", "mermaid", "dot", "python")

DEFINITION_FORMATS = ("yaml", "json")
"""The formats that write the definition itself: saved as ``NAME.yaml`` or ``NAME.json``,
the file loads (``machines.load``) to a spec with the same definition
(``MachineSpec.same_definition``)."""


class _Dumper(yaml.SafeDumper):
    """Block style but for lists of names (``[small, large]``), no anchors, and a text of
    several lines as a literal block."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """A literal block for several lines; double quotes (which escape them) for a text
    holding a line break YAML 1.1 has beyond ``\\n`` (NEL, the line and paragraph
    separators): PyYAML writes those as they are elsewhere, and reads them back as a
    line break, so ``a\\x85b`` would come back as ``a b``."""
    style = '"' if _OTHER_BREAKS & set(text) else "|" if "\n" in text else None
    if style is None and (text in _RETYPED_BY_YAML_11 or _YAML_NUMBER.fullmatch(text)):
        style = "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_OTHER_BREAKS = frozenset("\x85\u2028\u2029")
_RETYPED_BY_YAML_11 = frozenset({"y", "Y", "n", "N", "="})
"""Plain scalars a YAML 1.1 reader retypes that PyYAML's resolver leaves as text, so it
would write them bare: the booleans ``y`` and ``n`` and the value key ``=``. The export is
for any language's reader, so they are quoted."""


_YAML_NUMBER = re.compile(
    r"[-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?"  # float, as the 1.1 type page has it
    r"|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*"
    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)"
    r"|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+"  # int
    r"|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+"
    r"|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|0o[0-7]+"  # YAML 1.2's core schema
)
"""The YAML 1.1 type pages' patterns for floats and integers, which are looser than
PyYAML's resolver (``-.5``, ``+.5``, ``1.2.3``, ``+.``), and YAML 1.2's core schema ones
(``1e5``, ``0o17``), which a 1.1 reader such as PyYAML takes for text: a plain scalar
any of them matches is quoted, so that no reader of either version takes a text for a
number."""


def _list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.SequenceNode:
    flow = all(isinstance(item, str) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flow)


_Dumper.add_representer(str, _text)
_Dumper.add_representer(list, _list)


def as_yaml(spec: MachineSpec) -> str:
    """``spec`` as a YAML definition (``as_document``); PyYAML quotes every text that YAML
    would read as something else (``'on'``, ``'004'``, ``'*'``)."""
    return yaml.dump(
        as_document(spec),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=88,
    )


def export(spec: MachineSpec, fmt: str) -> str:
    """``spec`` in format ``fmt`` (one of ``FORMATS``). The schema writers are imported by
    the format that needs them: ``machines --help`` reads ``FORMATS`` and should not load
    the stores."""
    if fmt == "yaml":
        return as_yaml(spec)
    if fmt == "json":
        return as_json(spec)
    if fmt == "sql":
        from machines.store.ddl import sqlite_schema

        return sqlite_schema(spec)
    if fmt == "postgresql":
        from machines.store.ddl_postgres import postgres_schema

        return postgres_schema(spec)
    if fmt == "mermaid":
        return to_mermaid(spec)
    if fmt == "dot":
        return to_dot(spec)
    if fmt == "python":
        from machines.render.python_names import python_names

        return python_names(spec)
    raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
