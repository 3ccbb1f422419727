"""Targeted tests of the loader's error reporting.

Each test writes a deliberately broken copy of a bundled definition into ``tmp_path`` and
checks the precise ``SpecError``: its type, the file it names, the line (computed from the
text the test wrote, never hard-coded), the key path, and the hint that says what to do.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

import machines
from machines import SpecError, SpecUnreadable, SpecViolation
from machines.spec.loader import bundled_spec_dir, load, read_definition, see_format
from machines.spec.structure import check_structure
from tests.conftest import rename_everywhere

BUNDLED = bundled_spec_dir()
BUNDLED_NAMES = sorted(p.stem for p in BUNDLED.glob("*.yaml"))

# -- helpers ------------------------------------------------------------------------------


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    """A private copy of the bundled definitions (request.yaml needs node.yaml beside it)."""
    target = tmp_path / "spec"
    shutil.copytree(BUNDLED, target)
    return target


def edit(path: Path, old: str, new: str) -> str:
    """Replace the one occurrence of ``old`` in ``path``; return the new text."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path.name}"
    text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return text


def rewrite(path: Path, change: Callable[[dict[str, Any]], None]) -> str:
    """Load ``path`` with yaml.safe_load, apply ``change``, dump it back; return the text."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(doc)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10_000)
    path.write_text(text, encoding="utf-8")
    return text


def lines_of(text: str, pattern: str) -> list[int]:
    """1-based numbers of the lines of ``text`` that match the regex ``pattern``."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if re.search(pattern, line)]


def line_of(text: str, pattern: str) -> int:
    """The 1-based number of the single line of ``text`` matching ``pattern``."""
    found = lines_of(text, pattern)
    assert len(found) == 1, f"{pattern!r} matches lines {found}"
    return found[0]


def load_error(
    path: Path,
    kind: type[SpecError] = SpecError,
    loader: Callable[[Path], object] = machines.load,
) -> SpecError:
    """The error ``loader(path)`` raises; it must be exactly ``kind`` and name the file."""
    with pytest.raises(SpecError) as info:
        loader(path)
    err = info.value
    assert type(err) is kind, f"expected {kind.__name__}, got {type(err).__name__}: {err}"
    assert err.path is not None
    assert err.path.resolve() == path.resolve()
    assert str(err).startswith(str(err.path))
    assert err.problems
    return err


def only_problem(err: SpecError) -> str:
    assert len(err.problems) == 1, err.problems
    return err.problems[0]


# -- unreadable input ---------------------------------------------------------------------


def test_malformed_yaml_names_the_line(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "initial: pending\n", "initial: pending: again\n")
    err = load_error(path, SpecUnreadable)
    problem = only_problem(err)
    assert problem.startswith(f"line {line_of(text, r'^initial: pending: again$')}: ")
    assert "not valid YAML" in problem
    assert "mapping values are not allowed here" in problem
    assert "fix the syntax" in problem


def test_tab_indentation_names_the_line(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    text = edit(path, "initial: in_flight\n", "initial: in_flight\n\tcolour: red\n")
    line = line_of(text, "^\tcolour: red$")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line}: not valid YAML")
    assert "'\\t'" in problem


def test_second_document_is_unreadable(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    text = path.read_text(encoding="utf-8") + "---\nmachine: outcome\n"
    path.write_text(text, encoding="utf-8")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line_of(text, r'^---$')}: not valid YAML")
    assert "another document" in problem


@pytest.mark.parametrize("text", ["", "\n\n", "   \n", "# only a comment\n"])
def test_empty_file(spec_dir: Path, text: str) -> None:
    path = spec_dir / "outcome.yaml"
    path.write_text(text, encoding="utf-8")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert "empty" in problem
    assert "mapping" in problem


def test_not_utf8_is_unreadable(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    path.write_bytes(b"machine: \xff\xfe outcome\n")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert "cannot read the file" in problem
    assert "utf-8" in problem


def test_duplicate_top_level_key(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "initial: pending\n", "initial: pending\ninitial: executing\n")
    # plain PyYAML would silently keep the last value
    assert yaml.safe_load(text)["initial"] == "executing"
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line_of(text, r'^initial: executing$')}: ")
    assert "duplicate key 'initial'" in problem
    assert "<document>" in problem
    assert "remove or rename" in problem


def test_duplicate_key_inside_a_state(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(
        path,
        "  replayed:\n    terminal: true\n",
        "  replayed:\n    terminal: true\n    terminal: false\n",
    )
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line_of(text, r'^    terminal: false$')}: ")
    assert "duplicate key 'terminal' at states.replayed" in problem
    assert "silently keep only the last one" in problem


def test_duplicate_state_name(spec_dir: Path) -> None:
    """Two states with one name: PyYAML would merge them into one without a word."""
    path = spec_dir / "outcome.yaml"
    text = edit(
        path,
        "  failed:\n    terminal: true\n",
        "  succeeded:\n    description: again\n  failed:\n    terminal: true\n",
    )
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {lines_of(text, r'^  succeeded:$')[1]}: ")
    assert "duplicate key 'succeeded' at states" in problem


