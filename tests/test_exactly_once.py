"""ExactlyOnce on memory and SQLite: once per key, recorded outcomes replayed, and every
doubt parked as indeterminate, including a process killed between claim and result."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from machines.errors import (
    EffectFailed,
    EffectIndeterminate,
    EffectInProgress,
    InvalidStateTransition,
    MachinesError,
)
from machines.store import Store, open_store
from machines.systems import ExactlyOnce, Verdict, not_sent
from machines.testing._harness.stores import FaultyStore
from machines.testing.faults import SimulatedCrash
from tests.conftest import FakeClock


class Card:
    """A fake upstream that counts how often it was really charged."""

    def __init__(self) -> None:
        self.charges = 0

    def charge(self) -> dict[str, Any]:
        self.charges += 1
        return {"charge_id": f"ch_{self.charges}"}


def transitions_of(store: Store, key: str) -> list[tuple[str, str, str, str]]:
    with store.transaction() as tx:
        return [(e.source, e.dest, e.trigger, e.actor) for e in tx.history("outcome", key)]


def test_runs_once_and_replays_the_result(store: Store) -> None:
    eo, card = ExactlyOnce(store), Card()
    first = eo.run("order-1", card.charge)
    assert [eo.run("order-1", card.charge) for _ in range(3)] == [first] * 3
    assert card.charges == 1
    assert transitions_of(store, "order-1") == [("in_flight", "succeeded", "succeed", "worker")]


def test_unknown_error_parks_the_key_and_nothing_runs_it_again(store: Store) -> None:
    eo, card = ExactlyOnce(store), Card()

    def timeout_after_send() -> None:
        card.charge()
        raise TimeoutError("no response from the bank")

    with pytest.raises(EffectIndeterminate, match="TimeoutError"):
        eo.run("order-2", timeout_after_send)
    for _ in range(3):
        with pytest.raises(EffectIndeterminate):
            eo.run("order-2", card.charge)
    assert card.charges == 1
    assert transitions_of(store, "order-2") == [("in_flight", "indeterminate", "park", "worker")]


def test_provable_failure_is_recorded_and_replayed(store: Store) -> None:
    eo = ExactlyOnce(store, classify=not_sent(PermissionError))
    calls = Counter[str]()

    def refused() -> None:
        calls["refused"] += 1
        raise PermissionError("card blocked before sending")

    for _ in range(3):
        with pytest.raises(EffectFailed, match="PermissionError: card blocked") as info:
            eo.run("order-3", refused)
        assert info.value.error_type == "PermissionError"
    assert calls["refused"] == 1


def test_retries_happen_inside_one_lease_then_succeed_or_fail(store: Store) -> None:
    eo = ExactlyOnce(store, classify=not_sent(retry=(ConnectionRefusedError,)), retries=2)
    attempts = Counter[str]()

    def flaky() -> str:
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise ConnectionRefusedError("not sent")
        return "ok"

    assert eo.run("order-4", flaky) == "ok"
    row = eo.outcome("order-4")
    assert row is not None and row.data["attempts"] == 3 and row.data["runs"] == 1
    assert transitions_of(store, "order-4") == [("in_flight", "succeeded", "succeed", "worker")]

    def always_refused() -> None:
        attempts["refused"] += 1
        raise ConnectionRefusedError("not sent")

    with pytest.raises(EffectFailed):
        eo.run("order-5", always_refused)
    assert attempts["refused"] == 3  # 1 + 2 retries, then failed (it provably never happened)


def test_retries_stop_when_the_lease_runs_out(store: Store) -> None:
    clock = FakeClock()
    eo = ExactlyOnce(
        store,
        classify=not_sent(retry=(ConnectionRefusedError,)),
        retries=5,
        lease_seconds=10,
        clock=clock,
    )
    attempts = Counter[str]()

    def slow_refusal() -> None:
        attempts["n"] += 1
        clock.now += 6
        raise ConnectionRefusedError("not sent")

    with pytest.raises(EffectFailed):
        eo.run("order-6", slow_refusal)
    assert attempts["n"] == 2


def test_live_lease_elsewhere_is_in_progress_and_expired_lease_is_parked(store: Store) -> None:
    clock = FakeClock()
    holder = ExactlyOnce(store, clock=clock, lease_seconds=30, worker="holder")
    other = ExactlyOnce(store, clock=clock, lease_seconds=30, worker="other")
    seen: list[str] = []

    def long_call() -> str:
        with pytest.raises(EffectInProgress, match="holder's lease"):
            other.run("order-7", lambda: seen.append("other ran"))
        clock.now += 31  # the holder stalls past its lease
        with pytest.raises(EffectIndeterminate, match="lease of holder expired"):
            other.run("order-7", lambda: seen.append("other ran"))
        return "late result"

    with pytest.raises(EffectIndeterminate, match="lease was lost"):
        holder.run("order-7", long_call)  # fenced: its result is not written
    assert seen == []
    row = holder.outcome("order-7")
    assert row is not None and row.state == "indeterminate" and "result" not in row.data


def test_a_sweeper_parks_abandoned_keys_and_nothing_else(store: Store) -> None:
    clock = FakeClock()
    runs: list[str] = []

    def abandon(key: str, worker: str) -> None:
        """The worker runs the effect, then dies before it stores the result."""
        faulty = FaultyStore(store)

        def effect() -> str:
            runs.append(key)
            faulty.pending = "crash"
            return "charged"

        with pytest.raises(SimulatedCrash):
            ExactlyOnce(faulty, clock=clock, lease_seconds=30, worker=worker).run(key, effect)

    sweeper = ExactlyOnce(store, clock=clock, worker="sweeper")
    sweeper.run("settled", lambda: "ok")
    abandon("old", "w1")
    clock.now += 10
    abandon("newer", "w2")
    clock.now += 25  # the lease of w1 has expired, that of w2 has not
    assert sweeper.park_expired() == ["old"]
    clock.now += 10
    assert sweeper.park_expired(limit=1) == ["newer"]
    assert sweeper.park_expired() == []
    for key, worker in (("old", "w1"), ("newer", "w2")):
        assert transitions_of(store, key) == [("in_flight", "indeterminate", "park", "worker")]
        with pytest.raises(EffectIndeterminate, match=f"lease of {worker} expired"):
            sweeper.run(key, lambda: runs.append("again"))
    sweeper.reclaim("old", by="ops", reason="the charge never reached the bank")
    clock.now += 100  # a reclaimed key has no holder: nothing to expire
    assert sweeper.park_expired() == []
    assert runs == ["old", "newer"] and transitions_of(store, "settled")[0][1] == "succeeded"
    with pytest.raises(MachinesError, match="limit must be between 1 and 10000"):
        sweeper.park_expired(limit=0)


def test_reclaim_runs_again_and_decide_settles(store: Store) -> None:
    eo, card = ExactlyOnce(store, on_indeterminate="gate"), Card()

    def lost() -> None:
        raise TimeoutError("lost")

    with pytest.raises(EffectIndeterminate) as info:
        eo.run("a", lost)
    assert info.value.gate_open
    eo.reclaim("a", by="alice", reason="the API is idempotent on order id")
    assert eo.run("a", card.charge) == {"charge_id": "ch_1"}
    row = eo.outcome("a")
    assert row is not None and row.data["runs"] == 2 and row.data["reclaims"] == 1

    with pytest.raises(EffectIndeterminate):
        eo.run("b", lost)
    eo.decide("b", landed=True, by="bob", reason="seen on the statement", result={"id": 9})
    assert eo.run("b", card.charge) == {"id": 9}

    with pytest.raises(EffectIndeterminate):
        eo.run("c", lost)
    eo.decide("c", landed=False, by="bob", reason="bank confirms no charge")
    with pytest.raises(EffectFailed, match="GateDecision: bob decided it did not land"):
        eo.run("c", card.charge)
    assert card.charges == 1
    assert [t[2] for t in transitions_of(store, "a")] == ["park", "reclaim", "succeed"]
    assert [t[3] for t in transitions_of(store, "b")] == ["worker", "operator"]
    with store.transaction() as tx:
        assert tx.history("outcome", "b")[1].detail == {
            "by": "bob",
            "reason": "seen on the statement",
        }


def test_reclaim_and_decide_only_from_indeterminate(store: Store) -> None:
    eo = ExactlyOnce(store)
    eo.run("done", lambda: 1)
    with pytest.raises(InvalidStateTransition):
        eo.reclaim("done", by="alice", reason="try")
    with pytest.raises(InvalidStateTransition):
        eo.decide("done", landed=False, by="bob", reason="no")
    assert transitions_of(store, "done") == [("in_flight", "succeeded", "succeed", "worker")]


def test_unstorable_result_is_indeterminate_not_lost(store: Store) -> None:
    eo = ExactlyOnce(store)
    with pytest.raises(EffectIndeterminate, match="could not be stored"):
        eo.run("weird", lambda: object())
    row = eo.outcome("weird")
    assert row is not None and row.state == "indeterminate"


def test_interrupt_parks_then_propagates(store: Store) -> None:
    eo = ExactlyOnce(store)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        eo.run("ctrl-c", interrupted)
    row = eo.outcome("ctrl-c")
    assert row is not None and row.state == "indeterminate"


def test_async_run(store: Store) -> None:
    eo, card = ExactlyOnce(store), Card()

    async def charge() -> dict[str, Any]:
        await asyncio.sleep(0)
        return card.charge()

    async def scenario() -> list[Any]:
        first = await eo.arun("async-1", charge)
        return [first, await eo.arun("async-1", charge)]

    first, second = asyncio.run(scenario())
    assert first == second and card.charges == 1


def test_arun_given_a_plain_function_parks_the_key_and_runs_it_once(store: Store) -> None:
    """Outsider batch 17 (b10): a plain function given to ``arun`` ran, then awaiting its
    result raised ``TypeError``, which a classifier that calls TypeError "not sent" retried
    (the charge ran three times) or recorded as failed ("did not happen"). The key is
    parked at once instead, whatever the classifier says."""
    eo = ExactlyOnce(store, classify=not_sent(TypeError, retry=(TypeError,)), retries=2)
    card = Card()
    with pytest.raises(EffectIndeterminate, match="not an awaitable"):
        asyncio.run(eo.arun("sync-1", card.charge))  # type: ignore[arg-type]
    assert card.charges == 1
    row = eo.outcome("sync-1")
    assert row is not None and row.state == "indeterminate"
    with pytest.raises(EffectIndeterminate):
        asyncio.run(eo.arun("sync-1", card.charge))  # type: ignore[arg-type]
    assert card.charges == 1


class BrokenAwaitable:
    """What an effect returns that says it can be awaited and cannot: its ``__await__``
    raises, or gives no iterator."""

    def __init__(self, raises: bool) -> None:
        self.raises = raises

    def __await__(self) -> Any:
        if self.raises:
            raise TypeError("this object cannot be awaited")
        return 42


@pytest.mark.parametrize("raises", [True, False], ids=["raises", "no iterator"])
def test_arun_given_an_awaitable_that_cannot_be_awaited_parks_it_once(
    store: Store, raises: bool
) -> None:
    """Outsider batch 18 (b10 variant): an object whose ``__await__`` raised ``TypeError``
    after ``fn`` ran was judged as the effect's error, and a classifier that retries
    ``TypeError`` ran ``fn`` again. The object's failure is not the effect's: parked."""
    eo = ExactlyOnce(store, classify=not_sent(retry=(TypeError,)), retries=2)
    calls: list[int] = []

    def charge() -> BrokenAwaitable:
        calls.append(1)
        return BrokenAwaitable(raises)

    with pytest.raises(EffectIndeterminate, match="not an awaitable that can be awaited"):
        asyncio.run(eo.arun("broken-1", charge))
    assert calls == [1]


def test_threads_racing_on_the_same_keys(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/race.db")
    keys = [f"k{i}" for i in range(12)]
    ran = Counter[str]()
    ran_lock = threading.Lock()
    seen: dict[str, set[str]] = {k: set() for k in keys}
    in_progress = Counter[str]()
    start = threading.Barrier(6)

    def effect(key: str) -> str:
        with ran_lock:
            ran[key] += 1
        time.sleep(0.002)
        return f"result-{key}"

    def worker(index: int) -> None:
        eo = ExactlyOnce(store, worker=f"w{index}")
        start.wait()
        for key in keys[index % 3 :] + keys[: index % 3]:
            while True:
                try:
                    value = eo.run(key, lambda key=key: effect(key))
                except EffectInProgress:
                    in_progress[key] += 1
                    time.sleep(0.001)
                    continue
                seen[key].add(value)
                break

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    store.close()
    assert ran == Counter({k: 1 for k in keys})
    assert all(values == {f"result-{k}"} for k, values in seen.items())


CHILD = """
import os, sys
from machines.store import open_store
from machines.systems import ExactlyOnce
store = open_store(sys.argv[1])
eo = ExactlyOnce(store, lease_seconds=5, worker="doomed")
def effect():
    open(sys.argv[2], "w").write("charged")  # the side effect happened...
    os._exit(17)                              # ...and the process died before the result
