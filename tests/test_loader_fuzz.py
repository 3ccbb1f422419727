"""Property tests: whatever the input, the loader fails only with ``SpecError``.

A definition is user input. ``machines.load`` and ``machines.spec.loader.read_definition`` must
either return a ``MachineSpec`` or raise ``SpecError`` (any subclass); a bare ``KeyError``,
``TypeError`` or ``RecursionError`` from YAML, jsonschema or the IR builder is a bug. The
checker must never raise at all: it reports the problem and exits 1 or 2.

The inputs are arbitrary text, arbitrary YAML documents, random mutations of the bundled
definitions (the most useful: they pass most checks and break one thing deep inside), and
mutations of their YAML node trees: tags of every kind on every kind of node, typed
scalars that do not read as their type, anchors and aliases (recursive ones too), alias
bombs, and files over the size limit (issue 13, items 14-15). ``machines check`` run on
such a directory from the command line exits 1 or 2 and prints no traceback; the loading
functions given garbage in place of a name or path raise only ``SpecError``.
"""

from __future__ import annotations

import atexit
import copy
import io
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

import machines
from machines import MachineSpec, SpecError, SpecUnreadable, SpecViolation
from machines.checks.report import check
from machines.cli import main
from machines.spec.loader import bundled_spec_dir, definition_paths, read_definition
from machines.testing.profiles import scaled
from tests.conftest import rename_everywhere
from tests.garbage import garbage

BUNDLED = bundled_spec_dir()
DOCS: dict[str, Any] = {
    p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(BUNDLED.glob("*.yaml"))
}
NAMES = sorted(DOCS)

KeyPath = tuple[str | int, ...]


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


# Short strings of the real definitions (state, actor, key and trigger names, ids): a
# mutation that swaps one real name for another gets much further than random text.
WORDS = sorted({s for doc in DOCS.values() for s in _strings(doc) if len(s) <= 40})


def fuzz(examples: int) -> settings:
    """A fuzz run of ``examples`` at full size, scaled by the active profile."""
    return settings(
        scaled(examples), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )


FUZZ = fuzz(100)

# -- outcomes -----------------------------------------------------------------------------


def spec_or_spec_error(call: Callable[[], object]) -> SpecError | None:
    """Run ``call``; it may return a MachineSpec or raise SpecError, nothing else."""
    try:
        result = call()
    except SpecError as exc:
        assert exc.problems, "a SpecError must list at least one problem"
        assert all(isinstance(p, str) and p for p in exc.problems)
        str(exc)  # the message must render
        if not isinstance(exc, SpecViolation):  # what quotes the input is bounded
            assert len(exc.problems) <= 101, len(exc.problems)
            assert max(map(len, exc.problems)) <= 1000, max(exc.problems, key=len)[:200]
        return exc
    assert isinstance(result, MachineSpec), f"returned {type(result).__name__}"
    return None


# request.yaml reads node.yaml beside it, so the two travel together; every other
# definition stands alone (parsing is the slow part, so copy no more than needed).
COMPANIONS = {"request": ("node",), "node": ("request",)}


