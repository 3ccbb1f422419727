"""The ``machines`` mkdocs plugin in a user's own project (issue 16): a temporary project
with its own mkdocs.yml (the one docs/guide/site.md shows), a docs/index.md and a definition
of its own, built with ``mkdocs build --strict`` in a subprocess, as the user builds it.
Every option and every way it fails closed is broken here on purpose."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
REFUND = ROOT / "tests" / "user_project" / "specs" / "refund.yaml"
GUIDE = ROOT / "docs" / "guide" / "site.md"
CONFIG_BLOCK = re.compile(r'^```yaml title="mkdocs.yml"\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def guide_config() -> dict[str, object]:
    """The mkdocs.yml the guide tells a user to write."""
    found = CONFIG_BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    assert len(found) == 1, "the guide shows one mkdocs.yml"
    config: dict[str, object] = yaml.safe_load(found[0])
    return config


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    if importlib.util.find_spec("mkdocs") is None:
        unavailable("mkdocs", "pip install 'effect-machines[site]'")
    if not entry_points(group="mkdocs.plugins", name="machines"):
        unavailable(
            "the machines mkdocs plugin's entry point",
            "reinstall the package: pip install -e '.[dev]'",
        )


def needs_dot() -> None:
    if shutil.which("dot") is None:
        unavailable("Graphviz's dot binary", "apt-get install graphviz")


class Project:
    """A user's project: ``specs/refund.yaml``, ``docs/index.md`` and a ``mkdocs.yml``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "specs").mkdir(parents=True)
        shutil.copy(REFUND, root / "specs" / "refund.yaml")
        (root / "docs").mkdir()
        (root / "docs" / "index.md").write_text("# Refund service\n\nOur refunds.\n")
        self.config = guide_config()

    @property
    def options(self) -> dict[str, object]:
        plugins = self.config["plugins"]
        assert isinstance(plugins, list)
        entry = next(p for p in plugins if isinstance(p, dict) and "machines" in p)
        options: dict[str, object] = entry["machines"]
        return options

    def build(self, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        (self.root / "mkdocs.yml").write_text(yaml.safe_dump(self.config), encoding="utf-8")
        return subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict"],
            cwd=self.root,
            capture_output=True,
            text=True,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1", **(env or {})},
            timeout=120,
        )

    def built(self) -> Path:
        done = self.build()
        assert done.returncode == 0, done.stdout + done.stderr
        return self.root / "site"

    def fails(self, *said: str, env: dict[str, str] | None = None) -> str:
        done = self.build(env)
        output = done.stdout + done.stderr
        assert done.returncode != 0, output
        assert "Traceback" not in output, output
        for text in said:
            assert text in output, output
        return output


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "project")


def page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text(encoding="utf-8")


def test_the_guides_mkdocs_yml_builds_the_users_machine_pages(project: Project) -> None:
    needs_dot()
    site = project.built()
    refund = page(site, "machines/refund")
    for state in ("requested", "awaiting_approval", "sending", "unknown", "refunded"):
        assert f"<code>{state}</code>" in refund, state
    for trigger in ("send", "hold", "approve", "found_not_refunded"):
        assert f"<code>{trigger}</code>" in refund, trigger
    assert "approver" in refund and "service" in refund  # the actors of the moves
    assert "<code>size</code>" in refund and "large" in refund  # context and a guard
    assert "an unknown refund is never sent again" in refund  # the forbidden move
    for rule in ("people-settle-unknown", "large-needs-approval"):
        assert rule in refund and rule in page(site, "machines/rules")
    assert not re.search(r"<h2[^>]*>Findings", refund)  # research vocabulary, not used
    assert re.search(r"</h1>.*<p>None\.</p>", page(site, "machines/findings"), re.DOTALL)
    assert 'src="../diagrams/refund.svg"' in refund
    svg = (site / "machines" / "diagrams" / "refund.svg").read_text(encoding="utf-8")
    assert "<svg" in svg and "awaiting_approval" in svg
    for source in ("refund.dot", "refund.mmd"):
        assert (site / "machines" / "diagrams" / source).is_file()
    assert "spec/" not in refund and "machines docs" not in refund
    # nothing generated into the project: its files are the ones it had
    files = {p.relative_to(project.root).as_posix() for p in project.root.rglob("*")}
    assert {f for f in files if not f.startswith("site")} == {
        "specs",
        "specs/refund.yaml",
        "docs",
        "docs/index.md",
        "mkdocs.yml",
    }


def test_pages_dir_moves_the_pages(project: Project) -> None:
    needs_dot()
    project.options["pages_dir"] = "reference/lifecycles/"
    site = project.built()
    assert "large-needs-approval" in page(site, "reference/lifecycles/rules")
    assert (site / "reference" / "lifecycles" / "diagrams" / "refund.svg").is_file()
    assert not (site / "machines").exists()


def test_without_a_nav_the_section_of_the_pages_is_titled_nav_section(
    project: Project,
) -> None:
    needs_dot()
    project.options["pages_dir"] = "reference/lifecycles"
    project.options["nav_section"] = "Our lifecycles"
    home = page(project.built(), "")
    assert "Our lifecycles" in home and "Reference" in home and "Lifecycles" not in home
    assert 'href="reference/lifecycles/refund/"' in home


