"""Reading a definition fails closed, fast, and says why (issue 13, items 14-16).

Typed YAML scalars and YAML tags (item 14), the bounds on what one definition may cost
(item 15), the one vocabulary of state tags (item 16), and the names a definition may not
take because the runtime uses them. Each test writes the attack into ``tmp_path`` and
asserts the typed error, the line, what it says, and that nothing expensive ran first.

The attacks reach the behaviour through the public API (``machines.load``,
``read_definition``, ``machines.check``, the CLI), so that each regression test fails on a
checkout from before the fix for the behaviour itself.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import inspect
import io
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import machines
from machines import MachineSpec, SpecError, SpecUnreadable
from machines.cli import main
from machines.runtime import AsyncEntityMachine, EntityMachine
from machines.spec.loader import read_definition
from tests.test_loader_errors import BUNDLED, edit, line_of, load_error, only_problem

LIMIT = 1 << 20
"""The documented size limit of one definition file (docs/guide/definitions.md)."""

PACKAGE_ROOT = Path(machines.__file__).resolve().parent.parent

TITLE = "title: Exactly-once outcome\n"


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    target = tmp_path / "spec"
    target.mkdir()
    for path in BUNDLED.glob("*.yaml"):
        target.joinpath(path.name).write_bytes(path.read_bytes())
    return target


def lone(directory: Path, *names: str) -> Path:
    """A new directory beside ``directory`` holding only ``names`` (moved from it), so
    that ``check`` reads just those."""
    target = directory.parent / "lone"
    target.mkdir()
    for name in names:
        os.rename(directory / name, target / name)
    return target


def run_cli(*argv: str) -> tuple[int, str]:
    """``machines <argv>`` in this process: its exit code and everything it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


# -- item 14: typed scalars and YAML tags ------------------------------------------------------

UNCONSTRUCTIBLE = [
    ("title: !!int abc\n", "title: !!int abc", "'abc'", "'!!int'"),
    ("title: !!bool foo\n", "title: !!bool foo", "'foo'", "'!!bool'"),
    ('title: !!int ""\n', 'title: !!int ""', "''", "'!!int'"),
    ("title: !!float x\n", "title: !!float x", "'x'", "'!!float'"),
    ("title: !!int 1.5\n", "title: !!int 1.5", "'1.5'", "'!!int'"),
    ("title: !!null foo\n", "title: !!null foo", "'foo'", "'!!null'"),
    ("title: 0b_\n", "title: 0b_", "'0b_'", "'!!int'"),  # PyYAML's int pattern admits it
    ("title: 0x_\n", "title: 0x_", "'0x_'", "'!!int'"),
    ("!!int abc: key\n" + TITLE, "!!int abc: key", "'abc'", "'!!int'"),
    ("title: [x, !!bool maybe]\n", "!!bool maybe", "'maybe'", "'!!bool'"),
    ("title: [&n !!int abc, *n, *n]\n", "&n !!int abc", "'abc'", "'!!int'"),
]


@pytest.mark.parametrize(("replacement", "at", "value", "tag"), UNCONSTRUCTIBLE)
def test_typed_scalar_that_does_not_read_as_its_type_is_unreadable(
    spec_dir: Path, replacement: str, at: str, value: str, tag: str
) -> None:
    """issue 13 item 14: ``!!int abc``, ``!!bool foo``, ``!!int ""`` crashed every command
    with a raw ValueError / KeyError / IndexError, and ``!!null foo`` was silently read as
    null. Each is a SpecUnreadable naming the line, the value and the tag, in a value, a key,
    a list item and an anchored node used through aliases (reported once, at the anchor)."""
    path = spec_dir / "outcome.yaml"
    text = edit(path, TITLE, replacement)
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line_of(text, re.escape(at))}: {value} is not ")
    assert f"(tagged {tag}); quote it if it is text, or fix it" in problem


