"""``machines export``: the definition in YAML or JSON, which loads back to the same
definition, and the SQL the store runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import machines
from machines import SpecError, SpecUnreadable
from machines.checks.report import check
from machines.cli import main
from machines.render.export import export
from machines.spec import MachineSpec
from machines.spec.records import definition_differences
from machines.spec.visible import draws_something
from machines.store.ddl import sqlite_schema
from machines.store.ddl_postgres import postgres_schema
from machines.testing.profiles import scaled
from tests.conftest import postgres_schema as postgres_schema_on_server
from tests.conftest import rename_everywhere

BUNDLED = ("effect", "outcome", "node", "request")
USER_SPECS = Path(__file__).parent / "user_project" / "specs"
DEFINITION_FORMATS = ("yaml", "json")


def exported(spec: MachineSpec, fmt: str, directory: Path) -> Path:
    """``spec`` written as ``directory/NAME.fmt`` (a name must equal its file's stem)."""
    path = directory / f"{spec.name}.{fmt}"
    path.write_text(export(spec, fmt), encoding="utf-8")
    return path


def assert_same(original: MachineSpec, loaded: MachineSpec) -> None:
    """Equal field by field: ``definition_differences`` names the fields that differ."""
    assert loaded is not original
    assert definition_differences(original, loaded) == ()
    assert original.same_definition(loaded) and loaded.same_definition(original)


@pytest.mark.parametrize("fmt", DEFINITION_FORMATS)
def test_every_bundled_definition_round_trips(fmt: str, tmp_path: Path) -> None:
    """Exported and loaded back, each bundled machine is the same definition; request's
    derivation reads its node machine from the exported file beside it."""
    for name in BUNDLED:
        exported(machines.load(name), fmt, tmp_path)
    for name in BUNDLED:
        assert_same(machines.load(name), machines.load(tmp_path / f"{name}.{fmt}"))


@pytest.mark.parametrize("fmt", DEFINITION_FORMATS)
def test_a_users_definition_round_trips(fmt: str, tmp_path: Path) -> None:
    refund = machines.load(USER_SPECS / "refund.yaml")
    assert_same(refund, machines.load(exported(refund, fmt, tmp_path)))


@pytest.mark.parametrize("fmt", DEFINITION_FORMATS)
def test_the_cli_export_round_trips(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``machines export NAME --format yaml|json`` > NAME.yaml|json loads back, for a
    bundled name and for a path to a user's file (and to an exported one)."""
    sources = [*BUNDLED, str(USER_SPECS / "refund.yaml")]
    for source in sources:
        assert main(["export", source, "--format", fmt]) == 0
        spec = machines.load(source)
        (tmp_path / f"{spec.name}.{fmt}").write_text(capsys.readouterr().out, encoding="utf-8")
    for source in sources:
        spec = machines.load(source)
        again = tmp_path / f"{spec.name}.{fmt}"
        assert_same(spec, machines.load(again))
        assert main(["export", str(again), "--format", fmt]) == 0
        assert capsys.readouterr().out == again.read_text(encoding="utf-8"), "not a fixpoint"


def test_json_is_the_json_of_the_yaml(tmp_path: Path) -> None:
    """The two definition formats write one document; json is what any language loads."""
    for name in BUNDLED:
        spec = machines.load(name)
        doc = json.loads(export(spec, "json"))
        assert doc == yaml.safe_load(export(spec, "yaml"))
        assert doc["machine"] == name and list(doc["states"]) == list(spec.states)


def test_the_default_format_is_the_loadable_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "outcome"]) == 0
    assert capsys.readouterr().out == export(machines.load("outcome"), "json")


def test_json_export_says_which_transitions_no_system_takes() -> None:
    """The export carries ``unreachable_in_systems`` (issue 15): effect's replay edge
    carries its finding."""
    doc = json.loads(export(machines.load("effect"), "json"))
    marked = {
        (source, t["trigger"], t["dest"]): t["unreachable_in_systems"]
        for t in doc["transitions"]
        if "unreachable_in_systems" in t
        for source in ([t["source"]] if isinstance(t["source"], str) else t["source"])
    }
    assert set(marked) == set(machines.load("effect").unreachable_in_systems)
    assert marked, "effect marks no transition unreachable in systems"