def test_yaml_boolean_key_must_be_quoted(spec_dir: Path) -> None:
    """YAML 1.1 reads a state called ``no`` as the boolean False."""
    path = spec_dir / "effect.yaml"
    text = edit(path, "  replayed:\n", "  no:\n")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert problem.startswith(f"line {line_of(text, r'^  no:$')}, at states: the key no ")
    assert "is read as the boolean false, not a string" in problem
    assert BOOLEAN_HINT in problem
    assert problem.endswith("quote it: 'no'")


# -- YAML 1.1 reads some plain values as booleans, null or numbers ------------------------

REFUND = Path(__file__).parent / "user_project" / "specs" / "refund.yaml"

BOOLEAN_HINT = "YAML reads on/off, yes/no and true/false unquoted as booleans (and y/n in YAML 1.1)"


@pytest.mark.parametrize(
    ("old", "new", "at", "reads", "token"),
    [
        pytest.param(
            "values: [small, large]",
            "values: [on, off]",
            "context.size.values[0]",
            "the boolean true",
            "on",
            id="values-on-off",
        ),
        pytest.param(
            "values: [small, large]",
            "values: [yes, no]",
            "context.size.values[1]",
            "the boolean false",
            "no",
            id="values-yes-no",
        ),
        pytest.param(
            "dest: declined, actor: approver,\n     description: A person rejects",
            "dest: no, actor: approver,\n     description: A person rejects",
            "transitions[3].dest",
            "the boolean false",
            "no",
            id="dest-no",
        ),
        pytest.param(
            "{trigger: found_refunded, source: unknown,",
            "{trigger: found_refunded, source: [unknown, yes],",
            "transitions[7].source[1]",
            "the boolean true",
            "yes",
            id="source-list-yes",
        ),
        pytest.param(
            "trigger: time_out",
            "trigger: on",
            "transitions[6].trigger",
            "the boolean true",
            "on",
            id="trigger-on",
        ),
        pytest.param(
            "rule: only_actors_exit, state: unknown",
            "rule: only_actors_exit, state: off",
            "invariants[3].state",
            "the boolean false",
            "off",
            id="rule-state-off",
        ),
        pytest.param(
            "title: Customer refund",
            "title: 1.10",
            "title",
            "the number 1.1",
            "1.10",
            id="number",
        ),
        pytest.param(
            "title: Customer refund",
            "title: 012",
            "title",
            "the number 10",
            "012",
            id="octal",
        ),
        pytest.param('origin: "our payments team"', "origin: ~", "origin", "null", "~", id="tilde"),
        pytest.param(
            'origin: "our payments team"',
            "origin: null",
            "origin",
            "null",
            "null",
            id="null",
        ),
        pytest.param(
            "{source: unknown, dest: sending,",
            "{source: unknown, dest: null,",
            "forbidden[0].dest",
            "null",
            "null",
            id="forbidden-dest-null",
        ),
    ],
)
def test_a_value_yaml_misreads_gets_a_hint(
    tmp_path: Path, old: str, new: str, at: str, reads: str, token: str
) -> None:
    """Where a string is wanted, a plain ``on``, ``no``, ``~`` or ``1.10`` is read as a
    boolean, null or a number: the message names the file, the line, the key path and the
    value as written, says how YAML read it, and says to quote it."""
    path = tmp_path / "refund.yaml"
    shutil.copy(REFUND, path)
    text = edit(path, old, new)
    err = load_error(path)
    assert str(err).startswith(f"{path}: ")
    line = line_of(text, re.escape(new.splitlines()[0]))
    (problem,) = [p for p in err.problems if p.startswith(f"line {line}, at {at}: ")]
    assert problem.startswith(f"line {line}, at {at}: {token} is read as {reads}, not a string")
    assert problem.endswith(f"quote it: '{token}' ({see_format()})") or (
        reads == "null" and f"quote it: '{token}', or write the value" in problem
    )
    if reads.startswith("the boolean"):
        assert BOOLEAN_HINT in problem


def test_an_empty_value_is_null_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "refund.yaml"
    shutil.copy(REFUND, path)
    text = edit(path, "title: Customer refund\n", "title:\n")
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'^title:$')}, at title: an empty value is read as null, "
        f"not a string: write the value ({see_format()})"
    )


def test_no_quoting_advice_where_quoting_would_not_help(tmp_path: Path) -> None:
    """``'~'`` is no state name and ``'on'`` no rule kind: the hint to quote is given only
    where the quoted value would be accepted; elsewhere the plain schema message stands
    (and null says to write the value)."""
    path = tmp_path / "refund.yaml"
    shutil.copy(REFUND, path)
    edit(path, "initial: requested\n", "initial: ~\n")
    edit(path, "rule: only_actors_exit, state: unknown", "rule: on, state: unknown")
    err = load_error(path)
    assert any(
        p.endswith(f"at initial: ~ is read as null, not a string: write the value ({see_format()})")
        for p in err.problems
    ), err.problems
    (rule,) = [p for p in err.problems if "invariants[3].rule" in p]
    assert "True is not one of" in rule and "quote it" not in rule


