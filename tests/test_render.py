"""Diagrams and generated pages: what they show, that they are deterministic, and that the
committed ones are current (``machines diagrams --check``, ``machines docs --check``)."""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
from pathlib import Path

import graphviz
import pytest
import yaml

from machines.cli import main, site_facts
from machines.errors import MachinesError
from machines.render import DiagramView, to_dot, to_mermaid
from machines.render.export import export
from machines.render.files import MARKER, diagram_files, is_generated, marked, sync
from machines.render.site import definition_pages, package_pages
from machines.spec import MachineSpec
from machines.spec.loader import bundled_spec_dir, definition_paths, load, read_definition
from tests.conftest import Document, SpecCopy, transition, unavailable

ROOT = Path(__file__).resolve().parent.parent
MACHINES = [read_definition(p) for p in definition_paths(bundled_spec_dir())]


@pytest.mark.parametrize("name", [spec.name for spec in MACHINES])
def test_the_dot_diagram_shows_every_state_and_edge(name: str) -> None:
    spec = load(name)
    dot = to_dot(spec)
    assert f'"__initial__" -> "{spec.initial}"' in dot
    for name, state in spec.states.items():
        line = next(line for line in dot.splitlines() if line.startswith(f'  "{name}"'))
        assert ("peripheries=2" in line) == state.terminal, name
        assert ("penwidth=2.5" in line) == ("fail-closed" in state.tags), name
    edges = [line for line in dot.splitlines() if " -> " in line and "__initial__" not in line]
    assert len(edges) == len(spec.transitions)
    for t, line in zip(spec.transitions, edges, strict=True):
        assert line.startswith(f'  "{t.source}" -> "{t.dest}"') and t.trigger in line
        person = any(not spec.actors[a].automatic for a in t.actors)
        assert ("style=dashed" in line) == person, line
        assert ("\u2020" in line) == bool(t.amendment), line
    assert to_dot(spec) == dot  # deterministic


def test_edges_out_of_a_fail_closed_state_are_highlighted() -> None:
    view = DiagramView.of(load("node"))
    exits = [e for e in view.edges if e.source == "unknown"]
    assert exits and all(e.fail_closed_exit for e in exits)
    assert not any(e.fail_closed_exit for e in view.edges if e.source != "unknown")
    dot = to_dot(load("node"))
    for e in exits:
        line = next(
            line for line in dot.splitlines() if f'-> "{e.dest}"' in line and e.trigger in line
        )
        assert 'color="#c62828"' in line and "penwidth=2" in line


def test_mermaid_names_every_edge_and_marks_terminal_and_fail_closed_states() -> None:
    spec = load("outcome")
    text = to_mermaid(spec)
    assert text.splitlines()[3] == "stateDiagram-v2"
    assert f"[*] --> {spec.initial}" in text
    for t in spec.transitions:
        assert re.search(rf"^    {t.source} --> {t.dest}: {t.trigger} ", text, re.M), t
    assert "    succeeded --> [*]" in text and "    indeterminate --> [*]" not in text
    assert "class indeterminate failclosed" in text


def test_export_prints_the_diagrams(capsys: pytest.CaptureFixture[str]) -> None:
    assert export(load("effect"), "mermaid") == to_mermaid(load("effect"))
    assert main(["export", "effect", "--format", "dot"]) == 0
    assert capsys.readouterr().out == to_dot(load("effect"))