TRICKY_TEXTS = (
    "on",
    "no",
    "1.10",
    "012",
    "~",
    "null",
    "*",
    "key: value # not a comment",
    "- not a list",
    "'single' and \"double\" quotes, a \\ backslash",
    "two lines\nand a trailing space \n",
    "  leading spaces, a tab\there",
    "ünïcödé, 中文, and an emoji 💸",
    "a DEL \x7f, a NEL \x85, a line separator \u2028, a BOM \ufeff and a NUL \x00",
    "x" * 300,
)


@pytest.mark.parametrize("fmt", DEFINITION_FORMATS)
def test_texts_and_names_yaml_would_misread_round_trip(fmt: str, tmp_path: Path) -> None:
    """Every text that YAML 1.1 reads as something else unquoted, and states, values and
    triggers named ``on``, ``no``, ``off``, ``yes``, ``null`` and ``true``, come back as
    the same strings."""
    doc = yaml.safe_load((USER_SPECS / "refund.yaml").read_text(encoding="utf-8"))
    doc = rename_everywhere(doc, "unknown", "no")
    doc = rename_everywhere(doc, "declined", "null")
    doc = rename_everywhere(doc, "time_out", "on")
    doc = rename_everywhere(doc, "send", "true")
    doc = rename_everywhere(doc, "small", "yes")
    doc = rename_everywhere(doc, "large", "off")
    texts = iter(TRICKY_TEXTS * 3)
    for section in ("actors", "states"):
        for entry in doc[section].values():
            entry["description"] = next(texts)
    for entry in doc["transitions"]:
        entry["description"] = next(texts)
    doc["description"] = "\n".join(TRICKY_TEXTS)
    source = tmp_path / "source" / "refund.yaml"
    source.parent.mkdir()
    source.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    spec = machines.load(source)
    assert set(spec.states) >= {"no", "null"} and "on" in spec.triggers
    assert spec.context["size"].values == ("yes", "off")
    assert spec.description == "\n".join(TRICKY_TEXTS)
    assert_same(spec, machines.load(exported(spec, fmt, tmp_path)))


def test_equality_sees_every_field() -> None:
    """``same_definition`` is field by field: changing any one field of the definition
    (or only the order of a section) makes it false, and ``definition_differences`` names
    that field; where it was read from is no part of it."""
    spec = machines.load("request")
    assert spec.derivation is not None

    def first_dropped(section: tuple[Any, ...]) -> tuple[Any, ...]:
        return section[1:]

    def reversed_mapping(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
        return MappingProxyType(dict(reversed(list(mapping.items()))))

    changed: dict[str, Any] = {
        "name": "other",
        "title": spec.title + "!",
        "origin": spec.origin + "!",
        "description": spec.description + "!",
        "initial": next(s for s in spec.states if s != spec.initial),
        "context": MappingProxyType(
            {k: replace(v, description=v.description + "!") for k, v in spec.context.items()}
        ),
        "actors": reversed_mapping(spec.actors),
        "states": reversed_mapping(spec.states),
        "transitions": first_dropped(spec.transitions),
        "forbidden": first_dropped(spec.forbidden),
        "invariants": first_dropped(spec.invariants),
        "findings": first_dropped(spec.findings),
        "derivation": replace(spec.derivation, default="qtg-v3"),
        "opt_out": MappingProxyType({"can_terminate": "A request never ends."}),
    }
    compared = [f.name for f in fields(MachineSpec) if f.compare]
    assert sorted(changed) == sorted(compared), "a field of MachineSpec is not tested here"
    for name, value in changed.items():
        other = replace(spec, **{name: value})
        assert definition_differences(spec, other) == (name,)
        assert not spec.same_definition(other)
    moved = replace(spec, path=Path("elsewhere/request.yaml"), source=None)
    assert moved.same_definition(spec) and moved != spec, "== is identity, and stays so"


def test_request_json_reads_its_node_machine_in_json(tmp_path: Path) -> None:
    """An exported request.json reads node.json beside it, not a node.yaml; without it,
    the error names the file it looked for."""
    request = exported(machines.load("request"), "json", tmp_path)
    exported(machines.load("node"), "yaml", tmp_path)
    with pytest.raises(SpecError, match=r"node\.json does not exist"):
        machines.load(request)
    exported(machines.load("node"), "json", tmp_path)
    assert machines.load(request).derivation is not None


def test_a_spec_dir_reads_yaml_files_only(tmp_path: Path) -> None:
    """``--spec-dir`` reads ``*.yaml``: an exported ``.json`` beside its ``.yaml`` is
    never a second machine of one name."""
    refund = machines.load(USER_SPECS / "refund.yaml")
    exported(refund, "json", tmp_path)
    assert check(tmp_path).unreadable == [
        f"{tmp_path}: no *.yaml or *.yml definitions in this directory"
    ]
    exported(refund, "yaml", tmp_path)
    report = check(tmp_path)
    assert [m.name for m in report.machines] == ["refund"] and report.exit_code == 0


def test_an_exported_file_must_be_named_after_its_machine(tmp_path: Path) -> None:
    path = tmp_path / "refunds.json"
    path.write_text(export(machines.load(USER_SPECS / "refund.yaml"), "json"), encoding="utf-8")
    with pytest.raises(SpecError, match="must equal the file name 'refunds'"):
        machines.load(path)


def test_sql_export_is_the_store_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "effect", "--format", "sql"]) == 0
    assert capsys.readouterr().out == sqlite_schema(machines.load("effect"))


