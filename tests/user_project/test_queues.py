"""Our queues and safety checks read states by what the definition says of them (its tags):
if the definition changes what needs a person, our service must change with it."""

from pathlib import Path

from refunds import MONEY_MAY_HAVE_MOVED, NEEDS_A_PERSON, NOBODY_CAN_TELL, Refunds

import machines
from machines.testing import spec_dir_under_test

SPEC = machines.load(spec_dir_under_test(Path(__file__).parent / "specs") / "refund.yaml")


def test_the_queue_lists_what_the_definition_says_needs_a_person() -> None:
    assert SPEC.states_tagged("needs-human") == NEEDS_A_PERSON


def test_a_refund_that_may_have_moved_money_is_never_sent_again() -> None:
    assert SPEC.states_tagged("effect-started") == MONEY_MAY_HAVE_MOVED
    assert SPEC.states_tagged("fail-closed") == NOBODY_CAN_TELL


def test_a_large_refund_waits_on_the_queue() -> None:
    service = Refunds()
    small, large = service.create("small"), service.create("large")
    service.fire(large, "hold", "service")
    assert service.waiting_for_a_person() == [large]
    service.fire(small, "send", "service")
    service.fire(small, "time_out", "service")
    assert service.waiting_for_a_person() == [small, large]
