"""What the worker's agent hands its events to: batches, output, state flushes, acks.

The agent only passes events on (`add`). One task here folds whatever has been passed
on since it last looked, so batches size themselves: under load many events arrive
while a batch's output travels to the broker, and a lone event is folded at once,
with no timer to wait out. At most one batch's output is in flight.

Run states go to the changelog at most once per flush interval, not once per batch:
under load that is one record per touched run per interval. Input is acknowledged only
once everything that depends on it is durable (its decisions, dead letters and the
states that include it), so a committed offset never runs ahead of the stored state. A
restarted worker replays the input after the committed offset, and the engine answers
an event it has already seen exactly as it did the first time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from mode import Service

from detectors import DetectionConfig, RunState, decode_state, encode_state

from .metrics import Metrics
from .fold_batch import ENDED, ended_record, observe, process_batch
from .producer import Publisher, Record
from ..settings import Settings

log = logging.getLogger("loopwarden.worker")


class Pipeline(Service):
    def __init__(
        self,
        settings: Settings,
        config: DetectionConfig,
        metrics: Metrics,
        store: Callable[[], Any],
        lag: Callable[[], int],
        hurry: Callable[[], bool],
        changelog_topic: str,
        on_error: Callable[[BaseException], None],
        partition_of: Callable[[bytes], int | None] = lambda key: None,
        tombstone_delay: float = 6.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.config = config
        self.metrics = metrics
        self.store = store  # the table's store (a dict-like of run key -> RunState or bytes)
        self.changelog_topic = changelog_topic
        self.lag = lag  # events of the assigned partitions not folded yet
        self.hurry = hurry  # true while the app stops or rebalances: flush now
        self.linger = settings.batch_linger_ms / 1000.0
        self.on_error = on_error
        self.partition_of = partition_of  # a stored run's partition (the table knows it)
        self.publisher = Publisher(settings.kafka_kwargs())  # decisions and dead letters
        self.states = Publisher(settings.kafka_kwargs())  # changelog records
        self.interval = settings.flush_interval_ms / 1000.0
        self.progress: dict[int, int] = {}  # partition -> last offset folded
        self._waiting: list = []  # events passed on, not folded yet
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        # run key -> (its partition, the state to store; bytes: an ended run's record, see
        # below). A run's changelog partition is its events' partition: the state goes
        # where the partition's next owner recovers it, with no partitioner to run.
        self._dirty: dict[bytes, tuple[int, RunState | bytes]] = {}
        self._unacked: list = []  # folded since the last flush
        self._sent: list[asyncio.Future] = []  # deliveries queued since the last flush
        # A run that ended is stored as it was just before its run_end, with the run_end's
        # offset (processor.ended_record), and deleted (a tombstone) only once Faust has
        # surely committed the run_end (two commit intervals after its acknowledgement).
        # Until then a restarted worker replays the run's last events against that state
        # and answers them as before; a tombstone written at once would make them start
        # a new run, with other decisions.
        self._tombstones: dict[bytes, tuple[float, int]] = {}  # ended runs -> (when acknowledged, partition)
        # Runs idle for long in event time are dropped (semantics.md section 7): the
        # newest `ts` folded from each partition, and a sweep of the table now and then.
        self.newest_ts: dict[int, int] = {}
        self.idle_timeout_ms = config.idle_timeout_ms
        self.sweep_interval = settings.state_sweep_interval_s
        self.evicted = 0
        self.tombstone_delay = tombstone_delay
        self._flushing = asyncio.Lock()  # one flush at a time: state records stay in order
        self._last_flush = time.monotonic()
        # Health (app.py's /health reads these).
        self.failed: BaseException | None = None  # output could not be published: the worker stops
        self.last_fold = time.monotonic()  # when a batch was last folded
        self.broker_ok = True  # the last probe of the broker (every 2 s) got an answer
        self.broker_checked = time.monotonic()

    async def add(self, event: Any) -> None:
        """Pass an event on; waits only when far more than a batch is waiting."""
        if self.failed is not None or self.should_stop:
            return  # never acknowledged: the partition's next owner folds it
        self._waiting.append(event)
        self._arrived.set()
        if len(self._waiting) >= self.settings.batch_max:
            self._full.set()
        if len(self._waiting) >= 4 * self.settings.batch_max:
            self._room.clear()
            await self._room.wait()

    async def on_start(self) -> None:
        await self.publisher.start()
        await self.states.start()

    async def on_stop(self) -> None:
        self._room.set()  # an agent waiting for room must not hold the stop up
        try:
            if self.failed is None:
                await self._flush(final=True)
            # After a failure nothing more is stored or acknowledged: what was folded
            # since the last flush is replayed by the partitions' next owner.
        finally:
            for producer in (self.publisher, self.states):
                try:  # a producer that cannot reach its broker would wait for it forever
                    await asyncio.wait_for(producer.stop(), 5.0)
                except Exception as exc:
                    log.warning("a producer did not stop cleanly: %r", exc)

    @Service.task
    async def _sweep_idle_runs(self) -> None:
        """Drop the runs idle for more than twice the idle timeout in event time
        (semantics.md section 7: no decision changes, since the run's next event would
        start it over anyway), from the table and, with a tombstone, the changelog.

        Wall-clock paced, event-time decided: the newest `ts` folded from the run's
        partition against the run's last `ts`. Works in chunks, so the fold loop goes on
        in between."""
        limit = 2 * self.idle_timeout_ms
        while not self.should_stop:
            await self.sleep(self.sweep_interval)
            store = self.store()
            keys = list(store.keys())
            for i in range(0, len(keys), 1000):
                await asyncio.sleep(0)
                for key in keys[i:i + 1000]:
                    value = store.get(key)
                    if value is None or key in self._dirty or key in self._tombstones:
                        continue  # touched since the snapshot, or already on its way out
                    last, part = self._last_ts(key, value)
                    if last is None or part is None:
                        continue
                    newest = self.newest_ts.get(part)
                    if newest is not None and newest - last > limit:
                        del store[key]
                        self._tombstones[key] = (0.0, part)  # due at the next flush
                        self.evicted += 1
                        self.metrics.evicted.inc()

    def _last_ts(self, key: bytes, value: Any) -> tuple[int | None, int | None]:
        """(the run's last `ts`, its partition) for a stored value."""
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

    def stalled(self, after: float = 30.0) -> bool:
        """Events are waiting in Kafka but none was folded for `after` seconds."""
        return self.lag() > 0 and time.monotonic() - self.last_fold > after

    @Service.timer(2.0)
    async def _probe_broker(self) -> None:
        # A metadata request over the decisions producer's connections: during a broker
        # outage the consumer only logs its errors, and /health must say so.
        producer = self.publisher._producer
        if producer is None:
            return
        try:
            ok = bool(await asyncio.wait_for(producer.client.force_metadata_update(), 5.0))
        except Exception:
            ok = False
        self.broker_ok, self.broker_checked = ok, time.monotonic()

    @Service.task
    async def _fold_loop(self) -> None:
        n = self.settings.batch_max
        while not self.should_stop:
            await self._arrived.wait()
            if self.linger and len(self._waiting) < n and self.lag() >= n:
                # Behind: the events are already waiting in Kafka, so a fuller batch costs
                # no latency, and it spreads the per-batch work (produce requests, futures)
                # over more events. Caught up, a batch is folded at once.
                self._full.clear()
                try:
                    await asyncio.wait_for(self._full.wait(), self.linger)
                except asyncio.TimeoutError:
                    pass
            try:
                batch, self._waiting = self._waiting[:n], self._waiting[n:]
                if not self._waiting:
                    self._arrived.clear()
                self._room.set()
                await self._handle(batch)
                self.last_fold = time.monotonic()
            except Exception as exc:
                self._fail(exc)
                return

    @Service.timer(0.05)
    async def _flush_when_due(self) -> None:
        # Once per interval; at once while the app stops or rebalances, since both wait
        # for every event to be acknowledged (and commit right after).
        now, hurry = time.monotonic(), self.hurry()
        if self._dirty or self._unacked:
            due = hurry or now - self._last_flush >= self.interval
        else:  # only tombstones left
            due = bool(self._tombstones) and (
                hurry or now - min(t for t, _ in self._tombstones.values()) >= self.tombstone_delay)
        if due and self.failed is None:
            try:
                await self._flush()
            except Exception as exc:
                self._fail(exc)

    async def _handle(self, batch: list) -> None:
        s = self.settings
        msgs = [e.message for e in batch]
        store = self.store()
        result = process_batch(msgs, store.get, self.config, s.max_event_bytes, self.metrics)
        where = result.where
        for key, state in result.writes.items():
            if state is None:
                store.pop(key, None)
            else:
                store[key] = state
            self._tombstones.pop(key, None)  # a new run took the key: no tombstone
            self._dirty[key] = (where[key], ended_record(*result.ended[key]) if key in result.ended else state)
        newest = self.newest_ts
        for part, ts in result.newest_ts.items():
            if ts > newest.get(part, ts - 1):
                newest[part] = ts
        out = [Record(s.decisions_topic, d.gateway_id.encode(), raw) for d, raw in zip(result.decisions, result.encoded)]
        for dl in result.dead:
            out.append(Record(s.deadletter_topic, dl.key, dl.value, dl.headers, None if dl.key is not None else 0))
        if self._sent:
            # This batch was folded while the last one travelled; wait for it before
            # queueing more, and let the events arriving meanwhile make the next batch.
            await asyncio.shield(self._sent[-1])
        if out:
            self._sent.append(await self.publisher.send(out))
        # The states went into _dirty before these events go into _unacked: a flush in
        # between stores a state ahead of its acknowledgement, never behind it.
        self._unacked.extend(batch)
        for m in msgs:
            self.progress[m.partition] = m.offset
        observe(self.metrics, msgs, result)

    async def _flush(self, final: bool = False) -> None:
        """Store the touched runs' states, then acknowledge the events they include.

        Runs beside the fold loop: states are immutable, so taking the dirty map is a
        snapshot, and the changelog has a producer (a connection) of its own, so a large
        flush never holds up the decisions queued behind it."""
        async with self._flushing:
            dirty, events, deliveries = self._dirty, self._unacked, self._sent
            self._dirty, self._unacked, self._sent = {}, [], []
            now = self._last_flush = time.monotonic()
            hurry = final or self.hurry()  # stopping or rebalancing: Faust commits right after
            due = [k for k, (t, _) in self._tombstones.items() if hurry or now - t >= self.tombstone_delay]
            out = []
            for i, (key, (part, state)) in enumerate(dirty.items()):
                value = state if isinstance(state, bytes) else encode_state(state)
                out.append(Record(self.changelog_topic, key, value, None, part))
                if i % 64 == 63:
                    await asyncio.sleep(0)  # let the fold loop go on between chunks
            for key in due:
                _, part = self._tombstones.pop(key)
                out.append(Record(self.changelog_topic, key, None, None, part))
            if out:
                deliveries = [*deliveries, await self.states.send(out)]
            for d in deliveries:
                await d
            for e in events:
                e.ack()
            acked = time.monotonic()
            for key, (part, state) in dirty.items():
                if isinstance(state, bytes):  # an ended run: its tombstone once the run_end is committed
                    self._tombstones[key] = (acked, part)
            if final and self._tombstones:
                await self.states.publish([Record(self.changelog_topic, k, None, None, p)
                                           for k, (_, p) in self._tombstones.items()])
                self._tombstones.clear()
            self.metrics.flushes.inc()
            self.metrics.flushed_states.inc(len(out))

    def _fail(self, exc: BaseException) -> None:
        # Not a bad event (those are dead letters): output could not be published.
        # Acknowledging nothing and stopping the whole worker hands its partitions, from
        # their committed offsets, to a healthy member. `on_error` must not wait for the
        # app to stop: the app's stop waits for this service's own tasks, this one too.
        if self.failed is not None:
            return
        self.failed = exc
        self._room.set()  # an agent waiting for room must not hold the stop up
        log.critical("stopping the worker: output could not be published: %r", exc)
        self.on_error(exc)
