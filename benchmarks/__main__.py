"""``python -m benchmarks [--json PATH] [--only NAME] [--quick]``: run every ratio
benchmark (``--quick``: one round each, to check that each runs; its ratios are not
measurements)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks import (
    desk_bench,
    explore_bench,
    harness,
    postgres_bench,
    runtime_bench,
    step_bench,
    store_bench,
    suite_bench,
)
from benchmarks.harness import Ratio

SUITES = {
    "step": step_bench.run,
    "runtime": runtime_bench.run,
    "store": store_bench.run,
    "suites": suite_bench.run,
    "explore": explore_bench.run,
    "postgres": postgres_bench.run,
    "desk": desk_bench.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("build/benchmarks.json"))
    parser.add_argument("--only", choices=sorted(SUITES), action="append")
    parser.add_argument(
        "--quick", action="store_true", help="one round each: a check, not a measurement"
    )
    args = parser.parse_args(argv)
    harness.quick(args.quick)
    results: list[Ratio] = []
    for name, run in SUITES.items():
        if args.only and name not in args.only:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.extend(run())
    if args.quick:
        print("quick run: one round each, so these ratios are not measurements")
    print(format_table(results))
    if not args.only or "runtime" in args.only:
        memory = runtime_bench.memory_per_entity()
        print(
            "\nmemory per entity (tracemalloc): "
            + ", ".join(f"{name} {size:,.0f} B" for name, size in memory.items())
        )
    else:
        memory = {}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "results": [asdict(r) | {"meets_goal": r.meets_goal} for r in results],
        "memory_per_entity_bytes": memory,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwritten: {args.json}")
    return 0


def format_table(results: list[Ratio]) -> str:
    rows = [("benchmark", "candidate / baseline", "ratio", "goal", "", "per unit")]
    for r in results:
        verdict = "" if r.meets_goal is None else ("ok" if r.meets_goal else "MISSED")
        sign = ">=" if r.higher_is_better else "<="
        goal = "" if r.goal is None else f"{sign} {r.goal:g}x"
        per_unit = f"{r.candidate_ns:,.0f} ns vs {r.baseline_ns:,.0f} ns per {r.unit}"
        rows.append(
            (r.name, f"{r.candidate} / {r.baseline}", f"{r.ratio:.2f}x", goal, verdict, per_unit)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
