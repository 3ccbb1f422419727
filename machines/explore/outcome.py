"""The exactly-once executor as an explorable model: keys, workers, leases, crashes.

``machines.systems.exactly_once`` keeps one promise: an effect runs at most once per key,
plus once per explicit reclaim, and what a caller was told stays true. This model runs
its protocol over every interleaving of a few workers on a few keys, with every fault the
stateful suite injects: a run that returns, fails before sending, fails in a way worth a
retry, or raises after it may have sent; a crash at any point; a store write that fails;
a lease that expires while its holder still works; a sweeper parking a key whose lease
expired; a caller's reclaim; a person's decision. Every row move goes through
``spec/outcome.yaml`` (``MachineSpec.step``), so a move the definition refuses is not
made. The protocol itself is written out here, as a TLA+ specification would be, because
it lives in the executor's control flow:

- ``run`` claims in one transaction: absent -> insert in_flight under a lease; reclaimed
  (no owner) -> take it; live lease elsewhere -> refuse; expired lease -> park; succeeded,
  failed, indeterminate -> replay, nothing runs;
- the holder's outcome write is fenced: it lands only while the row is still in_flight and
  its own (the row's version is unchanged); otherwise the caller hears "indeterminate";
- an error that may have followed sending parks the key (if even that write fails, the
  expired lease parks it later);
- a sweeper (``park_expired``) parks any key whose lease expired, as a claimer would.

Invariants checked on every state: ``exactly-once`` (the upstream effect ran at most
1 + reclaims times per key), ``acknowledged-outcome-kept`` (a result or a proven failure
returned to a caller is what the key records, forever) and ``failed-means-proven`` (a
worker records ``failed`` only for an effect that did not happen in that claim). The
protocol never asks to move a parked key automatically; that no definition lets it
(``fail-closed-indeterminate``) is ``machines check``'s structural rule. Workers and keys
are interchangeable, which the model uses as a symmetry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from itertools import chain

from machines.errors import InvalidStateTransition, MachinesError
from machines.explore.worlds import (
    ABSENT,
    CLAIMED,
    IDLE,
    REFUSED,
    RETURNED,
    UNSURE,
    Key,
    OutcomeScope,
    Packing,
    Worker,
    World,
)
from machines.spec import MachineSpec

INVARIANTS = ("exactly-once", "acknowledged-outcome-kept", "failed-means-proven")
WHAT = {
    "exactly-once": "the effect ran more often than 1 + the key's reclaims",
    "acknowledged-outcome-kept": "a caller was told an outcome the key no longer records",
    "failed-means-proven": "a worker recorded failed although the effect happened",
}

SCOPES = {
    "small": OutcomeScope(keys=1, workers=2),
    "default": OutcomeScope(),
    "wide": OutcomeScope(keys=2, workers=3),
}
DEFAULT_SCOPES = ("small", "default")

Moves = Callable[[World], Iterator[tuple[str, World]]]
"""Some of the protocol's moves from a world, each with its label."""


