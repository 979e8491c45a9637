"""Reading partitions from where they start up to their end offsets, with no consumer group:
the one way the shell reads a topic by hand (recovery of the run states, audits, `top`,
the config and fleet topics, the worker's hole reads, the tests and benchmarks).

A `Range` holds one group-less consumer (`clients.reader`) and the partitions added to
it, each with a start and an end:

- the start is the partition's first offset (`BEGINNING`), its end (`END`), the first
  record at or after a time in ms (an `int`), or offsets given per partition (a dict);
- the end is the end offset when the partition was added (or, with `end_ms`, the first
  offset after that time), fixed then, so a read is a snapshot; with `follow=True` the
  partition is read on past it, and the end only says when the reader has caught up.

The seek is done right: each partition is put at its start with `seek` to an offset the
broker named. aiokafka's `seek_to_beginning` only asks for a reset, and a reset to the
consumer's default strategy that `assign` already sent is answered after it and wins.

A partition is done once a record at or past its end was read, or the consumer's
position reached it: compaction and transactions leave offsets that hold no record, so
the last records before the end may never come.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import clients
from .errors import BrokerError
from .settings import Settings

BEGINNING = "beginning"
END = "end"
Start = str | int | Mapping[int, int]  # BEGINNING, END, a time in ms, or offsets by partition


class Range:
    """Partitions of one or more topics read from their starts to their ends."""

    def __init__(self, consumer: Any, settings: Settings) -> None:
        self.consumer = consumer
        self.settings = settings
        self.tps: list[Any] = []
        self.starts: dict[Any, int] = {}
        self.ends: dict[Any, int] = {}
        self.beginnings: dict[Any, int] = {}
        self.position: dict[Any, int] = {}
        self.last_ts: dict[Any, int] = {}  # the newest timestamp read, by partition
        self.follow: set[Any] = set()
        self.done: set[Any] = set()

    async def add(
        self,
        topic: str,
        start: Start = BEGINNING,
        end_ms: int | None = None,
        partitions: Iterable[int] | None = None,
        follow: bool = False,
        must_exist: bool = True,
        until: Mapping[int, int] | None = None,
    ) -> list[Any]:
        """Add `topic`'s partitions (all, or those of `partitions` it has) and put each at
        its start; the TopicPartitions added. Each is read up to its end offset now, the
        first offset after `end_ms`, or the offset `until` gives it, whichever is lower.
        A topic that does not exist is a BrokerError, or nothing added when `must_exist`
        is false."""
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaError

        c = self.consumer
        try:
            found = await topic_partitions(c, topic)
            if found is None:
                if must_exist:
                    raise BrokerError(
                        f"topic {topic} does not exist on {self.settings.bootstrap} "
                        "(check --bootstrap and --topic-prefix)"
                    )
                return []
            parts = sorted(found if partitions is None else set(partitions) & found)
            tps = [TopicPartition(topic, p) for p in parts]
            c.assign(self.tps + tps)  # an assignment replaces the one before
            first = await c.beginning_offsets(tps) if tps else {}
            last = await c.end_offsets(tps) if tps else {}
            ends = await self._at(tps, end_ms + 1, last) if end_ms is not None else dict(last)
            if until is not None:
                ends = {tp: min(ends[tp], until.get(tp.partition, ends[tp])) for tp in tps}
            starts = await self._starts(tps, start, first, last)
        except KafkaError as exc:
            raise clients.translate(exc, self.settings) from None
        for tp in self.tps:  # the new assignment reset the partitions added before: put them back
            if tp in self.done:
                c.pause(tp)
            else:
                c.seek(tp, self.position[tp])
        for tp in tps:
            self.tps.append(tp)
            self.beginnings[tp], self.ends[tp] = first[tp], ends[tp]
            self.starts[tp] = self.position[tp] = starts[tp]
            if follow:
                self.follow.add(tp)
            if starts[tp] >= ends[tp] and not follow:
                self.done.add(tp)
                c.pause(tp)
            else:
                c.seek(tp, starts[tp])
        return tps

    async def _at(self, tps: list[Any], ms: int, last: Mapping[Any, int]) -> dict[Any, int]:
        """Each partition's first offset at or after `ms` (its end offset when none is)."""
        found = await self.consumer.offsets_for_times({tp: max(0, ms) for tp in tps})
        return {tp: (found[tp].offset if found[tp] is not None else last[tp]) for tp in tps}

    async def _starts(
        self, tps: list[Any], start: Start, first: Mapping[Any, int], last: Mapping[Any, int]
    ) -> dict[Any, int]:
        if start == BEGINNING:
            return dict(first)
        if start == END:
            return dict(last)
        if isinstance(start, int):
            return await self._at(tps, start, last)
        if isinstance(start, Mapping):
            return {tp: max(first[tp], start.get(tp.partition, first[tp])) for tp in tps}
        raise ValueError(f"not a start: {start!r}")

    @property
    def finished(self) -> bool:
        """Every partition read to its end (never, while one is followed)."""
        return not self.follow and len(self.done) == len(self.tps)

    @property
    def total(self) -> int:
        """Records between the starts and the ends (offsets, so an upper bound)."""
        return sum(max(0, self.ends[tp] - self.starts[tp]) for tp in self.tps)

    @property
    def read(self) -> int:
        return sum(min(self.position[tp], self.ends[tp]) - self.starts[tp] for tp in self.tps)

    def caught_up(self) -> bool:
        """Every partition read at least to the end it had when it was added."""
        return all(self.position[tp] >= self.ends[tp] for tp in self.tps)

    def complete(self, tp: Any) -> bool:
        """Read from the partition's very first record (nothing was ever deleted)."""
        return self.starts.get(tp) == self.beginnings.get(tp) == 0

    def horizon(self) -> int | None:
        """Records up to this timestamp have been read in every partition still being
        read (None: every partition is done, or one has not been read yet)."""
        live = [tp for tp in self.tps if tp not in self.done]
        if not live:
            return None
        times = [self.last_ts.get(tp) for tp in live]
        return None if any(t is None for t in times) else min(times)  # type: ignore[type-var]

    async def chunk(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[Any]:
        """The next records, each partition's in offset order, none at or past its end
        (but of partitions followed); [] when finished, or nothing came in time."""
        from aiokafka.errors import KafkaError

        if self.finished or not self.tps:
            return []
        try:
            got = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
            out: list[Any] = []
            for tp, records in got.items():
                out.extend(self._took(tp, records))
            for tp in self.tps:  # no record came: its position says whether the end was passed
                if tp not in got and tp not in self.done:
                    self.position[tp] = max(self.position[tp], await self.consumer.position(tp))
                    self._check_done(tp)
        except KafkaError as exc:
            raise clients.translate(exc, self.settings) from None
        return out

    def _took(self, tp: Any, records: list[Any]) -> list[Any]:
        end = self.ends[tp]
        followed = tp in self.follow
        reached = bool(records) and records[-1].offset >= end - 1
        if records and records[-1].offset >= end and not followed:
            records = [r for r in records if r.offset < end]
        if records:
            last = records[-1]
            self.last_ts[tp] = max(self.last_ts.get(tp, last.timestamp), last.timestamp)
            self.position[tp] = last.offset + 1
        if reached and not followed:  # a record at or past the end was read (offsets may have gaps)
            self.position[tp] = max(self.position[tp], end)
        self._check_done(tp)
        return records

    def _check_done(self, tp: Any) -> None:
        if tp not in self.follow and self.position[tp] >= self.ends[tp]:
            self.position[tp] = self.ends[tp]
            self.done.add(tp)
            self.consumer.pause(tp)

    async def drain(self, timeout: float, on_records: Callable[[list[Any]], None]) -> None:
        """Read to the ends, handing each chunk to `on_records`; a BrokerError when the
        ends are not reached within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.finished:
            if time.monotonic() > deadline:
                left = {f"{tp.topic}[{tp.partition}]": self.ends[tp] - self.position[tp] for tp in self.unfinished()}
                raise BrokerError(f"not read to the end offsets within {timeout:.0f} s; records left: {left}")
            records = await self.chunk(timeout_ms=500)
            if records:
                on_records(records)

    def unfinished(self) -> list[Any]:
        return [tp for tp in self.tps if tp not in self.done]

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None


async def topic_partitions(consumer: Any, topic: str) -> set[int] | None:
    """The partitions of `topic` (None: no such topic), from one metadata request for
    every topic: a consumer's own metadata tracks only the topics it was assigned, and
    aiokafka has no public call that asks for another's partitions."""
    cluster = await consumer._client.fetch_all_metadata()
    if topic not in cluster.topics():
        return None
    return set(cluster.partitions_for_topic(topic) or ())


async def open_range(settings: Settings, **consumer_kwargs: Any) -> Range:
    """A Range on a started group-less consumer; `add` its partitions, `close` it."""
    consumer = clients.reader(settings, **consumer_kwargs)
    await clients.start(consumer, settings)
    return Range(consumer, settings)


async def read_records(
    settings: Settings,
    topic: str,
    on_records: Callable[[list[Any]], None],
    start: Start = BEGINNING,
    partitions: Iterable[int] | None = None,
    timeout: float = 30.0,
    must_exist: bool = False,
    progress: Callable[[Range], None] | None = None,
    **consumer_kwargs: Any,
) -> Range:
    """Every record of `topic`'s partitions from `start` up to the end offsets they have
    now, handed to `on_records` chunk by chunk, in offset order per partition (and the
    range to `progress` after each chunk); the closed Range (its positions: where each
    partition's read ended)."""
    r = await open_range(settings, **consumer_kwargs)

    def take(records: list[Any]) -> None:
        on_records(records)
        if progress is not None:
            progress(r)

    try:
        await r.add(topic, start, partitions=partitions, must_exist=must_exist)
        await r.drain(timeout, take)
    finally:
        await r.close()
    return r


async def read_latest(
    settings: Settings,
    topic: str,
    partitions: Iterable[int],
    left: Callable[[int], None] | None = None,
    timeout: float = 600.0,
    **consumer_kwargs: Any,
) -> dict[int, dict[bytes, bytes]]:
    """A compacted topic's live records, up to the end offsets taken now, by partition:
    the last value of each key, tombstoned keys absent. `left(n)` is told the records
    still to read as the read goes on."""
    wanted = list(partitions)
    out: dict[int, dict[bytes, bytes]] = {p: {} for p in wanted}

    def take(records: list[Any]) -> None:
        for m in records:
            live = out[m.partition]
            if m.value is None:
                live.pop(m.key, None)
            else:
                live[m.key] = m.value

    def told(r: Range) -> None:
        if left is not None:
            left(r.total - r.read)

    await read_records(settings, topic, take, BEGINNING, wanted, timeout, progress=told, **consumer_kwargs)
    return out
