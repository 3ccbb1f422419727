"""The generated pages of a documentation site, one Markdown text per page.

Everything a page says about a machine comes from its definition (and the invariants and
findings from the code and specs that own them), so no table on a site can drift from the
definitions. The mkdocs plugin (``machines.render.mkdocs_plugin``) adds the pages about a
set of definitions to a site as it builds; ``machines docs`` writes this package's own
reference pages (the invariants of its systems, its command line) under ``docs/``, or a
user's machine pages as files.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence

from machines.errors import printable
from machines.render.view import DiagramView
from machines.spec import Clause, Finding, MachineSpec, Rule
from machines.spec.registry import judged_by
from machines.spec.vocabulary import describe_guard

DIAGRAM_ALT_END = " state machine"
"""How the alternative text of a machine page's diagram ends (``The effect state machine``):
what the site's style sheet finds the diagram by."""


def machine_page(spec: MachineSpec, diagrams: str) -> str:
    """The page of one machine; ``diagrams`` is the folder of its diagram files relative to
    the page (``diagrams/<name>.svg``, ``.dot``, ``.mmd``)."""
    view = DiagramView.of(spec)

    def diagram(suffix: str) -> str:
        return f"{diagrams}/{spec.name}.{suffix}"

    amended = any(t.amendment for t in spec.transitions)
    dagger = (
        " A dagger (\u2020) marks an amendment of the seed (see the findings)." if amended else ""
    )
    origin = f"Origin: {_text(spec.origin)}. " if spec.origin else ""
    out = [
        f"# {spec.name}: {_text(spec.title)}",
        "",
        _text(spec.description),
        "",
        f"*{origin}Initial state: `{spec.initial}`.*",
        "",
        f"[![The {spec.name}{DIAGRAM_ALT_END}]({diagram('svg')})]({diagram('svg')})",
        "",
        "Double borders mark terminal states, red ones the fail-closed states and their "
        f"only ways out; dashed blue arrows are moves a person makes.{dagger} "
        "Click the diagram to open it alone, at full size. Sources: "
        f"[Graphviz]({diagram('dot')}), [Mermaid]({diagram('mmd')}).",
        "",
        "## States",
        "",
        _table(
            ("state", "DB value", "enum", "terminal", "tags", "description"),
            (
                (
                    f"`{name}`",
                    f"`{s.db_value}`",
                    f"`{s.enum_name}`",
                    "yes" if s.terminal else "",
                    ", ".join(s.tags),
                    s.description,
                )
                for name, s in spec.states.items()
            ),
        ),
        "",
        "## Actors",
        "",
        _table(
            ("actor", "automatic", "description"),
            (
                (f"`{name}`", "yes" if a.automatic else "no", a.description)
                for name, a in spec.actors.items()
            ),
        ),
    ]
    if spec.context:
        out += [
            "",
            "## Context",
            "",
            _table(
                ("variable", "values", "description"),
                (
                    (f"`{name}`", ", ".join(f"`{v}`" for v in c.values), c.description)
                    for name, c in spec.context.items()
                ),
            ),
        ]
    out += [
        "",
        "## Transitions",
        "",
        _table(
            ("trigger", "from", "to", "actor", "guard", "evidence", "description"),
            (
                (
                    f"`{t.trigger}`",
                    f"`{t.source}`",
                    f"`{t.dest}`",
                    ", ".join(t.actors),
                    describe_guard(t.when, "markdown"),
                    t.evidence or "",
                    t.description + (f" (amendment: {t.amendment})" if t.amendment else ""),
                )
                for t in spec.transitions
            ),
        ),
        "",
        "## Forbidden moves",
        "",
        _table(
            ("from", "to", "reason"),
            ((_states(f.sources), _states(f.dests), f.reason) for f in spec.forbidden),
        ),
        "",
        "## Terminal states",
        "",
        ", ".join(f"`{s}`" for s in view.states if s in view.terminal) or "None.",
        "",
        "## Structural rules",
        "",
        "`machines check` proves each rule on the graph and prints a shortest path to any break.",
        "",
        _rules(spec),
    ]
    for kind, reason in spec.opt_out.items():
        out += ["", f"Opts out of `{kind}`: {_text(reason)}"]
    if spec.derivation is not None:
        out += ["", *_derivation(spec)]
    if spec.findings:
        out += ["", "## Findings", ""]
    for f in spec.findings:
        out += _finding(f"### {f.id}", f)
    return "\n".join(out).rstrip() + "\n"


