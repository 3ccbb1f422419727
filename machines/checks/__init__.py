"""Judging definitions and stored state.

``report`` is ``machines check``: every definition's structure, rules and derivation proof
in one ``Report``. ``invariants`` are the named system invariants, pure predicates over a
snapshot of a store. ``audit`` judges a history (a file of events, or a whole store) by the
definitions and those invariants.
"""
