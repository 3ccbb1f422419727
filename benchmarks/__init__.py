"""Ratio benchmarks: every figure is a ratio measured in one process against a baseline.

Run them all with ``python -m benchmarks`` (a table on stdout, JSON in
``build/benchmarks.json``). Absolute times on shared machines are noise; a ratio taken
from interleaved rounds of the candidate and its baseline is not.
"""