def test_two_values_read_as_one_boolean_say_why(tmp_path: Path) -> None:
    """``[yes, on]`` is ``[True, True]``: the list's "non-unique" says YAML misread it,
    and each value gets its own hint."""
    path = tmp_path / "refund.yaml"
    shutil.copy(REFUND, path)
    text = edit(path, "values: [small, large]", "values: [yes, on]")
    line = line_of(text, r"values: \[yes, on\]")
    err = load_error(path)
    assert err.problems[0] == (
        f"line {line}, at context.size.values: [True, True] has non-unique elements: YAML "
        "read some unquoted values as booleans, null or numbers (see below); quote them "
        f"({see_format()})"
    )
    assert [p.split(" is read as")[0] for p in err.problems[1:3]] == [
        f"line {line}, at context.size.values[0]: yes",
        f"line {line}, at context.size.values[1]: on",
    ]


def test_json_booleans_are_booleans(tmp_path: Path) -> None:
    """A JSON definition is read as YAML, but JSON's ``true`` is a boolean in JSON too: no
    YAML hint, the schema's message, at the line."""
    path = tmp_path / "refund.json"
    doc = yaml.safe_load(REFUND.read_text(encoding="utf-8"))
    doc["initial"] = True
    text = json.dumps(doc, indent=2)
    path.write_text(text, encoding="utf-8")
    problem = only_problem(load_error(path))
    line = line_of(text, '"initial": true')
    assert problem == (f"line {line}, at initial: True is not of type 'string' ({see_format()})")


# -- schema: shape and unknown keys --------------------------------------------------------


def test_unknown_top_level_key(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "title: Effect log entry\n", "title: Effect log entry\ncolour: red\n")
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line_of(text, r'^colour: red$')}, at colour: ")
    assert "unknown key(s) 'colour'" in problem
    assert (
        "allowed here: actors, context, derivation, description, findings, forbidden, "
        "initial, invariants, machine, opt_out, origin, spec_version, states, title, transitions"
    ) in problem
    assert "Remove or fix the spelling" in problem


def test_unknown_key_names_its_own_line(spec_dir: Path) -> None:
    """An unknown key near the end of a long file is reported at its own line, not at
    the line of the enclosing mapping (the document: line 1)."""
    path = spec_dir / "effect.yaml"
    text = path.read_text(encoding="utf-8") + "colour: red\n"
    path.write_text(text, encoding="utf-8")
    problem = only_problem(load_error(path))
    assert "unknown key(s) 'colour'" in problem
    assert problem.startswith(f"line {line_of(text, r'^colour: red$')}, ")


