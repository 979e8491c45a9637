"""The partition Kafka's default partitioner picks for a key (murmur2, as the Java
client computes it). Shared by the gateway client (which reads only its own gateway's
decisions partition) and the worker's producer; it imports nothing of the worker."""

from __future__ import annotations

from functools import lru_cache

from aiokafka.partitioner import murmur2


@lru_cache(maxsize=4096)
def partition_for(key: bytes, partitions: int) -> int:
    """The partition of `key` among `partitions` (murmur2 is pure Python, and the same
    gateway keys come back batch after batch, hence the cache). Run states carry their
    events' partition instead: a cache keyed by run would grow with every run."""
    h: int = murmur2(key)  # aiokafka ships no type information
    return (h & 0x7FFFFFFF) % partitions