@contextmanager
def spec_copy(*names: str) -> Iterator[Path]:
    """A fresh directory holding copies of the named bundled definitions (a fresh path
    each time: ``load()`` caches by path, size and mtime)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "spec"
        target.mkdir()
        for name in names:
            shutil.copy(BUNDLED / f"{name}.yaml", target / f"{name}.yaml")
        yield target


def write_and_load(path: Path) -> SpecError | None:
    """read_definition and load agree: the same error, or load adds only SpecViolation."""
    definition = spec_or_spec_error(lambda: read_definition(path))
    loaded = spec_or_spec_error(lambda: machines.load(path))
    if definition is not None:
        assert type(loaded) is type(definition), (definition, loaded)
        assert len(loaded.problems) == len(definition.problems), (definition, loaded)
        return definition
    assert loaded is None or type(loaded) is SpecViolation, loaded
    return loaded


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# -- (a) arbitrary text -------------------------------------------------------------------

YAML_CHARS = list("{}[]:-,&*!|>'\"#%@`?~ \t\n\r.=$\\") + list("abcxyz019_")


@FUZZ
@given(
    text=st.one_of(
        st.text(),
        st.text(alphabet=st.sampled_from(YAML_CHARS)),
        st.lists(st.sampled_from([*WORDS, ":", " ", "\n", "- ", "  ", "[", "]", "{", "}"])).map(
            "".join
        ),
    )
)
def test_arbitrary_text_raises_only_spec_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outcome.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        write_and_load(path)


NESTINGS = {
    "flow sequence": lambda n: "title: " + "[" * n + "]" * n,
    "flow mapping": lambda n: "title: " + "{a: " * n + "b" + "}" * n,
    "block sequence": lambda n: "- " * n + "x",
}


@pytest.mark.parametrize("depth", [10, 500, 1500])
@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_deeply_nested_text_raises_only_spec_error(kind: str, depth: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outcome.yaml"
        path.write_text(NESTINGS[kind](depth), encoding="utf-8")
        write_and_load(path)


@FUZZ
@given(data=st.binary())
def test_arbitrary_bytes_raise_only_spec_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outcome.yaml"
        path.write_bytes(data)
        write_and_load(path)


# -- (b) arbitrary YAML documents ---------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(WORDS),
)
KEYS = st.one_of(st.sampled_from(WORDS), st.text(max_size=12))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)
# Keys YAML can hold but a definition must not (the loader says "quote it").
ODD_KEYS = st.one_of(st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))
TOP_KEYS = sorted({k for doc in DOCS.values() for k in doc})


@FUZZ
@given(
    doc=st.one_of(
        VALUES,
        st.dictionaries(st.one_of(st.sampled_from(TOP_KEYS), KEYS), VALUES, max_size=14),
        st.dictionaries(ODD_KEYS, VALUES, min_size=1, max_size=3),
    ),
    name=st.sampled_from(NAMES),
)
def test_arbitrary_documents_raise_only_spec_error(doc: Any, name: str) -> None:
    with spec_copy(*COMPANIONS.get(name, ())) as spec_dir:
        path = spec_dir / f"{name}.yaml"
        path.write_text(dump(doc), encoding="utf-8")
        write_and_load(path)


# -- (c) mutations of the bundled definitions ---------------------------------------------


def walk(node: Any, prefix: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    yield prefix, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, (*prefix, i))


def get(doc: Any, path: KeyPath) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def put(doc: Any, path: KeyPath, value: Any) -> Any:
    """Set ``path`` to ``value``; return the (possibly new) root."""
    if not path:
        return value
    get(doc, path[:-1])[path[-1]] = value
    return doc


def _inner_paths(doc: Any) -> list[KeyPath]:
    return [p for p, _ in walk(doc) if p]


def delete_key(doc: Any, draw: st.DrawFn) -> Any:
    paths = _inner_paths(doc)
    if paths:
        path = draw(st.sampled_from(paths))
        del get(doc, path[:-1])[path[-1]]
    return doc


def replace_value(doc: Any, draw: st.DrawFn) -> Any:
    path = draw(st.sampled_from([p for p, _ in walk(doc)]))
    return put(doc, path, draw(VALUES))


def rename_key(doc: Any, draw: st.DrawFn) -> Any:
    paths = [p for p in _inner_paths(doc) if isinstance(p[-1], str)]
    if not paths:
        return doc
    path = draw(st.sampled_from(paths))
    old, new = path[-1], draw(KEYS)
    parent = get(doc, path[:-1])
    renamed = {(new if k == old else k): v for k, v in parent.items()}
    return put(doc, path[:-1], renamed)


def duplicate_item(doc: Any, draw: st.DrawFn) -> Any:
    paths = [p for p in _inner_paths(doc) if isinstance(get(doc, p[:-1]), list)]
    if paths:
        path = draw(st.sampled_from(paths))
        items = get(doc, path[:-1])
        items.insert(path[-1] + 1, copy.deepcopy(items[path[-1]]))
    return doc


def insert_key(doc: Any, draw: st.DrawFn) -> Any:
    paths = [p for p, node in walk(doc) if isinstance(node, dict)]
    if paths:
        target = get(doc, draw(st.sampled_from(paths)))
        odd = draw(st.integers(0, 9)) == 0
        target[draw(ODD_KEYS if odd else KEYS)] = draw(VALUES)
    return doc


def swap_state_name(doc: Any, draw: st.DrawFn) -> Any:
    """Replace a state name with another string: everywhere (a consistent rename, which
    may hit a reserved or badly formed name) or at one place (a dangling reference)."""
    states = doc.get("states") if isinstance(doc, dict) else None
    if not isinstance(states, dict) or not states:
        return doc
    old = draw(st.sampled_from(sorted(map(str, states))))
    new = draw(st.one_of(st.sampled_from(WORDS), st.text(max_size=12), st.just(old + "x")))
    if draw(st.booleans()):
        return rename_everywhere(doc, old, new)
    places = [p for p, node in walk(doc) if node == old] + [
        p for p, _ in walk(doc) if p and p[-1] == old
    ]
    if not places:
        return doc
    path = draw(st.sampled_from(places))
    if path and path[-1] == old and get(doc, path) != old:  # a key: rename the key
        parent = get(doc, path[:-1])
        return put(doc, path[:-1], {(new if k == old else k): v for k, v in parent.items()})
    return put(doc, path, new)


NAME = re.compile(r"[a-z][a-z0-9_]*")
IDENT = re.compile(r"[a-z][a-z0-9-]*")
NAME_WORDS = [w for w in WORDS if NAME.fullmatch(w)]
IDENT_WORDS = [w for w in WORDS if IDENT.fullmatch(w) and not NAME.fullmatch(w)]


def _like(value: str) -> list[str]:
    """Words of the same shape as ``value``: names for names, ids for ids."""
    if NAME.fullmatch(value):
        return NAME_WORDS
    if IDENT.fullmatch(value):
        return IDENT_WORDS
    return WORDS


def replace_word(doc: Any, draw: st.DrawFn) -> Any:
    """Swap one string for a word of the same shape from the definitions: the mutant stays
    schema-valid, so it reaches the reference checks, the rules and the derivation."""
    paths = [p for p, node in walk(doc) if p and isinstance(node, str)]
    if not paths:
        return doc
    path = draw(st.sampled_from(paths))
    return put(doc, path, draw(st.sampled_from(_like(get(doc, path)))))


def flip_bool(doc: Any, draw: st.DrawFn) -> Any:
    paths = [p for p, node in walk(doc) if p and isinstance(node, bool)]
    if not paths:
        return doc
    path = draw(st.sampled_from(paths))
    return put(doc, path, not get(doc, path))


def reverse_list(doc: Any, draw: st.DrawFn) -> Any:
    paths = [p for p, node in walk(doc) if isinstance(node, list) and len(node) > 1]
    if paths:
        get(doc, draw(st.sampled_from(paths))).reverse()
    return doc


def delete_item(doc: Any, draw: st.DrawFn) -> Any:
    paths = [p for p in _inner_paths(doc) if isinstance(get(doc, p[:-1]), list)]
    if paths:
        path = draw(st.sampled_from(paths))
        del get(doc, path[:-1])[path[-1]]
    return doc


def misspell_tag(doc: Any, draw: st.DrawFn) -> Any:
    """One letter of one state tag changed (``effect-started`` -> ``effect-startad``)."""
    states = doc.get("states") if isinstance(doc, dict) else None
    tagged = [s for s in (states.values() if isinstance(states, dict) else ()) if _tags_of(s)]
    if not tagged:
        return doc
    tags = draw(st.sampled_from(tagged))["tags"]
    i = draw(st.integers(0, len(tags) - 1))
    j = draw(st.integers(0, len(tags[i]) - 1))
    tags[i] = tags[i][:j] + draw(st.sampled_from("abcdeinrst-")) + tags[i][j + 1 :]
    return doc


def _tags_of(state: Any) -> list[str]:
    tags = state.get("tags") if isinstance(state, dict) else None
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


# The tags the bundled definitions use, and tags of one's own (x-...): any other tag is an
# error (issue 13 item 16), judged here independently of machines.spec.vocabulary.
BUNDLED_TAGS = {t for doc in DOCS.values() for s in doc["states"].values() for t in _tags_of(s)}


def has_undeclared_tag(doc: Any) -> bool:
    states = doc.get("states") if isinstance(doc, dict) else None
    return any(
        t not in BUNDLED_TAGS and not (t.startswith("x-") and len(t) > 2)
        for s in (states.values() if isinstance(states, dict) else ())
        for t in _tags_of(s)
    )


def rename_state(doc: Any, draw: st.DrawFn) -> Any:
    """A consistent rename of one state to another valid name (maybe an existing one)."""
    states = doc.get("states") if isinstance(doc, dict) else None
    if not isinstance(states, dict) or not states:
        return doc
    old = draw(st.sampled_from(sorted(map(str, states))))
    new = draw(st.one_of(st.sampled_from(NAME_WORDS), st.just(old + "_x")))
    return rename_everywhere(doc, old, new)


MUTATIONS: dict[str, Callable[[Any, st.DrawFn], Any]] = {
    "delete_key": delete_key,
    "replace_value": replace_value,
    "rename_key": rename_key,
    "duplicate_item": duplicate_item,
    "insert_key": insert_key,
    "swap_state_name": swap_state_name,
    "replace_word": replace_word,
    "flip_bool": flip_bool,
    "reverse_list": reverse_list,
}
# Mutations that keep the document's shape, so that the schema passes and the reference
# checks, the structural rules and the derivation check see the mutant.
SHAPE_KEEPING: dict[str, Callable[[Any, st.DrawFn], Any]] = {
    "replace_word": replace_word,
    "rename_state": rename_state,
    "flip_bool": flip_bool,
    "reverse_list": reverse_list,
    "duplicate_item": duplicate_item,
    "delete_item": delete_item,
    "misspell_tag": misspell_tag,
}

Case = tuple[str, Any, list[str]]


@st.composite
def mutated(
    draw: st.DrawFn, mutations: dict[str, Callable[[Any, st.DrawFn], Any]] = MUTATIONS
) -> Case:
    """A bundled definition's name, a mutated copy of its document, and the mutations."""
    name = draw(st.sampled_from(NAMES))
    doc = copy.deepcopy(DOCS[name])
    applied = draw(st.lists(st.sampled_from(sorted(mutations)), min_size=1, max_size=4))
    for mutation in applied:
        doc = mutations[mutation](doc, draw)
    return name, doc, applied


