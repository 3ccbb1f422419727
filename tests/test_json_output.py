"""``--format json`` of ``check``, ``audit`` and ``explore`` (issue 16; ``diff``'s is in
``test_diff.py``): every run prints one document on stdout that its shipped JSON Schema
accepts, clean, failing (exit 1) and unreadable (exit 2) alike, with the exit code the
process ends with; and ``--version``."""

from __future__ import annotations

import io
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from machines.cli import check as check_command
from machines.cli import command, main
from machines.cli.output import REPORTERS, schema
from machines.errors import DISTRIBUTION, InvalidArgument
from machines.spec.canonical import semantic_digest
from machines.spec.loader import load
from machines.store import open_store
from tests.conftest import Document, SpecCopy


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    """``main(argv)``: its exit code, the one JSON document on stdout (held to its schema,
    its ``exit_code`` the process's) and stderr."""
    code = main(argv)
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # one document, nothing before or after it
    jsonschema.Draft202012Validator(schema(argv[0])).validate(doc)
    assert doc["command"] == argv[0]
    assert doc["exit_code"] == code
    return code, doc, captured.err


def history(*moves: tuple[str, str], key: str = "k1") -> str:
    """JSON Lines of an outcome entity taking ``moves``, written by the runtime itself."""
    m = load("outcome").machine(entity_id=key)
    for trigger, actor in moves:
        m.trigger(trigger, actor=actor, detail={"by": "ops-1", "reason": "a test"})
    out = io.StringIO()
    m.history.write_jsonl(out)
    return out.getvalue()


