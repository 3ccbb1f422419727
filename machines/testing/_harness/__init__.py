"""Harnesses only this repository uses: not part of ``machines.testing``'s API.

``stores`` wraps the reference systems' store (a write that fails or dies on demand, the
named invariants over its snapshots); ``crashpoints`` kills a forked process at every write
boundary and recovers, and ``migration_crashes`` does the same to ``machines migrate``;
``races`` races worker processes on the same keys and checks what they were told against
the final store; ``durable`` appends lines that outlive the process writing them. The
public suites build their reference adapters on ``stores``; the rest serves ``tests/``
alone.
"""