ANY_MUTANT = st.one_of(mutated(), mutated(SHAPE_KEEPING))


def write_mutant(spec_dir: Path, name: str, doc: Any) -> Path:
    path = spec_dir / f"{name}.yaml"
    path.write_text(dump(doc), encoding="utf-8")
    return path


@fuzz(60)
@given(case=ANY_MUTANT)
def test_mutated_definitions_raise_only_spec_error(case: Case) -> None:
    name, doc, _ = case
    with spec_copy(*COMPANIONS.get(name, ())) as spec_dir:
        path = write_mutant(spec_dir, name, doc)
        error = write_and_load(path)
        if has_undeclared_tag(doc):
            event("an undeclared tag")
            assert error is not None, "a definition with an undeclared tag loaded"
        if name == "node":
            # request.yaml reads node.yaml: a broken node machine surfaces as a SpecError
            write_and_load(spec_dir / "request.yaml")


# -- (d) the checker never raises ---------------------------------------------------------


@fuzz(30)
@given(case=ANY_MUTANT)
def test_checker_never_raises_on_mutated_definitions(case: Case) -> None:
    name, doc, _ = case
    with spec_copy(*COMPANIONS.get(name, ())) as spec_dir:
        path = write_mutant(spec_dir, name, doc)
        report = check(spec_dir, max_nodes=2)
        assert report.exit_code in {0, 1, 2}
        # the checker and load() agree on the mutated file
        error = write_and_load(path)
        if isinstance(error, SpecUnreadable):
            assert report.exit_code == 2, report
        elif error is not None:
            assert report.exit_code >= 1, report