eo.run("payment-1", effect)
"""


def test_process_killed_between_claim_and_result(tmp_path: Path) -> None:
    url, marker = f"sqlite:///{tmp_path}/crash.db", tmp_path / "charged"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 17, done.stderr
    assert marker.read_text() == "charged"

    store = open_store(url)
    soon = ExactlyOnce(store, worker="restarted")
    with pytest.raises(EffectInProgress, match="doomed"):  # its lease is still live
        soon.run("payment-1", lambda: pytest.fail("must not run"))
    later = ExactlyOnce(store, worker="restarted", clock=lambda: time.time() + 60)
    with pytest.raises(EffectIndeterminate, match="lease of doomed expired"):
        later.run("payment-1", lambda: pytest.fail("must not run"))
    with pytest.raises(EffectIndeterminate):
        later.run("payment-1", lambda: pytest.fail("must not run"))
    assert transitions_of(store, "payment-1") == [("in_flight", "indeterminate", "park", "worker")]
    store.close()


def test_classifier_verdicts_are_closed() -> None:
    classify = not_sent(ValueError, retry=(ConnectionRefusedError,))
    assert classify(ValueError()) is Verdict.FAILED
    assert classify(ConnectionRefusedError()) is Verdict.RETRY
    assert classify(TimeoutError()) is Verdict.INDETERMINATE
    assert classify(Exception()) is Verdict.INDETERMINATE


def test_a_person_decides_only_a_parked_key_whatever_the_definition_adds(tmp_path: Path) -> None:
    """Outsider batch 17 (b09): an outcome definition that also lets the operator decide
    from in_flight (an addition the reliance check leaves to its owner) let a person fail a
    key whose worker was running the charge, and the next caller was told it did not
    happen. A person's decision answers only for a key the system parked."""
    import yaml

    from machines.spec.loader import bundled_spec_dir, load

    doc = yaml.safe_load((bundled_spec_dir() / "outcome.yaml").read_text(encoding="utf-8"))
    for entry in doc["transitions"]:
        if entry["trigger"] in ("decide_not_landed", "decide_landed"):
            entry["source"] = ["indeterminate", "in_flight"]
    (tmp_path / "outcome.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    store = open_store("memory://", [load(tmp_path / "outcome.yaml")])
    eo = ExactlyOnce(store)
    store.insert("outcome", "running", data={"owner": "w", "lease_until": 4e9})
    for call in (
        lambda: eo.decide("running", landed=False, by="bob", reason="no"),
        lambda: eo.decide("running", landed=True, by="bob", reason="yes", result=1),
    ):
        with pytest.raises(InvalidStateTransition, match="answers for a key the system parked"):
            call()
    row = eo.outcome("running")
    assert row is not None and (row.state, row.version) == ("in_flight", 1)
