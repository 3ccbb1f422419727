"""``machines init NAME``: a first machine that checks clean and a test that passes.

It writes ``specs/NAME.yaml`` (two actors, a guard, the three rules every machine keeps)
and ``test_NAME.py`` (the conformance suite, run against this package's own runtime as a
stand-in for your service until you give it an adapter of your own), into the working
folder, never over a file that is there, and says how to name the folder in
``pyproject.toml``. From there ``machines check`` and ``python -m pytest`` are green.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from machines.cli.command import Command, Parsers
from machines.cli.output import odd_names, printable_naming
from machines.errors import MachinesError, printable
from machines.spec.project import project_settings, written_inside
from machines.spec.vocabulary import RESERVED_MACHINE_PREFIXES, RESERVED_MACHINES, reserved_prefix

NAME = re.compile(r"[a-z][a-z0-9_]*\Z")

DEFINITION = """\
spec_version: 1
machine: '{name}'
description: One {name}, from opened to closed. Describe what one entity is here.

initial: opened

context:
  priority:
    values: [normal, urgent]
    description: An urgent one is closed by a person only.

actors:
  service:
    automatic: true
    description: Our service, a program.
  person:
    automatic: false
    description: A person on our team.

states:
  opened:
    description: Just created; waiting for work.
  working: {{}}
  closed:
    terminal: true

transitions:
  - {{trigger: start, source: opened, dest: working, actor: [service, person],
     description: Work begins.}}
  - {{trigger: close, source: working, dest: closed, actor: person,
     description: A person closes it.}}
  - {{trigger: auto_close, source: working, dest: closed, actor: service,
     when: {{priority: [normal]}}, description: The service closes a normal one.}}

# terminal_final, all_reachable and can_terminate are implied; opt_out says otherwise.
invariants:
  - {{id: urgent-closed-by-a-person, rule: automatic_enters_only_when, states: [closed],
     when: {{priority: [normal]}}, description: The service closes normal ones only.}}
"""

TEST = '''\
"""The {name} service judged by its definition (machines' conformance suite)."""

from pathlib import Path

import machines
from machines.testing import ConformanceSuite, RuntimeAdapter, spec_dir_under_test

OURS = Path(__file__).parent / "{folder}"


class {title_id}Conformance(ConformanceSuite):
    spec = machines.load(spec_dir_under_test(OURS) / "{name}.yaml")
    also_try = machines.load(OURS / "{name}.yaml")

    def make_adapter(self):
        # A stand-in: machines' own runtime on the definition. Replace it with a
        # ConformanceAdapter over your service (create, fire, state, history).
        return RuntimeAdapter(self.spec)


def test_{name}_conforms_to_its_definition():
    {title_id}Conformance.run()
'''


def _arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("name", help="the machine's name, lower_snake (ticket, refund, ...)")


def _run(args: argparse.Namespace, parsers: Parsers) -> int:
    name: str = args.name
    if not NAME.match(name):
        parsers[1]["init"].error(f"{name!r} is not a lower_snake name (ticket, refund_request)")
    if name in RESERVED_MACHINES:  # the loader refuses them: check would fail, the test too
        parsers[1]["init"].error(
            f"{name!r} is reserved: the site and machines docs make a page of that name beside "
            f"the machine pages ({', '.join(sorted(RESERVED_MACHINES))}); choose another name"
        )
    if (prefix := reserved_prefix(name)) is not None:  # the loader refuses it too
        parsers[1]["init"].error(
            f"{name!r} is reserved: its tables would start with {prefix!r}, which a store or "
            "its database keeps for its own; choose another name"
        )
    title_id = "".join(part.capitalize() for part in name.split("_"))
    settings = project_settings()
    configured = settings.folders.get("spec_dir") if settings is not None else None
    folder, root = (
        (Path("specs"), Path.cwd())
        if configured is None or settings is None
        else (configured, settings.path.parent)
    )
    shown = Path(os.path.relpath(folder, Path.cwd())).as_posix()
    files = {
        folder / f"{name}.yaml": DEFINITION.format(name=name),
        Path(f"test_{name}.py"): TEST.format(name=name, title_id=title_id, folder=shown),
    }
    try:
        written_inside(folder, root, "where init writes the definition")
    except (MachinesError, OSError) as exc:
        # it names the working folder (and where a link leads), named as the user likes
        said = printable_naming(f"machines init: {exc}; nothing written", odd_names(folder))
        print(said, file=sys.stderr)
        return 2
    there = [str(path) for path in files if path.exists() or path.is_symlink()]
    if there:
        print(f"machines init: {', '.join(there)} already there; nothing written", file=sys.stderr)
        return 2
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8") as file:
                file.write(text)
    except OSError as exc:
        print(f"machines init: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    for path in files:
        print(printable(f"machines init: wrote {path}"))
    if configured is None:
        print('next: add to your pyproject.toml\n  [tool.machines]\n  spec_dir = "specs"')
    else:
        where = f"{shown}, [tool.machines] of {settings.path}" if settings else shown
        print(printable(f"it is in the project's spec_dir ({where})"))
    print(f"then run: machines check, and python -m pytest test_{name}.py")
    return 0


COMMAND = Command(
    "init",
    help="write a first machine (specs/NAME.yaml) that checks clean, and a conformance "
    "test of it (test_NAME.py) that passes",
    description="Writes nothing over a file that is there. Exit 0 when written, 2 when a "
    "file is there or cannot be written, or when NAME is not lower_snake or is one a "
    f"machine may not take ({', '.join(sorted(RESERVED_MACHINES))}: the names of pages "
    "beside the machine pages; or one whose tables would start with "
    f"{', '.join(RESERVED_MACHINE_PREFIXES)}).",
    arguments=_arguments,
    run=_run,
)
