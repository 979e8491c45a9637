"""Reading the events and decisions topics for an audit: every partition (or the chosen
ones) between two offsets found by time, in chunks, with no consumer group."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ..gateway import connection
from ..gateway.errors import BrokerError, broker_error
from ..gateway.settings import Settings
from . import frames
from .join import Msg


def _raw(data: bytes | None) -> bytes | None:
    """The audit's consumers' key "deserializer": it marks them (see `_light_records`)."""
    return data


def _light_records() -> bool:
    """Have the consumers marked by `_raw` hand over each record as a `Msg`.

    aiokafka's fetcher unpacks the fetched record batches in `PartitionRecords` (a
    private class it builds by the module's name), and makes a ConsumerRecord of each
    record, through three Python calls a record. Its subclass installed here, for a
    consumer whose key deserializer is `_raw` (and that checks no CRCs and reads
    uncommitted records, as the audit's do), unpacks the batches itself into a Msg a
    record, and is iterated as that generator. Every other consumer is left as it was.
    The audit reads two whole topics: reading 1M events and 495,150 decisions took 2.2 s
    of CPU as ConsumerRecords; as Msgs, 1.93-2.0 s made one by one by a subclass's
    `_consumer_record` and 1.75-1.82 s unpacked here (side by side, on a slower machine).
    Were aiokafka's fetcher laid out otherwise, nothing is installed and the audit reads
    ConsumerRecords, which have the same five fields (the audit's tests check that Msgs
    arrive)."""
    try:
        from aiokafka.consumer import fetcher
    except ImportError:  # pragma: no cover
        return False
    base = getattr(fetcher, "PartitionRecords", None)
    if base is None or not callable(getattr(base, "_unpack_records", None)):
        return False
    if getattr(base, "light_for_audit", False):
        return True

    committed = getattr(fetcher, "READ_COMMITTED", 1)

    class AuditRecords(base):  # type: ignore[misc, valid-type]
        light_for_audit = True
        next_fetch_offset: int  # (the base class's)

        def _light(self) -> bool:
            return self._key_deserializer is _raw and not self._check_crcs and self._isolation_level != committed

        def __iter__(self) -> Any:
            # The records' generator itself, not this object: no Python `__next__`
            # between a fetch result's `getall` and each record.
            it = self._records_iterator if self._light() else None
            return it if it is not None else self

        def _unpack_records(self) -> Any:
            if not self._light():
                yield from super()._unpack_records()
                return
            part, records = self._tp.partition, self._records
            while records.has_next():
                batch = records.next_batch()
                if not batch.is_control_batch:  # (a transaction's marker: no record)
                    first = self.next_fetch_offset
                    for r in batch:
                        offset = r.offset
                        if offset >= first:  # (below: before the offset fetched from)
                            self.next_fetch_offset = offset + 1
                            yield Msg(part, offset, r.timestamp, r.key, r.value)
                self.next_fetch_offset = batch.next_offset

    fetcher.PartitionRecords = AuditRecords
    return True


class TopicRange:
    """Partitions of one topic, each read from `starts[p]` up to `ends[p]` (exclusive;
    the ends are fixed when the range is opened, so an audit reads a snapshot)."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self.consumer: AIOKafkaConsumer | None = None
        self.starts: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.beginnings: dict[int, int] = {}
        self.last_ts: dict[int, int] = {}  # partition -> newest timestamp read
        self.position: dict[int, int] = {}
        self.done: set[int] = set()

    async def open(self, start_ms: int | None, end_ms: int | None, partitions: list[int] | None = None) -> None:
        """Find the offsets: the first record at or after `start_ms` (None: the beginning)
        and the first after `end_ms` (None: the end now)."""
        # Records as Msgs, not ConsumerRecords (`_light_records`), and each response read
        # with one copy (frames.py: the consumer's connections are opened in here).
        _light_records()
        frames.install()
        with frames.frames():
            await self._open(start_ms, end_ms, partitions)

    async def _open(self, start_ms: int | None, end_ms: int | None, partitions: list[int] | None) -> None:
        s = self.settings
        # Fetches of at most 8 MiB (512 KiB a partition): what the consumer holds fetched
        # and not read yet is part of the audit's peak memory. With 64 MiB fetches a
        # 1M-event audit peaked at 414 MiB in one process, with these at 215 MiB, and
        # was no slower (benchmarks.audit, side by side with replay).
        #
        # No CRC check of each record batch on the client (check_crcs): the broker checked
        # it when the batch was produced, and what the audit reads of a record is checked
        # anyway (an event that does not decode is counted as a dead letter, a decision
        # that does not decode as unreadable, one that differs as a mismatch). Reading
        # 1M events took 1.18-1.29 s without the check, 1.44-1.55 s with it.
        consumer = connection.reader(
            s,
            max_partition_fetch_bytes=512 << 10,
            fetch_max_bytes=8 << 20,
            check_crcs=False,
            key_deserializer=_raw,
        )
        await connection.start(consumer, s)
        self.consumer = consumer
        try:
            if self.topic not in await consumer.topics():  # a metadata request for every topic
                raise BrokerError(
                    f"topic {self.topic} does not exist on {s.bootstrap} (check --bootstrap and --topic-prefix)"
                )
            found = consumer.partitions_for_topic(self.topic)
            if not found:  # topics() reads the metadata without keeping it: the client's own copy
                await consumer._client.force_metadata_update()
                found = consumer.partitions_for_topic(self.topic) or set()
            parts = sorted(found) if partitions is None else sorted(set(partitions) & set(found))
            tps = [TopicPartition(self.topic, p) for p in parts]
            consumer.assign(tps)
            first = await consumer.beginning_offsets(tps)
            last = await consumer.end_offsets(tps)
            starts = dict(first)
            if start_ms is not None:
                at = await consumer.offsets_for_times({tp: max(0, start_ms) for tp in tps})
                starts = {tp: (at[tp].offset if at[tp] is not None else last[tp]) for tp in tps}
            ends = dict(last)
            if end_ms is not None:
                at = await consumer.offsets_for_times({tp: end_ms + 1 for tp in tps})
                ends = {tp: (at[tp].offset if at[tp] is not None else last[tp]) for tp in tps}
        except KafkaError as exc:
            await self.close()
            raise broker_error(exc, s) from None
        except BaseException:
            await self.close()
            raise
        for tp in tps:
            p = tp.partition
            self.beginnings[p] = first[tp]
            self.starts[p] = starts[tp]
            self.ends[p] = ends[tp]
            self.position[p] = starts[tp]
            if starts[tp] >= ends[tp]:
                self.done.add(p)
                consumer.pause(tp)
            else:
                consumer.seek(tp, starts[tp])

    @property
    def total(self) -> int:
        return sum(max(0, self.ends[p] - self.starts[p]) for p in self.ends)

    @property
    def read(self) -> int:
        return sum(self.position[p] - self.starts[p] for p in self.ends)

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.ends)

    def complete(self, partition: int) -> bool:
        """Read from the partition's very first record (nothing was ever deleted)."""
        return self.starts.get(partition) == self.beginnings.get(partition) == 0

    def horizon(self) -> int | None:
        """Records up to this timestamp have been read in every partition still being
        read (None: every partition is done, or one has not been read yet)."""
        live = [p for p in self.ends if p not in self.done]
        if not live:
            return None
        times = [self.last_ts.get(p) for p in live]
        return None if any(t is None for t in times) else min(times)  # type: ignore[type-var]

    async def chunk(self, timeout_ms: int = 1000) -> list[Any]:
        """The next records, each partition's in offset order; [] when done or idle."""
        assert self.consumer is not None
        if self.finished:
            return []
        try:
            got = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=10000)
        except KafkaError as exc:
            raise broker_error(exc, self.settings) from None
        out: list[Any] = []  # Msgs (or ConsumerRecords: the same five fields)
        for tp, records in got.items():
            p = tp.partition
            end = self.ends[p]
            reached = bool(records) and records[-1].offset >= end - 1
            if records and records[-1].offset >= end:
                records = [r for r in records if r.offset < end]
            if records:
                out.extend(records)
                last = records[-1]
                self.last_ts[p] = max(self.last_ts.get(p, last.timestamp), last.timestamp)
                self.position[p] = last.offset + 1
            if reached:  # a record at or past the end was read (offsets may have gaps)
                self.position[p] = end
            if self.position[p] >= end:
                self.position[p] = end
                self.done.add(p)
                self.consumer.pause(tp)
        return out

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None


def partitions_of(keys: list[str], count: int) -> list[int]:
    """The partitions Kafka's default partitioner puts these keys on."""
    from ..gateway.partitioner import partition_for

    return sorted({partition_for(k.encode(), count) for k in keys})


def describe(r: TopicRange) -> dict[str, Any]:
    return {"topic": r.topic, "partitions": len(r.ends), "records": r.total}
