"""A guide page's titled code blocks, and the check that the output a page shows is what a
suite prints for the rule it is about.

The page shows one shrunk failure. Which entity, key or call it names, and how many
seconds pass, are picked by the derandomized draw, which changes whenever the suite or
Hypothesis draws differently; the rule, its promise and the shape of the report do not.
So the check holds the page to the rule word for word, and to the report line for line
up to those numbers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from machines.spec.registry import INVARIANTS
from machines.testing.verdict import promised

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_GUIDE = ROOT / "docs" / "guide" / "conformance.md"
SUITES_GUIDE = ROOT / "docs" / "guide" / "suites-in-ci.md"
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
NUMBER = re.compile(r"\d+")
RULE_BROKEN = "machines.testing.verdict.RuleBroken: "


def guide_blocks(page: Path) -> Mapping[str, str]:
    """The page's titled code blocks (```` ```python title="x.py" ````), by title."""
    found = {title: body for _, title, body in BLOCK.findall(page.read_text(encoding="utf-8"))}
    assert "output" in found, f"{page} shows no output block"
    return found


def _numbers_apart(line: str) -> str:
    return NUMBER.sub("#", line.strip().removeprefix("E").strip())


def promise_of(rule: str) -> str:
    """What ``rule`` promises, as the registry says it (and a report quotes it)."""
    return INVARIANTS[rule].statement


def assert_shows(shown: str, printed: str, *, rule: str) -> None:
    """The page's output block (``shown``) against what pytest printed: its first line is
    the failure of ``rule``, its second that rule's promise word for word, and every line
    it shows is a line pytest printed, numbers apart."""
    lines = [line.strip() for line in shown.splitlines() if line.strip()]
    assert len(lines) > 3, f"the page shows too little output: {lines}"
    assert lines[0].startswith(f"{RULE_BROKEN}{rule}: "), lines[0]
    assert lines[1] == promised(rule, promise_of(rule)), (lines[1], promise_of(rule))
    assert lines[2] == "what the suite saw last:", lines[2]
    said = {_numbers_apart(line) for line in printed.splitlines()}
    missing = [line for line in lines if _numbers_apart(line) not in said]
    assert not missing, f"the page shows lines pytest did not print: {missing}\n{printed}"
