"""The worker's run states: one class that loads, stages and stores them.

The run states live in a dict of the worker's own, and on a changelog topic (compacted,
keyed by run id, one partition per events partition, `<app id>-runs-changelog`: the name
Faust gave it while a Faust table held the runs, so existing deployments keep their
states). Faust has no table for them any more: `RunStore` does what a table did, and
recovery.py reads the changelog back when the worker takes a partition over:

- **Writes.** Faust produces one changelog record per `table[key] = value`, one
  `send` at a time (tens of microseconds each) and for every write, however often a
  run changes. Here a run's state is staged, and written once per flush interval, in
  explicit produce batches of a producer of its own (benchmarks.latency_stages times
  the flushes). The record goes to the partition of the run's events, with no
  partitioner to run.
- **Reads after recovery.** Recovery puts the changelog's raw bytes in the store
  (`adopt`); a RunState the fold wrote is stored as the object. `load` takes either.
- **Ended runs.** A run that ended is kept as an ended record (`ENDED`, then the
  offset of its `run_end`, then the state just before it), and deleted by a tombstone
  only once Faust has surely committed the `run_end` (`tombstone_delay` after the
  flush that acknowledged it). Until then a restarted worker that replays the run's
  last events judges them on that state, as the first time; a later event of the run
  id starts a new run. A tombstone written at once would make the replayed events
  start a new run, with other decisions.
  The ended record also stays in the store until that tombstone, so the same worker,
  handed the run's last events again (Faust seeks a partition back to its committed
  offset after a recovery or a rebalance, and may deliver records it had prefetched
  first), answers them as the first time too. An ended record read back from the
  changelog (its writer stopped before the tombstone) gets its tombstone once this
  worker has folded past its run_end (`evict_idle`).
- **Idle runs** (semantics.md section 7): `evict_idle` drops the runs idle in event
  time for more than twice the config's idle timeout, with a tombstone (no decision
  changes: the run's next event would start it over anyway).

Ordering: `checkpoint()` takes what is staged in one step (states are immutable, so
that is a snapshot); the caller writes it (`write`), waits until it is durable,
acknowledges the input it covers, then calls `committed` with the time. A state is
therefore never stored behind the input acknowledged for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, NamedTuple, Protocol

from detectors import RunState, decode_state, encode_state

from ..kafka.producer import OutRecord

log = logging.getLogger("loopwarden.worker")

# A changelog record of a run that has ended: this prefix (a byte msgpack never starts
# with), the offset of its run_end (8 bytes, big-endian), then the run's state just
# before the run_end.
ENDED = b"\xc1"


def ended_record(state: RunState, run_end_offset: int) -> bytes:
    return ENDED + run_end_offset.to_bytes(8, "big", signed=True) + encode_state(state)


def read_stored(raw: RunState | bytes | None, offset: int) -> RunState | None:
    """The state a stored value gives an event at `offset`: an ended run's state for
    the events up to its run_end, none after it. Raises for an unreadable record."""
    if raw is None or isinstance(raw, RunState):
        return raw
    if raw[:1] == ENDED:
        if offset > int.from_bytes(raw[1:9], "big", signed=True):
            return None
        return decode_state(raw[9:])
    return decode_state(raw)


class Sink(Protocol):
    """Where changelog records go (the worker's BatchProducer; a list in tests)."""

    async def send(self, records: Iterable[OutRecord]) -> asyncio.Future[Any]: ...


class Checkpoint(NamedTuple):
    """What one flush stores: the staged states (an ended run as its record), and the
    tombstones due."""

    staged: dict[bytes, tuple[int, RunState | bytes]]  # run key -> (partition, state or record)
    tombstones: list[OutRecord]


class RunStore:
    def __init__(
        self,
        data: Callable[[], MutableMapping[bytes, Any]],
        changelog_topic: str,
        sink: Sink,
        partition_of: Callable[[bytes], int | None],
        idle_timeout_ms: int,
        tombstone_delay: float = 6.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.data = data  # the table's store, as Faust has it now (it changes on assignment)
        self.topic = changelog_topic
        self.sink = sink
        self.partition_of = partition_of  # a stored run's partition, for runs not staged here
        self.idle_timeout_ms = idle_timeout_ms
        self.tombstone_delay = tombstone_delay
        self.clock = clock
        # run key -> (its partition, the state to store, or an ended run's record)
        self._staged: dict[bytes, tuple[int, RunState | bytes]] = {}
        self._tombstones: dict[bytes, tuple[float, int]] = {}  # run key -> (due from, partition)
        self.newest_ts: dict[int, int] = {}  # partition -> the newest event `ts` folded from it
        self.newest_offset: dict[int, int] = {}  # partition -> the highest offset folded from it
        self.evicted = 0

    # -- the fold's side ------------------------------------------------------------

    def load(self, key: bytes, offset: int) -> RunState | None:
        """A run's state for an event at `offset` (the fold's loader). A record that
        cannot be read (corrupt, or from a newer worker) is dropped, loudly: it must
        not stop the worker."""
        try:
            return read_stored(self.data().get(key), offset)
        except Exception as exc:
            log.error("dropping unreadable state of run %r: %s", key, exc)
            return None

    def stage(
        self, key: bytes, partition: int, state: RunState | None, ended: tuple[RunState, int] | None = None
    ) -> None:
        """A run's new state (None: it ended; `ended` = its state before the run_end and
        the run_end's offset) into the store at once, and into the next checkpoint."""
        store = self.data()
        record = ended_record(*ended) if ended is not None else None
        if record is not None:
            # An ended run stays in the store as its ended record, the value the changelog
            # gets, until its tombstone: the consumer may deliver this worker the run's
            # last events again (Faust seeks back to the committed offset after a
            # recovery or a rebalance), and they must be answered as the first time,
            # exactly as a restarted worker would answer them.
            store[key] = record
        elif state is None:
            store.pop(key, None)
        else:
            store[key] = state
        self._tombstones.pop(key, None)  # a new run took the key: no tombstone
        self._staged[key] = (partition, record if record is not None else state)  # type: ignore[assignment]

    def saw(self, partition: int, ts: int) -> None:
        """The newest event time folded from a partition (idle eviction's clock)."""
        if ts > self.newest_ts.get(partition, ts - 1):
            self.newest_ts[partition] = ts

    def folded(self, offsets: dict[int, int]) -> None:
        """The last offset of each partition in a batch just folded (ended runs read back
        from the changelog get their tombstones once the worker is past their run_end)."""
        newest = self.newest_offset
        for part, offset in offsets.items():
            if offset > newest.get(part, -1):
                newest[part] = offset

    # -- recovery's side (recovery.py) ------------------------------------------------

    def adopt(self, records: dict[bytes, bytes]) -> int:
        """The states read back from the changelog for a partition this worker takes
        over, as their encoded bytes (decoded when their run's next event comes). A run
        this worker has touched since is newer than its record and stays. Returns how
        many were taken."""
        store = self.data()
        n = 0
        for key, value in records.items():
            if key not in store and key not in self._staged:
                store[key] = value
                n += 1
        return n

    def drop_partitions(self, partitions: set[int]) -> int:
        """Forget the states of partitions this worker no longer owns (their next owner
        reads them from the changelog); what is staged for them is still written."""
        store = self.data()
        gone = [k for k in store if self.partition_of(k) in partitions]
        for key in gone:
            del store[key]
        return len(gone)

    def __len__(self) -> int:
        return len(self.data())

    # -- the flush's side -----------------------------------------------------------

    def pending(self) -> bool:
        return bool(self._staged)

    def tombstones_due(self, hurry: bool) -> bool:
        if not self._tombstones:
            return False
        return hurry or self.clock() - min(t for t, _ in self._tombstones.values()) >= self.tombstone_delay

    def checkpoint(self, hurry: bool = False) -> Checkpoint:
        """Take what is staged, and the tombstones due (all of them when `hurry`: the
        worker stops or rebalances, and Faust commits right after)."""
        staged, self._staged = self._staged, {}
        now = self.clock()
        due = [k for k, (t, _) in self._tombstones.items() if hurry or now - t >= self.tombstone_delay]
        store = self.data()
        for key in due:  # the run_end is surely committed: its ended record leaves the store too
            value = store.get(key)
            if isinstance(value, bytes) and value[:1] == ENDED:
                del store[key]
        tombstones = [OutRecord(self.topic, key, None, None, self._tombstones.pop(key)[1]) for key in due]
        return Checkpoint(staged, tombstones)

    async def write(self, cp: Checkpoint) -> asyncio.Future[Any] | None:
        """Queue a checkpoint's records on the sink; the future is done once all are
        durable. Encodes in chunks, so the fold loop goes on in between."""
        out = []
        for i, (key, (part, state)) in enumerate(cp.staged.items()):
            value = state if isinstance(state, bytes) else encode_state(state)
            out.append(OutRecord(self.topic, key, value, None, part))
            if i % 64 == 63:
                await asyncio.sleep(0)
        out.extend(cp.tombstones)
        if not out:
            return None
        return await self.sink.send(out)

    def committed(self, cp: Checkpoint) -> None:
        """A checkpoint is durable and the input it covers acknowledged: its ended runs
        get their tombstones `tombstone_delay` from now."""
        now = self.clock()
        for key, (part, state) in cp.staged.items():
            if isinstance(state, bytes):
                self._tombstones[key] = (now, part)

    async def close(self) -> None:
        """The worker stops: every scheduled tombstone goes out now (its run_end is in
        the offsets the stop commits)."""
        if self._tombstones:
            records = [OutRecord(self.topic, k, None, None, p) for k, (_, p) in self._tombstones.items()]
            self._tombstones.clear()
            await (await self.sink.send(records))

    # -- idle runs --------------------------------------------------------------------

    async def evict_idle(self, chunk: int = 1000) -> int:
        """Drop the runs idle for more than twice the idle timeout in event time: the
        newest `ts` folded from the run's partition against the run's last `ts`. Works
        in chunks over a snapshot of the keys, so the fold loop goes on in between;
        their tombstones go out with the next checkpoint. Returns how many."""
        limit = 2 * self.idle_timeout_ms
        store = self.data()
        keys = list(store.keys())
        n = 0
        for i in range(0, len(keys), chunk):
            await asyncio.sleep(0)
            for key in keys[i : i + chunk]:
                value = store.get(key)
                if value is None or key in self._staged or key in self._tombstones:
                    continue  # touched since the snapshot, or already on its way out
                if isinstance(value, bytes) and value[:1] == ENDED:
                    self._recovered_end(key, value)
                    continue
                last, part = self._last_ts(key, value)
                if last is None or part is None:
                    continue
                newest = self.newest_ts.get(part)
                if newest is not None and newest - last > limit:
                    del store[key]
                    self._tombstones[key] = (float("-inf"), part)  # due at the next checkpoint
                    n += 1
        self.evicted += n
        return n

    def _recovered_end(self, key: bytes, value: bytes) -> None:
        """An ended record no tombstone is scheduled for: read back from the changelog,
        written by a worker that stopped before its tombstone was due. Once this worker
        has folded past the record's run_end, the record gets its tombstone
        `tombstone_delay` from now, as one ended here: by then that offset is committed."""
        part = self.partition_of(key)
        if part is not None and self.newest_offset.get(part, -1) > int.from_bytes(value[1:9], "big", signed=True):
            self._tombstones[key] = (self.clock(), part)

    def _last_ts(self, key: bytes, value: Any) -> tuple[int | None, int | None]:
        """(the run's last `ts`, its partition) for a stored value; an ended run is
        on its way out already."""
        if isinstance(value, RunState):
            state = value
        elif isinstance(value, bytes) and value[:1] != ENDED:
            try:
                state = decode_state(value)
            except Exception:
                return None, None
        else:
            return None, None
        return state.last_ts, self.partition_of(key)
