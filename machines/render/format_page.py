"""The definition format's reference page, generated from its JSON Schema.

Every key of a definition, every kind of object it holds and every rule kind with its
parameters come from ``spec/machine.schema.json`` (its ``description`` texts included),
so the page cannot leave out what the loader accepts; each rule kind's example is the
first rule of that kind in the bundled definitions (``examples``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from machines.spec.vocabulary import MAX_CONTEXT_NAME, TAGS, USER_TAG_PREFIX

FORMAT_PAGE = "format.md"

SECTIONS: Sequence[tuple[str, str]] = (
    ("context_variable", "A context variable (an entry of `context`)"),
    ("actor", "An actor (an entry of `actors`)"),
    ("state", "A state (an entry of `states`)"),
    ("transition", "A transition (an item of `transitions`)"),
    ("forbidden", "A forbidden move (an item of `forbidden`)"),
    ("finding", "A finding (an item of `findings`)"),
    ("derivation", "A derivation (`derivation`)"),
    ("rule_set", "A rule set (an entry of `derivation.rule_sets`)"),
    ("derivation_rule", "A derivation rule (an item of a rule set's `rules`)"),
    ("context_case", "A derived context case (an item of `derivation.context.VARIABLE`)"),
    ("clause", "A clause (an item of a derivation rule's `when`)"),
    ("nodeset", "A set of nodes (what a clause's `any`, `all` or `none` holds)"),
)
"""The objects a definition holds, in the order the page describes them."""


def format_page(
    schema: Mapping[str, Any], examples: Mapping[str, Mapping[str, Any]], schema_path: str
) -> str:
    """The reference page: ``schema`` is the parsed JSON Schema, ``examples`` a rule of
    each kind (kind -> the rule as written), ``schema_path`` where the schema is installed
    as the page says it."""
    defs: Mapping[str, Any] = schema["$defs"]
    out = [
        "# Definition format",
        "",
        "A definition is one YAML file (`.yaml` or `.yml`) per machine, named after the "
        "machine; a `.json` export (`machines export`) loads too when you name its path, "
        "while a folder of definitions (`--spec-dir`) is read for `.yaml` and `.yml` files "
        "only. This page is generated from the JSON Schema every "
        "definition is validated against, `machine.schema.json`; an installed package keeps "
        f"it at `{schema_path}`. Unknown keys are errors.",
        "",
        "## Names",
        "",
        "Every name a definition gives (its machine, states, actors, triggers, context "
        "variables and their values, a state's `db_value`) is "
        f"{_lowered(defs['name']['description'])}, matching "
        f"`{_shown_pattern(defs['name']['pattern'])}`. `IN_PROGRESS`, `in-progress`, `EUR` "
        "and `goNow` are refused, each with its place. The keys below that hold names say "
        f"so. A context variable's name has at most {MAX_CONTEXT_NAME} characters (a store "
        "keeps it as a column, whose name PostgreSQL cuts at 63 bytes).",
        "",
        "Every text a definition gives (a description, a title, a reason) must show "
        "something: a letter, a digit, a punctuation mark or a symbol that draws (`~` and "
        "an emoji do). Spaces, control and format characters (a zero-width space, a "
        "right-to-left mark), a mark alone (a variation selector) and a blank Braille "
        "pattern do not.",
        "",
        "## The top level",
        "",
        _keys(schema),
    ]
    for name, title in SECTIONS:
        out += ["", f"## {title}", "", _keys(defs[name])]
    out += ["", "## Tags", "", *_tags()]
    out += [
        "",
        "## Rules",
        "",
        "Each item of `invariants` is a rule: an `id`, a `rule` kind, a `description`, and "
        "the parameters of its kind. `machines check` proves each rule on the definition's "
        "graph and prints a shortest path to any break. A rule that can never fail is "
        "reported too: one that keeps only terminal states' exits, names every actor or "
        "trigger, every state a move can come from, a `when` that admits every context, "
        "`via` states that include the states it keeps, or `holds` naming every state that "
        "is not terminal keeps nothing, and a mutant it should kill would survive.",
    ]
    for branch in defs["rule"]["allOf"]:
        kind = branch["if"]["properties"]["rule"]["const"]
        then = branch["then"]
        out += ["", f"### `{kind}`", "", then.get("description", ""), "", _keys(then)]
        example = examples.get(kind)
        if example is not None:
            text = yaml.safe_dump([dict(example)], sort_keys=False, width=80)
            out += ["", "```yaml", text.rstrip(), "```"]
    return "\n".join(out).rstrip() + "\n"


def _tags() -> list[str]:
    """The tags a state may carry, from ``machines.spec.vocabulary.TAGS``, as a table."""
    rows = [f"| `{t.name}` | {t.meaning} | {t.read_by} |" for t in TAGS.values()]
    return [
        "A state's `tags` switch logic on; a tag not listed here is refused with its line "
        f"and a did-you-mean. A tag of your own starts with `{USER_TAG_PREFIX}`: nothing in "
        "the package reads it, and no tag of the package will ever start with it.",
        "",
        "| tag | what it says about the state | who reads it |",
        "| --- | --- | --- |",
        *rows,
    ]


def _keys(node: Mapping[str, Any]) -> str:
    required = set(node.get("required", ()))
    either = [b["required"][0] for b in node.get("oneOf", ()) if len(b.get("required", ())) == 1]
    rows = [
        (
            f"`{key}`",
            "yes" if key in required else _one_of(either) if key in either else "no",
            _what(value),
        )
        for key, value in node.get("properties", {}).items()
    ]
    lines = ["| key | required | what it is |", "|---|---|---|"]
    lines += [f"| {k} | {r} | {w} |" for k, r, w in rows]
    return "\n".join(lines)


def _one_of(keys: Sequence[str]) -> str:
    return "one of " + " or ".join(f"`{k}`" for k in keys)


def _what(value: Mapping[str, Any]) -> str:
    text = " ".join(str(value.get("description", "")).split())
    if _NAME_REF in json.dumps(value) and "lower_snake" not in text:
        text += " Names here are lower_snake (see [Names](#names))."
    return text.replace("|", "\\|")


_NAME_REF = '"#/$defs/name'
"""How the schema points at a name, or a list of names."""


def _lowered(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:].rstrip(".")


def _shown_pattern(pattern: str) -> str:
    """The schema's name pattern as a reader knows it: its end written ``$``."""
    return pattern.replace("(?![\\s\\S])", "$")


def rule_examples(documents: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The first rule of each kind in ``documents`` (parsed definitions), by kind."""
    found: dict[str, Mapping[str, Any]] = {}
    for rule in _rules(documents):
        found.setdefault(str(rule.get("rule")), rule)
    return found


def _rules(documents: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for document in documents:
        yield from document.get("invariants", ())
