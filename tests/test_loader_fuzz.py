"""Property tests: whatever the input, the loader fails only with ``SpecError``.

A definition is user input. ``machines.load`` and ``machines.loader.read_definition`` must
either return a ``MachineSpec`` or raise ``SpecError`` (any subclass); a bare ``KeyError``,
``TypeError`` or ``RecursionError`` from YAML, jsonschema or the IR builder is a bug. The
checker must never raise at all: it reports the problem and exits 1 or 2.

The inputs are arbitrary text, arbitrary YAML documents, and random mutations of the bundled
definitions (the most useful: they pass most checks and break one thing deep inside).
"""

from __future__ import annotations

import copy
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import machines
from machines import MachineSpec, SpecError, SpecUnreadable, SpecViolation
from machines.checker import check
from machines.loader import bundled_spec_dir, read_definition
from tests.conftest import rename_everywhere

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

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- outcomes -----------------------------------------------------------------------------


def spec_or_spec_error(call: Callable[[], object]) -> SpecError | None:
    """Run ``call``; it may return a MachineSpec or raise SpecError, nothing else."""
    try:
        result = call()
    except SpecError as exc:
        assert exc.problems, "a SpecError must list at least one problem"
        assert all(isinstance(p, str) and p for p in exc.problems)
        str(exc)  # the message must render
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


@settings(FUZZ, max_examples=60)
@given(case=ANY_MUTANT)
def test_mutated_definitions_raise_only_spec_error(case: Case) -> None:
    name, doc, _ = case
    with spec_copy(*COMPANIONS.get(name, ())) as spec_dir:
        path = write_mutant(spec_dir, name, doc)
        write_and_load(path)
        if name == "node":
            # request.yaml reads node.yaml: a broken node machine surfaces as a SpecError
            write_and_load(spec_dir / "request.yaml")


# -- (d) the checker never raises ---------------------------------------------------------


@settings(FUZZ, max_examples=30)
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


@settings(FUZZ, max_examples=40)
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
