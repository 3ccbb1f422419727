"""The exactly-once model's worlds: keys and workers as records, and packed into one int.

``machines.explore.outcome`` writes the executor's protocol as moves on these records,
readable, and the reference every trace is replayed on. The search runs on ints instead
(``Packing``): every value a key or a worker can hold in a scope is listed up front, in
sorted order, so a value's rank is its id and a world is its ids side by side, keys
first, then workers, then one bit per broken invariant on top. Ints then compare as the
worlds' tuples do, so the least relabelling of a world (workers and keys are
interchangeable), its canonical representative, is the least of a few sums of table
lookups: the very world a comparison of the tuples would pick.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import getitem
from typing import NamedTuple

from machines.errors import MachinesError

ABSENT = "absent"
IDLE, CLAIMED, RETURNED, REFUSED, UNSURE = "idle", "claimed", "returned", "refused", "unsure"
"""Worker phases: no call; holding a claim; the effect returned; the effect raised an error
proving it did not happen; the effect raised after it may have happened."""
PHASES = (IDLE, CLAIMED, RETURNED, REFUSED, UNSURE)
TOLD = ("", "failed", "succeeded")
"""What a caller of a key can have been told: nothing yet, or an outcome the key recorded."""


class Key(NamedTuple):
    row: str = ABSENT  # an outcome state, or absent
    owner: int = 0  # the lease holder (1-based worker), 0 for none
    expired: bool = False  # the lease ran out (the fake clock jumped)
    ran: int = 0  # times the upstream effect happened
    reclaims: int = 0
    landed: bool = False  # the effect happened under the current claim
    told: str = ""  # the outcome a caller was given: succeeded / failed / ""


class Worker(NamedTuple):
    key: int = 0  # 1-based key of its current call, 0 when idle
    phase: str = IDLE
    attempt: int = 0


class World(NamedTuple):
    keys: tuple[Key, ...]
    workers: tuple[Worker, ...]
    flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class OutcomeScope:
    keys: int = 2
    workers: int = 2
    reclaims: int = 1  # how many reclaims per key the scope allows
    retries: int = 1  # the executor's ``retries``

    @property
    def name(self) -> str:
        return ", ".join(
            _count(n, word)
            for n, word in (
                (self.keys, "key"),
                (self.workers, "worker"),
                (self.reclaims, "reclaim"),
                (self.retries, "retry"),
            )
        )


def _count(n: int, word: str) -> str:
    plural = word[:-1] + "ies" if word.endswith("ry") else word + "s"
    return f"{n} {word if n == 1 else plural}"


class Packing:
    """The worlds of one scope, over one outcome definition's rows, as ints.

    ``key_shift[i]`` and ``worker_shift[j]`` place key ``i`` and worker ``j``; a world
    whose int is at or above ``flag_floor`` breaks an invariant (``flag`` gives its bit).
    """

    def __init__(
        self, rows: Iterable[str], scope: OutcomeScope, flags: Sequence[str], *, symmetry: bool
    ) -> None:
        keys, workers = scope.keys, scope.workers
        self.keys = sorted(
            Key(*fields)
            for fields in itertools.product(
                (ABSENT, *rows),
                range(workers + 1),
                (False, True),
                range(scope.reclaims + 3),  # ran: at most 1 + reclaims, plus the breach
                range(scope.reclaims + 1),
                (False, True),
                TOLD,
            )
        )
        self.workers = sorted(
            Worker(*fields)
            for fields in itertools.product(range(keys + 1), PHASES, range(scope.retries + 1))
        )
        self.key_id = {key: i for i, key in enumerate(self.keys)}
        self.worker_id = {worker: i for i, worker in enumerate(self.workers)}
        key_bits = (len(self.keys) - 1).bit_length()
        worker_bits = (len(self.workers) - 1).bit_length()
        self.key_mask, self.worker_mask = (1 << key_bits) - 1, (1 << worker_bits) - 1
        self.worker_shift = tuple((workers - 1 - j) * worker_bits for j in range(workers))
        self.key_shift = tuple(
            workers * worker_bits + (keys - 1 - i) * key_bits for i in range(keys)
        )
        self.flag_floor = 1 << (keys * key_bits + workers * worker_bits)
        self.flag = {name: self.flag_floor << i for i, name in enumerate(flags)}
        self._relabellings = self._relabelling_tables(keys, workers) if symmetry else []
        self._workers_mask = (1 << (workers * worker_bits)) - 1
        self._canonical: dict[int, int] = {}
        self._by_keys: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._by_workers: dict[int, list[int]] = {}

    def encode(self, world: World) -> int:
        try:
            state = sum(self.flag[name] for name in world.flags)
            for shift, key in zip(self.key_shift, world.keys, strict=True):
                state |= self.key_id[key] << shift
            for shift, worker in zip(self.worker_shift, world.workers, strict=True):
                state |= self.worker_id[worker] << shift
        except KeyError as missing:
            raise MachinesError(
                f"the exactly-once model reached {missing}, outside its scope's values"
            ) from None
        return state

    def decode(self, state: int) -> World:
        return World(
            tuple(self.keys[state >> shift & self.key_mask] for shift in self.key_shift),
            tuple(self.workers[state >> shift & self.worker_mask] for shift in self.worker_shift),
            frozenset(name for name, bit in self.flag.items() if state & bit),
        )

    def canonical(self, state: int) -> int:
        """The least relabelling of workers and keys (they are interchangeable), or
        ``state`` itself without the symmetry."""
        if not self._relabellings:
            return state
        found = self._canonical.get(state)
        if found is None:
            found = self._canonical[state] = self.least(state)
        return found

    def canonicals(self, state: int, deltas: list[int]) -> list[int]:
        """``canonical(state + delta)`` for each delta: the search's hot path."""
        if not self._relabellings:
            return [state + delta for delta in deltas]
        cache, least = self._canonical, self.least
        out = []
        for delta in deltas:
            raw = state + delta
            found = cache.get(raw)
            if found is None:
                found = cache[raw] = least(raw)
            out.append(found)
        return out

    def least(self, state: int) -> int:
        """``canonical`` without its cache. The keys' bits are above the workers', so the
        least relabelling is among those that make the keys' part least (found once per
        keys' bits), and the least of their workers' parts (each relabelling's, once per
        workers' bits) settles it."""
        body = state & (self.flag_floor - 1)
        keys, workers = body >> self.key_shift[-1], body & self._workers_mask
        by_keys = self._by_keys.get(keys)
        if by_keys is None:
            ids = [body >> shift & self.key_mask for shift in self.key_shift]
            parts = [sum(map(getitem, part, ids)) for part, _ in self._relabellings]
            lowest = min(parts)
            by_keys = self._by_keys[keys] = (
                lowest,
                tuple(i for i, part in enumerate(parts) if part == lowest),
            )
        by_workers = self._by_workers.get(workers)
        if by_workers is None:
            ids = [body >> shift & self.worker_mask for shift in self.worker_shift]
            by_workers = self._by_workers[workers] = [
                sum(map(getitem, part, ids)) for _, part in self._relabellings
            ]
        lowest, ties = by_keys
        if len(ties) == 1:
            return state - body + lowest + by_workers[ties[0]]
        return state - body + lowest + min(map(by_workers.__getitem__, ties))

    def local(self, state: int, key: int, worker: int | None) -> int:
        """The bits of ``state`` outside key ``key``, worker ``worker`` and the flags: what
        a move of that worker on that key (or of the key alone) must leave as it was."""
        mask = self.flag_floor - 1
        mask &= ~(self.key_mask << self.key_shift[key])
        if worker is not None:
            mask &= ~(self.worker_mask << self.worker_shift[worker])
        return state & mask

    def _relabelling_tables(
        self, keys: int, workers: int
    ) -> list[tuple[list[list[int]], list[list[int]]]]:
        """Per relabelling (key ``i`` becomes ``kp[i]``, worker ``j`` becomes ``wp[j]``):
        for each key position, every key id's renamed id (its owner renamed) shifted to its
        new place; the same for each worker position (its key renamed)."""
        keys_under = {
            wp: [
                self.key_id[k._replace(owner=wp[k.owner - 1] + 1) if k.owner else k]
                for k in self.keys
            ]
            for wp in itertools.permutations(range(workers))
        }
        tables = []
        for kp in itertools.permutations(range(keys)):
            workers_under = [
                self.worker_id[w._replace(key=kp[w.key - 1] + 1) if w.key else w]
                for w in self.workers
            ]
            for wp, renamed_keys in keys_under.items():
                key_parts = [
                    [renamed << self.key_shift[kp[i]] for renamed in renamed_keys]
                    for i in range(keys)
                ]
                worker_parts = [
                    [renamed << self.worker_shift[wp[j]] for renamed in workers_under]
                    for j in range(workers)
                ]
                tables.append((key_parts, worker_parts))
        return tables
