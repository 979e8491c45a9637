"""The worker's part of the fleet's spend caps (semantics.md section 11) and of the spend
anomaly watch (detectors/anomaly.py): what it forwards, and the spend stage.

- Forwarded, from each batch (`forward`): what each applied, non-duplicate event adds to
  each cap it matches (`detectors.spend.spend_of`), to the spend topic, keyed by
  `{cap}:{key}`, with the event's source partition and offset as headers; and, while the
  anomaly watch is on, what it adds to its agent's count (`ANOMALY_CAP`). A worker whose
  config has neither forwards nothing and reads no spend topic.
- The spend stage: a Faust agent over the spend topic. Keyed by cap and key, each key's
  records reach one worker, in order. Each key's count lives in a Faust table of
  tumbling windows in event time, one table per window length (`spend-{ms}`), expired
  two windows after their end: the window is the record's own (its `window_start`, the
  cap's epoch-aligned window), handed to Faust as the window's middle, so float seconds
  never move a record across a boundary. The value is a `SpendState`: the count, the
  marks warned, the signal once reached, and the highest source offset counted per
  events partition (a record forwarded again after a worker's restart counts once).
  Reaching a cap publishes its `spend_cap` record to the fleet topic, which every
  worker applies as it applies breakers, with a `spend_cap_reached` alert;
  `spend_cap_warning` alerts mark 80 and 95 percent of a ceiling, once each per key and
  window. The anomaly watch keeps its windows in a table of its own
  (`spend-anomaly`, kept for its history) and posts `spend_anomaly` alerts.

A config published later with caps of a new window length, or the anomaly watch turned
on, needs the workers restarted for their stage to count them: Faust's tables are made
with the app (logged when it happens).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgspec

from detectors import DetectionConfig
from detectors.anomaly import ANOMALY_CAP, Anomaly, anomalous, anomaly_cap
from detectors.config import AnomalyConfig, SpendCapConfig
from detectors.errors import DecodeError
from detectors.fleet import SpendCapSignal, encode_fleet_record
from detectors.ingest import Folded
from detectors.spend import (
    NOTHING,
    SpendRecord,
    SpendState,
    add_spend,
    check_spend_record,
    decode_spend_record,
    decode_spend_state,
    encode_spend_record,
    encode_spend_state,
    new_marks,
    spend_of,
)

from ..kafka import faust_compat
from ..kafka.producer import OutRecord
from ..kafka.settings import Settings, spend_table
from .fleet import alert

log = logging.getLogger("loopwarden.spend")

SOURCE_PARTITION = "loopwarden.source.partition"
SOURCE_OFFSET = "loopwarden.source.offset"
BATCH = 2000  # spend records the stage takes at once
BATCH_WAIT_S = 0.02  # and waits for at most, so a cap's signal is late by that much at most
RAW = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}


def forwarded_caps(config: DetectionConfig) -> tuple[SpendCapConfig, ...]:
    """The caps a worker under `config` forwards records for: its spend caps, and the
    anomaly watch's pseudo-cap while it is on."""
    caps = config.spend_caps
    if config.spend_anomaly is not None:
        caps = (*caps, anomaly_cap(config.spend_anomaly))
    return caps


def forward(
    f: Folded, caps: tuple[SpendCapConfig, ...], topic: str, partition: int, offset: int, out: list[OutRecord]
) -> int:
    """The spend records of one applied event, appended to `out`; how many."""
    records = spend_of(caps, f.event)
    if records:
        headers = [(SOURCE_PARTITION, str(partition).encode()), (SOURCE_OFFSET, str(offset).encode())]
        for rec in records:
            out.append(OutRecord(topic, rec.topic_key().encode(), encode_spend_record(rec), headers))
    return len(records)


def source_of(headers: Any) -> tuple[int, int] | None:
    """(events partition, offset) a spend record was forwarded from, or None."""
    found = dict(headers or ())
    try:
        return int(found[SOURCE_PARTITION]), int(found[SOURCE_OFFSET])
    except (KeyError, ValueError):
        return None


@dataclass
class Windows:
    """One windowed table: its wrapper, and the time its next read or write is about
    (the middle of the record's window, in seconds)."""

    table: Any
    at: list[float] = field(default_factory=lambda: [0.0])
    raw: Any = None  # the table under the window wrapper (its keys: (key, window range))

    def __len__(self) -> int:
        return len(self.raw.data) if self.raw is not None else 0

    def get(self, key: str, at_ms: float) -> SpendState | None:
        self.at[0] = at_ms / 1000.0
        try:
            raw = self.table[key].value()
        except KeyError:
            return None
        return decode_spend_state(raw) if raw is not None else None

    def put(self, key: str, at_ms: float, state: SpendState) -> None:
        self.at[0] = at_ms / 1000.0
        self.table[key] = encode_spend_state(state)


