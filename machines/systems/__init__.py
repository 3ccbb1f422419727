"""Reference systems built on the specs, the runtime's decisions and a store."""

from machines.systems.exactly_once import ExactlyOnce, Verdict, fail_closed, not_sent

__all__ = ["ExactlyOnce", "Verdict", "fail_closed", "not_sent"]