def test_unknown_key_in_a_state(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(
        path,
        "  pending:\n    description: Registered",
        "  pending:\n    colour: red\n    description: Registered",
    )
    problem = only_problem(load_error(path))
    assert problem.startswith(
        f"line {line_of(text, r'^    colour: red$')}, at states.pending.colour: "
    )
    assert "unknown key(s) 'colour'" in problem
    assert "allowed here: annotations, db_value, description, tags, terminal" in problem
    assert "Remove or fix the spelling" in problem


def test_unknown_key_in_a_transition(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(
        path, "    dest: committed\n", "    dest: committed\n    guard: {tier: [compensable]}\n"
    )
    index = lines_of(text, r"^  - trigger: ").index(line_of(text, r"^  - trigger: commit$"))
    problem = only_problem(load_error(path))
    line = line_of(text, r"^    guard: ")
    assert problem.startswith(f"line {line}, at transitions[{index}].guard: ")
    assert "unknown key(s) 'guard'" in problem
    assert (
        "allowed here: actor, amendment, description, dest, evidence, source, trigger, "
        "unreachable_in_systems, when"
    ) in problem


def test_missing_required_top_level_key(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    edit(path, "initial: pending\n", "")
    problem = only_problem(load_error(path))
    assert problem.startswith("line 1, at <document>: ")
    assert "'initial' is a required property" in problem
    assert f"add it ({see_format()})" in problem


def test_missing_required_key_in_a_transition(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "    dest: replayed\n    actor: engine\n", "    dest: replayed\n")
    starts = lines_of(text, r"^  - trigger: ")
    start = line_of(text, r"^  - trigger: replay$")
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {start}, at transitions[{starts.index(start)}]: ")
    assert "'actor' is a required property" in problem
    assert "add it" in problem


def test_wrong_type(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(
        path,
        "  committed:\n    terminal: true\n",
        '  committed:\n    terminal: "yes"\n',
    )
    line = line_of(text, 'terminal: "yes"')
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line}, at states.committed.terminal: ")
    assert "'yes' is not of type 'boolean'" in problem
    assert "machine.schema.json" in problem


def test_bad_name_pattern(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    text = edit(path, "initial: in_flight\n", "initial: In-Flight\n")
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line_of(text, r'^initial: In-Flight$')}, at initial: ")
    assert "is not a lower_snake name" in problem


def test_name_with_trailing_newline_is_not_lower_snake(spec_dir: Path) -> None:
    """``"failed\\n"`` is not a lower_snake name, yet it matches the schema's
    ``^[a-z][a-z0-9_]*$``: Python's ``re.search`` lets ``$`` match before a final newline.
    Renamed consistently, the definition loads with a state called ``'failed\\n'``."""
    path = spec_dir / "outcome.yaml"
    rewrite(path, lambda doc: doc.update(rename_everywhere(doc, "failed", "failed\n")))
    err = load_error(path)
    assert any("states" in p and "is not a lower_snake name" in p for p in err.problems), (
        err.problems
    )


def test_document_that_is_a_list(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    problem = only_problem(load_error(path))
    assert problem.startswith("line 1, at <document>: ")
    assert "the document is a list, not a mapping of keys" in problem


@pytest.mark.parametrize(
    ("given", "said"), [("'1'", "not '1' (a text)"), ("true", "(a true or false)")]
)
def test_a_spec_version_that_is_not_the_number_1_says_what_was_given(
    spec_dir: Path, given: str, said: str
) -> None:
    """Outsider batch 45 (b 15b): ``spec_version: '1'`` was "1 was expected", which did not
    say that a text was given."""
    path = spec_dir / "outcome.yaml"
    edit(path, "spec_version: 1\n", f"spec_version: {given}\n")
    problem = only_problem(load_error(path))
    assert "at spec_version: 1 was expected, " in problem and said in problem, problem


def test_a_tag_written_in_snake_case_is_told_the_tag_meant(spec_dir: Path) -> None:
    """Outsider batch 46 (b 4): ``needs_human`` was "not a kebab-case id" with no guess,
    where ``needs-humans`` got one."""
    path = spec_dir / "outcome.yaml"
    edit(path, "effect-started, fail-closed,", "effect-started, fail_closed,")
    problem = only_problem(load_error(path))
    assert "'fail_closed' is not a kebab-case id" in problem
    assert "(did you mean 'fail-closed'?)" in problem


def test_a_guard_on_an_unknown_variable_is_one_problem_not_an_ambiguity_too(
    tmp_path: Path,
) -> None:
    """Outsider batch 46 (b 5): a guard naming an unknown variable was reported, and then
    again as an ambiguity of the move it no longer told apart from its twin."""
    from tests.test_migration import LOAN

    assert "when: {amount: [small]}" in LOAN  # the twin of approve's large branch
    path = tmp_path / "loan.yaml"
    path.write_text(LOAN.replace("when: {amount: [small]}", "when: {amout: [small]}", 1))
    problem = only_problem(load_error(path))
    assert "'amout' is not a context variable (did you mean 'amount'?)" in problem


def test_every_problem_is_listed(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    edit(path, "    dest: committed\n", "    dest: comitted\n")
    edit(path, "    actor: engine\n", "    actor: engin\n")
    err = load_error(path)
    assert len(err.problems) == 2
    assert f"{err.path}: 2 problems:\n  - " in str(err)
    assert "'comitted'" in str(err)
    assert "'engin'" in str(err)


# -- cross-references ---------------------------------------------------------------------


def test_undefined_dest_suggests_close_name(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "    dest: committed\n", "    dest: comitted\n")
    starts = lines_of(text, r"^  - trigger: ")
    index = starts.index(line_of(text, r"^  - trigger: commit$"))
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'dest: comitted')}, at transitions[{index}].dest: "
        "'comitted' is not a state of machine 'effect' (did you mean 'committed'?); "
        "define it under states or fix the name"
    )


def test_undefined_source_in_a_list(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = rewrite(
        path,
        lambda doc: doc["transitions"][3].__setitem__("source", ["pending", "pendng"]),
    )
    problem = only_problem(load_error(path))
    assert problem.startswith(
        f"line {line_of(text, r'^  - pendng$')}, at transitions[3].source[1]: 'pendng'"
    )
    assert "(did you mean 'pending'?)" in problem


def test_unknown_actor_in_a_list_is_named_at_its_item(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = rewrite(
        path,
        lambda doc: doc["transitions"][3].__setitem__("actor", ["engine", "engin"]),
    )
    problem = only_problem(load_error(path))
    assert problem.startswith(
        f"line {line_of(text, r'^  - engin$')}, at transitions[3].actor[1]: 'engin' "
        "is not an actor (did you mean 'engine'?)"
    )


def test_names_in_a_rules_lists_are_named_at_their_items(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    edit(
        path,
        "    states: [approved, rejected]\n    actors: [human]\n",
        "    states: [approved, rejectd]\n    actors: [human, humn]\n",
    )
    problems = load_error(path).problems
    assert any("at invariants[6].states[1]: 'rejectd' is not a state" in p for p in problems)
    assert any("at invariants[6].actors[1]: 'humn' is not an actor" in p for p in problems)


def test_undefined_initial_state(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    text = edit(path, "initial: in_flight\n", "initial: inflight\n")
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line_of(text, r'^initial: inflight$')}, at initial: ")
    assert "(did you mean 'in_flight'?)" in problem


def test_unknown_actor(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "    actor: engine\n", "    actor: engin\n")
    problem = only_problem(load_error(path))
    index = lines_of(text, r"^  - trigger: ").index(line_of(text, r"^  - trigger: replay$"))
    assert problem.startswith(
        f"line {line_of(text, r'actor: engin$')}, at transitions[{index}].actor: 'engin' "
        "is not an actor (did you mean 'engine'?)"
    )
    assert "declare it under actors (known: proxy, engine, saga, human)" in problem


GUARDED_APPROVE = "    when: {tier: [irreversible]}\n    description: A human approves"


def test_guard_on_undeclared_context_variable(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, GUARDED_APPROVE, GUARDED_APPROVE.replace("tier:", "tiers:"))
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'tiers:')}, at transitions[1].when.tiers: "
        "'tiers' is not a context variable (did you mean 'tier'?); declare it under context"
    )


def test_guard_with_undeclared_value(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, GUARDED_APPROVE, GUARDED_APPROVE.replace("irreversible", "irreversibel"))
    problem = only_problem(load_error(path))
    assert problem.startswith(
        f"line {line_of(text, r'irreversibel')}, at transitions[1].when.tier[0]: "
        "'irreversibel' is not a value of 'tier' (did you mean 'irreversible'?)"
    )
    assert "values: compensable, irreversible" in problem


def test_guard_admitting_an_excluded_value(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, GUARDED_APPROVE, GUARDED_APPROVE.replace("[irreversible]", "[safe]"))
    line = line_of(text, r"tier: \[safe\]")
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line}, at transitions[1].when.tier[0]: "
        "tier=safe is excluded from this machine; a guard cannot admit it"
    )


