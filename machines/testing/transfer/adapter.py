"""What the transfer suite needs from an engine (``TransferAdapter``), and the reference
engine behind it (``ReferenceTransfer``: two ``TransferEngine`` instances on one store).

Every method of the contract is required: a subclass missing one fails at its ``class``
statement, naming it and its duty. The reference engines run on a ``FaultyStore`` (a write
fails or the process dies on demand), seen through a wrapper that announces every
committed change of a request's reservation to the venue, as a limits service would hear
of it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from machines.errors import InvalidArgument
from machines.spec.jsonvalue import describe
from machines.store import open_store
from machines.systems.transfer import TransferEngine
from machines.testing._harness.stores import FaultyStore, Specs, StoreWatch
from machines.testing.contract import Adapter
from machines.testing.coverage import Coverage
from machines.testing.faults import Fault
from machines.testing.transfer.history import EngineHistory
from machines.testing.transfer.venue import Venue
from machines.testing.transfer.watch import SUBMIT_TIMEOUT as SUBMIT_TIMEOUT
from machines.testing.verdict import Move

ENGINES = ("engine-a", "engine-b")
"""The engine instances the suite steps: they share one storage and step the same requests."""


class TransferAdapter(Adapter):
    """What the suite needs from a transfer engine. Every method is required: a subclass
    missing one fails at its ``class`` statement, naming it and its duty.

    Build the engine in ``TransferSuite.make_adapter(venue)`` so that it calls ``venue``
    for every plan node whose executor is ``"venue"``, delivers every callback to
    ``venue.callback(name, request_id, payload)``, and announces the end of every
    request's reservation to ``venue.reservation(request_id, "released" | "consumed")``
    once committed (the reservation is held from ``submit``; a real engine tells its
    limits service here): that is what the suite judges by. An engine that never
    announces its reservations fails at the first request that ends.
    Nodes whose executor is ``"gate"`` are manual gates (names start with ``manual_``),
    passed by the ``complete_manual`` operation, never by the venue; an engine that hands
    gates to an executor uses ``venue.gate``. Two engine instances (``ENGINES``) share
    one storage and step the same requests."""

    @abstractmethod
    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        """Perform one public operation by name on the request, as ``TransferEngine`` names
        them: ``submit`` (``plan=``), ``validate``, ``request_approval``, ``approve``,
        ``reject``, ``expire``, ``start``, ``fail_before_start``, ``cancel``, ``resume``,
        ``confirm_failed``, ``confirm_completed``, ``complete_manual``, ``sign``,
        ``refuse_signature``, ``retry``, ``skip``, ``reconcile`` (arguments: see
        ``OPERATIONS``). A refusal raises a ``machines.MachinesError`` (any subclass)
        having written nothing; a store fault raises what ``fail_next_write`` asked."""

    @abstractmethod
    def step(self, request_id: str, engine: str) -> None:
        """Advance the request once as engine instance ``engine`` (one of ``ENGINES``):
        each node that can move makes at most one move and one venue call."""

    @abstractmethod
    def request_state(self, request_id: str) -> str | None:
        """The request's state (a state of the bundled ``request`` definition), or None
        if the engine does not know the request. Used to choose what to do, and taken as
        your implementation's own word that a request ended: then its end must have been
        announced (``reservation-with-the-end``), and a request it no longer knows breaks
        ``request-kept``. It is never taken as proof that a promise was kept."""

    @abstractmethod
    def node_states(self, request_id: str) -> dict[str, str]:
        """The request's nodes: name -> state. Used to choose what to do, never to judge."""

    @abstractmethod
    def history(self, request_id: str) -> EngineHistory | None:
        """Every move the engine recorded for the request and each of its nodes, oldest
        first (``EngineHistory`` of ``Move``), judged as legal chains of the bundled
        ``request`` and ``node`` definitions. Return None if the engine keeps no history:
        the suite then cannot judge it (nor see a node given up before its request ends)."""

    @abstractmethod
    def fingerprint(self) -> object:
        """Anything that changes whenever the engine writes (a dump of its storage, or a
        write counter): a refused operation must leave it equal."""

    @abstractmethod
    def advance_clock(self, seconds: float) -> None:
        """Move the engine's clock on; past ``SUBMIT_TIMEOUT`` a submit that never reported
        back must be declared unknown, never resent."""

    @abstractmethod
    def fail_next_write(self, how: Fault | None) -> None:
        """Make the engine's next storage write raise ``StoreError`` (``"error"``) or die
        with ``SimulatedCrash`` (``"crash"``), nothing of it written; None clears. An
        engine without a storage to break writes an explicit no-op: the suite then cannot
        test what a crash or a failed write leaves behind."""

    @abstractmethod
    def check(self) -> list[str]:
        """The implementation's own consistency checks, each problem described (``[]``
        when there is nothing to add): an extra, never the oracle."""