def test_a_nav_naming_none_of_the_pages_gets_a_section_of_them(project: Project) -> None:
    needs_dot()
    project.config["nav"] = [{"Home": "index.md"}]
    project.options["nav_section"] = "Our lifecycles"
    home = page(project.built(), "")
    assert "Our lifecycles" in home
    for target in ("machines/refund/", "machines/findings/", "machines/rules/"):
        assert f'href="{target}"' in home, target


def test_a_nav_that_names_a_page_is_left_as_written(project: Project) -> None:
    needs_dot()
    project.config["nav"] = [{"Home": "index.md"}, {"The refund": "machines/refund.md"}]
    home = page(project.built(), "")
    assert "The refund" in home and 'href="machines/refund/"' in home
    assert "Machines" not in home and 'href="machines/rules/"' not in home


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"specdir": "specs"}, "'specdir': not an option of the machines plugin"),
        ({"spec_dir": "specs", "pages": "x"}, "its options: spec_dir, pages_dir, nav_section"),
        ({"spec_dir": "specs", "page_dir": "x"}, "did you mean 'pages_dir'?"),
        ({}, "option 'spec_dir': Required configuration not provided"),
        ({"spec_dir": "no-such-dir"}, "no-such-dir' isn't an existing directory"),
        ({"spec_dir": "specs", "pages_dir": "../out"}, "is not a folder inside the site"),
        ({"spec_dir": "specs", "pages_dir": "/abs"}, "is not a folder inside the site"),
        ({"spec_dir": "specs", "pages_dir": ""}, "is not a folder inside the site"),
        ({"spec_dir": "specs", "pages_dir": "./"}, "is not a folder inside the site"),
        ({"spec_dir": "specs", "pages_dir": "a\\b"}, "is not a folder inside the site"),
        ({"spec_dir": "specs", "nav_section": 3}, "option 'nav_section': Expected type"),
    ],
)
def test_a_bad_option_fails_the_build_saying_which(
    project: Project, options: dict[str, object], said: str
) -> None:
    project.options.clear()
    project.options.update(options)
    project.fails(said)


@pytest.mark.parametrize(
    ("broken", "said", "after"),
    [
        ("trigger: Hold It,", "'Hold It' is not a lower_snake name", 0),
        ("trigger: [hold,", "not valid YAML", 1),  # the parser notices on the next line
    ],
    ids=["invalid", "not YAML"],
)
def test_a_definition_that_does_not_load_fails_naming_its_file_and_line(
    project: Project, broken: str, said: str, after: int
) -> None:
    definition = project.root / "specs" / "refund.yaml"
    text = definition.read_text(encoding="utf-8")
    definition.write_text(text.replace("trigger: hold,", broken), encoding="utf-8")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "trigger: hold," in t)
    output = project.fails("machines plugin:", str(definition), said)
    assert re.search(rf"line {line + after}\b", output), output


def test_a_definition_that_breaks_its_own_rule_fails_the_build(project: Project) -> None:
    definition = project.root / "specs" / "refund.yaml"
    text = definition.read_text(encoding="utf-8")
    broken = re.sub(r"  - \{trigger: found_(not_)?refunded,.*?\}\n", "", text, flags=re.DOTALL)
    assert broken != text
    definition.write_text(broken, encoding="utf-8")
    project.fails("machines plugin:", str(definition), "always-can-finish")


def test_an_empty_spec_dir_fails_the_build(project: Project) -> None:
    (project.root / "specs" / "refund.yaml").unlink()
    project.fails("machines plugin:", "no *.yaml or *.yml definitions in this directory")


def test_a_page_of_the_users_own_in_the_way_fails_the_build(project: Project) -> None:
    needs_dot()
    mine = project.root / "docs" / "machines" / "refund.md"
    mine.parent.mkdir()
    mine.write_text("# My refund page\n", encoding="utf-8")
    project.fails(str(mine), "choose another pages_dir")
    assert mine.read_text(encoding="utf-8") == "# My refund page\n"


def test_without_graphviz_the_build_fails_saying_how_to_install_it(
    project: Project, tmp_path: Path
) -> None:
    empty = tmp_path / "no-programs"
    empty.mkdir()
    project.fails(
        "cannot draw the diagram of 'refund'", "apt-get install graphviz", env={"PATH": str(empty)}
    )


def test_importing_machines_never_imports_mkdocs() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, machines, machines.render, machines.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mkdocs'))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_mkdocs_serve_watches_the_definitions(tmp_path: Path) -> None:
    from machines.render.mkdocs_plugin import MachinesPlugin

    class Server:
        def __init__(self) -> None:
            self.watched: list[str] = []

        def watch(self, path: str) -> None:
            self.watched.append(path)

    plugin = MachinesPlugin()
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    (tmp_path / "specs").mkdir()
    errors, _ = plugin.load_config({"spec_dir": "specs"}, str(tmp_path / "mkdocs.yml"))
    assert errors == []
    server = Server()
    assert plugin.on_serve(server, config=None, builder=None) is server  # type: ignore[arg-type]
    assert server.watched == [str(tmp_path / "specs")]


def test_an_mkdocs_without_generated_files_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    from machines.render.mkdocs_plugin import MachinesPlugin

    monkeypatch.delattr(File, "generated")
    with pytest.raises(PluginError, match=r"needs mkdocs 1\.6 or later.*effect-machines\[site\]"):
        MachinesPlugin().on_config(None)  # type: ignore[arg-type]