def test_context_value_both_allowed_and_excluded(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(
        path, "    values: [compensable, irreversible]\n", "    values: [compensable, safe]\n"
    )
    problems = load_error(path).problems
    both = [p for p in problems if "both a value and excluded" in p]
    assert len(both) == 1
    assert both[0].startswith(f"line {line_of(text, r'^      safe: ')}, at context.tier.excluded")


def _add_transition(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["transitions"].append({**fields, "description": "added by the test"})

    return change


def test_duplicate_trigger_is_ambiguous(spec_dir: Path) -> None:
    """pending --approve (human)--> approved already exists under tier=irreversible; an
    unguarded approve by a human to rejected overlaps it."""
    path = spec_dir / "effect.yaml"
    text = rewrite(
        path, _add_transition(trigger="approve", source="pending", dest="rejected", actor="human")
    )
    problem = only_problem(load_error(path, loader=read_definition))
    added = len(yaml.safe_load(text)["transitions"]) - 1
    line = [i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("- trigger: ")][added]
    assert problem == (
        f"line {line}, at transitions[{added}]: trigger 'approve' from 'pending' is "
        f"ambiguous: transitions[1] goes to 'approved' and transitions[{added}] to 'rejected' "
        "for the same actor and context; give one a different trigger name, actor or guard"
    )


def test_duplicate_trigger_with_shared_actor_in_a_list_is_ambiguous(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    rewrite(
        path,
        _add_transition(
            trigger="replay", source=["approved", "pending"], dest="rejected", actor=["engine"]
        ),
    )
    problem = only_problem(load_error(path, loader=read_definition))
    assert "trigger 'replay' from 'pending' is ambiguous" in problem
    assert "transitions[3] goes to 'replayed' and transitions[10] to 'rejected'" in problem


def test_duplicate_trigger_with_disjoint_guards_is_not_ambiguous(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    rewrite(
        path,
        _add_transition(
            trigger="approve",
            source="pending",
            dest="rejected",
            actor="human",
            when={"tier": ["compensable"]},
        ),
    )
    spec = read_definition(path)
    approve = [t for t in spec.transitions if t.trigger == "approve"]
    assert [(t.dest, set(t.when["tier"])) for t in approve] == [
        ("approved", {"irreversible"}),
        ("rejected", {"compensable"}),
    ]
    assert spec.step("pending", "approve", actor="human", tier="compensable") == "rejected"
    assert spec.step("pending", "approve", actor="human", tier="irreversible") == "approved"


def test_duplicate_trigger_with_disjoint_actors_is_not_ambiguous(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    rewrite(
        path, _add_transition(trigger="replay", source="pending", dest="rejected", actor="human")
    )
    spec = read_definition(path)
    assert spec.step("pending", "replay", actor="engine") == "replayed"
    assert spec.step("pending", "replay", actor="human") == "rejected"


def test_machine_name_must_equal_file_stem(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "machine: effect\n", "machine: effects\n")
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'^machine: effects$')}, at machine: "
        "machine 'effects' must equal the file name 'effect'"
    )


def test_renamed_file_must_be_renamed_inside(spec_dir: Path) -> None:
    path = spec_dir / "effect_copy.yaml"
    shutil.copy(spec_dir / "effect.yaml", path)
    problem = only_problem(load_error(path))
    assert "machine 'effect' must equal the file name 'effect_copy'" in problem


@pytest.mark.parametrize(
    "trigger", ["to_replayed", "may_replay", "is_replayed", "state", "trigger", "history"]
)
def test_reserved_trigger_name(spec_dir: Path, trigger: str) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "  - trigger: replay\n", f"  - trigger: {trigger}\n")
    index = lines_of(text, r"^  - trigger: ").index(line_of(text, rf"^  - trigger: {trigger}$"))
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, rf'^  - trigger: {trigger}$')}, at transitions[{index}].trigger: "
        f"trigger name '{trigger}' is reserved (it would shadow a runtime attribute); "
        "choose another verb"
    )


def test_amendment_naming_missing_finding(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(
        path,
        "    amendment: irreversible-bypasses-approval\n",
        "    amendment: irreversible-bypasses-aproval\n",
    )
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'amendment: irreversible-bypasses-aproval')}, "
        "at transitions[0].amendment: 'irreversible-bypasses-aproval' is not a finding of "
        "this file (did you mean 'irreversible-bypasses-approval'?); add it under findings"
    )