class OutcomeModel:
    """``machines.explore.Model`` of ``ExactlyOnce`` on one outcome definition.

    The protocol below is written on ``World`` records (``_moves``: the reference, which
    ``moves`` and so every trace runs). The search's hot path, ``successors``, runs on
    packed ints (``machines.explore.worlds.Packing``): a worker's move reads and writes
    only that worker and the key it calls, a key's own moves only that key, so each move
    is compiled once per (worker, key) pair of values into the int it adds to a world,
    by running the very same protocol methods on a world holding just those two values
    (and refused if it changes anything else). The tests hold ``successors`` to
    ``moves``, state by state.
    """

    name = "exactly-once"

    def __init__(
        self, spec: MachineSpec, scope: OutcomeScope, *, label: str = "", symmetry: bool = True
    ) -> None:
        self.spec = spec
        self.bounds = scope
        self.scope = label or scope.name
        self.symmetry = symmetry
        self._steps: dict[tuple[str, str, str], str | None] = {}
        self.packing = packing = Packing(spec.states, scope, INVARIANTS, symmetry=symmetry)
        self.flag_floor = packing.flag_floor
        self._idle = packing.worker_id[Worker()]
        self._called_key = [packing.key_shift[worker.key - 1] for worker in packing.workers]
        # an idle worker's moves by the keys' bits, a busy one's by its id and its key's;
        # the keys' own moves by their bits; each assembled from ``_compile``'s moves
        self._by_idle: tuple[dict[int, tuple[int, ...]], ...] = tuple(
            {} for _ in range(scope.workers)
        )
        self._by_busy: tuple[dict[int, tuple[int, ...]], ...] = tuple(
            {} for _ in range(scope.workers)
        )
        self._by_keys: dict[int, tuple[int, ...]] = {}
        self._compiled: dict[tuple[int, int | None, int], tuple[int, ...]] = {}

    # -- the Model protocol ---------------------------------------------------------------------

    def initial(self) -> list[int]:
        world = World(
            tuple(Key() for _ in range(self.bounds.keys)),
            tuple(Worker() for _ in range(self.bounds.workers)),
        )
        return [self.packing.encode(world)]

    def successors(self, state: int) -> list[int]:
        if state >= self.flag_floor:
            return []
        packing = self.packing
        keys = state >> packing.key_shift[-1]
        key_mask, worker_mask, key_ids = packing.key_mask, packing.worker_mask, len(packing.keys)
        deltas: list[int] = []
        for w, shift in enumerate(packing.worker_shift):
            wid = state >> shift & worker_mask
            if wid == self._idle:
                found = self._by_idle[w].get(keys)
                if found is None:
                    found = self._by_idle[w][keys] = self._compile_idle(state, w)
            else:
                local = wid * key_ids + (state >> self._called_key[wid] & key_mask)
                found = self._by_busy[w].get(local)
                if found is None:
                    found = self._by_busy[w][local] = self._compile_busy(state, w)
            deltas += found
        found = self._by_keys.get(keys)
        if found is None:
            found = self._by_keys[keys] = self._compile_keys(state)
        deltas += found
        return packing.canonicals(state, deltas)

    def moves(self, state: int) -> list[tuple[str, int]]:
        encode = self.packing.encode
        return [(label, encode(w)) for label, w in self._moves(self.packing.decode(state))]

    def canonical(self, state: int) -> int:
        return self.packing.canonical(state)

    def breaches(self, state: int) -> list[tuple[str, str]]:
        return [(f, WHAT[f]) for f in INVARIANTS if state & self.packing.flag[f]]

    def describe(self, state: int) -> str:
        world = self.packing.decode(state)
        keys = "; ".join(
            f"k{i}: {k.row}"
            + (f" (lease w{k.owner}{', expired' if k.expired else ''})" if k.owner else "")
            + f", ran {k.ran}x"
            + (f", {k.reclaims} reclaim(s)" if k.reclaims else "")
            + (f", caller told {k.told}" if k.told else "")
            for i, k in enumerate(world.keys, 1)
        )
        workers = ", ".join(
            f"w{i}: {w.phase}" + (f" k{w.key}" if w.key else "")
            for i, w in enumerate(world.workers, 1)
        )
        return f"{keys} | {workers}"

    # -- the protocol's moves compiled to int deltas ----------------------------------------------

    def _compile_idle(self, state: int, w: int) -> tuple[int, ...]:
        return tuple(
            chain.from_iterable(
                self._compile(state, k, w, partial(self._claim_moves, w=w, k=k))
                for k in range(self.bounds.keys)
            )
        )

    def _compile_busy(self, state: int, w: int) -> tuple[int, ...]:
        worker = self.packing.decode(state).workers[w]
        moves = partial(self._worker_moves, w=w, worker=worker)
        return self._compile(state, worker.key - 1, w, moves)

    def _compile_keys(self, state: int) -> tuple[int, ...]:
        return tuple(
            chain.from_iterable(
                self._compile(state, k, None, partial(self._key_moves, k=k, key=key))
                for k, key in enumerate(self.packing.decode(state).keys)
            )
        )

    def _compile(self, state: int, k: int, w: int | None, moves: Moves) -> tuple[int, ...]:
        """What each of ``moves`` adds to a world holding ``state``'s key ``k`` and worker
        ``w`` (or key ``k`` alone): found once per pair of values, on a world holding
        nothing else, and refused if it changes anything else."""
        packing = self.packing
        memo = (k, w, state - packing.local(state, k, w))
        found = self._compiled.get(memo)
        if found is not None:
            return found
        world = packing.decode(state)
        alone = World(
            tuple(key if i == k else Key() for i, key in enumerate(world.keys)),
            tuple(worker if j == w else Worker() for j, worker in enumerate(world.workers)),
        )
        before = packing.encode(alone)
        deltas = []
        for label, after in moves(alone):
            moved = packing.encode(after)
            if packing.local(moved, k, w) != packing.local(before, k, w):
                raise MachinesError(
                    f"exactly-once model: '{label}' changes another worker or key; "
                    "the compiled moves assume a move changes only its own"
                )
            deltas.append(moved - before)
        found = self._compiled[memo] = tuple(deltas)
        return found

    # -- what may happen next (the reference) ------------------------------------------------------

    def _moves(self, world: World) -> Iterator[tuple[str, World]]:
        if world.flags:
            return
        for w, worker in enumerate(world.workers):
            if worker.phase == IDLE:
                for k in range(len(world.keys)):
                    yield from self._claim_moves(world, w=w, k=k)
            else:
                yield from self._worker_moves(world, w=w, worker=worker)
        for k, key in enumerate(world.keys):
            yield from self._key_moves(world, k=k, key=key)

    def _claim_moves(self, world: World, *, w: int, k: int) -> Iterator[tuple[str, World]]:
        claimed = self._claim(world, w, k)
        if claimed is not None:
            yield f"w{w + 1} calls run(k{k + 1}): {claimed[0]}", claimed[1]

    def _key_moves(self, world: World, *, k: int, key: Key) -> Iterator[tuple[str, World]]:
        name = f"k{k + 1}"
        if key.row == "in_flight" and key.owner and not key.expired:
            yield f"the lease on {name} expires", _set_key(world, k, key._replace(expired=True))
        swept = self._park_expired(key)
        if swept is not None:
            yield f"a sweeper parks {name} (park_expired)", _set_key(world, k, swept)
        if key.reclaims < self.bounds.reclaims:
            moved = self._move(key, "reclaim", "caller")
            if moved is not None:
                after = moved._replace(
                    owner=0, expired=False, reclaims=key.reclaims + 1, landed=False
                )
                yield f"a caller reclaims {name}", _set_key(world, k, after)
        for trigger in ("decide_landed", "decide_not_landed"):
            moved = self._move(key, trigger, "operator")
            if moved is not None:
                yield f"an operator decides {name}: {trigger}", _set_key(world, k, moved)

    def _worker_moves(self, world: World, *, w: int, worker: Worker) -> Iterator[tuple[str, World]]:
        """The moves of a worker inside a call (not idle), on the key it calls."""
        k = worker.key - 1
        key = world.keys[k]
        name = f"w{w + 1} on k{k + 1}"
        crashed = _set_worker(world, w, Worker())
        yield f"{name}: the process dies", crashed
        if worker.phase == CLAIMED:
            ran = _ran(key, mine=key.row == "in_flight" and key.owner == w + 1)
            yield (
                f"{name}: the effect returns",
                _set(world, k, ran, w, worker._replace(phase=RETURNED)),
            )
            yield (
                f"{name}: the effect dies with the process after it ran",
                _set_key(crashed, k, ran),
            )
            yield (
                f"{name}: the effect fails before sending",
                _set_worker(world, w, worker._replace(phase=REFUSED)),
            )
            if worker.attempt < self.bounds.retries and not key.expired:
                again = worker._replace(attempt=worker.attempt + 1)
                yield f"{name}: a retryable error, tried again", _set_worker(world, w, again)
            else:
                yield (
                    f"{name}: a retryable error with no retry left",
                    _set_worker(world, w, worker._replace(phase=REFUSED)),
                )
            unsure = worker._replace(phase=UNSURE)
            yield f"{name}: an error after sending", _set(world, k, ran, w, unsure)
            yield (
                f"{name}: an error before anything was sent, of unknown kind",
                _set_worker(world, w, unsure),
            )
        elif worker.phase == RETURNED:
            yield from self._record(world, w, k, "succeed", "succeeded", name)
            yield from self._park(world, w, k, f"{name}: storing the result fails; ")
        elif worker.phase == REFUSED:
            yield from self._record(world, w, k, "fail", "failed", name)
            yield from self._park(world, w, k, f"{name}: storing the failure fails; ")
        elif worker.phase == UNSURE:
            yield from self._park(world, w, k, f"{name}: ")

    def _claim(self, world: World, w: int, k: int) -> tuple[str, World] | None:
        key = world.keys[k]
        claimed = Worker(k + 1, CLAIMED, 0)
        if key.row == ABSENT:
            row = Key(self.spec.initial, owner=w + 1, ran=key.ran, reclaims=key.reclaims)
            return "claims it (insert, lease)", _set(world, k, row, w, claimed)
        if key.row != "in_flight":
            return None  # replay: nothing changes
        if key.owner == 0:
            after = key._replace(owner=w + 1, expired=False, landed=False)
            return "takes the reclaimed key", _set(world, k, after, w, claimed)
        parked = self._park_expired(key)
        if parked is None:
            return None  # EffectInProgress: nothing changes
        return "finds the lease expired and parks it", _set_key(world, k, parked)

    def _park_expired(self, key: Key) -> Key | None:
        """What a claimer, or a sweeper, does to a key whose holder's lease ran out."""
        if key.row != "in_flight" or not key.owner or not key.expired:
            return None
        parked = self._move(key, "park", "worker")
        return None if parked is None else parked._replace(owner=0, expired=False)

    def _record(
        self, world: World, w: int, k: int, trigger: str, outcome: str, name: str
    ) -> Iterator[tuple[str, World]]:
        """The fenced outcome write, then the caller is told; a stale claim writes nothing
        and the caller hears indeterminate."""
        key = world.keys[k]
        idle = _set_worker(world, w, Worker())
        if key.row != "in_flight" or key.owner != w + 1:
            yield f"{name}: the write is fenced off (the claim was lost)", idle
            return
        moved = self._move(key, trigger, "worker")
        if moved is None:
            return
        after = moved._replace(owner=0, expired=False, told=outcome)
        flags = set()
        if outcome == "failed" and key.landed:
            flags.add("failed-means-proven")
        yield (
            f"{name}: records {trigger}; the caller is told {outcome}",
            _flag(_set_key(idle, k, after), flags),
        )

    def _park(self, world: World, w: int, k: int, said: str) -> Iterator[tuple[str, World]]:
        key = world.keys[k]
        idle = _set_worker(world, w, Worker())
        yield f"{said}parking fails too; the caller hears indeterminate", idle
        if key.row == "in_flight" and key.owner == w + 1:
            moved = self._move(key, "park", "worker")
            if moved is not None:
                after = moved._replace(owner=0, expired=False)
                yield (
                    f"{said}parks the key; the caller hears indeterminate",
                    _set_key(idle, k, after),
                )

    def _move(self, key: Key, trigger: str, actor: str) -> Key | None:
        """The key after ``trigger`` by ``actor``, if the definition allows it."""
        if key.row == ABSENT:
            return None
        found = self._steps.get((key.row, trigger, actor), "")
        if found == "":
            try:
                found = self.spec.step(key.row, trigger, actor=actor)
            except InvalidStateTransition:
                found = None
            self._steps[(key.row, trigger, actor)] = found
        return None if found is None else key._replace(row=found)


