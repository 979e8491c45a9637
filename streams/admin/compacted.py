"""Reading and following a one-partition compacted topic (the config and fleet topics).

Both topics are small logs that every worker reads whole at start and then follows: the
config topic (`config_topic.py`) and the fleet topic (`fleet_topic.py`). What differs is
what a record means, which each gives as a `Ledger` (its `add` takes one record in, and
logs and skips one it cannot read). Reading and following are the same, and live here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from ..gateway import connection
from ..gateway.errors import BrokerError, broker_error
from ..gateway.settings import Settings

log = logging.getLogger("loopwarden.admin")

READ_TIMEOUT_S = 30.0


class Ledger(Protocol):
    """What a topic's records add up to, and the offset after the last one read."""

    next_offset: int

    def add(self, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]], where: str) -> None:
        """Take one record in; an unreadable one is logged and skipped, never raised."""


async def read_to(consumer: Any, tp: Any, ledger: Ledger, end: int, timeout: float) -> None:
    """Read `tp` from the ledger's offset up to `end`, adding each record."""
    deadline = time.monotonic() + timeout
    while ledger.next_offset < end:
        if time.monotonic() > deadline:
            raise BrokerError(
                f"{tp.topic} was not read to its end offset {end} within {timeout:.0f} s (at {ledger.next_offset})"
            )
        got = await consumer.getmany(tp, timeout_ms=500)
        for m in got.get(tp, []):
            ledger.add(m.key, m.value, m.headers, f"{tp.topic}@{m.offset}")
            ledger.next_offset = m.offset + 1
        # Compaction leaves gaps, and the last offsets may be transaction markers or
        # removed records: the consumer's position is where the read really is.
        ledger.next_offset = max(ledger.next_offset, await consumer.position(tp))


async def read_whole(settings: Settings, topic: str, ledger: Ledger, timeout: float = READ_TIMEOUT_S) -> None:
    """Every record of `topic` (partition 0) up to its end offset at the time of the
    call, into `ledger`. A topic that does not exist leaves the ledger as it is."""
    from aiokafka import TopicPartition
    from aiokafka.errors import KafkaError

    consumer = connection.reader(settings)
    await connection.start(consumer, settings)
    try:
        if topic not in await consumer.topics():
            return
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        ledger.next_offset = await consumer.position(tp)
        await read_to(consumer, tp, ledger, end, timeout)
    except KafkaError as exc:
        raise broker_error(exc, settings) from None
    finally:
        await consumer.stop()


async def publish(
    settings: Settings, topic: str, records: Iterable[tuple[bytes, bytes, list[tuple[str, bytes]]]], quiet: bool = False
) -> None:
    """Produce (key, value, headers) records to partition 0 of `topic`, in order, each
    acknowledged by every in-sync replica before the next. `quiet`: the topic was just
    created, so aiokafka's warnings about a leader not elected yet (retried) are dropped."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    from ..gateway.errors import SettingsError

    try:
        producer = AIOKafkaProducer(**connection.client_kwargs(settings), acks="all", enable_idempotence=True)
    except ValueError as exc:
        raise SettingsError(f"cannot connect with these settings: {exc}") from None
    await connection.start(producer, settings)
    hush = _NewTopicRetries()
    loggers = [logging.getLogger(name) for name in ("aiokafka.producer.sender", "aiokafka.cluster")]
    if quiet:
        for logger in loggers:
            logger.addFilter(hush)
    try:
        for key, value, headers in records:
            await producer.send_and_wait(topic, value, key=key, partition=0, headers=headers)
    except KafkaError as exc:
        raise broker_error(exc, settings) from None
    finally:
        for logger in loggers:
            logger.removeFilter(hush)
        await producer.stop()


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
        self._consumer: Any = None
        self._tp: Any = None

    async def start(self, **consumer_kwargs: Any) -> None:
        from aiokafka import TopicPartition

        self._consumer = connection.reader(self.settings, **consumer_kwargs)
        await connection.start(self._consumer, self.settings)
        self._tp = TopicPartition(self.topic, 0)
        self._consumer.assign([self._tp])
        self._consumer.seek(self._tp, self.ledger.next_offset)

    async def poll(self, timeout_s: float = 1.0) -> bool:
        """Wait up to `timeout_s` for new records; whether any was taken in."""
        got = await self._consumer.getmany(self._tp, timeout_ms=int(timeout_s * 1000))
        msgs = got.get(self._tp, [])
        for m in msgs:
            self.ledger.add(m.key, m.value, m.headers, f"{self._tp.topic}@{m.offset}")
            self.ledger.next_offset = m.offset + 1
        return bool(msgs)

    async def stop(self) -> None:
        if self._consumer is not None:
            try:
                await asyncio.wait_for(self._consumer.stop(), 5.0)
            except Exception as exc:  # a consumer that cannot reach its broker
                log.warning("%s's consumer did not stop cleanly: %r", self.what, exc)
