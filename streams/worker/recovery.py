"""Recovery by the run store: a worker reads its partitions' run states straight from the
changelog, and folds a partition's events only once its states are loaded.

Faust's table recovery read the changelog one record at a time through its recovery
loop (about 4,400 records a second here, its main thread busy on records), and paused
every partition of the worker while it did. The worker no longer has a Faust table for
its runs: the run store (run_store.py) holds them in a dict of its own, writes their
changelog itself, and this module reads it back:

- **When.** The assignment of events partitions is known (rebalance.py calls
  `assigned`): each partition the worker did not hold is loaded; a partition it held
  before the rebalance and still holds is kept as it is (its states in memory are the
  newest, written by this worker; nothing else wrote them in between), counted in
  `loopwarden_partitions_kept`; a partition it held and lost is dropped. An event of
  a partition that is neither held nor being loaded starts its load too, so no event
  is ever folded without its partition's states.
- **How.** One consumer without a group per load: the changelog partitions assigned,
  their end offsets taken then, read from the beginning in batched fetches up to those
  offsets, the last record of each run winning and a tombstone dropping the run. The
  values stay the encoded bytes; a run's state is decoded when its next event comes
  (`run_store.read_stored`), so the load does nothing per record but keep it.
- **Meanwhile.** The partitions already held keep folding; the batch loop holds the
  events of a loading partition back, in order, and folds them once it is loaded.
  /health says `recovering` with the records left to read.

A load that a newer assignment overtook (the partition moved on meanwhile) is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..kafka import ranges
from ..kafka.settings import Settings
from .metrics import Metrics
from .run_store import RunStore

log = logging.getLogger("loopwarden.worker")

FETCH_BYTES = 32 << 20  # a fetch's size: the changelog is read in large batches


async def read_partitions(
    settings: Settings, topic: str, partitions: Iterable[int], left: Callable[[int], None] | None = None
) -> dict[int, dict[bytes, bytes]]:
    """The live records of `topic`'s partitions, up to their end offsets taken now, by
    partition: the last value of each key, tombstoned keys absent. `left(n)` is told the
    records still to read as the read goes on."""
    return await ranges.read_latest(
        settings,
        topic,
        partitions,
        left,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_BYTES,
        max_poll_records=100_000,
    )


class Recovery:
    """Which events partitions are loaded, being loaded or unknown, and the loads."""

    def __init__(self, settings: Settings, runs: RunStore, metrics: Metrics) -> None:
        self.settings = settings
        self.runs = runs
        self.metrics = metrics
        # Called when a load is done: the batch loop, which holds the partitions' events
        # meanwhile, sets it when it is made (held events can go).
        self.on_loaded: Callable[[], None] = lambda: None
        self.held: set[int] = set()  # partitions whose states are in the store
        self.loading: dict[int, int] = {}  # partition -> the generation of its load
        self.records_left = 0
        self.generation = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def ready(self, partition: int) -> bool:
        """Whether events of the partition can be folded; starts its load if unknown."""
        if partition in self.held:
            return True
        if partition not in self.loading:
            self._start([partition])
        return False

    def recovering(self) -> bool:
        return bool(self.loading)

    def assigned(self, partitions: Iterable[int]) -> None:
        """The new assignment of events partitions: keep, drop, load."""
        new = set(partitions)
        self.generation += 1
        kept = self.held & new
        gone = (self.held | set(self.loading)) - new
        if kept:
            self.metrics.partitions_kept.inc(len(kept))
        if gone:
            self.held -= gone
            for p in gone:
                self.loading.pop(p, None)
            dropped = self.runs.drop_partitions(gone)
            log.info("dropped the run states of partitions %s (%d runs)", sorted(gone), dropped)
        todo = sorted(new - self.held - set(self.loading))
        if todo:
            self._start(todo)

    def _start(self, partitions: list[int]) -> None:
        gen = self.generation
        for p in partitions:
            self.loading[p] = gen
        task = asyncio.ensure_future(self._load(partitions, gen))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load(self, partitions: list[int], gen: int) -> None:
        t0 = time.monotonic()

        def left(n: int) -> None:
            self.records_left = n

        while True:
            try:
                records = await read_partitions(self.settings, self.settings.changelog_topic, partitions, left)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broker that does not answer: the partitions wait, and we try again
                log.warning("cannot read the run states of partitions %s yet: %r", partitions, exc)
                await asyncio.sleep(1.0)
        mine = [p for p in partitions if self.loading.get(p) == gen]  # the others moved on while we read
        n = 0
        for p in mine:
            n += self.runs.adopt(records[p])
            del self.loading[p]
            self.held.add(p)
        self.records_left = 0
        self.metrics.partitions_loaded.inc(len(mine))
        self.metrics.states_loaded.inc(n)
        log.warning("loaded the run states of partitions %s: %d runs in %.2fs", mine, n, time.monotonic() - t0)
        self.on_loaded()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Gate:
    """The events of partitions whose states are not loaded yet, held back in the order
    they came, per partition, until their load is done (`release`). A partition the
    worker lost meanwhile has its held events forgotten (never acknowledged: its next
    owner folds them)."""

    def __init__(self, recovery: Recovery) -> None:
        self.recovery = recovery
        self.held: dict[int, list[tuple[Any, float | None]]] = {}
        self.count = 0

    def admit(self, event: Any, arrival: float | None) -> bool:
        """True: fold it now. False: held (its partition's load is started if need be)."""
        p = event.message.partition
        if p in self.recovery.held:
            return True
        self.recovery.ready(p)
        self.held.setdefault(p, []).append((event, arrival))
        self.count += 1
        return False

    def release(self) -> list[tuple[Any, float | None]]:
        """The held events of every partition loaded now, oldest first per partition;
        those of partitions no longer assigned are dropped."""
        out: list[tuple[Any, float | None]] = []
        for p in list(self.held):
            if p in self.recovery.held:
                out += self.held.pop(p)
            elif p not in self.recovery.loading:
                del self.held[p]
        self.count = sum(len(v) for v in self.held.values())
        return out
