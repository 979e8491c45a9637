"""Reading the events and decisions topics for an audit: every partition (or the chosen
ones) between two offsets found by time, in chunks, with no consumer group."""

from __future__ import annotations

from typing import Any

from ..kafka import compat, frames, ranges
from ..kafka.settings import Settings


class TopicRange:
    """Partitions of one topic, each read from `starts[p]` up to `ends[p]` (exclusive;
    the ends are fixed when the range is opened, so an audit reads a snapshot): a
    `streams.kafka.ranges.Range` read by a light consumer, its offsets by partition."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self.range: ranges.Range | None = None
        self.starts: dict[int, int] = {}
        self.ends: dict[int, int] = {}

    async def open(self, start_ms: int | None, end_ms: int | None, partitions: list[int] | None = None) -> None:
        """Find the offsets: the first record at or after `start_ms` (None: the beginning)
        and the first after `end_ms` (None: the end now)."""
        # Records as Msgs, not ConsumerRecords (compat.light_records), and each response
        # read with one copy (frames.py: the consumer's connections are opened in here).
        compat.light_records()
        frames.install()
        with frames.frames():
            # Fetches of at most 8 MiB (512 KiB a partition): what the consumer holds
            # fetched and not read yet is part of the audit's peak memory. No CRC check of
            # each record batch on the client: the broker checked it when the batch was
            # produced, and what the audit reads of a record is checked anyway (an event
            # that does not decode is a dead letter, a decision that does not decode is
            # unreadable, one that differs is a mismatch). benchmarks.audit measures both.
            self.range = r = await ranges.open_range(
                self.settings,
                max_partition_fetch_bytes=512 << 10,
                fetch_max_bytes=8 << 20,
                check_crcs=False,
                key_deserializer=compat.raw_key,
            )
            try:
                start: ranges.Start = ranges.BEGINNING if start_ms is None else start_ms
                await r.add(self.topic, start, end_ms, partitions)
            except BaseException:
                await self.close()
                raise
        self.starts = {tp.partition: r.starts[tp] for tp in r.tps}
        self.ends = {tp.partition: r.ends[tp] for tp in r.tps}

    @property
    def total(self) -> int:
        return self.range.total if self.range is not None else 0

    @property
    def read(self) -> int:
        return self.range.read if self.range is not None else 0

    @property
    def finished(self) -> bool:
        return self.range is None or self.range.finished

    def complete(self, partition: int) -> bool:
        """Read from the partition's very first record (nothing was ever deleted)."""
        r = self.range
        return r is not None and any(tp.partition == partition and r.complete(tp) for tp in r.tps)

    def horizon(self) -> int | None:
        """Records up to this timestamp have been read in every partition still being
        read (None: every partition is done, or one has not been read yet)."""
        return self.range.horizon() if self.range is not None else None

    async def chunk(self, timeout_ms: int = 1000) -> list[Any]:
        """The next records (Msgs, or ConsumerRecords: the same five fields), each
        partition's in offset order; [] when done or idle."""
        if self.range is None:
            return []
        return await self.range.chunk(timeout_ms=timeout_ms, max_records=10000)

    async def close(self) -> None:
        if self.range is not None:
            await self.range.close()
            self.range = None


def partitions_of(keys: list[str], count: int) -> list[int]:
    """The partitions Kafka's default partitioner puts these keys on."""
    from ..kafka.partitioner import partition_for

    return sorted({partition_for(k.encode(), count) for k in keys})


def describe(r: TopicRange) -> dict[str, Any]:
    return {"topic": r.topic, "partitions": len(r.ends), "records": r.total}