def test_the_committed_diagrams_and_pages_are_current(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CI runs the same checks; regenerate with machines diagrams && machines docs."""
    assert main(["diagrams", "--check", "--out", str(ROOT / "diagrams")]) == 0
    assert main(["docs", "--check", "--out", str(ROOT / "docs")]) == 0
    assert "are current" in capsys.readouterr().out


def test_check_reports_a_stale_or_missing_file_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "diagrams"
    assert main(["diagrams", "--out", str(out)]) == 0
    stale = marked("effect.mmd", "stale\n")
    (out / "effect.mmd").write_text(stale)
    (out / "node.dot").unlink()
    assert main(["diagrams", "--check", "--out", str(out)]) == 1
    said = capsys.readouterr().out
    assert "effect.mmd" in said and "node.dot" in said
    assert f"run: machines diagrams --out {shlex.quote(str(out))}" in said
    assert (out / "effect.mmd").read_text() == stale and not (out / "node.dot").exists()
    assert main(["diagrams", "--out", str(out)]) == 0
    assert main(["diagrams", "--check", "--out", str(out)]) == 0


def test_an_edited_spec_makes_the_committed_files_stale(
    spec_copy: SpecCopy, capsys: pytest.CaptureFixture[str]
) -> None:
    """The invariants page says which machines declare a rule of each named invariant, so
    dropping outcome's makes it stale; a reworded trigger makes a diagram stale; the hint
    repeats the user's own --spec-dir and --out, quoted for a shell."""

    def drop_rule(doc: Document) -> None:
        doc["invariants"] = [r for r in doc["invariants"] if r["id"] != "fail-closed-indeterminate"]

    spec_copy.edit("outcome", drop_rule)
    args = ["--spec-dir", str(spec_copy.path), "--check"]
    assert main(["docs", *args, "--out", str(ROOT / "docs")]) == 1
    said = capsys.readouterr().out
    assert "invariants.md" in said and "cli.md" not in said
    again = shlex.join(["machines", "docs", "--spec-dir", str(spec_copy.path)])
    assert f"run: {again} --out {shlex.quote(str(ROOT / 'docs'))}" in said
    assert main(["diagrams", *args, "--out", str(ROOT / "diagrams")]) == 0  # rules not drawn

    def rename(doc: Document) -> None:
        transition(doc, "in_flight", "indeterminate")["trigger"] = "park_it"

    spec_copy.edit("outcome", rename)
    assert main(["diagrams", *args, "--out", str(ROOT / "diagrams")]) == 1
    assert "outcome.dot" in capsys.readouterr().out


def test_without_graphviz_dot_and_mermaid_are_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(self: graphviz.Source, format: str, quiet: bool = False) -> bytes:
        raise graphviz.ExecutableNotFound(["dot"])

    monkeypatch.setattr(graphviz.Source, "pipe", missing)
    files, drawn = diagram_files(MACHINES)
    assert not drawn and not any(name.endswith(".svg") for name in files)
    assert main(["diagrams", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)
    assert "apt-get install graphviz" in capsys.readouterr().err


def test_svg_is_compared_without_the_graphviz_version_line(tmp_path: Path) -> None:
    files, drawn = diagram_files([load("outcome")])
    assert drawn
    sync(files, tmp_path, check=False)
    svg = tmp_path / "outcome.svg"
    svg.write_text(svg.read_text().replace("graphviz version", "graphviz version 0.0 (other)"))
    assert sync(files, tmp_path, check=True) == ()


def test_every_machine_page_has_its_tables_and_findings() -> None:
    pages = definition_pages(MACHINES)
    assert set(pages) == {*(f"{s.name}.md" for s in MACHINES), "findings.md", "rules.md"}
    for spec in MACHINES:
        page = pages[f"{spec.name}.md"]
        for heading in ("## States", "## Transitions", "## Forbidden moves", "## Structural rules"):
            assert heading in page, (spec.name, heading)
        assert f"(diagrams/{spec.name}.svg)" in page
        for name in spec.states:
            assert f"| `{name}` |" in page
        for f in spec.findings:
            assert f"### {f.id}" in page and f"## {spec.name} / {f.id}" in pages["findings.md"]
        assert f"## [{spec.name}]({spec.name}.md)" in pages["rules.md"]
        for rule in spec.invariants:
            assert f"| `{rule.id}` |" in page and f"| `{rule.id}` |" in pages["rules.md"]
    request = pages["request.md"]
    assert "| # | `money-safe` | `qtg-v3` |" in request
    ours = package_pages(MACHINES, site_facts(MACHINES))
    assert set(ours) == {"invariants.md", "cli.md", "format.md"}
    invariants = ours["invariants.md"]
    for name in ("exactly-once", "no-auto-terminal-money-in-flight", "context-matches-money"):
        assert f"`{name}`" in invariants or f"### {name}" in invariants
    assert "closed" in invariants and "outcome-auto-exit-indeterminate" in invariants
    assert "## `machines explore`" in ours["cli.md"]


def test_a_machine_without_findings_or_rules_says_none() -> None:
    bare = dataclasses.replace(load("effect"), findings=(), invariants=())
    pages = definition_pages([bare])
    assert pages["findings.md"].rstrip().endswith("None.")
    assert "## Findings" not in pages["effect.md"]
    assert "## Structural rules" in pages["effect.md"]
    assert pages["rules.md"].rstrip().endswith("## [effect](effect.md)\n\nNone.")


# -- issue 16: never overwrite a file we did not write ---------------------------------------


@pytest.mark.parametrize("name", ["a.md", "a.dot", "a.mmd", "a.svg"])
def test_every_kind_of_generated_file_carries_the_marker(name: str) -> None:
    files, _ = diagram_files([load("outcome")])
    text = {
        "a.md": "# A page\n",
        "a.dot": files["outcome.dot"],
        "a.mmd": files["outcome.mmd"],
        "a.svg": files.get("outcome.svg", '<?xml version="1.0"?>\n<svg/>\n'),
    }[name]
    assert not is_generated(text)
    out = marked(name, text)
    assert is_generated(out) and out.count(MARKER) == 1
    assert out.replace(next(line for line in out.splitlines(True) if MARKER in line), "") == text
    first = out.splitlines()[0]
    if name == "a.mmd":
        assert first == "---" and yaml.safe_load(out.split("---")[1])["title"].startswith("outcome")
    if name == "a.svg":
        assert first.startswith("<?xml")


def test_an_unmarked_file_is_not_a_generated_one() -> None:
    assert not is_generated("# CLI\n\n" + "text\n" * 10 + f"<!-- {MARKER} -->\n")
    with pytest.raises(MachinesError, match="no comment syntax"):
        marked("a.txt", "text")


@pytest.mark.parametrize("command", ["docs", "diagrams"])
def test_a_hand_written_file_is_refused_named_and_unchanged_unless_forced(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 16: ``machines docs`` overwrote a user's own docs/cli.md without asking."""
    mine = tmp_path / ("cli.md" if command == "docs" else "effect.dot")
    other = tmp_path / ("invariants.md" if command == "docs" else "node.dot")
    mine.write_text("# My own page\n", encoding="utf-8")
    assert main([command, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(mine) in err and "--force" in err and str(other) not in err
    assert mine.read_text(encoding="utf-8") == "# My own page\n"
    assert not other.exists()  # nothing at all was written
    assert main([command, "--check", "--out", str(tmp_path)]) == 1  # stale, not refused
    err = capsys.readouterr().err  # batch 43 b 16: it said to run what refuses
    assert str(mine) in err and "would not be replaced" in err and "--force" in err, err
    assert main([command, "--force", "--out", str(tmp_path)]) == 0
    assert is_generated(mine.read_text(encoding="utf-8")) and other.exists()
    assert main([command, "--out", str(tmp_path)]) == 0  # ours now: replaced freely
    mine.write_text(mine.read_text(encoding="utf-8") + "edited by hand\n", encoding="utf-8")
    assert main([command, "--out", str(tmp_path)]) == 0  # still marked: regenerated
    assert "edited by hand" not in mine.read_text(encoding="utf-8")
    capsys.readouterr()


def test_docs_writes_a_users_machine_pages_never_this_packages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 16: for a user's --spec-dir, machines docs wrote this package's cli.md, an
    invariants page about the bundled systems and an empty findings page. Issue 29: it
    writes the pages about the user's machines instead."""
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(ROOT / "tests" / "user_project" / "specs" / "refund.yaml", specs)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "docs"
    assert main(["docs", "--spec-dir", str(specs), "--out", str(out), "--check"]) == 1
    assert not out.exists()
    assert main(["docs", "--spec-dir", str(specs), "--out", str(out)]) == 0
    assert {p.name for p in (out / "machines").iterdir()} == {
        "refund.md",
        "findings.md",
        "rules.md",
        "diagrams",
    }
    assert not list(out.glob("*.md"))
    assert main(["diagrams", "--spec-dir", str(specs), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {"refund.dot", "refund.mmd"}
    capsys.readouterr()


# -- issue 13, item 23: text from a definition cannot break a diagram -------------------------

AWKWARD_TITLES = (
    'say "hi"',
    "two\nlines",
    "back\\slash\\",
    "---",
    "end\n---\nstateDiagram-v2\n    [*] --> committed",
    "ünïcödé \u2713 \U0001f680 \u00a0",
    "nul\x00 tab\t cr\r sep\u2028 del\x7f",
    "lone \ud800 surrogate",
    "#quot; & &amp; <b>bold</b> %% ; :",
)


def _titled(title: str) -> MachineSpec:
    return dataclasses.replace(load("effect"), title=title)


@pytest.mark.parametrize("title", AWKWARD_TITLES, ids=range(len(AWKWARD_TITLES)))
def test_mermaid_front_matter_holds_any_title(title: str) -> None:
    """issue 13 item 23: a ``"`` or a line break in the title broke the front matter."""
    plain = to_mermaid(load("effect")).splitlines()
    text = to_mermaid(_titled(title))
    text.encode("utf-8")  # writable as the file is written
    lines = text.splitlines()
    assert lines[0] == lines[2] == "---" and lines[3:] == plain[3:]
    assert yaml.safe_load(lines[1]) == {"title": f"effect - {title}"}


@pytest.mark.parametrize("title", AWKWARD_TITLES, ids=range(len(AWKWARD_TITLES)))
def test_dot_holds_any_title(title: str) -> None:
    """issue 13 item 23 (DOT): a line break went into the file raw, an unprintable
    character or a lone surrogate made it unwritable."""
    plain = to_dot(load("effect")).splitlines()
    dot = to_dot(_titled(title))
    dot.encode("utf-8")
    lines = dot.splitlines()
    assert len(lines) == len(plain) and lines[2:] == plain[2:]
    label = re.search(r'label=("(?:[^"\\]|\\.)*")\];$', lines[1])
    assert label is not None
    shown = "".join(
        c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in f"effect: {title}"
    )
    assert _read_dot_string(label.group(1)) == shown


def _read_dot_string(quoted: str) -> str:
    """What Graphviz shows for a quoted DOT label that ``_quote`` wrote."""
    text = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), quoted[1:-1])
    return text.replace("&amp;", "&")


def test_graphviz_draws_a_diagram_with_an_awkward_title() -> None:
    if shutil.which("dot") is None:
        unavailable("Graphviz's dot binary", "apt-get install graphviz")
    for title in AWKWARD_TITLES:
        svg = graphviz.Source(to_dot(_titled(title))).pipe(format="svg").decode("utf-8")
        assert "<svg" in svg and "effect: " in svg


def test_mermaid_labels_stay_on_their_line_and_odd_state_ids_are_refused() -> None:
    """issue 13 item 23: label text is spelled in Mermaid's entity codes; a state name
    that cannot be a Mermaid id is refused, not drawn as another diagram."""
    spec = load("effect")
    first = dataclasses.replace(spec.transitions[0], trigger="go;#<b>\nnext: now")
    odd = dataclasses.replace(spec, transitions=(first, *spec.transitions[1:]))
    lines = to_mermaid(odd).splitlines()
    assert len(lines) == len(to_mermaid(spec).splitlines())
    label = lines[6].split(": ", 1)[1]
    assert label.startswith("go,#35;#lt;b#gt;\\nnext  now (")
    renamed = dataclasses.replace(
        spec, states={("pending state" if k == "pending" else k): v for k, v in spec.states.items()}
    )
    with pytest.raises(MachinesError, match="cannot be a Mermaid id"):
        to_mermaid(renamed)


@pytest.mark.parametrize("machine", ["outcome", "node"])
def test_a_fail_closed_state_is_filled_alike_in_dot_and_mermaid(machine: str) -> None:
    """Mermaid filled fail-closed states and DOT only outlined them (its fill colour was
    defined and never used): both now draw them from the one palette of ``render.view``."""
    from machines.render.view import FAIL_CLOSED_FILL

    spec = load(machine)
    view = DiagramView.of(spec)
    assert view.fail_closed, f"{machine} has no fail-closed state to draw"
    dot = to_dot(spec)
    for state in view.fail_closed:
        line = next(line for line in dot.splitlines() if line.startswith(f'  "{state}" ['))
        assert f'fillcolor="{FAIL_CLOSED_FILL}"' in line, line
    assert f"classDef failclosed fill:{FAIL_CLOSED_FILL}," in to_mermaid(spec)


def test_the_check_hint_repeats_the_users_flags_quoted_for_a_shell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 16: the hint said ``run: machines docs`` whatever --spec-dir and --out were."""
    specs = tmp_path / "my specs"
    specs.mkdir()
    shutil.copy(ROOT / "tests" / "user_project" / "specs" / "refund.yaml", specs)
    out = tmp_path / "it's $HOME"
    argv = ["diagrams", "--spec-dir", str(specs), "--out", str(out)]
    assert main([*argv, "--check"]) == 1
    said = capsys.readouterr().out
    assert said.rstrip().endswith(f"run: {shlex.join(['machines', *argv])}")
    assert shlex.split(said.rstrip().split("run: ", 1)[1]) == ["machines", *argv]
    assert main(argv) == 0 and main([*argv, "--check"]) == 0
    capsys.readouterr()


def test_an_entitys_picture_shows_where_it_is_and_the_way_it_came() -> None:
    """Issue 29: the object runtime's entity drawn with its current state and the path so
    far highlighted, shown by Jupyter as SVG (``_repr_svg_``)."""
    import shutil

    import machines
    from machines.render.dot import CURRENT_FILL, TAKEN_COLOR
    from machines.render.picture import entity_picture

    effect = machines.load("effect").machine(tier="compensable")
    effect.trigger("execute", actor="proxy")
    picture = entity_picture(effect)
    lines = picture.dot.splitlines()
    current = [line for line in lines if CURRENT_FILL in line]
    assert len(current) == 1 and current[0].lstrip().startswith('"executing"')
    taken = [line for line in lines if TAKEN_COLOR in line]
    assert len(taken) == 1 and '"pending" -> "executing"' in taken[0]
    assert CURRENT_FILL not in machines.render.dot.to_dot(effect.spec)  # a plain diagram
    if shutil.which("dot"):
        svg = picture._repr_svg_()
        assert svg is not None and svg.lstrip().startswith(("<?xml", "<svg", "<!--"))


def test_a_definitions_free_text_is_never_markup_on_its_page() -> None:
    """Outsider batch 22 (b B7): descriptions and findings went into the site's pages as
    they are, so a wording-only pull request (what diff calls wording) could put a live
    script on the published site, and an ESC byte into it. Free text is escaped."""
    from dataclasses import replace

    import machines
    from machines.render.pages import machine_page

    spec = machines.load("outcome")
    hostile = replace(
        spec,
        description="<script>alert(1)</script> \x1b[2J & more",
        title="Tickets <img src=x onerror=alert(1)>",  # batch 42 c 5c: the title was raw
        origin="<b>seed</b>",
        states={
            name: replace(state, description="<img src=x onerror=alert(1)>")
            for name, state in spec.states.items()
        },
    )
    page = machine_page(hostile, "diagrams")
    assert "<script>" not in page and "<img" not in page and "\x1b" not in page
    assert "<b>" not in page and "# outcome: Tickets &lt;img" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&amp; more" in page


@pytest.mark.parametrize(
    "link",
    [
        "[x](javascript:alert(2))",
        "[x]( JavaScript:alert(2))",
        "[x](data:text/html,<b>hi</b>)",
        "[ref]: vbscript:msgbox(1)",
    ],
)
def test_a_link_to_a_script_in_a_definitions_text_is_no_link_on_the_site(link: str) -> None:
    """Outsider batch 43 (b 21): Markdown links survived the escaping, so a description
    holding ``[x](javascript:...)`` was a live ``javascript:`` link on the built site. A
    link to a web page, a mail address or another page stays one."""
    from dataclasses import replace

    import markdown

    import machines
    from machines.render.pages import machine_page

    spec = machines.load("outcome")
    safe = "[docs](https://example.com/a) [mail](mailto:ops@example.com) [page](../cli.md)"
    given = replace(spec, description=f"{link} then {safe}")
    page = markdown.markdown(machine_page(given, "diagrams") + "\n\n[ref]", extensions=["tables"])
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert not any(h.lower().lstrip().startswith(("javascript", "data", "vbscript")) for h in hrefs)
    assert {"https://example.com/a", "mailto:ops@example.com", "../cli.md"} <= set(hrefs)


@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("echo boom >&2; exit 3", "dot exited with status 3 drawing machine 'effect' (boom)"),
        ("kill -9 $$", "dot was killed by signal 9 drawing machine 'effect'"),
    ],
)
def test_a_dot_that_fails_is_a_typed_error_and_nothing_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    script: str,
    says: str,
) -> None:
    """Outsider batch 35 (c 1): Graphviz' ``dot`` killed for its memory on a definition of
    4,000 states (or failing for any reason) ended ``machines diagrams``, ``machines docs``
    and the mkdocs plugin in a raw ``CalledProcessError`` traceback."""
    from machines.render.files import DrawingFailed, render_svg

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dot").write_text(f"#!/bin/sh\n{script}\n")
    (fake / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    with pytest.raises(DrawingFailed, match="nothing was written"):
        render_svg("digraph { a -> b }")
    out = tmp_path / "diagrams"
    capsys.readouterr()
    assert main(["diagrams", "--spec-dir", str(bundled_spec_dir()), "--out", str(out)]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_a_dot_that_draws_no_text_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outsider batch 37: a ``dot`` that exited 0 with bytes that are not UTF-8 ended
    ``machines diagrams`` in a raw ``UnicodeDecodeError``."""
    from machines.render.files import DrawingFailed, render_svg

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dot").write_text("#!/bin/sh\ncat > /dev/null; printf '\\377\\376<svg>'\n")
    (fake / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    with pytest.raises(DrawingFailed, match="not UTF-8 text"):
        render_svg("digraph { a -> b }", "machine 'm'")