# -- pure helpers on worlds ----------------------------------------------------------------


def _ran(key: Key, *, mine: bool) -> Key:
    """The upstream effect happened; under the key's current claim when ``mine`` (not a
    holder whose claim was parked and taken over meanwhile)."""
    return key._replace(ran=min(key.ran + 1, key.reclaims + 2), landed=key.landed or mine)


def _set_key(world: World, k: int, key: Key) -> World:
    keys = (*world.keys[:k], key, *world.keys[k + 1 :])
    return _judge(world._replace(keys=keys), world.keys[k], key)


def _set_worker(world: World, w: int, worker: Worker) -> World:
    return world._replace(workers=(*world.workers[:w], worker, *world.workers[w + 1 :]))


def _set(world: World, k: int, key: Key, w: int, worker: Worker) -> World:
    return _set_worker(_set_key(world, k, key), w, worker)


def _flag(world: World, flags: set[str]) -> World:
    return world._replace(flags=world.flags | flags) if flags else world


def _judge(world: World, before: Key, after: Key) -> World:
    """The invariants that one key's change can break."""
    flags = set()
    if after.ran > 1 + after.reclaims:
        flags.add("exactly-once")
    if before.told and after.row != before.told:
        flags.add("acknowledged-outcome-kept")
    return _flag(world, flags)
