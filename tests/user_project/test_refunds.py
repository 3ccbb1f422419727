"""Our refund service under the machines conformance suite, judged by our own definition
(specs/refund.yaml): it must allow exactly the moves the definition allows."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from refunds import Refunds

import machines
from machines.testing import ConformanceAdapter, ConformanceSuite, spec_dir_under_test

OURS = Path(__file__).parent / "specs"  # the definitions our service is written to
SPECS = spec_dir_under_test(OURS)  # the same, unless machines mutate swaps in a mutant


class RefundsAdapter(ConformanceAdapter[int]):
    """The suite's calls, in our service's words: a refund's id is its handle."""

    def __init__(self, service: Refunds) -> None:
        self.service = service

    def create(self, context: Mapping[str, str]) -> int:
        return self.service.create(size=context["size"])

    def fire(
        self,
        entity: int,
        trigger: str,
        actor: str,
        context: Mapping[str, str],
        detail: Mapping[str, Any] | None,
    ) -> None:
        self.service.fire(entity, trigger, actor)  # the size is the refund's own

    def state(self, entity: int) -> str:
        return self.service.state(entity)

    def history(self, entity: int) -> list[dict[str, object]]:
        return self.service.events(entity)


class RefundConformance(ConformanceSuite):
    spec = machines.load(SPECS / "refund.yaml")  # judges every move
    also_try = machines.load(OURS / "refund.yaml")  # tried too: a dropped move is noticed

    def make_adapter(self) -> ConformanceAdapter[int]:
        return RefundsAdapter(Refunds())  # a fresh in-memory database for every run


def test_refunds_conform_to_their_definition() -> None:
    RefundConformance.run()  # then fails if some transition was never taken