def _derivation(spec: MachineSpec) -> list[str]:
    d = spec.derivation
    assert d is not None
    sets = list(d.rule_sets.values())
    depth = max(len(rs.rules) for rs in sets)
    rows = []
    for i in range(depth):
        row = [str(i + 1)]
        for rs in sets:
            if i < len(rs.rules):
                rule = rs.rules[i]
                result = f"`{rule.result}`" if rule.result else "no change"
                row.append(f"**{rule.id}**: {_clauses(rule.when)} \u2192 {result}")
            else:
                row.append("")
        rows.append(row)
    out = [
        "## Derivation",
        "",
        f"While the request is {', '.join(f'`{s}`' for s in d.applied_in)}, its state follows "
        f"from its plan's `{d.node_machine}` states: the first rule whose every clause holds "
        f"gives the state, applied by `{d.actor}` when it is a legal move. Nodes named "
        f"`{d.manual_prefix}...` are manual gates. The default rule set is `{d.default}`.",
        "",
        _table(("#", *(f"`{rs.name}`" for rs in sets)), rows),
        "",
    ]
    for rs in sets:
        out += [f"- `{rs.name}`: {_text(rs.description)}"]
        for invariant, finding in rs.known_violations.items():
            out.append(f"    - breaks `{invariant}`: finding `{finding}`")
    for var, cases in d.context.items():
        out += [
            "",
            f"The guard context `{var}` follows from the nodes too:",
            "",
            _table(
                ("value", "when"),
                ((f"`{c.value}`", _clauses(c.when) or "otherwise") for c in cases),
            ),
        ]
    return out


PROOF = """\
## Why the derivation check covers plans of every size

A derivation rule only asks whether *some*, *every* or *no* node of the plan matches a
condition on one node (its state, whether it has a side effect, whether it is a manual
gate). So a plan matters only through two sets: the conditions some node meets, and the
conditions every node meets. `machines check` reduces each plan to that pair of bit masks
(its *signature*), enumerates every plan of up to `--max-nodes` nodes over every node
kind, and judges each distinct signature once against the derivation invariants below.

Adding a node to a plan with signature (S, E) gives (S | m, E & m), where m is the new
node's mask: the next signature depends only on the current one. If adding any node to
any signature seen so far yields a signature already seen, the set of signatures is
*closed*: no plan of any size has a signature outside it, so the verdicts hold for every
plan size. `machines check` tests that closure and says so in its summary; both bundled
rule sets are closed at five nodes. The check runs the same `Deriver` code the engine
calls, so the proof is about the function the engine uses, not a copy of it."""


def invariants_page(
    explorer: Mapping[str, Mapping[str, str]],
    mutations: Sequence[tuple[str, str, str, str, tuple[str, ...]]],
    rules_by_id: Mapping[str, Sequence[str]],
) -> str:
    """``explorer``: system -> {invariant id: what a breach is}; ``mutations``: (id,
    machine, operator, description, the ids it breaks) of the mutation catalog; ``rules_by_id``:
    structural rule id -> the machines whose definitions declare a rule with that id."""
    out = [
        "# Invariants",
        "",
        "Each invariant has one id, used by the definitions, the checks, the tests and this "
        "page. Four layers check them: `machines check` (structural rules on every "
        "definition, and the derivation over every plan), the stateful suites "
        "(`machines.testing`, after every step of every run), `machines explore` (every "
        "reachable state of a small scope) and the mutation check (each mutation below must "
        "be caught by one of the others).",
        "",
        "## Named invariants of the systems",
        "",
        "Checked after every step of every stateful suite, on the store's rows and "
        "histories (`machines.checks.invariants`).",
        "",
    ]
    for name, statement in judged_by("stored state").items():
        layers = ["every stateful suite"]
        layers += (
            [f"`machines check` ({', '.join(rules_by_id[name])})"] if name in rules_by_id else []
        )
        layers += [f"`machines explore {s}`" for s, ids in explorer.items() if name in ids]
        breaking = [f"`{m[0]}`" for m in mutations if name in m[4]]
        out += [f"### {name}", "", _text(statement), "", f"Checked by: {', '.join(layers)}."]
        if breaking:
            out += ["", f"Mutations that break it on purpose: {', '.join(breaking)}."]
        out.append("")
    out += [
        "## Derivation invariants",
        "",
        "Checked by `machines check` for every rule set over every plan (see the proof "
        "below); a rule set that breaks one must name the finding that records it.",
        "",
        _table(
            ("id", "statement", "mutations that break it"),
            (
                (f"`{k}`", v, ", ".join(f"`{m[0]}`" for m in mutations if k in m[4]))
                for k, v in judged_by("derivation").items()
            ),
        ),
        "",
        PROOF,
        "",
        "## What the explorer checks",
        "",
    ]
    for system, ids in explorer.items():
        out += [
            f"`machines explore {system}`:",
            "",
            _table(("id", "a breach means"), ((f"`{k}`", v) for k, v in ids.items())),
            "",
        ]
    out += [
        "## The mutation catalog",
        "",
        "`machines mutate` applies each mutation to a copy of the definitions and runs "
        "`machines check`, the explorer and the affected system's suite until one catches "
        "it; a mutation none catches fails CI. Each applies an operator of the same catalog "
        "`machines mutate` applies to a user's definitions, or one that only this catalog "
        "applies (`machines.mutation.edits`).",
        "",
        _table(
            ("mutation", "machine", "operator", "the change", "meant to break"),
            (
                (f"`{i}`", m, f"`{o}`", d, ", ".join(f"`{b}`" for b in breaks))
                for i, m, o, d, breaks in mutations
            ),
        ),
    ]
    return "\n".join(out).rstrip() + "\n"