def test_duplicate_invariant_ids(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "  - id: every-state-reachable\n", "  - id: terminal-final\n")
    second = lines_of(text, r"^  - id: terminal-final$")[1]
    index = lines_of(text[: text.index("\nfindings:")], r"^  - id: ").index(second)
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {second}, at invariants[{index}].id: invariant id 'terminal-final' is used twice"
    )


def test_duplicate_finding_ids(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    text = rewrite(path, lambda doc: doc["findings"].append(dict(doc["findings"][0])))
    doc = yaml.safe_load(text)
    first, index = doc["findings"][0]["id"], len(doc["findings"]) - 1
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {lines_of(text, rf'^- id: {first}$')[1]}, at findings[{index}].id: "
        f"finding id '{first}' is used twice"
    )


def test_invariant_naming_unknown_trigger(spec_dir: Path) -> None:
    path = spec_dir / "outcome.yaml"
    text = edit(
        path,
        "    triggers: [reclaim, decide_landed, decide_not_landed]\n",
        "    triggers: [reclaim, decide_landed, decide_not_lande]\n",
    )
    line = line_of(text, r"decide_not_lande\]")
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line}, at invariants[")
    assert "'decide_not_lande' is not a trigger of this machine" in problem
    assert "(did you mean 'decide_not_landed'?)" in problem


# -- the request derivation ---------------------------------------------------------------

ALL_DONE = (
    "            - all: {state: [completed, skipped]}\n"
    "          result: completed\n"
    "          description: Every node completed"
)


def test_derivation_rule_naming_missing_node_state(spec_dir: Path) -> None:
    path = spec_dir / "request.yaml"
    text = edit(path, ALL_DONE, ALL_DONE.replace("skipped", "skiped"))
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'skiped')}, at "
        "derivation.rule_sets.money-safe.rules[0].when[0].all.state[1]: 'skiped' is not a "
        "state of machine 'node' (did you mean 'skipped'?); define it under states or fix "
        "the name"
    )


def test_derivation_result_naming_missing_request_state(spec_dir: Path) -> None:
    path = spec_dir / "request.yaml"
    text = edit(path, ALL_DONE, ALL_DONE.replace("result: completed", "result: complete"))
    problem = only_problem(load_error(path))
    assert problem.startswith(
        f"line {line_of(text, r'result: complete$')}, at "
        "derivation.rule_sets.money-safe.rules[0].result: 'complete' is not a state of "
        "machine 'request' (did you mean 'completed'?)"
    )


def test_derivation_default_naming_missing_rule_set(spec_dir: Path) -> None:
    path = spec_dir / "request.yaml"
    text = edit(path, "  default: money-safe\n", "  default: money-saf\n")
    problem = only_problem(load_error(path))
    assert problem == (
        f"line {line_of(text, r'default: money-saf$')}, at derivation.default: "
        "'money-saf' is not a rule set (did you mean 'money-safe'?)"
    )


def test_derivation_naming_missing_node_machine(spec_dir: Path) -> None:
    path = spec_dir / "request.yaml"
    text = edit(path, "  nodes: node\n", "  nodes: nodes\n")
    problem = only_problem(load_error(path))
    assert problem.startswith(
        f"line {line_of(text, r'^  nodes: nodes$')}, at derivation.nodes: "
        "cannot read the node machine"
    )
    assert f"{spec_dir.resolve() / 'nodes.yaml'} does not exist" in problem


def test_derivation_reports_a_broken_node_machine(spec_dir: Path) -> None:
    node = spec_dir / "node.yaml"
    node_text = edit(node, "initial: blocked\n", "initial: blocked: again\n")
    path = spec_dir / "request.yaml"
    problem = only_problem(load_error(path))
    assert "at derivation.nodes: cannot read the node machine" in problem
    assert str(node.resolve()) in problem
    assert f"line {line_of(node_text, r'^initial: blocked: again$')}: not valid YAML" in problem


def test_derivation_naming_its_own_machine(spec_dir: Path) -> None:
    path = spec_dir / "request.yaml"
    text = edit(path, "  nodes: node\n", "  nodes: request\n")
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line_of(text, r'^  nodes: request$')}, at derivation.nodes: ")
    assert "derivation.nodes 'request' refers back to a definition being read" in problem


def test_derivation_context_must_cover_every_variable(spec_dir: Path) -> None:
    path = spec_dir / "request.yaml"
    text = rewrite(path, lambda doc: doc["derivation"].pop("context"))
    problem = only_problem(load_error(path))
    assert problem.startswith(f"line {line_of(text, r'^derivation:$')}, at derivation.context: ")
    assert "missing: side_effects" in problem


# -- names and paths ----------------------------------------------------------------------


def test_load_unknown_name_lists_bundled_machines() -> None:
    with pytest.raises(SpecUnreadable) as info:
        machines.load("nonexistent-name")
    err = info.value
    assert err.path is None
    assert only_problem(err) == (
        "'nonexistent-name' is neither a bundled machine nor a definition file "
        "(.yaml, .yml, .json); "
        f"bundled machines: {', '.join(BUNDLED_NAMES)}"
    )


def test_load_misspelled_name_suggests_bundled_machine() -> None:
    with pytest.raises(SpecUnreadable) as info:
        machines.load("efect")
    assert "(did you mean 'effect'?)" in only_problem(info.value)


