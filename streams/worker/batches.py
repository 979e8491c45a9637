"""The worker's batch loop: what the agent hands its events to. It folds them in
batches through the one fold (detectors.ingest), publishes decisions and dead letters,
has the run states stored (run_store.RunStore) and acknowledges the input once its
output is durable (flush.py).

The agent passes events on (`put`). One task here folds whatever has been passed on
since it last looked, so batches size themselves: under load many events arrive while
a batch's output travels to the broker, and a lone event is folded at once, with no
timer to wait out. When nothing waits, no batch is being handled and the last one's
output has been delivered, the agent folds its event itself (`handle_now`): the same
handling, without waking the fold loop's task for one event (benchmarks.kafka measures
that hop). At most one batch's output is in flight, and one batch is handled at a time
(`_turn`), so the decisions of a partition go out in its order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from mode import Service

from detectors import DetectionConfig, EventError, RunState
from detectors.fleet import FleetView
from detectors.ingest import SetAside, fold

from ..kafka.producer import OutRecord
from . import fleet as fleet_out
from . import spend
from .flush import Flusher
from .metrics import Metrics
from .parts import LoopParts
from .run_store import RunStore
from .settings import WorkerSettings

log = logging.getLogger("loopwarden.worker")


class Incoming(Protocol):
    """What the fold reads of a consumed message (Faust's Message has these attributes,
    so the worker passes its messages as they are)."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: float | None  # seconds


class DeadLetter(NamedTuple):
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


# A dead letter must fit the dead-letter topic (the broker's default limit is about 1 MiB
# per record, and an event the broker accepted compressed can be larger): past these
# sizes the value and the key are cut, and their original sizes named in headers.
DEAD_LETTER_MAX_VALUE = 900_000
DEAD_LETTER_MAX_KEY = 4096


def dead_letter(msg: Incoming, err: EventError) -> DeadLetter:
    key, value = msg.key, msg.value if msg.value is not None else b""
    headers = [
        ("loopwarden.error", err.reason.encode()),
        ("loopwarden.detail", str(err).encode("utf-8", "backslashreplace")[:2000]),
        ("loopwarden.source.topic", msg.topic.encode()),
        ("loopwarden.source.partition", str(msg.partition).encode()),
        ("loopwarden.source.offset", str(msg.offset).encode()),
    ]
    if len(value) > DEAD_LETTER_MAX_VALUE:
        headers.append(("loopwarden.original.value_bytes", str(len(value)).encode()))
        value = value[:DEAD_LETTER_MAX_VALUE]
    if key is not None and len(key) > DEAD_LETTER_MAX_KEY:
        headers.append(("loopwarden.original.key_bytes", str(len(key)).encode()))
        key = key[:DEAD_LETTER_MAX_KEY]
    return DeadLetter(key, value, headers)


class Folded(NamedTuple):
    """A batch folded: its output records, decisions by (action, detector), dead letters,
    (with a trace) each decision's (event id, offset, partition), and each partition's
    last offset."""

    out: list[OutRecord]
    counts: dict[tuple[str, str], int]
    dead: int
    ids: list[tuple[str, int, int]]
    last: dict[int, int]  # partition -> its last offset in the batch


