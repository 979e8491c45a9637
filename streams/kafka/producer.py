"""Batch publishing: one produce batch per partition per processed batch (the worker's
decisions, dead letters and changelog records, the fleet's stages' output).

aiokafka's per-message `send` costs tens of microseconds in Python; a worker publishing a
decision and a changelog record for most events spends more there than in the fold.
Building one record batch per partition and awaiting the deliveries together costs a
few microseconds per message, and the worker acknowledges its input only after
everything the batch produced is durable (acks=all).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec
from aiokafka import AIOKafkaProducer
from mode import Service

from . import clients
from .partitioner import partition_for
from .settings import Settings

# Records per produce batch, in bytes (aiokafka's default is 16 KiB). A partition gets at
# most one batch per produce request, so a processed batch's decisions for one partition,
# or a flush's states, split into 16 KiB batches would take one round trip each; below the
# broker's default limit of about 1 MiB per batch (message.max.bytes).
BATCH_BYTES = 512 * 1024


class OutRecord(msgspec.Struct, gc=False):
    """A record to produce (named apart from the aiokafka and Faust records consumed).
    A struct, made in C: the worker makes one per decision (a NamedTuple costs four
    times as much to make)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None
    partition: int | None = None  # None: the default partitioner's choice for the key


class BatchProducer(Service):
    """An idempotent producer (acks=all) that publishes lists of records as batches."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._partitions: dict[str, int] = {}
        self._starting = asyncio.Lock()

    async def on_start(self) -> None:
        await self._ensure_producer()

    async def _ensure_producer(self) -> AIOKafkaProducer:
        # The agent may get its first batch before the worker reaches this service
        # (services start after table recovery), so publishing starts it too.
        async with self._starting:
            if self._producer is None:
                s = self._settings
                producer = clients.producer(
                    s, acks="all", enable_idempotence=True, linger_ms=0, max_batch_size=BATCH_BYTES
                )
                await clients.start(producer, s)
                self._producer = producer
        return self._producer

    async def probe(self, timeout_s: float = 5.0) -> bool | None:
        """Whether the broker answers a metadata request over this producer's connections
        (None: the producer is not started)."""
        producer = self._producer
        if producer is None:
            return None
        try:
            return bool(await asyncio.wait_for(producer.client.force_metadata_update(), timeout_s))
        except Exception:
            return False

    async def on_stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def _count(self, topic: str) -> int:
        n = self._partitions.get(topic)
        if n is None:
            p = await self._ensure_producer()
            n = self._partitions[topic] = len(await p.partitions_for(topic))
        return n

    async def send(self, records: Iterable[OutRecord]) -> asyncio.Future[Any]:
        """Queue every record; the returned future is done once all are acknowledged by
        the broker. Calls made one after another (never concurrently) keep their order
        within each partition, so a caller need not wait for one delivery before the next."""
        p = self._producer or await self._ensure_producer()
        groups: dict[tuple[str, int], list[OutRecord]] = defaultdict(list)
        counts = self._partitions
        for r in records:
            part = r.partition
            if part is None:
                n = counts.get(r.topic) or await self._count(r.topic)
                part = partition_for(r.key or b"", n)
            groups[(r.topic, part)].append(r)
        futures: list[asyncio.Future[Any]] = []
        for (topic, part), recs in groups.items():
            batch = p.create_batch()
            for r in recs:
                if batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers or []) is None:
                    futures.append(await p.send_batch(batch, topic, partition=part))
                    batch = p.create_batch()
                    batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers or [])
            futures.append(await p.send_batch(batch, topic, partition=part))
        if len(futures) == 1:  # a lone event's batch, mostly: no gathering future to make
            return futures[0]
        return asyncio.gather(*futures)

    async def publish(self, records: Iterable[OutRecord]) -> None:
        """Publish every record and return once all are acknowledged by the broker."""
        await (await self.send(records))