def test_overlong_number_is_unreadable_before_it_is_computed(spec_dir: Path) -> None:
    """issue 13 item 14: YAML 1.1 reads ``1:2:3`` in base 60, which costs quadratic time in
    its length; a number longer than any a definition needs is refused unread."""
    path = spec_dir / "outcome.yaml"
    edit(path, TITLE, "title: " + ":".join(["59"] * 100_000) + "\n")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith("line 3: '59:59:59:")
    assert "is read as an integer of 299,999 characters; a definition's are at most 64" in problem
    assert len(problem) < 300


FOREIGN = [
    ("states:\n", "states: !!python/object:os.system\n", "'!!python/object:os.system'", "mapping"),
    ("states:\n", "states: !!set\n", "'!!set'", "mapping"),
    ("states:\n", "states: !!omap\n", "'!!omap'", "mapping"),
    ("transitions:\n", "transitions: !!python/tuple\n", "'!!python/tuple'", "list"),
    (TITLE, "title: !!str {a: b}\n", "'!!str'", "mapping"),
    (TITLE, "title: !!binary aGVsbG8=\n", "'!!binary'", None),
    (TITLE, "title: !!python/name:os.system x\n", "'!!python/name:os.system'", None),
]


@pytest.mark.parametrize(("old", "new", "tag", "node"), FOREIGN)
def test_yaml_tag_outside_the_format_is_unreadable(
    spec_dir: Path, old: str, new: str, tag: str, node: str | None
) -> None:
    """issue 13 item 14: a YAML tag on a mapping or list (``states:
    !!python/object:os.system``) was silently ignored, and a tag on a scalar reached the
    schema as a ``bytes`` or ``date``. A tag the format does not use is a SpecUnreadable
    naming the line and the tag."""
    path = spec_dir / "outcome.yaml"
    text = edit(path, old, new)
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line_of(text, re.escape(new.strip()))}: the YAML tag {tag}")
    on = f" on a {node}" if node else ""
    assert f"the YAML tag {tag}{on} is not part of the definition format" in problem
    assert problem.endswith("remove it")


def test_tagged_node_reached_only_through_an_alias_is_unreadable(spec_dir: Path) -> None:
    """issue 13 item 14: a tagged mapping under an anchor, used through an alias, is vetted
    like any other node (once, at its anchor)."""
    path = spec_dir / "outcome.yaml"
    text = path.read_text(encoding="utf-8")
    text += "x-anchor: &m !!python/object/apply:os.system {a: 1}\nx-alias: *m\n"
    path.write_text(text, encoding="utf-8")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(
        f"line {line_of(text, '^x-anchor')}: the YAML tag '!!python/object/apply:os.system' on "
        "a mapping is not part of the definition format"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2026-01-01", "'2026-01-01' is read as '!!timestamp'"),
        ("!!timestamp 2026-01-01", "'2026-01-01' is read as '!!timestamp'"),
        ("=", "'=' is read as '!!value'"),
        ("<<", "'<<' is read as '!!merge'"),
    ],
)
def test_value_read_as_a_type_outside_the_format_must_be_quoted(
    spec_dir: Path, value: str, shown: str
) -> None:
    """issue 13 item 14: YAML reads a plain ``2026-01-01`` as a date (which reached the
    schema as one), and ``=``, ``<<`` as special keys; the message says so and how to fix
    it."""
    path = spec_dir / "outcome.yaml"
    text = edit(path, TITLE, f"title: {value}\n")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem == (
        f"line {line_of(text, '^title: ')}: {shown}, which is not part of the definition "
        "format; write it as a quoted string"
    )


def test_every_tag_problem_is_listed_at_once(spec_dir: Path) -> None:
    """A file with several bad tags lists each, so it is fixed in one pass."""
    path = spec_dir / "outcome.yaml"
    edit(path, TITLE, "title: !!int abc\norigin_x: !!set {a: null}\n")
    err = load_error(path, SpecUnreadable)
    assert len(err.problems) == 2
    assert [p.split(":")[0] for p in err.problems] == ["line 3", "line 4"]


# -- item 15: bounds ---------------------------------------------------------------------------


