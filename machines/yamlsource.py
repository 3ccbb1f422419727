"""Read a YAML definition and remember where every value came from.

PyYAML quietly keeps the last of two equal keys and forgets line numbers once it builds
Python objects. A definition error must name its line, and a duplicated key must never be
dropped, so we compose the node tree ourselves and keep a map from key path to line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from machines.errors import SpecUnreadable

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class YamlSource:
    """A parsed document plus the line (1-based) of every key path in it."""

    path: Path
    data: Any
    lines: Mapping[KeyPath, int]

    def line_of(self, key_path: KeyPath) -> int | None:
        """The line of ``key_path``, or of its nearest ancestor that has one."""
        for end in range(len(key_path), -1, -1):
            line = self.lines.get(tuple(key_path[:end]))
            if line is not None:
                return line
        return None

    def where(self, key_path: KeyPath) -> str:
        """``line N, at a.b[2].c`` for messages."""
        line = self.line_of(key_path)
        dotted = format_key_path(key_path) or "<document>"
        return f"line {line}, at {dotted}" if line is not None else f"at {dotted}"


def format_key_path(key_path: KeyPath) -> str:
    out = ""
    for part in key_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_yaml(path: Path) -> YamlSource:
    """Parse ``path``; raise ``SpecUnreadable`` naming the file and line on any failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecUnreadable(path, [f"cannot read the file: {exc}"]) from exc
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path) -> YamlSource:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError as exc:
        raise SpecUnreadable(path, ["the YAML nests too deeply to be a definition"]) from exc
    except yaml.YAMLError as exc:
        raise SpecUnreadable(path, [f"{_yaml_problem(exc, text)}; fix the syntax"]) from exc
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag.endswith(":null")):
        raise SpecUnreadable(path, ["the file is empty; a definition is a YAML mapping"])
    builder = _Builder()
    try:
        data = builder.build(root, ())
    except RecursionError as exc:
        raise SpecUnreadable(path, ["the YAML nests too deeply to be a definition"]) from exc
    except _Unbuildable as exc:
        raise SpecUnreadable(path, [str(exc)]) from exc
    except yaml.YAMLError as exc:
        raise SpecUnreadable(path, [_yaml_problem(exc, text)]) from exc
    if builder.problems:
        raise SpecUnreadable(path, builder.problems)
    return YamlSource(path=path, data=data, lines=builder.lines)


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """One line: where (when PyYAML knows) and what, without PyYAML's source excerpt."""
    mark = getattr(exc, "problem_mark", None)
    position = getattr(exc, "position", None)
    if mark is not None:
        where = f"line {mark.line + 1}: "
    elif isinstance(position, int):
        where = f"line {text.count(chr(10), 0, position) + 1}: "
    else:
        where = ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}not valid YAML for a definition ({problem})"


_MAX_VALUES = 200_000  # a definition has a few thousand; this stops alias bombs


class _Unbuildable(Exception):
    """The node tree cannot become a definition (recursive or exploding aliases)."""


class _Builder:
    """Turns a composed node tree into plain data, recording lines and key problems."""

    def __init__(self) -> None:
        self.lines: dict[KeyPath, int] = {}
        self.problems: list[str] = []
        self._constructor = yaml.SafeLoader(stream="")
        self._open: set[int] = set()
        self._budget = _MAX_VALUES

    def build(self, node: yaml.Node, key_path: KeyPath) -> Any:
        if id(node) in self._open:
            raise _Unbuildable(f"a recursive alias at {format_key_path(key_path)}; remove it")
        self._budget -= 1
        if self._budget < 0:
            raise _Unbuildable(
                f"more than {_MAX_VALUES:,} values once aliases are expanded; a definition has "
                "a few thousand (is this an alias bomb?)"
            )
        self.lines.setdefault(key_path, node.start_mark.line + 1)
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, key_path)
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*key_path, i)) for i, item in enumerate(node.value)]
            return self._constructor.construct_object(node, deep=True)
        finally:
            self._open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, key_path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        here = format_key_path(key_path) or "<document>"
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.problems.append(
                    f"line {line}: merge keys (<<) are not supported at {here}; write the keys out"
                )
                continue
            key = (
                self._constructor.construct_object(key_node, deep=True)
                if isinstance(key_node, yaml.ScalarNode)
                else None
            )
            if not isinstance(key, str):
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a collection"
                self.problems.append(
                    f"line {line}: key {shown!r} at {here} is read as {type(key).__name__}, "
                    "not a string (YAML reads yes/no/on/off and numbers that way); quote it"
                )
                continue
            if key in out:
                self.problems.append(
                    f"line {line}: duplicate key '{key}' at {here}; YAML would silently keep "
                    "only the last one, so remove or rename one of them"
                )
                continue
            child = (*key_path, key)
            self.lines[child] = line
            out[key] = self.build(value_node, child)
        return out