@dataclass
class ReferenceTransfer(TransferAdapter):
    """Two ``TransferEngine`` instances sharing one faulty memory (or given) store."""

    venue: Venue
    url: str = "memory://"
    coverage: Coverage | None = None
    specs: Specs = None
    now: float = 1_000.0
    store: FaultyStore = field(init=False)
    watch: StoreWatch = field(init=False)
    engines: dict[str, TransferEngine] = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.venue, Venue):
            raise InvalidArgument(
                f"ReferenceTransfer: venue must be a Venue, not {describe(self.venue)}"
            )
        if self.coverage is not None and not isinstance(self.coverage, Coverage):
            raise InvalidArgument(
                f"ReferenceTransfer: coverage must be a Coverage, not {describe(self.coverage)}"
            )
        self.store = FaultyStore(open_store(self.url, self.specs))
        self.watch = StoreWatch(self.store, self.coverage)
        announcing = _Reservations(self.store, self.venue)
        self.engines = {
            name: TransferEngine(
                announcing,  # type: ignore[arg-type]
                {"venue": self.venue, "gate": self.venue.gate},
                self.venue.callbacks,
                clock=lambda: self.now,
                engine_id=name,
                submit_timeout=SUBMIT_TIMEOUT,
            )
            for name in ENGINES
        }

    def operate(self, request_id: str, operation: str, **arguments: Any) -> None:
        getattr(self.engines[ENGINES[0]], operation)(request_id, **arguments)

    def step(self, request_id: str, engine: str) -> None:
        self.engines[engine].step(request_id)

    def request_state(self, request_id: str) -> str | None:
        with self.store.transaction() as tx:
            row = tx.get("request", request_id)
        return None if row is None else row.state

    def node_states(self, request_id: str) -> dict[str, str]:
        with self.store.transaction() as tx:
            return {row.data["name"]: row.state for row in tx.scope("node", request_id)}

    def history(self, request_id: str) -> EngineHistory | None:
        with self.store.transaction() as tx:
            request = tx.history("request", request_id)
            nodes = {
                row.data["name"]: tx.history("node", row.key)
                for row in tx.scope("node", request_id)
            }
        return EngineHistory(
            [Move(e.source, e.trigger, e.dest, e.actor) for e in request],
            {
                name: [Move(e.source, e.trigger, e.dest, e.actor) for e in events]
                for name, events in nodes.items()
            },
        )

    def fingerprint(self) -> object:
        with self.store.transaction() as tx:
            return [
                (row.machine, row.key, row.version, row.data)
                for machine in self.store.specs()
                for row in tx.rows(machine)
            ]

    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    def fail_next_write(self, how: Fault | None) -> None:
        self.store.pending = how

    def check(self) -> list[str]:
        return self.watch.check()


class _Reservations:
    """The reference engine's store, announcing to the venue every committed change of a
    request's ``reservation`` (the engine keeps it on the request row; the adapter is its
    limits service)."""

    def __init__(self, store: FaultyStore, venue: Venue) -> None:
        self.store, self.venue = store, venue

    def specs(self) -> Any:
        return self.store.specs()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        changed: dict[str, str] = {}
        with self.store.transaction() as tx:
            yield _Watched(tx, changed)
        for key, what in changed.items():
            if what in ("released", "consumed"):
                self.venue.reservation(key, what)


class _Watched:
    def __init__(self, tx: Any, changed: dict[str, str]) -> None:
        self._tx, self._changed = tx, changed

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._tx, name)
        if name not in ("move", "update"):
            return attribute

        def write(row: Any, *args: Any, **kwargs: Any) -> Any:
            after = attribute(row, *args, **kwargs)
            if row.machine == "request":
                was, now = row.data.get("reservation"), after.data.get("reservation")
                if was != now and isinstance(now, str):
                    self._changed[row.key] = now
            return after

        return write