def _windows(app: Any, name: str, window_ms: int, expires_ms: int, partitions: int) -> Windows:
    table = app.Table(name, default=None, key_type=str, value_type=bytes, partitions=partitions)  # keys: json
    w = Windows(None, raw=table)
    w.table = table.tumbling(timedelta(milliseconds=window_ms), expires=timedelta(milliseconds=expires_ms)).relative_to(
        lambda event=None: w.at[0]
    )
    return w


class SpendStage:
    """The stage's work on one record: counted once, the cap reached or warned of, the
    anomaly watched; what it publishes goes through `send(topic, key, value)`."""

    def __init__(
        self,
        settings: Settings,
        config_of: Any,
        tables: dict[int, Windows],
        anomaly: Windows | None,
        metrics: Any,
        send: Any,
    ) -> None:
        self.settings = settings
        self.config_of = config_of
        self.tables = tables
        self.anomaly = anomaly
        self.metrics = metrics
        self.send = send
        self.refresh: Any = None  # async (): the consumer reads the cluster's metadata again
        self._told: set[str] = set()  # what was logged once
        # The windows a batch changed, stored once at its end: (table, key, window) ->
        # (table, key, the window's middle, state). A key many records of a batch share
        # (a gateway's, a fleet-wide cap's) is written to its table and changelog once.
        self._pending: dict[tuple[int, str, int], tuple[Windows, str, float, SpendState, Any]] = {}
        self._event: Any = None  # the Faust event being counted

    async def take_batch(self, events: list[Any]) -> None:
        """A batch of the stage's Faust events, in order; each window they change is
        stored once, after every alert and fleet record they make is published, as of
        the last event that changed it (Faust writes a table's changelog to the partition
        of the event in hand: the window's key's, as every record of that key). A record
        that cannot be counted (a bad record, or a bug) is logged and skipped, not fatal."""
        try:
            for event in events:
                m = event.message
                self._event = event
                try:
                    await self.take(event.value, m.headers, m.offset)
                except Exception:
                    self.metrics.spend_skipped.inc()
                    log.exception("the spend stage could not count the record at offset %d", m.offset)
        finally:
            pending, self._pending, self._event = self._pending, {}, None
            with faust_compat.writing_as() as current:
                for w, key, at_ms, state, ev in pending.values():
                    current(ev)
                    await self._store(w, key, at_ms, state)

    def _get(self, w: Windows, key: str, at_ms: float) -> SpendState | None:
        hit = self._pending.get((id(w), key, int(at_ms * 2)))
        return hit[3] if hit is not None else w.get(key, at_ms)

    def _put(self, w: Windows, key: str, at_ms: float, state: SpendState) -> None:
        self._pending[(id(w), key, int(at_ms * 2))] = (w, key, at_ms, state, self._event)

    async def take(self, value: bytes | None, headers: Any, offset: int) -> None:
        try:
            rec = decode_spend_record(value or b"")
        except DecodeError as exc:
            self.metrics.spend_skipped.inc()
            log.warning("skipping an unreadable spend record at offset %d: %s", offset, exc)
            return
        cfg: DetectionConfig = self.config_of()
        source = source_of(headers)
        if rec.cap == ANOMALY_CAP:
            if cfg.spend_anomaly is not None and self.anomaly is not None:
                await self._watch(cfg.spend_anomaly, rec, source)
            return
        cap = next((c for c in cfg.spend_caps if c.id == rec.cap), None)
        why = check_spend_record(rec, cap) if cap is not None else f"no cap {rec.cap!r} in the config"
        windows = self.tables.get(cap.window_ms) if cap is not None else None
        if why is None and windows is None:
            why = "its window length has no table in this worker (restart the workers to count it)"
        if why is not None or cap is None or windows is None:
            self.metrics.spend_skipped.inc()
            self._once(f"skip:{rec.cap}", f"spend records of cap {rec.cap!r} are not counted: {why}")
            return
        await self._count(cap, windows, rec, source)

    async def _count(
        self, cap: SpendCapConfig, windows: Windows, rec: SpendRecord, source: tuple[int, int] | None
    ) -> None:
        key, mid = rec.topic_key(), rec.window_start + cap.window_ms / 2
        state = self._get(windows, key, mid) or SpendState(
            cap.id, rec.key, rec.window_start, cap.window_ms, cap.ceilings()
        )
        if source is not None and state.counted(*source):
            self.metrics.spend_duplicates.inc()
            return
        count, signal = add_spend(cap, state.count, rec)
        seen = state.seen if source is None else {**state.seen, source[0]: source[1]}
        state = msgspec.structs.replace(state, count=count, seen=seen, signal=signal.id if signal else state.signal)
        warnings = new_marks(state)
        if warnings:
            marks = list(state.marks)
            for unit, mark, *_ in warnings:
                marks[("tokens", "cost", "calls").index(unit)] = mark
            state = msgspec.structs.replace(state, marks=(marks[0], marks[1], marks[2]))
        # published before the state is stored (at the batch's end): a worker that dies
        # between the two counts the record again and says it twice (alerts and the fleet
        # record are keyed by subject), rather than storing a reached window and never
        # pausing its calls
        for unit, mark, percent, used, ceiling in warnings:
            await self._warn(cap, rec, unit, mark, percent, used, ceiling)
        if signal is not None:
            await self._reached(signal)
        self._put(windows, key, mid, state)
        self.metrics.spend_records.inc()

    async def _watch(self, cfg: AnomalyConfig, rec: SpendRecord, source: tuple[int, int] | None) -> None:
        w = self.anomaly
        assert w is not None
        key, size = rec.key, cfg.window_ms
        mid = rec.window_start + size / 2
        state = self._get(w, key, mid) or SpendState(ANOMALY_CAP, key, rec.window_start, size, (None, None, None))
        if source is not None and state.counted(*source):
            self.metrics.spend_duplicates.inc()
            return
        count, _ = add_spend(anomaly_cap(cfg), state.count, rec)
        seen = state.seen if source is None else {**state.seen, source[0]: source[1]}
        state = msgspec.structs.replace(state, count=count, seen=seen)
        found = None
        floors = cfg.floors()
        now = (count.tokens, count.cost_micros, count.calls)
        over = any(f is not None and n >= f for f, n in zip(floors, now, strict=True))
        if state.signal is None and over:  # (the previous windows are looked at only then)
            previous = [self._get(w, key, mid - k * size) for k in range(cfg.history, 0, -1)]
            found = anomalous(cfg, key, rec.window_start, count, [p.count if p else NOTHING for p in previous])
            if found is not None:
                state = msgspec.structs.replace(state, signal=f"anomaly:{key}:{rec.window_start}")
        if found is not None:  # (said before it is stored, as a cap's signal)
            await self._anomaly(found, rec, cfg)
        self._put(w, key, mid, state)
        self.metrics.spend_records.inc()

    async def _store(self, windows: Windows, key: str, at_ms: float, state: SpendState, tries: int = 60) -> None:
        """Write a window's state, waiting out a changelog topic the consumer's metadata
        does not know yet (a worker just started on new topics): Faust refuses the write
        until it does, and its consumer would read the metadata again only minutes later,
        so it is asked to now."""
        from faust.exceptions import PartitionsMismatch

        for attempt in range(tries):
            try:
                windows.put(key, at_ms, state)
                return
            except PartitionsMismatch:
                if attempt == tries - 1:
                    raise
                if self.refresh is not None:
                    with contextlib.suppress(Exception):  # (a broker that does not answer: tried again)
                        await self.refresh()
                await asyncio.sleep(0.5)

    async def _warn(
        self, cap: SpendCapConfig, rec: SpendRecord, unit: str, mark: int, percent: int, used: int, ceiling: int
    ) -> None:
        subject = f"{cap.id}:{rec.key}:{rec.window_start}"
        summary = (
            f"spend cap {cap.id} for {_who(cap, rec.key)}: {percent}% of its {unit} ceiling in this window "
            f"({used} of {ceiling})"
        )
        fields = {"cap": cap.id, "key": rec.key, "window_start": rec.window_start, "unit": unit, "mark": mark}
        fields |= {"used": used, "ceiling": ceiling, "percent": percent}
        rec_alert = alert("spend_cap_warning", rec.ts, subject, summary, **fields)
        await self.send(self.settings.alerts_topic, subject.encode(), rec_alert)

    async def _reached(self, s: SpendCapSignal) -> None:
        key = s.id.encode()
        await self.send(self.settings.fleet_topic, key, encode_fleet_record(s), wait=True)
        summary = (
            f"spend cap {s.cap} reached for {s.key or 'all'}: {s.used} of {s.ceiling} {s.unit}; "
            f"its calls are paused until {s.until_ts} (the window's end) or a lift"
        )
        fields = {"cap": s.cap, "key": s.key, "window_start": s.window_start, "window_end": s.window_end}
        fields |= {"unit": s.unit, "used": s.used, "ceiling": s.ceiling, "from_ts": s.from_ts, "until_ts": s.until_ts}
        await self.send(self.settings.alerts_topic, key, alert("spend_cap_reached", s.from_ts, s.id, summary, **fields))
        self.metrics.spend_caps_reached.inc()
        log.warning("%s", summary)

    async def _anomaly(self, a: Anomaly, rec: SpendRecord, cfg: AnomalyConfig) -> None:
        subject = f"anomaly:{a.key}:{a.window_start}"
        summary = (
            f"agent {a.key or '(none)'} spent {a.used} {a.kind} in this window, above {cfg.factor:g} times "
            f"the median of its previous {a.windows} windows ({a.norm:g})"
        )
        fields = {"agent_id": a.key, "window_start": a.window_start, "window_ms": cfg.window_ms, "unit": a.kind}
        fields |= {"used": a.used, "median": a.norm, "factor": cfg.factor, "windows": a.windows}
        rec_alert = alert("spend_anomaly", rec.ts, subject, summary, **fields)
        await self.send(self.settings.alerts_topic, subject.encode(), rec_alert)
        self.metrics.spend_anomalies.inc()
        log.warning("%s", summary)

    def _once(self, what: str, message: str) -> None:
        if what not in self._told:
            self._told.add(what)
            log.warning("%s", message)