def test_postgresql_export_is_the_store_schema_and_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import psycopg

    assert main(["export", "outcome", "--format", "postgresql"]) == 0
    script = capsys.readouterr().out
    assert script == postgres_schema(machines.load("outcome"))
    with postgres_schema_on_server() as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(script.encode())
        conn.execute(script.encode())  # idempotent: a second run changes nothing
        with pytest.raises(psycopg.Error, match="starts in in_flight"):
            conn.execute(
                "INSERT INTO outcome_entities (key, state, created_at, updated_at) "
                "VALUES ('k', 'succeeded', 0, 0)"
            )


def test_export_of_an_unknown_machine_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "nope"]) == 2
    assert "did you mean 'node'" in capsys.readouterr().err


_TEXTS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    draws_something  # what a definition's text must hold
)


@given(texts=st.lists(_TEXTS, min_size=4, max_size=4), fmt=st.sampled_from(DEFINITION_FORMATS))
@settings(scaled(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_round_trips(texts: list[str], fmt: str, tmp_path_factory: Any) -> None:
    """Whatever the texts hold (control characters, quotes, a BOM, line breaks, any
    script), the exported definition loads back to the same one."""
    refund = machines.load(USER_SPECS / "refund.yaml")
    first = refund.transitions[0]
    changed = replace(
        refund,
        title=texts[0],
        description=texts[1],
        transitions=(replace(first, description=texts[2]), *refund.transitions[1:]),
        findings=(),
        origin=texts[3],
    )
    directory = tmp_path_factory.mktemp("texts")
    assert_same(changed, machines.load(exported(changed, fmt, directory)))


def test_a_json_file_with_a_raw_yaml_line_break_is_refused(tmp_path: Path) -> None:
    """JSON allows a raw U+2028 in a string; YAML reads it as a line break. The loader
    refuses it (naming the line and the escape to write) instead of misreading it."""
    path = tmp_path / "refund.json"
    text = export(machines.load(USER_SPECS / "refund.yaml"), "json")
    text = text.replace('"title": "Customer refund"', '"title": "Customer\u2028refund"')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecUnreadable) as info:
        machines.load(path)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '"title"' in t)
    assert info.value.problems == (
        f"line {line}: a raw U+2028 character, which a YAML reader (this one) reads as a "
        "line break; write it as the escape \\u2028",
    )


def test_names_a_yaml_1_1_reader_takes_for_booleans_are_quoted(tmp_path: Path) -> None:
    """issue 27 item 11: PyYAML reads ``y`` and ``n`` as text and so wrote them bare, but
    YAML 1.1 (the export is for any language's reader) makes them booleans."""
    doc = yaml.safe_load((USER_SPECS / "refund.yaml").read_text(encoding="utf-8"))
    doc = rename_everywhere(doc, "small", "y")
    doc = rename_everywhere(doc, "declined", "n")
    source = tmp_path / "refund.yaml"
    source.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    spec = machines.load(source)
    text = export(spec, "yaml")
    assert not re.search(r"[\s\[,:]([yn])(,|\]|:|$)", text, re.MULTILINE), text
    assert "'y'" in text and "'n':" in text
    assert_same(spec, machines.load(exported(spec, "yaml", tmp_path)))