@pytest.mark.parametrize("reporter", REPORTERS)
def test_each_schema_is_a_valid_draft_2020_12_schema(reporter: str) -> None:
    shipped = schema(reporter)  # type: ignore[arg-type]
    assert shipped["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(shipped)


def test_the_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"machines {metadata.version(DISTRIBUTION)}\n"


def test_without_metadata_the_version_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(command.metadata, "version", missing)
    with pytest.raises(SystemExit):
        main(["--version"])
    out = capsys.readouterr().out
    assert out.startswith("machines (unknown: no effect-machines distribution is installed")


class TestCheck:
    def test_a_clean_run(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, doc, _ = run(["check", "--format", "json", "--max-nodes", "2"], capsys)
        assert code == 0 and doc["violations"] == [] and doc["unreadable"] == []
        by_name = {m["name"]: m for m in doc["machines"]}
        assert sorted(by_name) == ["effect", "node", "outcome", "request"]
        for name, summary in by_name.items():
            spec = load(name)
            assert summary["states"] == len(spec.states)
            assert summary["transitions"] == len(spec.transitions)
            assert summary["findings_count"] == len(spec.findings)
            assert summary["semantic_digest"] == semantic_digest(spec)
            assert [f["id"] for f in summary["findings"]] == [f.id for f in spec.findings]
            assert summary["file"].endswith(f"{name}.yaml")
        assert doc["findings_count"] == sum(len(load(n).findings) for n in by_name)
        (derivation,) = doc["derivations"]
        verdicts = {r["name"]: r for r in derivation["rule_sets"]}
        assert verdicts["money-safe"]["holds"] and not verdicts["qtg-v3"]["holds"]
        assert all(c["finding"] for c in verdicts["qtg-v3"]["counterexamples"])

    def test_a_violation_names_its_machine_rule_kind_and_path(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        def shortcut(doc: Document) -> None:
            doc["transitions"].append(
                {
                    "trigger": "commit",
                    "source": "pending",
                    "dest": "committed",
                    "actor": "proxy",
                    "description": "added by a test",
                }
            )

        spec_copy.edit("effect", shortcut)
        argv = ["check", "--format", "json", "--max-nodes", "2", "--spec-dir", str(spec_copy.path)]
        code, doc, _ = run(argv, capsys)
        assert code == 1
        forbidden = [v for v in doc["violations"] if v["kind"] == "forbidden"]
        assert forbidden and all(v["machine"] == "effect" for v in forbidden)
        steps = forbidden[0]["path"]["steps"]
        assert steps[-1] == {
            "source": "pending",
            "trigger": "commit",
            "actors": ["proxy"],
            "dest": "committed",
        }
        assert {"file", "line"} <= set(forbidden[0])

    def test_an_unrecorded_derivation_break_is_a_violation_without_finding(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        spec_copy.edit(
            "request", lambda d: d["derivation"]["rule_sets"]["qtg-v3"].pop("known_violations")
        )
        argv = ["check", "--format", "json", "--max-nodes", "2", "--spec-dir", str(spec_copy.path)]
        code, doc, _ = run(argv, capsys)
        assert code == 1
        qtg = next(r for r in doc["derivations"][0]["rule_sets"] if r["name"] == "qtg-v3")
        assert qtg["counterexamples"] and all(c["finding"] is None for c in qtg["counterexamples"])
        assert "derivation/qtg-v3/derivation-settles" in {v["rule"] for v in doc["violations"]}

    def test_unreadable_input_is_a_report_with_exit_2(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        spec_copy.file("outcome").write_text("states: [unclosed\n")
        argv = ["check", "--format", "json", "--max-nodes", "2", "--spec-dir", str(spec_copy.path)]
        code, doc, _ = run(argv, capsys)
        assert code == 2
        (unreadable,) = doc["unreadable"]
        assert "outcome.yaml" in unreadable and "not valid YAML" in unreadable

    def test_a_missing_directory_is_a_report_with_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        argv = ["check", "--format", "json", "--spec-dir", str(tmp_path / "nope")]
        code, doc, _ = run(argv, capsys)
        assert code == 2 and doc["machines"] == [] and "not a directory" in doc["unreadable"][0]

    @pytest.mark.parametrize(
        ("error", "code"),
        [
            (InvalidArgument("max_nodes must be from 1 to 6"), 2),
            (PermissionError(13, "Permission denied", "/somewhere"), 2),
            (KeyboardInterrupt(), 130),
        ],
    )
    def test_a_run_that_cannot_report_prints_an_error_document(
        self,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
        error: BaseException,
        code: int,
    ) -> None:
        def broken(*args: object, **kwargs: object) -> None:
            raise error

        monkeypatch.setattr(check_command, "check", broken)
        got, doc, err = run(["check", "--format", "json"], capsys)
        assert got == code
        assert err == f"machines check: {doc['error']}\n"
        assert set(doc) == {"command", "format_version", "version", "exit_code", "error"}

    def test_the_exit_codes_are_those_of_text(
        self, spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
    ) -> None:
        spec_copy.edit("outcome", lambda d: d["states"]["failed"].update(colour="red"))
        argv = ["check", "--max-nodes", "2", "--spec-dir", str(spec_copy.path)]
        text = main(argv)
        capsys.readouterr()
        assert run([*argv, "--format", "json"], capsys)[0] == text == 1


class TestAudit:
    def test_a_clean_history(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        log = tmp_path / "history.jsonl"
        log.write_text(history(("park", "worker"), ("reclaim", "caller")))
        code, doc, _ = run(["audit", str(log), "--format", "json"], capsys)
        assert code == 0 and doc["breaches"] == []
        assert (doc["file"], doc["store"], doc["events"], doc["entities"]) == (str(log), None, 2, 1)
        assert doc["versions"] is None  # a log names no definition versions

    def test_a_breach_with_its_events(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        lines = history(("park", "worker")).splitlines()
        forged = json.loads(lines[0]) | {"seq": 2, "source": "indeterminate", "dest": "in_flight"}
        forged |= {"trigger": "reclaim", "actor": "worker"}
        log = tmp_path / "history.jsonl"
        log.write_text("\n".join([lines[0], json.dumps(forged)]) + "\n")
        code, doc, _ = run(["audit", str(log), "--format", "json"], capsys)
        assert code == 1
        illegal = next(b for b in doc["breaches"] if b["invariant"] == "append-only-history")
        assert (illegal["machine"], illegal["key"]) == ("outcome", "k1")
        assert any(e["seq"] == 2 and e["dest"] == "in_flight" for e in illegal["events"])

    @pytest.mark.parametrize("content", [None, "not json\n"])
    def test_unreadable_input_prints_an_error_document(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None
    ) -> None:
        log = tmp_path / "history.jsonl"
        if content is not None:
            log.write_text(content)
        code, doc, err = run(["audit", str(log), "--format", "json"], capsys)
        assert code == 2 and "history.jsonl" in doc["error"]
        assert err == f"machines audit: {doc['error']}\n"

    def test_a_store_names_the_definition_versions_it_was_judged_by(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        url = f"sqlite:///{tmp_path}/store.db"
        store = open_store(url)
        with store.transaction() as tx:
            row, _ = tx.insert("outcome", "k1")
            tx.move(row, "park", actor="worker")
        store.close()
        code, doc, _ = run(["audit", "--from-store", url, "--format", "json"], capsys)
        assert code == 0 and doc["breaches"] == [] and doc["store"] == url
        assert doc["versions"] == {"effect": [1], "node": [1], "outcome": [1], "request": [1]}

    def test_a_missing_store_prints_an_error_document(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        url = f"sqlite:///{tmp_path}/none.db"
        code, doc, _ = run(["audit", "--from-store", url, "--format", "json"], capsys)
        assert code == 2 and doc["error"]
        assert not (tmp_path / "none.db").exists()


class TestExplore:
    def test_a_clean_run(self, capsys: pytest.CaptureFixture[str]) -> None:
        argv = ["explore", "exactly-once", "--scope", "small", "--format", "json"]
        code, doc, _ = run(argv, capsys)
        assert code == 0 and doc["violations"] == 0 and doc["exhausted"] == 1
        (scope,) = doc["scopes"]
        assert scope["complete"] and scope["states"] == doc["states"] > 0

    def test_a_violation_with_its_shortest_trace(self, capsys: pytest.CaptureFixture[str]) -> None:
        argv = ["explore", "transfer", "--rules", "qtg-v3", "--scope", "gated", "--format", "json"]
        code, doc, _ = run(argv, capsys)
        assert code == 1 and doc["violations"] == 1 and doc["rules"] == "qtg-v3"
        (violation,) = doc["scopes"][0]["violations"]
        assert violation["invariant"] == "derivation-consistency"
        assert violation["moves"] == len(violation["trace"]) - 1 == 8

    def test_a_bound_is_reported_not_exhausted(self, capsys: pytest.CaptureFixture[str]) -> None:
        argv = ["explore", "exactly-once", "--scope", "small", "--max-states", "5"]
        code, doc, _ = run([*argv, "--format", "json"], capsys)
        assert code == 0 and doc["exhausted"] == 0 and doc["max_states"] == 5

    def test_an_unknown_scope_prints_an_error_document(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        argv = ["explore", "exactly-once", "--scope", "galactic", "--format", "json"]
        code, doc, _ = run(argv, capsys)
        assert code == 2 and "galactic" in doc["error"]