def _who(cap: SpendCapConfig, key: str) -> str:
    return {"agent": f"agent {key or '(none)'}", "gateway": f"gateway {key}"}.get(cap.per, "all its agents")


def _tables_of(config: DetectionConfig) -> dict[int | None, tuple[int, int]]:
    """The stage's tables under `config`: by window length (None: the anomaly watch's),
    (window length, how long a window is kept) in ms."""
    lengths = sorted({c.window_ms for c in config.spend_caps})
    out: dict[int | None, tuple[int, int]] = {ms: (ms, 2 * ms) for ms in lengths}
    watch = config.spend_anomaly
    if watch is not None:
        out[None] = (watch.window_ms, (watch.history + 2) * watch.window_ms)
    return out


def table_specs(settings: Settings, config: DetectionConfig) -> list[tuple[str, int, dict[str, str]]]:
    """The changelog topics of the stage's tables under `config`, as Faust would make
    them (compacted and deleted after the windows' expiry), for the worker to create
    before it starts: a table whose changelog topic the consumer's metadata does not
    know yet refuses writes, and a topic made while the group runs makes it rebalance."""
    return [
        (
            settings.spend_table_topic(name),
            settings.partitions,
            {"cleanup.policy": "compact,delete", "retention.ms": str(expires), "segment.ms": "600000"},
        )
        for name, (_, expires) in _tables_of(config).items()
    ]


