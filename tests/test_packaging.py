"""A wheel built from this checkout works on its own: specs inside, console script, no checkout.

Builds the wheel, installs it into a fresh virtual environment (dependencies from the
package index), and runs ``machines check`` from a folder outside the checkout.
"""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)


@pytest.mark.slow
def test_wheel_installs_and_checks_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        tmp_path,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("effect_machines-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for machine in ("effect", "outcome", "node", "request"):
        assert f"machines/_spec/{machine}.yaml" in names
    assert "machines/_spec/machine.schema.json" in names
    assert "machines/py.typed" in names
    for report in ("check", "audit", "explore"):  # the JSON Schemas of --format json
        assert f"machines/cli/schemas/{report}.schema.json" in names
    assert not any(n.startswith("mutants/") for n in names)  # a development tool only

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    installed = _run([str(bin_dir / "pip"), "install", "-q", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    checked = _run([str(bin_dir / "machines"), "check"], elsewhere)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK: no violations" in checked.stdout
    assert "_spec" in checked.stdout  # the wheel's own copy, not this checkout's spec/

    version = _run([str(bin_dir / "machines"), "--version"], elsewhere)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"machines {wheel.name.split('-')[1]}\n"  # the wheel's metadata
    as_json = _run(
        [str(bin_dir / "python"), "-c", "from machines.cli.output import schema; schema('check')"],
        elsewhere,
    )
    assert as_json.returncode == 0, as_json.stderr  # the schema is read from the wheel

    as_module = _run(
        [str(bin_dir / "python"), "-m", "machines", "check", "--max-nodes", "2"], elsewhere
    )
    assert as_module.returncode == 0, as_module.stdout + as_module.stderr
