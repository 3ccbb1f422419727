"""``python -m code_mutants.hunt DETECTOR...``: run detectors in order in this tree, stop at the
first that catches something, and print one line ``RESULT {json}`` saying which one, what
it saw and when. Run by ``code_mutants.run`` in a mutated copy of the tree, never by hand."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MARK = "RESULT "
"""The prefix of the one line the parent reads (the suites may print other lines)."""


def evidence(caught: BaseException) -> str:
    """The first line of what a detector raised, and where: enough to name the rule."""
    while isinstance(caught, BaseExceptionGroup) and caught.exceptions:
        caught = caught.exceptions[0]
    try:
        first = (str(caught).strip().splitlines() or [""])[0]
    except Exception:
        first = ""
    where = ""
    root = Path.cwd().resolve()
    frames = traceback.extract_tb(caught.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(root)]
    if ours:
        where = f" (at {Path(ours[-1].filename).resolve().relative_to(root)}:{ours[-1].lineno})"
    text = f"{type(caught).__name__}: {first}" if first else type(caught).__name__
    return (text[:300] + where).replace("\n", " ")


def main(argv: list[str]) -> int:
    root = Path.cwd().resolve()
    import machines

    if not Path(machines.__file__).resolve().is_relative_to(root):
        print(f"{MARK}{json.dumps({'error': f'machines imported from {machines.__file__}'})}")
        return 1
    from code_mutants.detectors import Unavailable, detector
    from machines.testing.profiles import load_profile

    load_profile("ci")
    result: dict[str, Any] = {"detector": None, "evidence": "", "seconds": 0.0, "skipped": []}
    started = time.perf_counter()
    for name in argv:
        try:
            detector(name)()
        except Unavailable as why:
            result["skipped"].append(f"{name}: {why}")
            continue
        except BaseException as caught:  # any failure of a detector is a catch
            if isinstance(caught, KeyboardInterrupt):
                raise
            result |= {"detector": name, "evidence": evidence(caught)}
            break
    result["seconds"] = round(time.perf_counter() - started, 2)
    print(f"{MARK}{json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
