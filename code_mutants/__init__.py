"""Code mutants of this package's own systems and stores, and the command that runs them.

``python -m code_mutants`` seeds realistic semantic bugs (``code_mutants.catalog``: a dropped lease
fence, a retry after a send, a result acknowledged before it is stored, a saga that
compensates oldest first, a store write that skips its version fence, ...) into
``machines/systems/`` and ``machines/store/``, one at a time, each in a temporary copy of
the tree, runs the property suites against it (``code_mutants.detectors``, ``ci`` profile) and
prints a kill table: which detector caught each mutant, with what evidence, after how
many seconds. A mutant that survives is a blind spot of the suites, unless the catalog
justifies it as equivalent. The package is a development tool: it is not in the wheel.
"""
