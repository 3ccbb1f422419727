"""Mutation: definitions broken on purpose, one change at a time, to show that a break is
caught, with one set of operators and two detectors.

- ``operators``: the generic changes to what any definition allows (a move dropped, added
  or redirected, an actor allowed, a guard dropped, widened or narrowed, a state made
  terminal or not, a tag dropped), each a mutant with an id naming the file and line.
- ``catalog``: the detector of this package's own checks. A curated catalog of breaks of
  the bundled definitions (an automatic exit from a fail-closed state, a dropped derivation
  rule, ...), each shown caught by ``machines check``, the explorer or a system's suite
  (``machines mutate [ID]``).
- ``user``: the detector of a user's own tests. Every operator's mutants of the user's
  definitions, each judged by the definitions' rules, then handed to the user's test
  command (``machines mutate --spec-dir DIR -- COMMAND``); a survivor is a hole in the
  tests.

Mutants of this package's *code* (not definitions) live outside it, in the repository's
``code_mutants/``.
"""
