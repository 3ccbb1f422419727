"""Reusable property suites: point them at the bundled specs, or at your own system.

``spec_walker(spec)`` builds a Hypothesis ``RuleBasedStateMachine`` that drives one entity
of any machine with random legal and illegal triggers, actors and contexts, and checks
after every step that refusals change nothing, terminal states stay final, and the
history is one legal unbroken chain. ``Coverage`` records which transitions a run
exercised. ``ExactlyOnceSuite`` judges any exactly-once executor through an adapter.
"""

from machines.testing.coverage import Coverage
from machines.testing.exactly_once import ExactlyOnceAdapter, ExactlyOnceSuite, ReferenceAdapter
from machines.testing.walker import spec_walker

__all__ = ["Coverage", "ExactlyOnceAdapter", "ExactlyOnceSuite", "ReferenceAdapter", "spec_walker"]