@fuzz(40)
@given(doc=VALUES, name=st.sampled_from(NAMES))
def test_checker_never_raises_on_arbitrary_documents(doc: Any, name: str) -> None:
    with spec_copy() as spec_dir:
        write_mutant(spec_dir, name, doc)
        report = check(spec_dir, max_nodes=2)
        assert report.exit_code in {1, 2}


def test_unmutated_copy_is_clean() -> None:
    """The baseline the mutations start from: every bundled definition loads and checks."""
    with spec_copy(*NAMES) as spec_dir:
        for name in NAMES:
            path = write_mutant(spec_dir, name, copy.deepcopy(DOCS[name]))
            assert spec_or_spec_error(lambda path=path: machines.load(path)) is None
        assert check(spec_dir, max_nodes=2).exit_code == 0


# -- (e) YAML tags, typed scalars, anchors, aliases, bombs, oversize files ---------------------

LIMIT = 1 << 20  # the documented size limit of a definition file
MAX_VALUES, MAX_TEXT = 200_000, LIMIT  # the documented bounds once aliases are expanded
CORE = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL, SEQ, MAP, MERGE = (
    CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge")
)
TYPED = (INT, FLOAT, BOOL, NULL)
NODES: dict[str, yaml.Node] = {
    p.stem: yaml.compose(p.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    for p in sorted(BUNDLED.glob("*.yaml"))
}
RESOLVER = yaml.SafeLoader("")
TAG_POOL = st.one_of(
    st.sampled_from(
        [STR, INT, FLOAT, BOOL, NULL, SEQ, MAP]
        + [CORE + t for t in ("python/object:os.system", "python/name:os.system")]
        + [CORE + t for t in ("python/tuple", "set", "omap", "pairs", "binary", "timestamp")]
        + [CORE + t for t in ("merge", "value", "yaml")]
        + ["!local", "tag:example.com,2000:app/thing"]
    ),
    st.text(alphabet="abcxyz/:._-!%", min_size=1, max_size=12).map("!".__add__),
)
TYPED_VALUES = st.one_of(
    st.sampled_from(["abc", "", "0b_", "0x_", "1.5", "12", "yes", "~", "1:2:3", ".inf", "._"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=10),
)

Slot = tuple[yaml.Node, int, int]  # (collection, index, 0 key / 1 value / -1 item)


def nodes_of(root: yaml.Node) -> list[yaml.Node]:
    """Every distinct node reachable from ``root`` (aliases and cycles visited once)."""
    seen: dict[int, yaml.Node] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            todo.extend(x for pair in node.value for x in pair)
    return list(seen.values())


def slots_of(root: yaml.Node) -> list[Slot]:
    out: list[Slot] = []
    for node in nodes_of(root):
        if isinstance(node, yaml.SequenceNode):
            out.extend((node, i, -1) for i in range(len(node.value)))
        elif isinstance(node, yaml.MappingNode):
            out.extend((node, i, 1) for i in range(len(node.value)))
    return out


def put_node(slot: Slot, new: yaml.Node) -> None:
    collection, index, side = slot
    if side < 0:
        collection.value[index] = new
    else:
        pair = list(collection.value[index])
        pair[side] = new
        collection.value[index] = tuple(pair)


def retag(root: yaml.Node, draw: st.DrawFn) -> yaml.Node:
    """Any node (a scalar, a key, a list, a mapping, the root) gets any tag."""
    draw(st.sampled_from(nodes_of(root))).tag = draw(TAG_POOL)
    return root


def mistype(root: yaml.Node, draw: st.DrawFn) -> yaml.Node:
    """A scalar becomes ``!!int``/``!!float``/``!!bool``/``!!null`` with a value that may not
    read as that type (``!!int abc``, ``!!bool foo``, ``0b_``)."""
    scalars = [n for n in nodes_of(root) if isinstance(n, yaml.ScalarNode)]
    node = draw(st.sampled_from(scalars))
    node.tag, node.value = draw(st.sampled_from(TYPED)), draw(TYPED_VALUES)
    return root


def alias(root: yaml.Node, draw: st.DrawFn) -> yaml.Node:
    """One node used again elsewhere (an anchor and an alias), maybe inside itself."""
    slots = slots_of(root)
    if slots:
        put_node(draw(st.sampled_from(slots)), draw(st.sampled_from(nodes_of(root))))
    return root


def bomb(root: yaml.Node, draw: st.DrawFn) -> yaml.Node:
    """Billion laughs: ``depth`` levels of ``width`` aliases of the level below, or one long
    text used ``width`` times; tiny on disk, up to 10**9 values or 10**10 characters."""
    width, depth = draw(st.integers(1, 10)), draw(st.integers(1, 9))
    leaf = yaml.ScalarNode(STR, "lol" * draw(st.sampled_from([1, 1, 1000, 20_000])))
    level: yaml.Node = leaf
    for _ in range(depth):
        level = yaml.SequenceNode(SEQ, [level] * width)
    slots = slots_of(root)
    if slots:
        put_node(draw(st.sampled_from(slots)), level)
    return root


NODE_MUTATIONS: dict[str, Callable[[yaml.Node, st.DrawFn], yaml.Node]] = {
    "retag": retag,
    "mistype": mistype,
    "alias": alias,
    "bomb": bomb,
}


@st.composite
def hostile_yaml(draw: st.DrawFn) -> tuple[str, str]:
    """A bundled definition's name and the YAML text of its node tree after node
    mutations, sometimes padded past the size limit."""
    name = draw(st.sampled_from(NAMES))
    root = copy.deepcopy(NODES[name])
    for mutation in draw(st.lists(st.sampled_from(sorted(NODE_MUTATIONS)), min_size=1, max_size=3)):
        root = NODE_MUTATIONS[mutation](root, draw)
    try:
        text = yaml.serialize(root, Dumper=yaml.SafeDumper, allow_unicode=True, width=10**6)
    except yaml.YAMLError:
        reject()
    if draw(st.integers(0, 7)) == 0:
        size = len(text.encode("utf-8"))
        text += "\n#" + "x" * max(0, LIMIT - size + draw(st.integers(0, 100)))
    return name, text


def must_be_unreadable(text: str) -> bool:
    """The oracle: the file is over the size limit, or does not compose, or holds a node
    whose tag does not fit it (a tag outside the core schema, a collection tagged as
    another kind, a typed scalar not spelled as its type), or expands past the bounds or
    into itself. Any of these must make the file a SpecUnreadable."""
    if len(text.encode("utf-8")) > LIMIT:
        return True
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return True
    if root is None:
        return True
    sizes: dict[int, tuple[int, int]] = {}
    busy: set[int] = set()

    def size(node: yaml.Node, is_key: bool) -> tuple[int, int]:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in busy:
            raise RecursionError  # a recursive alias
        if isinstance(node, yaml.ScalarNode):
            plain = RESOLVER.resolve(yaml.ScalarNode, node.value, (True, False))
            fits = node.tag == STR or (node.tag == MERGE and is_key)
            fits = fits or (node.tag in TYPED and plain == node.tag)
            if not fits:
                raise ValueError(node.tag)
            found = (1, len(node.value))
        else:
            is_map = isinstance(node, yaml.MappingNode)
            if node.tag != (MAP if is_map else SEQ):
                raise ValueError(node.tag)
            busy.add(id(node))
            children = (
                [(x, i == 0) for pair in node.value for i, x in enumerate(pair)]
                if is_map
                else [(x, False) for x in node.value]
            )
            values, chars = 1, 0
            for child, child_is_key in children:
                more, text_ = size(child, child_is_key)
                values, chars = values + more, chars + text_
                if values > MAX_VALUES or chars > MAX_TEXT:
                    raise OverflowError
            busy.discard(id(node))
            found = (values, chars)
        sizes[id(node)] = found
        return found

    try:
        size(root, False)
    except (ValueError, OverflowError, RecursionError):
        return True
    return False


@fuzz(60)
@given(case=hostile_yaml())
def test_yaml_tags_aliases_and_bombs_raise_only_spec_error(case: tuple[str, str]) -> None:
    """issue 13 items 14 and 15: tags on every kind of node, typed scalars, aliases and
    bombs: a MachineSpec or a SpecError, and SpecUnreadable whenever the oracle says the
    file cannot be a definition."""
    name, text = case
    with spec_copy(*COMPANIONS.get(name, ())) as spec_dir:
        path = spec_dir / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        error = write_and_load(path)
        event(f"outcome: {type(error).__name__ if error else 'loaded'}")
        if must_be_unreadable(text):
            event("the oracle says unreadable")
            assert isinstance(error, SpecUnreadable), error


ODD_ENTRIES: dict[str, Callable[[Path], None]] = {
    "fifo": lambda p: os.mkfifo(p),
    "device": lambda p: p.symlink_to("/dev/zero"),
    "directory": lambda p: p.mkdir(),
    "loop": lambda p: p.symlink_to(p),
    "oversize": lambda p: p.write_bytes(b"#" * (LIMIT + 1)),
}


def run_check(spec_dir: Path) -> tuple[int, str]:
    """``machines check --spec-dir`` in this process: exit code and all it printed."""
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = main(["check", "--spec-dir", str(spec_dir), "--max-nodes", "2"])
    return code, out.getvalue()


@fuzz(20)
@given(case=hostile_yaml(), odd=st.sets(st.sampled_from(sorted(ODD_ENTRIES))))
def test_cli_check_on_hostile_files_exits_1_or_2_without_traceback(
    case: tuple[str, str], odd: set[str]
) -> None:
    """issue 13 items 14 and 15 through the command line: a directory holding a hostile
    definition and odd entries named ``*.yaml`` (a FIFO, a symlink to /dev/zero, a
    directory, a symlink loop, an oversize file) exits 2 when any file is unreadable, never
    hangs and never prints a traceback."""
    name, text = case
    with spec_copy(*COMPANIONS.get(name, ())) as spec_dir:
        (spec_dir / f"{name}.yaml").write_text(text, encoding="utf-8")
        for entry in odd:
            ODD_ENTRIES[entry](spec_dir / f"odd_{entry}.yaml")
        code, output = run_check(spec_dir)
    assert "Traceback" not in output
    assert code in (0, 1, 2), output
    if odd or must_be_unreadable(text):
        assert code == 2, output


def _odd_paths() -> tuple[Any, ...]:
    """Odd entries (``ODD_ENTRIES``) in a folder of their own, made once at import, and
    names too long: built before the strategy, so that every example draws from the same
    values (drawing them with ``st.data()`` from a fixture made Hypothesis' thorough runs
    report its data generation as flaky)."""
    root = Path(tempfile.mkdtemp(prefix="machines-odd-"))
    atexit.register(shutil.rmtree, root, True)
    for entry, make in ODD_ENTRIES.items():
        make(root / f"{entry}.yaml")
    made = [root / f"{entry}.yaml" for entry in ODD_ENTRIES]
    paths = [root, *made, root / ("x" * 300 + ".yaml"), BUNDLED / "node.yaml"]
    return (*paths, *map(str, paths), *NAMES, "x" * 300)


ODD_PATHS = _odd_paths()


@fuzz(150)
@given(value=garbage(extra=ODD_PATHS))
def test_loading_functions_given_garbage_raise_only_spec_error(value: Any) -> None:
    """issue 13: ``load``, ``read_definition`` and ``definition_paths`` given anything in
    place of a name or path (garbage of every type, odd files, names too long) return a
    MachineSpec / a list of paths or raise a SpecError: never a TypeError or OSError."""
    spec_or_spec_error(lambda: machines.load(value))
    spec_or_spec_error(lambda: read_definition(value))
    try:
        paths = definition_paths(value)
    except SpecError as exc:
        assert exc.problems
    else:
        assert all(isinstance(p, Path) for p in paths)