def returns_within(call: Callable[[], Any], seconds: float, unblock: Callable[[], None]) -> Any:
    """``call()``'s result (or its exception), failing the test if it has not returned
    within ``seconds``; then ``unblock()`` is called so that the thread can end."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    hung = thread.is_alive()
    while thread.is_alive():
        unblock()
        thread.join(0.2)
    assert not hung, f"still reading after {seconds} s (blocked on a FIFO?)"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def open_writer(fifo: Path) -> Callable[[], None]:
    """Opens and closes the FIFO's write end, which ends a reader blocked on it."""

    def unblock() -> None:
        with contextlib.suppress(OSError):  # ENXIO: no reader has opened it yet
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    return unblock


def test_fifo_is_refused_without_hanging(spec_dir: Path) -> None:
    """issue 13 item 15: a FIFO named like a definition hung ``load`` and ``check`` (an
    open waits for a writer). It is opened without blocking and refused by its type."""
    fifo = spec_dir / "outcome.yaml"
    fifo.unlink()
    os.mkfifo(fifo)
    with pytest.raises(SpecUnreadable) as info:
        returns_within(lambda: machines.load(fifo), 3, open_writer(fifo))
    assert only_problem(info.value).startswith("a FIFO (named pipe), not a definition file")
    alone = lone(spec_dir, "outcome.yaml")
    fifo = alone / "outcome.yaml"
    report = returns_within(lambda: machines.check(alone), 3, open_writer(fifo))
    assert report.unreadable == [
        f"{fifo}: a FIFO (named pipe), not a definition file; a definition is a YAML file"
    ]


_DEV_ZERO = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import machines
from machines.cli import main
try:
    machines.load(sys.argv[1])
except machines.SpecUnreadable as exc:
    print("load:", exc)
