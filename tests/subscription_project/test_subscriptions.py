"""Our subscription service under the machines conformance suite."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from subscriptions import Subscriptions

import machines
from machines.testing import ConformanceAdapter, ConformanceSuite, spec_dir_under_test

OURS = Path(__file__).parent / "specs"
SPECS = spec_dir_under_test(OURS)


class SubscriptionsAdapter(ConformanceAdapter[int]):
    def __init__(self, service: Subscriptions) -> None:
        self.service = service

    def create(self, context: Mapping[str, str]) -> int:
        return self.service.create(plan=context["plan"])

    def fire(
        self,
        entity: int,
        trigger: str,
        actor: str,
        context: Mapping[str, str],
        detail: Mapping[str, Any] | None,
    ) -> None:
        self.service.fire(entity, trigger, actor)

    def state(self, entity: int) -> str:
        return self.service.rows[entity].state

    def history(self, entity: int) -> list[dict[str, object]]:
        return list(self.service.rows[entity].events)


class SubscriptionConformance(ConformanceSuite):
    spec = machines.load(SPECS / "subscription.yaml")
    also_try = machines.load(OURS / "subscription.yaml")

    def make_adapter(self) -> ConformanceAdapter[int]:
        return SubscriptionsAdapter(Subscriptions())


def test_subscriptions_conform_to_their_definition() -> None:
    SubscriptionConformance.run()
