"""Parse a YAML definition, within bounds, and remember where every value came from.

PyYAML quietly keeps the last of two equal keys and forgets line numbers once it builds
Python objects. A definition error must name its line, and a duplicated key must never be
dropped, so we compose the node tree ourselves and keep a map from key path to line.

A definition is untrusted input, so every step is bounded before it starts. The text comes
from ``machines.spec.files`` (a regular file of at most 1 MiB). The composed node tree is
vetted once per distinct node, before any value is built: every YAML tag must be one the
format uses and fit its node, and the document with its aliases expanded must stay within
``MAX_VALUES`` values and ``MAX_TEXT`` characters, so an alias bomb is refused after a few
nodes instead of after building millions. Every message that shows a piece of the input
shows it through ``quote`` (a value) or ``clip`` (a text that embeds input), cut short.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from machines.errors import SpecUnreadable
from machines.spec.files import MAX_DEFINITION_BYTES, read_text
from machines.spec.jsonvalue import describe
from machines.spec.records import KeyPath, nearest_line

MAX_VALUES = 200_000
"""The most values (scalars, lists and mappings, keys included) a document may hold once
its aliases are expanded. The bundled definitions hold under 1,000."""

MAX_TEXT = MAX_DEFINITION_BYTES
"""The most characters of scalar text a document may hold once its aliases are expanded:
no more than the largest file could spell out without aliases."""

MAX_NUMBER_CHARS = 64
"""The longest number read: a definition's numbers are versions and flags, and a longer
one (``1:2:3:...`` is read in base 60) would cost time out of proportion to its size."""

MAX_PROBLEMS = 100
"""A message lists at most this many problems, then says how many more there are."""

QUOTE_LIMIT = 80
"""The most characters of one input value a message shows."""

MESSAGE_LIMIT = 1000
"""The most characters of one problem line, whatever it embeds."""

_CORE = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL = (_CORE + name for name in ("str", "int", "float", "bool", "null"))
SEQ, MAP, MERGE = (_CORE + name for name in ("seq", "map", "merge"))
_READS_AS = {INT: "an integer", FLOAT: "a number", BOOL: "a boolean", NULL: "null"}
"""The scalar tags a definition uses besides ``str``; a value so tagged must be spelled as
YAML spells that type (``!!int abc`` and ``!!null x`` are refused, not guessed at)."""


# -- showing input in messages ---------------------------------------------------------------


def quote(value: object) -> str:
    """How a message shows one value from the input: its repr, cut to ``QUOTE_LIMIT``."""
    return describe(value, QUOTE_LIMIT)


def clip(text: str) -> str:
    """A problem line (which may embed input, e.g. PyYAML's) cut to ``MESSAGE_LIMIT``."""
    return text if len(text) <= MESSAGE_LIMIT else f"{text[: MESSAGE_LIMIT - 3]}..."


def bounded(problems: Sequence[str]) -> list[str]:
    """The problems a message lists: at most ``MAX_PROBLEMS``, each clipped."""
    shown = [clip(p) for p in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"... and {len(problems) - MAX_PROBLEMS:,} more problems; fix these first")
    return shown


_LINE_PREFIX = re.compile(r"line ([0-9]+)(?:, |: )")


def split_line(problem: str) -> tuple[int | None, str]:
    """A problem line as ``where`` and the loader write it (``line 12, at a.b: text``, or
    ``line 12: text``) split into its line and the rest (``at a.b: text``); ``None`` and
    the whole text when it names no line."""
    match = _LINE_PREFIX.match(problem)
    if match is None:
        return None, problem
    return int(match.group(1)), problem[match.end() :]


def format_key_path(key_path: KeyPath) -> str:
    out = ""
    for part in key_path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        shown = part if len(part) <= QUOTE_LIMIT else quote(part)
        out += f".{shown}" if out else shown
    return out


# -- the parsed document ---------------------------------------------------------------------


def misread(value: object, token: str | None, quoting_fixes: bool = True) -> str | None:
    """Why a plain value that YAML read as a boolean, null or a number is not the text it
    looks like, and the fix (quote it); ``None`` for any other value. ``token`` is the value
    as the file spells it, when known (``on`` for ``True``); ``quoting_fixes=False``: the
    quoted token would be refused too (``'~'`` is no name), so null says write the value."""
    if isinstance(value, bool):
        spelled = token or str(value).lower()
        return (
            f"{spelled} is read as the boolean {str(value).lower()}, not a string: YAML "
            "reads on/off, yes/no and true/false unquoted as booleans (and y/n in YAML "
            f"1.1); quote it: {quote(spelled)}"
        )
    if value is None:
        if not token or not quoting_fixes:
            spelled = f"{token} is" if token else "an empty value is"
            return f"{spelled} read as null, not a string: write the value"
        return (
            f"{token} is read as null, not a string: YAML reads ~ and null unquoted as "
            f"null; quote it: {quote(token)}, or write the value"
        )
    if isinstance(value, int | float):
        spelled = token or repr(value)
        read = "a number" if spelled == repr(value) else f"the number {value!r}"
        return (
            f"{spelled} is read as {read}, not a string: YAML reads an unquoted number "
            f"as a number (1.10 as 1.1, 012 as 10); quote it: {quote(spelled)}"
        )
    return None


@dataclass(frozen=True)
class YamlSource:
    """A parsed document plus the line (1-based) of every key path in it, and how the file
    spells each value that YAML read as something other than a string (``on``, ``~``,
    ``1.10``), for messages about values misread."""

    path: Path
    data: Any
    lines: Mapping[KeyPath, int]
    tokens: Mapping[KeyPath, str] = field(default_factory=dict)

    def line_of(self, key_path: KeyPath) -> int | None:
        """The line of ``key_path``, or of its nearest ancestor that has one."""
        return nearest_line(self.lines, key_path)

    def where(self, key_path: KeyPath) -> str:
        """``line N, at a.b[2].c`` for messages."""
        line = self.line_of(key_path)
        dotted = format_key_path(key_path) or "<document>"
        return f"line {line}, at {dotted}" if line is not None else f"at {dotted}"


# -- the YAML ----------------------------------------------------------------------------------


def read_yaml(path: Path) -> YamlSource:
    """Read and parse ``path``; raise ``SpecUnreadable`` naming the file and line on any
    failure."""
    return parse_yaml(read_text(path), path)


def parse_yaml(text: str, path: Path) -> YamlSource:
    """Parse ``text`` (already bounded by ``read_text``) read from ``path``. A ``.json``
    file is read as YAML (JSON is YAML), but for the raw characters YAML reads as a line
    break inside a string where JSON does not: those are refused, not misread."""
    if path.suffix == ".json":
        _refuse_yaml_breaks(text, path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError as exc:
        raise SpecUnreadable(path, ["the YAML nests too deeply to be a definition"]) from exc
    except yaml.YAMLError as exc:
        raise SpecUnreadable(path, [f"{_yaml_problem(exc, text)}; fix the syntax"]) from exc
    if root is None:
        raise SpecUnreadable(path, [_EMPTY])
    constructor = yaml.SafeLoader(stream="")
    vetter = _Vetter(constructor)
    builder = _Builder(constructor)
    try:
        vetter.size(root)
        if vetter.problems:
            raise SpecUnreadable(path, bounded(vetter.problems))
        data = builder.build(root, ())
    except RecursionError as exc:
        raise SpecUnreadable(path, ["the YAML nests too deeply to be a definition"]) from exc
    except _Unbuildable as exc:
        raise SpecUnreadable(path, [str(exc)]) from exc
    except yaml.YAMLError as exc:
        raise SpecUnreadable(path, [_yaml_problem(exc, text)]) from exc
    if builder.problems:
        raise SpecUnreadable(path, bounded(builder.problems))
    if data is None:
        raise SpecUnreadable(path, [_EMPTY])
    return YamlSource(path=path, data=data, lines=builder.lines, tokens=builder.tokens)


_EMPTY = "the file is empty; a definition is a YAML mapping"

_YAML_ONLY_BREAKS = "\x85\u2028\u2029"
"""NEL, the line separator and the paragraph separator: text in JSON, line breaks in YAML."""


def _refuse_yaml_breaks(text: str, path: Path) -> None:
    for char in _YAML_ONLY_BREAKS:
        at = text.find(char)
        if at != -1:
            code = f"{ord(char):04x}"
            raise SpecUnreadable(
                path,
                [
                    f"line {text.count(chr(10), 0, at) + 1}: a raw U+{code.upper()} "
                    "character, which a YAML reader (this one) reads as a line break; write "
                    f"it as the escape \\u{code}"
                ],
            )


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
    return clip(f"{where}not valid YAML for a definition ({problem})")


class _Unbuildable(Exception):
    """The node tree cannot become a definition (recursive or exploding aliases)."""


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _shown_tag(tag: str) -> str:
    return quote(f"!!{tag[len(_CORE) :]}" if tag.startswith(_CORE) else tag)


class _Vetter:
    """One pass over the distinct nodes of a composed tree, before anything is built: the
    tags, the numbers, and the size with aliases expanded (memoized per node, so an alias
    costs one lookup however often it is used)."""

    def __init__(self, constructor: yaml.SafeLoader) -> None:
        self.problems: list[str] = []
        self._constructor = constructor
        self._resolve = cast(Callable[..., str], constructor.resolve)  # untyped in the stubs
        self._sizes: dict[int, tuple[int, int]] = {}
        self._open: set[int] = set()

    def size(self, node: yaml.Node, *, is_key: bool = False) -> tuple[int, int]:
        """(values, characters) of ``node`` with its aliases expanded; raise
        ``_Unbuildable`` as soon as either passes its bound."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in self._open:
            raise _Unbuildable(
                f"line {_line(node)}: a recursive alias (an anchor used inside itself); remove it"
            )
        if isinstance(node, yaml.ScalarNode):
            self._scalar(node, is_key)
            values, chars = 1, len(node.value)
        else:
            self._collection(node)
            self._open.add(id(node))
            values, chars = 1, 0
            for child, child_is_key in self._children(node):
                more, text = self.size(child, is_key=child_is_key)
                values, chars = values + more, chars + text
                if values > MAX_VALUES or chars > MAX_TEXT:
                    raise _Unbuildable(self._too_big(node, values > MAX_VALUES))
            self._open.discard(id(node))
        self._sizes[id(node)] = (values, chars)
        return values, chars

    @staticmethod
    def _children(node: yaml.Node) -> Iterator[tuple[yaml.Node, bool]]:
        if isinstance(node, yaml.SequenceNode):
            for item in node.value:
                yield item, False
        else:
            for key, value in node.value:
                yield key, True
                yield value, False

    @staticmethod
    def _too_big(node: yaml.Node, values: bool) -> str:
        what = f"{MAX_VALUES:,} values" if values else f"{MAX_TEXT:,} characters of text"
        return (
            f"line {_line(node)}: more than {what} once aliases are expanded; a definition "
            "holds a few thousand values, so this is refused before anything is built "
            "(an alias bomb?)"
        )

    def _collection(self, node: yaml.Node) -> None:
        is_map = isinstance(node, yaml.MappingNode)
        if node.tag != (MAP if is_map else SEQ):
            self.problems.append(
                f"line {_line(node)}: the YAML tag {_shown_tag(node.tag)} on a "
                f"{'mapping' if is_map else 'list'} is not part of the definition format; "
                "remove it"
            )

    def _scalar(self, node: yaml.ScalarNode, is_key: bool) -> None:
        tag, value = node.tag, node.value
        if tag == STR or (tag == MERGE and is_key):  # the builder refuses merge keys itself
            return
        plain = self._resolve(yaml.ScalarNode, value, (True, False))
        if tag not in _READS_AS:
            if plain == tag:  # a value YAML reads as a type the format does not use
                problem = (
                    f"{quote(value)} is read as {_shown_tag(tag)}, which is not part of the "
                    "definition format; write it as a quoted string"
                )
            else:
                problem = (
                    f"the YAML tag {_shown_tag(tag)} is not part of the definition format, "
                    "which uses only plain strings, numbers, booleans, null, lists and "
                    "mappings; remove it"
                )
            self.problems.append(f"line {_line(node)}: {problem}")
            return
        if len(value) > MAX_NUMBER_CHARS:
            problem = (
                f"{quote(value)} is read as {_READS_AS[tag]} of {len(value):,} characters; "
                f"a definition's are at most {MAX_NUMBER_CHARS}"
            )
        elif plain == tag and self._constructs(node):
            return
        else:
            problem = f"{quote(value)} is not {_READS_AS[tag]} as YAML spells one"
        self.problems.append(
            f"line {_line(node)}: {problem} (tagged {_shown_tag(tag)}); "
            "quote it if it is text, or fix it"
        )

    def _constructs(self, node: yaml.ScalarNode) -> bool:
        """Whether PyYAML builds the value (it raises on ``0b_``, which its int pattern
        admits); the value is kept for the builder."""
        try:
            self._constructor.construct_object(node, deep=True)
        except (ArithmeticError, LookupError, TypeError, ValueError, yaml.YAMLError):
            return False
        return True


class _Builder:
    """Turns a vetted node tree into plain data, recording lines and key problems."""

    def __init__(self, constructor: yaml.SafeLoader) -> None:
        self.lines: dict[KeyPath, int] = {}
        self.tokens: dict[KeyPath, str] = {}
        self.problems: list[str] = []
        self._constructor = constructor

    def build(self, node: yaml.Node, key_path: KeyPath) -> Any:
        self.lines.setdefault(key_path, _line(node))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, key_path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*key_path, i)) for i, item in enumerate(node.value)]
        if node.tag != STR:
            self.tokens[key_path] = node.value
        return self._constructor.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, key_path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        here = format_key_path(key_path) or "<document>"
        for key_node, value_node in node.value:
            line = _line(key_node)
            if key_node.tag == MERGE:
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
                token = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                why = misread(key, token) if token is not None else None
                self.problems.append(
                    f"line {line}, at {here}: the key {why}"
                    if why is not None
                    else f"line {line}, at {here}: a key that is "
                    f"{'a collection' if token is None else type(key).__name__}, not a "
                    "string; a key is a name: write one"
                )
                continue
            if key in out:
                self.problems.append(
                    f"line {line}: duplicate key {quote(key)} at {here}; YAML would silently "
                    "keep only the last one, so remove or rename one of them"
                )
                continue
            child = (*key_path, key)
            self.lines[child] = line
            out[key] = self.build(value_node, child)
        return out
