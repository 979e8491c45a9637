"""Reading and following a one-partition compacted topic.

loopwarden has two such small logs that every worker reads whole at start and then
follows (the config and fleet topics, streams/admin). What differs is what a record
means, which each gives as a `Ledger` (its `add` takes one record in, and logs and skips
one it cannot read). Reading, following and publishing are the same, and live here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import clients, ranges
from .settings import Settings

log = logging.getLogger("loopwarden.admin")

READ_TIMEOUT_S = 30.0


class Ledger(Protocol):
    """What a topic's records add up to, and the offset after the last one read."""

    next_offset: int

    def add(self, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]], where: str) -> None:
        """Take one record in; an unreadable one is logged and skipped, never raised."""


def _adder(topic: str, ledger: Ledger) -> Callable[[list[Any]], None]:
    def add(records: list[Any]) -> None:
        for m in records:
            ledger.add(m.key, m.value, m.headers, f"{topic}@{m.offset}")
            ledger.next_offset = m.offset + 1

    return add


async def read_whole(settings: Settings, topic: str, ledger: Ledger, timeout: float = READ_TIMEOUT_S) -> None:
    """Every record of `topic` (partition 0) up to its end offset at the time of the
    call, into `ledger`. A topic that does not exist leaves the ledger as it is."""
    add = _adder(topic, ledger)
    r = await ranges.read_records(settings, topic, add, partitions=[0], timeout=timeout)
    # Compaction leaves gaps, and the last offsets may be transaction markers or removed
    # records: where the read ended is where the ledger goes on from.
    for at in r.position.values():
        ledger.next_offset = max(ledger.next_offset, at)


async def publish(
    settings: Settings, topic: str, records: Iterable[tuple[bytes, bytes, list[tuple[str, bytes]]]], quiet: bool = False
) -> None:
    """Produce (key, value, headers) records to partition 0 of `topic`, in order, each
    acknowledged by every in-sync replica before the next. `quiet`: the topic was just
    created, so aiokafka's warnings about a leader not elected yet (retried) are dropped."""
    producer = clients.producer(settings, acks="all", enable_idempotence=True)
    hush = _NewTopicRetries()
    loggers = [logging.getLogger(name) for name in ("aiokafka.producer.sender", "aiokafka.cluster")]
    if quiet:
        for logger in loggers:
            logger.addFilter(hush)
    try:
        async with clients.opened(producer, settings):
            for key, value, headers in records:
                await producer.send_and_wait(topic, value, key=key, partition=0, headers=headers)
    finally:
        for logger in loggers:
            logger.removeFilter(hush)


class _NewTopicRetries(logging.Filter):
    """Drops aiokafka's messages about a topic created a moment ago: a produce retried as
    it has no leader ready yet, and metadata that does not list it yet (the producer asks
    again; the command prints nothing about either)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        msg = str(record.msg)
        if msg.startswith("Topic %s not found in cluster metadata"):
            return False
        return not (
            msg.startswith("Got error produce response on topic-partition")
            and any(getattr(a, "__name__", "") == "NotLeaderForPartitionError" for a in args)
        )


class Follower:
    """Follows a topic from where a `read_whole` stopped (`ledger.next_offset`), adding
    each new record to the ledger. One consumer, no group, partition 0."""

    def __init__(self, settings: Settings, topic: str, ledger: Ledger, what: str) -> None:
        self.settings = settings
        self.topic = topic
        self.ledger = ledger
        self.what = what  # for the log: "the config topic", "the fleet topic"
        self._range: ranges.Range | None = None

    async def start(self, **consumer_kwargs: Any) -> None:
        self._range = await ranges.open_range(self.settings, **consumer_kwargs)
        start = {0: self.ledger.next_offset}
        await self._range.add(self.topic, start, partitions=[0], follow=True, must_exist=False)

    async def poll(self, timeout_s: float = 1.0) -> bool:
        """Wait up to `timeout_s` for new records; whether any was taken in."""
        assert self._range is not None, "start() first"
        if not self._range.tps:  # the topic did not exist at the start: look again
            await self._range.add(self.topic, ranges.BEGINNING, partitions=[0], follow=True, must_exist=False)
            if not self._range.tps:
                await asyncio.sleep(timeout_s)
                return False
        records = await self._range.chunk(timeout_ms=int(timeout_s * 1000))
        _adder(self.topic, self.ledger)(records)
        return bool(records)

    async def stop(self) -> None:
        if self._range is not None:
            try:
                await asyncio.wait_for(self._range.close(), 5.0)
            except Exception as exc:  # a consumer that cannot reach its broker
                log.warning("%s's consumer did not stop cleanly: %r", self.what, exc)