def test_load_missing_yaml_path(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    problem = only_problem(load_error(path, SpecUnreadable))
    assert "no such" in problem


def test_load_directory(tmp_path: Path) -> None:
    path = tmp_path / "dir.yaml"
    path.mkdir()
    problem = only_problem(load_error(path, SpecUnreadable))
    assert "directory" in problem


def test_load_overlong_name_is_spec_unreadable() -> None:
    """A name too long for the file system is a SpecUnreadable, not the OSError
    (ENAMETOOLONG) that ``Path.exists()`` raises for it."""
    with pytest.raises(SpecUnreadable) as info:
        machines.load("x" * 300)
    assert "xxxxxxxx" in only_problem(info.value)


def test_deeply_nested_yaml_is_spec_unreadable(spec_dir: Path) -> None:
    """Deep nesting is a SpecUnreadable, not a RecursionError from yaml.compose."""
    path = spec_dir / "outcome.yaml"
    path.write_text("title: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    load_error(path, SpecUnreadable)


def test_alias_bomb_is_spec_unreadable(spec_dir: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    path = spec_dir / "outcome.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problem = only_problem(load_error(path, SpecUnreadable))
    assert "once aliases are expanded" in problem


# -- structural rules ---------------------------------------------------------------------


def test_structural_violation_raises_spec_violation(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    rewrite(
        path, _add_transition(trigger="reopen", source="committed", dest="executing", actor="proxy")
    )
    # schema and references are fine: read_definition accepts it
    spec = read_definition(path)
    assert spec.allows("committed", "executing")
    err = load_error(path, SpecViolation)
    message = str(err)
    assert "[terminal-final] terminal state 'committed' has a way out" in message
    assert "[forbidden]" in message
    assert "\n    path: " in message
    terminal = next(p for p in err.problems if "[terminal-final]" in p)
    assert "path: with tier=compensable: pending --execute (proxy)--> executing" in terminal
    assert terminal.endswith("--> committed --reopen (proxy)--> executing")


def test_a_baseline_rule_left_out_is_implied_and_one_built_without_it_is_refused(
    spec_dir: Path,
) -> None:
    path = spec_dir / "outcome.yaml"
    rewrite(
        path,
        lambda doc: doc.__setitem__(
            "invariants", [r for r in doc["invariants"] if r["rule"] != "can_terminate"]
        ),
    )
    spec = load(path)
    assert [r.id for r in spec.invariants if r.kind == "can_terminate"] == ["can-terminate"]
    built = replace(spec, invariants=tuple(r for r in spec.invariants if r.kind != "can_terminate"))
    (problem,) = [v for v in check_structure(built) if v.rule == "required-rules"]
    assert "no invariant of kind 'can_terminate' is declared" in problem.message
    opted = replace(built, opt_out={"can_terminate": "It never ends."})
    assert check_structure(opted) == []


def test_bundled_definitions_load_cleanly(spec_dir: Path) -> None:
    """The baseline every broken copy above starts from."""
    for name in BUNDLED_NAMES:
        assert machines.load(spec_dir / f"{name}.yaml").name == name


def test_reserved_context_variable_name(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    text = edit(path, "context:\n  tier:\n", "context:\n  state:\n")
    problems = load_error(path, loader=read_definition).problems
    reserved = [p for p in problems if "is reserved" in p]
    assert reserved and reserved[0].startswith(
        f"line {line_of(text, r'^  state:$')}, at context.state"
    )


def test_unreachable_in_systems_must_name_a_finding(spec_dir: Path) -> None:
    path = spec_dir / "effect.yaml"
    edit(
        path,
        "    unreachable_in_systems: replay-vs-unique-signature\n",
        "    unreachable_in_systems: no-such-finding\n",
    )
    problem = only_problem(load_error(path))
    assert "unreachable_in_systems" in problem and "no-such-finding" in problem


def test_a_text_of_spaces_alone_is_refused_naming_its_place(tmp_path: Path) -> None:
    """Outsider batch 38 (c F4): ``""`` was refused as a description, ``"   "`` passed, and
    so did a tab; every text a definition gives must hold more than spaces."""
    path = tmp_path / "m.yaml"
    path.write_text(
        'spec_version: 1\nmachine: m\ndescription: "\\u200b \\u2800"\ninitial: a\n'
        'actors:\n  bot: {automatic: true, description: " "}\n'
        "states:\n  a: {}\n  done: {terminal: true}\n"
        'transitions:\n  - {trigger: go, source: a, dest: done, actor: bot, description: "\\t"}\n',
        encoding="utf-8",
    )
    problems = load_error(path).problems
    said = "is not a text with something in it besides spaces and characters that draw"
    places = sorted(p.split(",")[0] for p in problems if said in p)
    assert places == ["line 11", "line 3", "line 6"], problems


def test_a_context_variable_name_too_long_for_a_column_is_refused(tmp_path: Path) -> None:
    """Outsider batch 39 (c B4): a context variable of 70 characters checked clean, and
    every PostgreSQL store of it was refused as tampered (PostgreSQL cut its column's name
    at 63 bytes); two sharing their first 60 made one column twice. A variable's name has
    at most 59 characters (its column is ``ctx_`` and the name)."""

    def definition(variable: str) -> Path:
        path = tmp_path / "m.yaml"
        path.write_text(
            "spec_version: 1\nmachine: m\ndescription: A machine.\ninitial: a\n"
            f"context:\n  {variable}: {{values: [x, y], description: A variable.}}\n"
            "actors:\n  bot: {automatic: true, description: A bot.}\n"
            "states:\n  a: {}\n  b: {terminal: true}\n"
            "transitions:\n  - {trigger: go, source: a, dest: b, actor: bot, description: Go.}\n",
            encoding="utf-8",
        )
        return path

    assert machines.load(definition("v" * 59)).context
    problems = load_error(definition("v" * 60)).problems
    assert any("has 60 characters; at most 59" in p for p in problems), problems


@pytest.mark.parametrize(
    "blank",
    ["\u061c", "\U000e0020", "\u034f", "\ufe0f", "\u2061\u17b4", "\ue000", "\u0301", "\u303f"],
)
def test_a_text_of_any_character_that_draws_nothing_is_refused(tmp_path: Path, blank: str) -> None:
    """Outsider batches 39 and 40 (c B5, B3): the schema's pattern listed the characters
    that draw nothing, and every one it left out (an Arabic letter mark, a tag space, a
    combining grapheme joiner, a variation selector) made a description that passed. A
    text must hold a letter, digit, punctuation mark or symbol that draws
    (``visible.draws_something``); ``~`` and an emoji still describe."""
    path = tmp_path / "m.yaml"

    def definition(description: str) -> Path:
        text = json.dumps(description, ensure_ascii=False)
        path.write_text(
            f"spec_version: 1\nmachine: m\ndescription: {text}\ninitial: a\n"
            "actors:\n  bot: {automatic: true, description: A bot.}\n"
            "states:\n  a: {}\n  done: {terminal: true}\n"
            "transitions:\n  - {trigger: go, source: a, dest: done, actor: bot, "
            "description: Go.}\n",
            encoding="utf-8",
        )
        return path

    problems = load_error(definition(blank)).problems
    said = "is not a text with something in it besides spaces and characters that draw"
    assert [p.split(",")[0] for p in problems if said in p] == ["line 3"], problems
    for shows in ("~", "\U0001f512", f"{blank}x", "\U0001fa77", "\U0001e4d0"):
        assert machines.load(definition(shows)).description == shows  # batch 42 c 1c
    for never in ("\U000e0080", "\u2065"):  # unassigned, never to draw
        assert load_error(definition(never)).problems
    said = load_error(definition("\u3164\u2800")).problems  # batch 42 c 1d
    assert any("'\\u3164\\u2800' is not a text" in p for p in said), said


def test_a_name_or_a_list_of_names_is_judged_by_the_form_given(tmp_path: Path) -> None:
    """Outsider batch 41 (c 10): ``actor: Human`` was told it "is not of type 'array'",
    and ``source: [Bad]`` that it "is not of type 'string'": the message judged the
    value by the branch its type does not fit. It now says what is wrong in the form
    given (a name that is no lower_snake name, an empty list)."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "spec_version: 1\nmachine: m\ndescription: A thing.\ninitial: a\n"
        "actors:\n  bot: {automatic: true, description: A bot.}\n"
        "states:\n  a: {}\n  z: {terminal: true}\n"
        "transitions:\n"
        "  - {trigger: go, source: Bad, dest: z, actor: Human, description: Go.}\n"
        "  - {trigger: go2, source: [Bad], dest: z, actor: [], description: Go.}\n"
        "  - {trigger: go3, source: [a, 5], dest: z, actor: bot, description: Go.}\n"
        "forbidden:\n  - {source: a, dest: Closed, reason: Answer it first.}\n",
        encoding="utf-8",
    )
    problems = load_error(path).problems
    said = {p.split(": ", 1)[0].split("at ")[-1]: p for p in problems}
    snake = "is not a lower_snake name"
    assert snake in said["transitions[0].actor"] and snake in said["transitions[0].source"]
    assert snake in said["transitions[1].source[0]"]
    assert "should be non-empty" in said["transitions[1].actor"]
    assert "5 is not of type 'string'" in said["transitions[2].source[1]"]  # batch 42 c 2b
    assert snake in said["forbidden[0].dest"]  # batch 42 c 2a: "'*' was expected"
    assert not any("is not of type 'array'" in p or "was expected" in p for p in problems)


def test_a_pattern_is_said_in_words_wherever_it_is_used(tmp_path: Path) -> None:
    """Outsider batch 42 (c 2d): a ``db_value`` or an invariant's ``id`` that broke its
    pattern was told the raw regular expression."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "spec_version: 1\nmachine: m\ndescription: A thing.\ninitial: a\n"
        "actors:\n  bot: {automatic: true, description: A bot.}\n"
        "states:\n  a: {db_value: Open}\n  z: {terminal: true}\n"
        "transitions:\n  - {trigger: go, source: a, dest: z, actor: bot, description: Go.}\n"
        "invariants:\n  - {id: Urgent, rule: terminal_final, description: x}\n",
        encoding="utf-8",
    )
    problems = load_error(path).problems
    assert any("'Open' is not a lower_snake name" in p for p in problems), problems
    assert any("'Urgent' is not a kebab-case id: a lowercase" in p for p in problems), problems
    assert not any("does not match" in p for p in problems), problems
