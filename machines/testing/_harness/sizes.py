"""The full size of each run of the reference systems' suites that this repository's tests,
its bug zoo and its code mutants' detectors make, said once. The active profile scales each
(``ci``: half the runs; ``thorough``: twenty times the runs, twice the steps), so no run
names a number of examples of its own."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings

from machines.testing.profiles import hunting, scaled


@dataclass(frozen=True)
class Size:
    """A run's full size: ``examples`` runs of up to ``steps`` steps."""

    examples: int
    steps: int

    def scaled(self) -> settings:
        """Settings for a run of this size under the active profile."""
        return scaled(self.examples, self.steps)

    def hunting(self) -> settings:
        """Settings for a hunt of a known bug of this size under the active profile."""
        return hunting(self.examples, self.steps)


EXACTLY_ONCE = Size(200, 25)
"""``ExactlyOnceSuite`` on the reference executor in memory, and on the zoo's executors."""
EFFECT_LOG = Size(200, 30)
"""``EffectLogSuite`` on the reference log in memory, and on the zoo's logs."""
TRANSFER = Size(250, 60)
"""``TransferSuite`` on the reference engine in memory, and on the zoo's engines."""
EXACTLY_ONCE_ON_DISK = Size(25, 25)
"""``ExactlyOnceSuite`` on a real database (a fresh one per run)."""
EFFECT_LOG_ON_DISK = Size(25, 30)
"""``EffectLogSuite`` on a real database."""
TRANSFER_ON_DISK = Size(30, 40)
"""``TransferSuite`` on a real database."""
TRANSFER_START = Size(3, 30)
"""``TransferSuite`` pinned to one scripted start: a few runs reach its deep corner."""
TRANSFER_HUNT = Size(1000, 60)
"""A hunt of one of the zoo's transfer engines. A hunt stops at its catch, so its size is
what a miss costs: at ``ci`` (500 runs) every engine of the zoo was caught under 20 of 20
random seeds; at 250 runs one was missed under 1 seed in 20, at 125 under 6."""
EFFECT_LOG_HUNT = Size(600, 30)
"""A hunt of one of the zoo's effect logs: at ``ci`` (300 runs) every log of the zoo was
caught under 20 of 20 random seeds; at 200 runs one was missed under 1 seed in 20, at 100
under 5."""