@pytest.mark.parametrize(
    "text",
    ["-.5", "+.5", ".5", "1.2.3", "+.", "0o17", "1_000", "0x_1", "1e5", "1E5", "-2e-3", "0o7"],
)
def test_texts_a_yaml_reader_takes_for_numbers_are_quoted(text: str, tmp_path: Path) -> None:
    """Outsider batch 17 (b05): a title of ``-.5`` was written bare, which the YAML 1.1
    float pattern (looser than PyYAML's) reads as a number; and (batch 18) ``1e5`` and
    ``0o17``, which PyYAML (YAML 1.1) reads as text and a YAML 1.2 reader as numbers."""
    doc = yaml.safe_load((USER_SPECS / "refund.yaml").read_text(encoding="utf-8"))
    doc["description"] = text
    source = tmp_path / "refund.yaml"
    source.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    spec = machines.load(source)
    exported_text = export(spec, "yaml")
    bare = re.findall(r"^description: (.*)$", exported_text, re.MULTILINE)
    assert bare and bare[0] in (f"'{text}'", f'"{text}"'), bare
    assert machines.load(exported(spec, "yaml", tmp_path)).description == text


def test_typed_names_make_a_trigger_typo_a_mypy_error(tmp_path: Path) -> None:
    """Issue 29: triggers are found by ``__getattr__``, so a typo was a runtime error mypy
    could not see. ``machines export NAME --format python`` writes the names as types."""
    from mypy import api

    refund = machines.load(USER_SPECS / "refund.yaml")
    (tmp_path / "refund_names.py").write_text(export(refund, "python"), encoding="utf-8")
    good = (
        "import machines\n"
        "from refund_names import Refund, RefundActor, RefundState\n"
        f"spec = machines.load({str(USER_SPECS / 'refund.yaml')!r})\n"
        "refund = Refund(spec.machine(size='small'))\n"
        "refund.send(actor=RefundActor.SERVICE)\n"
        'assert refund.state == "sending"\n'
    )
    (tmp_path / "good.py").write_text(good, encoding="utf-8")
    (tmp_path / "typo.py").write_text(good.replace("refund.send(", "refund.snd("), encoding="utf-8")
    options = ["--strict", "--ignore-missing-imports", "--no-incremental", "--cache-dir=/dev/null"]
    out, _, code = api.run([*options, str(tmp_path / "good.py"), str(tmp_path / "refund_names.py")])
    assert code == 0, out
    out, _, code = api.run([*options, str(tmp_path / "typo.py"), str(tmp_path / "refund_names.py")])
    assert code == 1 and '"Refund" has no attribute "snd"' in out, out
    ran = subprocess.run(
        [sys.executable, str(tmp_path / "good.py")], cwd=tmp_path, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr


def test_a_keyword_trigger_and_its_underscored_name_get_a_method_each(tmp_path: Path) -> None:
    """Outsider batch 38 (c E2): triggers ``class`` and ``class_`` both became the method
    ``class_``: the second shadowed the first (mypy: no-redef), and ``class`` had none.
    Each trigger has a method of its own, and each method fires its own trigger."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "spec_version: 1\nmachine: m\ndescription: A machine.\ninitial: a\n"
        "actors:\n  bot: {automatic: true, description: A bot.}\n"
        "states:\n  a: {}\n  b: {terminal: true}\n"
        "transitions:\n"
        "  - {trigger: class, source: a, dest: b, actor: bot, description: One.}\n"
        "  - {trigger: class_, source: a, dest: b, actor: bot, description: Two.}\n",
        encoding="utf-8",
    )
    text = export(machines.load(path), "python")
    assert text.count("    def class__(") == 1 and text.count("    def class_(") == 1, text
    namespace: dict[str, Any] = {}
    exec(compile(text, "m_names.py", "exec"), namespace)
    fired: list[str] = []

    class Recording:
        def trigger(self, trigger: str, **_: Any) -> None:
            fired.append(str(trigger))

    m = namespace["M"](Recording())
    m.class__(actor="bot")
    m.class_(actor="bot")
    assert fired == ["class", "class_"]


def test_a_definition_that_does_not_load_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outsider batch 39 (c B6): export exited 1 on a definition that does not load, where
    diagrams and docs exit 2 on the same file (and the README says 2 for unreadable input)."""
    path = tmp_path / "one.yaml"
    path.write_text(
        "spec_version: 1\nmachine: one\ndescription: A machine.\ninitial: a\n"
        "actors:\n  bot: {automatic: true, description: A bot.}\n"
        "states:\n  a: {terminal: true}\ntransitions: []\n",
        encoding="utf-8",
    )
    assert main(["export", str(path)]) == 2
    assert "should be non-empty" in capsys.readouterr().err