def install(app: Any, settings: Settings, config_of: Any, metrics: Any) -> SpendStage:
    """The spend stage in the worker app: its tables (for the caps and the anomaly watch
    of the config in use now) and its agent over the spend topic."""
    cfg: DetectionConfig = config_of()
    n = settings.partitions
    made = {name: _windows(app, spend_table(name), ms, expires, n) for name, (ms, expires) in _tables_of(cfg).items()}
    anomaly = made.pop(None, None)
    tables = {ms: w for ms, w in made.items() if ms is not None}

    async def send(topic: str, key: bytes, value: bytes, wait: bool = False) -> None:
        partition = 0 if topic in (settings.fleet_topic, settings.alerts_topic) else None
        put = app.producer.send_and_wait if wait else app.producer.send
        await put(topic, key, value, partition=partition, headers=None, timestamp=None)

    stage = SpendStage(settings, config_of, tables, anomaly, metrics, send)
    faust_compat.table_writes_unthrottled(app)
    stage.refresh = lambda: faust_compat.refresh_metadata(app.consumer)
    records = app.topic(settings.spend_topic, partitions=n, **RAW)
    held = [*tables.values(), *([anomaly] if anomaly is not None else [])]

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]  # (Faust's decorators are untyped)
    async def count_spend_keys() -> None:
        metrics.spend_keys.set(sum(map(len, held)))

    @app.agent(records, concurrency=1)  # type: ignore[untyped-decorator]  # (Faust's decorators are untyped)
    async def spend_stage(stream: Any) -> None:
        # In batches of what has arrived (at most BATCH records, waiting BATCH_WAIT_S at
        # most): acknowledged once the batch is counted and stored.
        async for events in stream.take_events(BATCH, within=BATCH_WAIT_S):
            await stage.take_batch(events)

    return stage