def fold_batch(
    msgs: list[Any],
    s: WorkerSettings,
    config: DetectionConfig,
    fleet: FleetView | None,
    runs: RunStore,
    metrics: Metrics,
    traced: bool = False,
) -> Folded:
    """Fold one batch of consumed messages through the one fold (detectors.ingest): its
    decisions, dead letters and fleet records, the touched run states staged in `runs`."""
    out: list[OutRecord] = []
    counts: dict[tuple[str, str], int] = {}
    ids: list[tuple[str, int, int]] = []
    dead = 0

    # the fold's loader; the key is the run id (admit checks)
    def stored(run_id: str, msg: Incoming) -> RunState | None:
        return runs.load(msg.key, msg.offset)  # type: ignore[arg-type]

    source = ((m, m.key, m.value) for m in msgs)
    breaker_on = config.tool_breaker is not None
    caps = spend.forwarded_caps(config) if config.spend_caps or config.spend_anomaly else ()
    forwarded = 0
    decisions_topic = s.decisions_topic  # (a property that formats the name: once per batch)
    for f in fold(source, config, max_event_bytes=s.max_event_bytes, load=stored, fleet=fleet):
        msg = f.position
        if isinstance(f, SetAside):
            out.append(_dead_letter_record(msg, f, s, metrics))
            dead += 1
            continue
        ts = f.event.ts
        if ts is not None:
            runs.saw(msg.partition, ts)
        if f.after is not f.before:
            ended = (f.before, msg.offset) if f.after is None and f.before is not None else None
            runs.stage(f.key, msg.partition, f.after, ended)  # type: ignore[arg-type]  # keyed: a folded event has one
            if caps and ts is not None:  # applied, not a duplicate: it counts (section 11)
                forwarded += spend.forward(f, caps, s.spend_topic, msg.partition, msg.offset, out)
        # (half the events decide nothing: no loop for them)
        alert = _decided(f, msg, decisions_topic, out, counts, ids if traced else None) if f.decisions else False
        if breaker_on or alert:
            fleet_out.outputs(f, s, breaker_on, out)
    if forwarded:
        metrics.spend_forwarded.inc(forwarded)
    last = {m.partition: m.offset for m in msgs}  # each partition's last offset in the batch
    runs.folded(last)
    return Folded(out, counts, dead, ids, last)


def _decided(
    f: Any, msg: Incoming, topic: str, out: list[OutRecord], counts: dict[tuple[str, str], int], ids: list[Any] | None
) -> bool:
    """An event's decisions to their topic, counted (and with a trace their ids); whether
    one may be the subject of an alert (only then are the fleet's outputs asked)."""
    alert = False
    for d, raw in zip(f.decisions, f.encoded, strict=True):
        out.append(OutRecord(topic, d.gateway_id.encode(), raw))
        if ids is not None:
            ids.append((d.event_id, msg.offset, msg.partition))
        k = (d.action, d.detector or "none")
        counts[k] = counts.get(k, 0) + 1
        if not alert and fleet_out.may_alert(d):
            alert = True
    return alert


def _dead_letter_record(msg: Incoming, f: SetAside, s: WorkerSettings, metrics: Metrics) -> OutRecord:
    """A message set aside, as its dead letter."""
    exc = f.error
    if exc.reason == "internal_error":
        log.error("event at %s[%d]@%d set aside: %s", msg.topic, msg.partition, msg.offset, exc)
    dl = dead_letter(msg, exc)
    metrics.dead_letters.labels(exc.reason).inc()
    return OutRecord(s.deadletter_topic, dl.key, dl.value, dl.headers, None if dl.key is not None else 0)


class _Part(NamedTuple):
    """Events folded for one send: the events, their messages, the fold's output, with a
    trace the timings so far and the events' arrivals."""

    events: list[Any]
    msgs: list[Any]
    folded: Folded
    timings: dict[str, Any] | None
    arrivals: list[float]