def findings_page(specs: Iterable[MachineSpec]) -> str:
    """Every finding of every machine in ``specs``; "None." when they record none."""
    out = [
        "# Findings",
        "",
        "Where a seed document is ambiguous, contradicts itself or is unsafe, the definition "
        "records what it chose, next to the data it explains. Every finding of every "
        "machine:",
        "",
    ]
    found = [(spec.name, f) for spec in specs for f in spec.findings]
    for name, f in found:
        out += _finding(f"## {name} / {f.id}", f)
    if not found:
        out.append("None.")
    return "\n".join(out).rstrip() + "\n"


def rules_page(specs: Iterable[MachineSpec]) -> str:
    """Every machine's own rules (its ``invariants:`` entries), by machine, each linked to
    its page beside this one."""
    out = [
        "# Rules",
        "",
        "The rules each definition states about itself (its `invariants:`). "
        "`machines check` proves each rule on the graph and prints a shortest path to any "
        "break.",
    ]
    for spec in specs:
        out += ["", f"## [{spec.name}]({spec.name}.md)", "", _rules(spec)]
    return "\n".join(out).rstrip() + "\n"


def _rules(spec: MachineSpec) -> str:
    if not spec.invariants:
        return "None."
    return _table(
        ("id", "rule", "applies to", "description"),
        ((f"`{r.id}`", f"`{r.kind}`", _rule_scope(r), r.description) for r in spec.invariants),
    )


def cli_page(helps: Sequence[tuple[str, str]]) -> str:
    """``helps``: (command line, its ``--help`` text) for the tool and each command."""
    out = ["# Command line", ""]
    for command, text in helps:
        out += [f"## `{command}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


# -- Markdown helpers -----------------------------------------------------------------------


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


SAFE_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
"""The schemes a link in a definition's text may name; a relative link names none."""

_LINK_TO_SCHEME = re.compile(r"(\]\(\s*|^\s*\[[^\]]*\]:\s*)([A-Za-z][A-Za-z0-9+.-]*):")


def _text(text: str) -> str:
    """A definition's free text as a page shows it: on one line, with ``<``, ``>`` and
    ``&`` as entities, control characters escaped, and a Markdown link to any scheme but
    ``SAFE_LINK_SCHEMES`` (``javascript:``, ``data:``) shown as text, so that a
    wording-only change (what ``machines diff`` calls wording) can never put markup, a
    script, on the site."""
    shown = html.escape(printable(" ".join(text.split())), quote=False)
    return _LINK_TO_SCHEME.sub(_unlinked, shown)


def _unlinked(found: re.Match[str]) -> str:
    """A link kept as text (an inline link's ``]``, a reference's ``[`` escaped) unless
    its scheme is safe."""
    if found[2].lower() in SAFE_LINK_SCHEMES:
        return found[0]
    bracket = "]" if found[1].startswith("]") else "["
    return found[0].replace(bracket, "\\" + bracket, 1)


def _finding(heading: str, f: Finding) -> list[str]:
    """One finding as the machine pages and the findings page show it."""
    return [
        heading,
        "",
        f"*Seed {f.seed}.* {_text(f.text)}",
        "",
        f"**Resolution.** {_text(f.resolution)}",
        "",
    ]


def _states(names: frozenset[str] | None) -> str:
    return "any" if names is None else ", ".join(f"`{n}`" for n in sorted(names))


def _rule_scope(rule: Rule) -> str:
    named = (
        ("states", rule.states),
        ("actors", rule.actors),
        ("triggers", rule.triggers),
        ("sources", rule.sources),
        ("dests", rule.dests),
        ("via", rule.via),
        ("holds", rule.holds),
    )
    parts = [f"{name}: {', '.join(values)}" for name, values in named if values]
    if rule.when:
        parts.append(f"when {describe_guard(rule.when, 'markdown')}")
    return "; ".join(parts)


def _clauses(clauses: Sequence[Clause]) -> str:
    said = []
    for c in clauses:
        n = c.nodes
        what = []
        if n.states is not None:
            what.append("/".join(sorted(n.states)))
        if n.side_effect is not None:
            what.append("with side effect" if n.side_effect else "without side effect")
        if n.manual is not None:
            what.append("manual gate" if n.manual else "not a gate")
        who = {"any": "some node", "all": "every node", "none": "no node"}[c.quantifier]
        said.append(f"{who} {' '.join(what)}".rstrip())
    return "; ".join(said)