sys.exit(main(["check", "--spec-dir", sys.argv[2]]))
"""


def test_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    """issue 13 item 15: a definition that is a symlink to ``/dev/zero`` was read until
    ``MemoryError``. It is refused by its type, before a byte is read. (Run in a child
    process with 1 GiB of address space, so that a regression cannot take the machine.)"""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "outcome.yaml").symlink_to("/dev/zero")
    done = subprocess.run(
        [sys.executable, "-c", _DEV_ZERO, str(spec / "outcome.yaml"), str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, done.stdout + done.stderr
    assert "outcome.yaml: a device, not a definition file" in done.stdout
    assert "load: " in done.stdout


def test_directory_named_like_a_definition_is_refused(spec_dir: Path) -> None:
    """issue 13 item 15: a directory named ``x.yaml`` in a spec dir is refused by its
    type, saying so (main refused it with the raw OSError text, ``[Errno 21] ...``)."""
    (spec_dir / "extra.yaml").mkdir()
    report = machines.check(lone(spec_dir, "extra.yaml", "outcome.yaml"))
    assert report.exit_code == 2
    assert len(report.unreadable) == 1
    assert report.unreadable[0].endswith(
        "extra.yaml: a directory, not a definition file; a definition is a YAML file"
    )


def _denied(path: object, denied: list[Path]) -> bool:
    if not isinstance(path, str | os.PathLike):
        return False  # a file descriptor
    candidate = Path(os.fsdecode(path))
    return any(candidate == d or d in candidate.parents for d in denied)


@pytest.fixture
def deny(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path, tuple[str, ...]], None]:
    """``deny(path, calls)``: the named ``os`` calls on ``path`` or below it fail with
    EACCES. Tests run as root here, and root ignores permissions, so ``chmod 000`` is
    simulated: a directory without permissions cannot be listed (``scandir``) and nothing
    below it can be reached (``stat``, ``open``); a file without them cannot be opened."""

    def deny_path(path: Path, calls: tuple[str, ...]) -> None:
        for name in calls:
            real = getattr(os, name)

            def guarded(target: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
                if _denied(target, [path]):
                    raise PermissionError(errno.EACCES, "Permission denied", str(target))
                return _real(target, *args, **kwargs)

            monkeypatch.setattr(os, name, guarded)

    return deny_path


def test_spec_dir_inside_an_unreadable_directory(
    tmp_path: Path, deny: Callable[[Path, tuple[str, ...]], None]
) -> None:
    """issue 13 item 15: ``check --spec-dir`` on a directory whose parent cannot be read
    raised a raw PermissionError (from ``Path.is_dir``)."""
    locked = tmp_path / "locked"
    (locked / "spec").mkdir(parents=True)
    deny(locked, ("stat", "scandir", "open"))
    report = machines.check(locked / "spec")
    assert report.exit_code == 2
    assert report.unreadable == [f"{locked / 'spec'}: cannot list the directory: Permission denied"]
    code, output = run_cli("check", "--spec-dir", str(locked / "spec"))
    assert code == 2
    assert "Traceback" not in output


def test_unreadable_spec_dir_says_so(
    spec_dir: Path, deny: Callable[[Path, tuple[str, ...]], None]
) -> None:
    """issue 13 item 15: an unreadable ``--spec-dir`` was reported as holding no
    definitions (pathlib's glob hides the PermissionError); it says why it cannot be read."""
    deny(spec_dir, ("scandir",))
    report = machines.check(spec_dir)
    assert report.unreadable == [f"{spec_dir}: cannot list the directory: Permission denied"]


def test_unreadable_definition_file(
    spec_dir: Path, deny: Callable[[Path, tuple[str, ...]], None]
) -> None:
    """issue 13 item 15: a file that cannot be opened is a SpecUnreadable naming it and
    the reason. (Main held this too, for a real ``chmod 000``; the simulation here patches
    ``os.open``, which main's reader did not use.)"""
    path = spec_dir / "outcome.yaml"
    deny(path, ("open",))
    err = load_error(path, SpecUnreadable)
    assert only_problem(err) == "cannot read the file: Permission denied"


def test_overlong_spec_dir_name(tmp_path: Path) -> None:
    """issue 13 item 15: a ``--spec-dir`` name too long for the file system raised a raw
    OSError (ENAMETOOLONG)."""
    name = str(tmp_path / ("x" * 300))
    report = machines.check(name)
    assert report.unreadable == [f"{name}: cannot list the directory: File name too long"]
    code, output = run_cli("check", "--spec-dir", name)
    assert code == 2
    assert "Traceback" not in output and "File name too long" in output


def test_overlong_node_machine_name(spec_dir: Path) -> None:
    """issue 13 item 15: a derivation naming a node machine too long for a file name
    raised a raw OSError while looking for the file."""
    path = spec_dir / "request.yaml"
    edit(path, "  nodes: node\n", f"  nodes: {'n' * 300}\n")
    problem = only_problem(load_error(path))
    assert "cannot read the node machine" in problem
    assert "does not exist" in problem


def test_overlong_and_looping_definition_paths(tmp_path: Path) -> None:
    """issue 13 item 15: ``load`` of a ``*.yaml`` path too long for the file system raised
    a raw OSError (ENAMETOOLONG, from ``Path.is_file``); a symlink loop is refused too."""
    with pytest.raises(SpecUnreadable, match="File name too long"):
        machines.load(tmp_path / ("x" * 300 + ".yaml"))
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(SpecUnreadable):
        machines.load(loop)


def test_size_limit_just_under_and_just_over(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 13 item 15: a definition of exactly the limit loads; one byte more is refused
    from its size alone, before it is parsed."""
    path = spec_dir / "outcome.yaml"
    text = path.read_bytes()
    padding = LIMIT - len(text) - 1
    path.write_bytes(text + b"#" * padding + b"\n")
    assert path.stat().st_size == LIMIT
    assert isinstance(machines.load(path), MachineSpec)

    path.write_bytes(text + b"#" * (padding + 1) + b"\n")
    monkeypatch.setattr(yaml, "compose", _must_not_parse)
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem == (
        f"the file is {LIMIT + 1:,} bytes; a definition may be at most {LIMIT:,} bytes "
        "(1 MiB): split the machine or shorten its texts"
    )


def test_size_limit_is_the_documented_one() -> None:
    from machines.spec.files import MAX_DEFINITION_BYTES

    assert MAX_DEFINITION_BYTES == LIMIT
    docs = (PACKAGE_ROOT / "docs" / "guide" / "definitions.md").read_text(encoding="utf-8")
    assert "1 MiB" in docs


def _must_not_parse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the YAML was parsed before the size check")


def test_fifty_megabyte_scalar_is_refused_unparsed_and_unechoed(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 13 item 15: a 50 MB scalar was parsed (minutes, gigabytes) and then echoed
    whole into the error. It is refused by the size check, and the message is short."""
    path = spec_dir / "outcome.yaml"
    with path.open("w", encoding="utf-8") as out:
        out.write("title: ")
        for _ in range(50):
            out.write("x" * 1_000_000)
        out.write("\n")
    monkeypatch.setattr(yaml, "compose", _must_not_parse)
    err = load_error(path, SpecUnreadable)
    assert "50,000,008 bytes" in only_problem(err)
    assert len(str(err)) < 400
    report = machines.check(lone(spec_dir, "outcome.yaml"))
    assert report.exit_code == 2
    assert max(len(u) for u in report.unreadable) < 400


@contextlib.contextmanager
def counting_builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the values the YAML reader builds (``_Builder.build`` calls)."""
    from machines.spec import yamlsource

    count = [0]
    real = yamlsource._Builder.build

    def build(self: Any, node: Any, key_path: Any) -> Any:
        count[0] += 1
        return real(self, node, key_path)

    monkeypatch.setattr(yamlsource._Builder, "build", build)
    yield count


def test_billion_laughs_is_refused_before_anything_is_built(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 13 item 15: an alias bomb was expanded until 200,000 values had been built
    (for a 47 MB file: 121 s and 3.5 GB). Its size is computed once per node, so the bomb
    is refused before a single value is built."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = spec_dir / "outcome.yaml"
    text = "\n".join(lines) + "\n"
    assert len(text) < 1000
    path.write_text(text, encoding="utf-8")
    with counting_builds(monkeypatch) as built:
        problem = only_problem(load_error(path, SpecUnreadable))
    assert built == [0]
    assert problem.startswith(f"line {line_of(text, '^a5: ')}: more than 200,000 values once")
    assert "aliases are expanded" in problem


def test_text_bomb_is_refused_before_anything_is_built(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 13 item 15: few values but much text: one 100 kB string used 200 times through
    an alias was built, and its repr (20 MB) echoed into the schema error."""
    path = spec_dir / "outcome.yaml"
    text = f"title: &t {'x' * 100_000}\ndescription: [{', '.join(['*t'] * 200)}]\n"
    path.write_text(text, encoding="utf-8")
    with counting_builds(monkeypatch) as built:
        err = load_error(path, SpecUnreadable)
    assert built == [0]
    assert "more than 1,048,576 characters of text once aliases are expanded" in only_problem(err)
    assert len(str(err)) < 500


LONG = 200_000

ECHOES = [
    ("    dest: succeeded\n", f"    dest: {'s' * LONG}\n", "is not a state of machine"),
    (TITLE, f"{TITLE}? {'k' * LONG}\n: red\n", "unknown key(s)"),
    (TITLE, f"title: [{', '.join(['w'] * (LONG // 3))}]\n", "is not of type 'string'"),
    (TITLE, f"title: *{'a' * LONG}\n", "found undefined alias"),
    (TITLE, f"title: !{'t' * LONG} x\n", "is not part of the definition format"),
    (TITLE, f"{TITLE}? {'9' * LONG}\n: x\n", "a definition's are at most 64"),
]


@pytest.mark.parametrize(("old", "new", "says"), ECHOES)
def test_input_quoted_in_a_message_is_cut_short(
    spec_dir: Path, old: str, new: str, says: str
) -> None:
    """issue 13 item 15: a message quoted the offending input whole (a 200 kB name, key,
    list, alias or tag came back as a 200 kB message). Every quote is cut short."""
    path = spec_dir / "outcome.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace(old, new, 1), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        machines.load(path)
    message = str(info.value)
    assert says in message
    assert len(message) < 2000, message[:300]


def test_problem_list_is_bounded(spec_dir: Path) -> None:
    """issue 13 item 15: 5,000 duplicate keys made a message of 5,000 lines; a message
    lists at most 100 problems and says how many more there are."""
    path = spec_dir / "outcome.yaml"
    edit(path, TITLE, TITLE + "again: x\n" * 5001)
    err = load_error(path, SpecUnreadable)
    assert len(err.problems) == 101
    assert err.problems[-1] == "... and 4,900 more problems; fix these first"


def test_too_many_definitions_in_a_spec_dir(tmp_path: Path) -> None:
    """issue 13 item 15: ``check`` read every ``*.yaml`` of a directory however many there
    were; more than 256 is refused before any is read."""
    for i in range(257):
        (tmp_path / f"m{i:03}.yaml").write_text("a: b\n", encoding="utf-8")
    report = machines.check(tmp_path)
    assert report.exit_code == 2
    assert report.unreadable == [
        f"{tmp_path}: more than 256 definitions in this directory; a system has a "
        "handful: point at the directory of one system"
    ]
    assert report.violations == []


# -- item 16: one vocabulary of tags --------------------------------------------------------

BUNDLED_TAGS = sorted(
    {
        tag
        for path in BUNDLED.glob("*.yaml")
        for state in yaml.safe_load(path.read_text(encoding="utf-8"))["states"].values()
        for tag in state.get("tags", [])
    }
)


def _first_use(tag: str) -> tuple[Path, str, str]:
    """The first bundled file, state and ``tags:`` line that use ``tag``."""
    for path in sorted(BUNDLED.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for state, raw in doc["states"].items():
            if tag in raw.get("tags", []):
                line = next(
                    ln
                    for ln in path.read_text(encoding="utf-8").splitlines(keepends=True)
                    if ln.strip().startswith("tags:") and tag in re.findall(r"[\w-]+", ln)
                )
                return path, state, line
    raise AssertionError(f"no bundled definition uses {tag}")


@pytest.mark.parametrize("tag", BUNDLED_TAGS)
def test_misspelled_tag_is_refused_with_a_did_you_mean(spec_dir: Path, tag: str) -> None:
    """issue 13 item 16: a misspelled tag (``effect-startd``) loaded cleanly and silently
    switched off the logic that reads it. It is a SpecError naming the line, with a
    did-you-mean."""
    bundled, state, line = _first_use(tag)
    wrong = tag[:-1] + "x"
    path = spec_dir / bundled.name
    text = path.read_text(encoding="utf-8").replace(
        line, re.sub(rf"(?<![\w-]){re.escape(tag)}(?![\w-])", wrong, line), 1
    )
    path.write_text(text, encoding="utf-8")
    problems = [p for p in load_error(path).problems if "unknown tag" in p]
    assert len(problems) == 1
    assert re.match(
        rf"line {line_of(text, re.escape(wrong))}, at states\.{state}\.tags\[\d\]: "
        rf"unknown tag '{wrong}' \(did you mean '{tag}'\?\); the tags are ",
        problems[0],
    ), problems[0]
    assert problems[0].endswith("and a tag of your own starts with 'x-'")


def test_tags_of_your_own_start_with_x(spec_dir: Path) -> None:
    """issue 13 item 16: a tag nothing in the package reads is declared by its ``x-``
    prefix; ``x-`` alone is not a tag."""
    path = spec_dir / "outcome.yaml"
    edit(path, "    tags: [effect-started, fail-closed", "    tags: [x-paged, fail-closed")
    spec = machines.load(path)
    assert "x-paged" in spec.states["indeterminate"].tags
    edit(path, "[x-paged, ", "[x-, ")
    problem = only_problem(load_error(path))
    assert "unknown tag 'x-'; the tags are effect-started, done, " in problem


def test_every_tag_is_documented() -> None:
    from machines.spec.vocabulary import TAGS, USER_TAG_PREFIX

    assert sorted(TAGS) == sorted(BUNDLED_TAGS)
    docs = (PACKAGE_ROOT / "docs" / "guide" / "definitions.md").read_text(encoding="utf-8")
    for tag in TAGS.values():
        assert f"| `{tag.name}` | {tag.meaning} | {tag.read_by} |" in docs
    assert f"`{USER_TAG_PREFIX}`" in docs


def test_code_reads_tags_through_the_vocabulary_only() -> None:
    """Each tag is spelled once, in ``machines.spec.vocabulary``: a module that spelled one
    itself could misspell it and silently read nothing."""
    from machines.spec.vocabulary import TAGS

    package = PACKAGE_ROOT / "machines"
    spelled = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "vocabulary.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in TAGS and "-" in node.value:
                spelled.append(f"{path.relative_to(package)}:{node.lineno}: {node.value}")
    assert spelled == []


# -- reserved names -------------------------------------------------------------------------

RUNTIME_ATTRIBUTES = sorted(
    {n for cls in (EntityMachine, AsyncEntityMachine) for n in dir(cls) if not n.startswith("_")}
)


@pytest.mark.parametrize("name", RUNTIME_ATTRIBUTES)
def test_every_runtime_attribute_is_a_reserved_trigger_name(spec_dir: Path, name: str) -> None:
    """issue 13 (reserved names): a trigger named ``can`` loaded, and then ``m.can(...)``
    fired it instead of asking. Every public attribute of the entity machines is reserved."""
    path = spec_dir / "effect.yaml"
    edit(path, "  - trigger: replay\n", f"  - trigger: {name}\n")
    problems = load_error(path).problems
    assert any(f"trigger name '{name}' is reserved" in p for p in problems), problems


def _keywords_beside_context() -> list[str]:
    """Named parameters of every call that takes a context as ``**context`` or forwards
    ``**options`` to the entity machine: a context variable must not be named like one."""
    from machines.spec import MachineSpec

    names: set[str] = set()
    classes = {MachineSpec, *EntityMachine.__mro__, *AsyncEntityMachine.__mro__} - {object}
    for cls in classes:
        for member in vars(cls).values():
            if not inspect.isfunction(member):
                continue
            params = inspect.signature(member).parameters.values()
            if any(p.kind is p.VAR_KEYWORD for p in params):
                names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return sorted(names)


@pytest.mark.parametrize("name", _keywords_beside_context())
def test_every_keyword_beside_a_context_is_a_reserved_context_name(
    spec_dir: Path, name: str
) -> None:
    """issue 13 (reserved names): a context variable named ``name`` or ``trigger`` loaded,
    and then ``m.trigger("x", actor=..., name=...)`` raised a raw TypeError."""
    path = spec_dir / "effect.yaml"
    text = edit(path, "context:\n  tier:\n", f"context:\n  {name}:\n")
    problems = load_error(path, loader=read_definition).problems
    reserved = [p for p in problems if f"context variable name '{name}' is reserved" in p]
    assert reserved, problems
    assert reserved[0].startswith(f"line {line_of(text, rf'^  {name}:$')}, at context.{name}")


def test_read_definition_takes_a_str_path_like_load(spec_dir: Path) -> None:
    """issue 13 item 15 (found by the garbage fuzz): ``read_definition`` given a ``str``
    path raised a raw AttributeError (``str.read_text``, then ``str.resolve``)."""
    spec = read_definition(str(spec_dir / "request.yaml"))
    assert spec.name == "request" and spec.derivation is not None
    with pytest.raises(SpecUnreadable):
        read_definition(None)  # type: ignore[arg-type]


def test_a_definition_linked_from_outside_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 21 (b13): ``specs/notes.yaml`` linked to a CI machine's credentials
    made ``machines check`` and ``machines docs`` read it and print it ("'https://ci-bot:
    ghp_...' is not of type 'object'") into the job's log. A link out of the directory is
    refused naming the link, unread; a document that is no mapping is not quoted."""
    from machines.cli import main

    secret = tmp_path / "credentials"
    secret.write_text("https://ci-bot:ghp_S3CRETt0ken@github.com\n", encoding="utf-8")
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "outcome.yaml").write_text(
        (machines.load("outcome").path or Path()).read_text(encoding="utf-8"), encoding="utf-8"
    )
    (specs / "notes.yaml").symlink_to(secret)
    for command in (
        ["check", "--spec-dir", str(specs)],
        ["check", "--spec-dir", str(specs), "--format", "json"],
    ):
        capsys.readouterr()
        assert main(command) != 0
        said = capsys.readouterr()
        assert "ghp_S3CRET" not in said.out + said.err
        assert (
            "notes.yaml" in said.out + said.err and "outside this directory" in said.out + said.err
        )
    (specs / "notes.yaml").unlink()
    (specs / "notes.yaml").write_text(
        "https://ci-bot:ghp_S3CRETt0ken@github.com\n", encoding="utf-8"
    )
    capsys.readouterr()
    assert main(["check", "--spec-dir", str(specs)]) != 0
    said = capsys.readouterr()
    assert "ghp_S3CRET" not in said.out + said.err
    assert "the document is a text, not a mapping of keys" in said.out + said.err


@pytest.mark.parametrize(("variables", "refused"), [(4, False), (5, True), (6, True)])
def test_a_context_of_too_many_combinations_is_refused_at_once(
    tmp_path: Path, variables: int, refused: bool
) -> None:
    """Outsider batch 35 (c 2): 12 values of each of 6 context variables, in a file of 911
    bytes, took 28 s and 1.6 GB to load, the checks walking the machine under each of the
    2,985,984 combinations. A definition has at most ``MAX_VALUATIONS`` of them."""
    values = "[" + ", ".join(f"v{i}" for i in range(12)) + "]"
    context = "".join(f"  k{i}: {{values: {values}, description: k}}\n" for i in range(variables))
    text = (
        "spec_version: 1\nmachine: wide\ndescription: d\ninitial: a\n"
        f"context:\n{context}"
        "actors:\n  bot: {automatic: true, description: b}\n"
        "states:\n  a: {}\n  b: {terminal: true}\n"
        "transitions:\n  - {trigger: go, source: a, dest: b, actor: bot, description: x}\n"
    )
    path = tmp_path / "wide.yaml"
    path.write_text(text)
    if refused:
        with pytest.raises(SpecError, match=r"combinations of values \(k0 12 x k1 12"):
            machines.load(path)
    else:
        machines.load(path)


def test_the_limit_of_contexts_a_definition_breaks_is_the_one_named(tmp_path: Path) -> None:
    """Outsider batch 41 (c 12): 100,000 combinations under 599 transitions were refused
    saying "at most 100,000" (which they are), not the limit broken: 5,000,000 counted
    once per transition."""
    values = "[" + ", ".join(f"v{i}" for i in range(10)) + "]"
    context = "".join(f"  k{i}: {{values: {values}, description: k}}\n" for i in range(5))
    moves = "".join(
        f"  - {{trigger: t{i}, source: a, dest: b, actor: bot, description: x}}\n"
        for i in range(60)
    )
    path = tmp_path / "wide.yaml"
    path.write_text(
        "spec_version: 1\nmachine: wide\ndescription: d\ninitial: a\n"
        f"context:\n{context}"
        "actors:\n  bot: {automatic: true, description: b}\n"
        "states:\n  a: {}\n  b: {terminal: true}\n"
        f"transitions:\n{moves}"
    )
    with pytest.raises(SpecError) as refused:
        machines.load(path)
    said = str(refused.value)
    assert "for each of its 60 transitions that is 6,000,000" in said, said
    assert "at most 5,000,000 are walked" in said and "at most 100,000" not in said, said