class BatchLoop(Service):
    """The fold loop over the events the agent passes on, with its parts (parts.py)
    built by create_app; run states and acknowledgements go through `flusher`."""

    def __init__(
        self,
        settings: WorkerSettings,
        parts: LoopParts,
        config: DetectionConfig,
        config_id: str | None,
        fleet: FleetView | None,
        metrics: Metrics,
        lag: Callable[[], int],
        hurry: Callable[[], bool],
        on_error: Callable[[BaseException], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.config = config
        self.config_id = config_id  # streams.admin.config_topic.config_id of `config` (None: the defaults)
        self.fleet = fleet  # the stop orders, breakers and spend caps received (worker/fleet.py)
        self.metrics = metrics
        self.lag = lag  # events of the assigned partitions not folded yet
        self.on_error = on_error
        self.parts = parts
        self.publisher, self.runs, self.gate, self.trace = parts.publisher, parts.runs, parts.gate, parts.trace
        parts.recovery.on_loaded = self._release  # held events go once their partition's states are loaded
        self.flusher = Flusher(parts.runs, metrics, parts.trace, settings.flush_interval_ms / 1000.0, hurry)
        self.linger = settings.batch_linger_ms / 1000.0
        self._batch_max = settings.batch_max
        self.sweep_interval = settings.state_sweep_interval_s
        self.progress: dict[int, int] = {}  # partition -> last offset folded
        self.folded_at: dict[int, float] = {}  # partition -> when an event of it was last folded
        self.handling = False  # a batch is being folded and published
        self._turn = asyncio.Lock()  # one batch handled at a time: the fold loop's, or the agent's lone event
        self._waiting: list[Any] = []  # events passed on, not folded yet
        self._arrivals: list[float] = []  # with a trace: when each waiting event was passed on
        self._arrived, self._full, self._room = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._room.set()
        # Health (health.py reads these).
        self.failed: BaseException | None = None  # output could not be published: the worker stops
        self.last_fold = time.monotonic()  # when a batch was last folded
        self.receiving = False  # the agent holds an event not passed on yet (app.py): on its way

    async def add(self, event: Any) -> None:
        """Pass an event on; waits only when far more than a batch is waiting."""
        if self.put(event):
            await self.room()

    def put(self, event: Any) -> bool:
        """Pass an event on without waiting (the agent's per-event path: no coroutine to
        make); True when far more than a batch is waiting, and the caller should await
        `room()` before the next one."""
        if self.failed is not None or self.should_stop:
            return False  # never acknowledged: the partition's next owner folds it
        arrival = time.time() if self.trace is not None else None
        if not self.gate.admit(event, arrival):
            return False  # its partition's states are being loaded: folded once they are
        waiting = self._waiting
        waiting.append(event)
        if arrival is not None:
            self._arrivals.append(arrival)
        self._arrived.set()
        n = len(waiting)
        if n >= self._batch_max:
            self._full.set()
            if n >= 4 * self._batch_max:
                self._room.clear()
                return True
        return False

    def can_handle_now(self) -> bool:
        """Nothing waits, no batch is being handled, the last batch's output was delivered,
        and the worker is not stopping: the agent may fold its event itself, now."""
        if self._waiting or self._turn.locked() or self.failed is not None or self.should_stop:
            return False
        return self.flusher.in_flight() is None

    async def handle_now(self, event: Any) -> None:
        """Fold, publish and stage one event as a batch of its own (after `can_handle_now`,
        with no await in between): what the fold loop would do with it a task switch
        later. An event of a partition whose states are loading is held, as by `put`."""
        arrival = time.time() if self.trace is not None else None
        if not self.gate.admit(event, arrival):
            return
        async with self._turn:
            await self._take_turn([event], [arrival] if arrival is not None else [])

    async def room(self) -> None:
        """Until the fold loop has taken a batch from a long queue (after `put` said so)."""
        await self._room.wait()

    def _release(self) -> None:
        """A partition's states are loaded: its held events go first (they came before
        any of its events now waiting, which were held too)."""
        items = self.gate.release()
        if items:
            self._waiting[:0] = [e for e, _ in items]
            if self.trace is not None:
                self._arrivals[:0] = [a or time.time() for _, a in items]
            self._arrived.set()

    async def on_start(self) -> None:
        await self.parts.start()

    async def on_stop(self) -> None:
        self._room.set()  # an agent waiting for room must not hold the stop up
        try:
            if self.failed is None:
                await self.flusher.flush(final=True)
            # After a failure nothing more is stored or acknowledged: what was folded
            # since the last flush is replayed by the partitions' next owner.
        finally:
            await self.parts.close()

    @Service.task
    async def _sweep_idle_runs(self) -> None:
        """Now and then (wall-clock paced), drop the runs idle past twice the idle
        timeout in event time (RunStore.evict_idle)."""
        while not self.should_stop:
            await self.sleep(self.sweep_interval)
            n = await self.runs.evict_idle()
            if n:
                self.metrics.evicted.inc(n)

    def use_config(self, config: DetectionConfig, config_id: str | None) -> None:
        """Decide the events of later batches under `config` (a worker following the config
        topic got a new current one; None: the built-in defaults).

        Called by another task of the same event loop. A batch is folded in one pass with
        no await in it, over the config `_handle` passed to `fold` when it began, so the
        switch always falls between two batches, never inside one. The run states stay as
        they are: the next event of a run is judged on its history and warning memory under
        the new thresholds (see streams/admin/config_topic.py)."""
        old, self.config, self.config_id = self.config_id, config, config_id
        self.runs.idle_timeout_ms = config.idle_timeout_ms  # idle eviction (run_store.py) follows it
        log.warning("config switched: %s -> %s", old or "defaults", config_id or "defaults")

    def idle(self) -> bool:
        """No event is waiting to be folded (or held while its partition's states load, or
        in the agent's hands), and no batch is being folded."""
        return not (self._waiting or self.gate.count or self.handling or self.receiving) and self.failed is None

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
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.linger)
            async with self._turn:  # the agent may be handling a lone event
                batch, arrivals = self._take()
                if not batch:  # nothing left to fold
                    continue
                if not await self._take_turn(batch, arrivals):
                    return

    def _take(self) -> tuple[list[Any], list[float]]:
        """The events waiting (at most a batch), and with a trace their arrival times."""
        n = self._batch_max
        batch, self._waiting = self._waiting[:n], self._waiting[n:]
        arrivals, self._arrivals = self._arrivals[:n], self._arrivals[n:]
        if not self._waiting:
            self._arrived.clear()
        self._room.set()
        return batch, arrivals

    async def _take_turn(self, batch: list[Any], arrivals: list[float]) -> bool:
        """Handle one batch (the caller holds `_turn`). False: its output could not be
        published, and the worker stops."""
        self.handling = True
        try:
            await self._handle(batch, arrivals)
        except Exception as exc:
            self._fail(exc)
            return False
        finally:
            self.handling = False
        self.last_fold = time.monotonic()
        return True

    @Service.timer(0.05)
    async def _flush_when_due(self) -> None:
        if self.failed is None and self.flusher.due():
            try:
                await self.flusher.flush()
            except Exception as exc:
                self._fail(exc)

    async def _handle(self, batch: list[Any], arrivals: list[float] | None = None) -> None:
        """Fold a batch and publish its output, once the previous batch's is delivered.

        The batch is folded while the previous one travels; the events that arrive
        during that wait are folded right after it, and their output goes out in the
        same produce request. (Left for the next batch, they would wait for this one's
        round trip as well: most calls at 1,000 calls/s arrive while a batch travels,
        benchmarks.latency_stages.)"""
        parts = [self._fold(batch, arrivals or [])]
        t = parts[0].timings
        fl = self.flusher
        previous = fl.in_flight()
        if previous is not None:
            await asyncio.shield(previous)
            if t is not None:
                t["w1"] = time.time()
            if self._waiting and not self.should_stop:
                parts.append(self._fold(*self._take()))
        out = [r for p in parts for r in p.folded.out]
        # `fl.sent` read after the send: a flush may swap it while `send` waits for room
        sent = await self.publisher.send(out) if out else None
        if sent is not None:
            fl.sent.append(sent)
        for p in parts:
            if self.trace is not None and p.timings is not None:
                p.timings.setdefault("w1", p.timings["w0"])  # (a part folded after the wait: none of its own)
                self.trace.batch(p.timings, p.msgs, p.arrivals, p.folded.ids, sent)
            # The states were staged before these events go into unacked: a flush in
            # between stores a state ahead of its acknowledgement, never behind it.
            fl.unacked.extend(p.events)
            self.progress.update(p.folded.last)
            self.folded_at.update(dict.fromkeys(p.folded.last, time.monotonic()))
            self.metrics.observe_batch(p.msgs, len(p.msgs) - p.folded.dead, p.folded.counts)

    def _fold(self, batch: list[Any], arrivals: list[float]) -> _Part:
        """One batch folded (`_Part`)."""
        t = {"k": "batch", "n": len(batch), "f0": time.time()} if self.trace is not None else None
        msgs = [e.message for e in batch]
        folded = fold_batch(msgs, self.settings, self.config, self.fleet, self.runs, self.metrics, t is not None)
        if t is not None:
            t["f1"] = t["w0"] = time.time()
        return _Part(batch, msgs, folded, t, arrivals)

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
