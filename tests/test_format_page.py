"""The definition format has a reference (issue 29): a page generated from the JSON Schema
(``docs/format.md``), with every key, every rule kind with its parameters and an example of
each; errors point to it and to the installed schema."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from machines.render.format_page import SECTIONS
from machines.spec.loader import SCHEMA_FILE, bundled_spec_dir, load, schema, see_format

PAGE = (Path(__file__).parents[1] / "docs" / "format.md").read_text(encoding="utf-8")


def _objects(node: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object of the schema that lists keys: the top level, each object of $defs, and
    each rule kind's parameters."""
    yield "top level", node
    for name, value in node["$defs"].items():
        if "properties" in value and name != "rule":
            yield name, value
    for branch in node["$defs"]["rule"]["allOf"]:
        yield branch["if"]["properties"]["rule"]["const"], branch["then"]


def test_every_object_of_the_schema_has_a_section_and_every_key_a_description() -> None:
    described = {name for name, _ in SECTIONS}
    for name, node in _objects(schema()):
        if name != "top level" and "allOf" not in node and name not in described:
            assert name in {
                b["if"]["properties"]["rule"]["const"] for b in schema()["$defs"]["rule"]["allOf"]
            }, f"$defs.{name} has keys and no section of the format page: add it to SECTIONS"
        for key, value in node["properties"].items():
            assert value.get("description"), f"{name}.{key} has no description in the schema"
            assert f"| `{key}` |" in PAGE, f"{name}.{key} is not on docs/format.md"


def test_every_rule_kind_has_a_section_a_description_and_an_example_that_loads() -> None:
    for branch in schema()["$defs"]["rule"]["allOf"]:
        kind = branch["if"]["properties"]["rule"]["const"]
        section = PAGE[PAGE.index(f"### `{kind}`") :]
        section = section[: section.find("\n### ", 4) if "\n### " in section[4:] else None]
        assert branch["then"]["description"] in section
        assert f"rule: {kind}" in section, f"no example of {kind}"


def test_a_refusal_points_to_the_page_and_to_the_installed_schema(tmp_path: Path) -> None:
    said = see_format()
    assert "format.md" in said and str(bundled_spec_dir() / SCHEMA_FILE) in said
    assert (bundled_spec_dir() / SCHEMA_FILE).is_file()
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec_version: 1\nmachine: broken\n")
    try:
        load(broken)
    except Exception as refused:
        assert said in str(refused)
    else:
        raise AssertionError("an incomplete definition loaded")


def test_the_api_reference_shows_every_name_the_package_exports() -> None:
    """Issue 29 item 6: EntityMachine, AsyncEntityMachine, Hooks, History and
    TransitionEvent, which the README shows first, were missing from the API reference."""
    import machines

    page = (Path(__file__).parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    whole_modules = {"machines.errors"}  # documented as a whole module
    missing = [
        name
        for name in machines.__all__
        if f"{name}" not in page and getattr(machines, name).__module__ not in whole_modules
    ]
    assert missing == []


def test_rules_name_their_states_one_way_and_the_old_spelling_still_loads(
    tmp_path: Path,
) -> None:
    """Issue 29: ``only_actors_exit`` took ``state`` where ``only_actors_enter`` took
    ``states``. Every rule now takes ``states``; ``state:`` loads to the same rule, and
    ``machines check`` notes it; ``machines diff`` sees no change between the two."""
    import yaml

    from machines.checks.report import check
    from machines.cli import main
    from machines.errors import SpecError
    from machines.spec.canonical import semantic_digest

    refund = Path(__file__).parent / "user_project" / "specs" / "refund.yaml"
    old = refund.read_text(encoding="utf-8")
    assert "state: unknown, actors" in old  # the user project keeps the old spelling
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new = old.replace("state: unknown, actors", "states: [unknown], actors").replace(
        "state: sending, via", "states: [sending], via"
    )
    (new_dir / "refund.yaml").write_text(new, encoding="utf-8")
    assert semantic_digest(load(refund)) == semantic_digest(load(new_dir / "refund.yaml"))
    notes = check(refund.parent).notes
    assert len(notes) == 2 and "writes state: unknown, the old spelling" in notes[0]
    assert check(new_dir).notes == []
    assert main(["diff", str(refund), str(new_dir / "refund.yaml")]) == 0
    both = yaml.safe_load(new)
    both["invariants"][3]["state"] = "unknown"  # both spellings at once: which one?
    (new_dir / "refund.yaml").write_text(yaml.safe_dump(both), encoding="utf-8")
    try:
        load(new_dir / "refund.yaml")
    except SpecError:
        pass
    else:
        raise AssertionError("a rule giving both state and states loaded")


def test_the_names_the_page_says_are_refused_are_refused(tmp_path: Path) -> None:
    """Outsider batch 35 (c 4): the loader refused ``db_value: IN_PROGRESS``, ``values:
    [EUR]`` and ``trigger: goNow`` by the name pattern, pointing at this page, which said
    the rule only of the machine's own name. The page's Names section says it once, and
    each spelling it gives as refused is refused, in each place it names."""
    import pytest
    import yaml

    from machines.errors import SpecError

    page = (Path(__file__).parent.parent / "docs" / "format.md").read_text()
    assert "## Names" in page
    base = yaml.safe_load((bundled_spec_dir() / "outcome.yaml").read_text())
    for bad in ("IN_PROGRESS", "in-progress", "EUR", "goNow"):
        assert f"`{bad}`" in page
        for place in ("db_value", "trigger", "actor"):
            doc = yaml.safe_load(yaml.safe_dump(base))
            if place == "db_value":
                doc["states"]["failed"]["db_value"] = bad
            elif place == "trigger":
                doc["transitions"][0]["trigger"] = bad
            else:
                doc["actors"][bad] = {"automatic": True, "description": "x"}
            path = tmp_path / place / "outcome.yaml"
            path.parent.mkdir(exist_ok=True)
            path.write_text(yaml.safe_dump(doc))
            with pytest.raises(SpecError, match=r"does not match|is not a lower_snake name"):
                load(path)


def test_a_rule_given_neither_or_both_of_states_and_state_says_so(tmp_path: Path) -> None:
    """Outsider batch 36 (c 4): format.md marked a rule's ``states`` and ``state`` both
    optional while the loader asked for ``states``, and given both it printed jsonschema's
    "is valid under each of". The page says one of the two is required, and the loader
    says "give exactly one"."""
    import pytest
    import yaml

    from machines.errors import SpecError

    page = (Path(__file__).parent.parent / "docs" / "format.md").read_text()
    assert "| `states` | one of `states` or `state` |" in page
    base = yaml.safe_load((bundled_spec_dir() / "outcome.yaml").read_text())
    for given in ({}, {"states": ["failed"], "state": "failed"}):
        doc = yaml.safe_load(yaml.safe_dump(base))
        rule = {"id": "x-rule", "rule": "only_actors_exit", "description": "d"}
        doc["invariants"].append({**rule, "actors": ["operator"], **given})
        path = tmp_path / str(len(given)) / "outcome.yaml"
        path.parent.mkdir()
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(SpecError, match="give exactly one of 'states' or 'state'"):
            load(path)
