"""What the tests and the benchmarks share to drive a real broker: settings for a topic
prefix, the topics, worker processes (the one way either starts `loopwarden worker`),
producing, reading topics to their end offsets, waiting on a worker's metric, and
percentiles. Waits are on end offsets, committed offsets or a metric, never on a fixed
quiet period.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..admin.topics import create_topics
from ..kafka import clients, ranges
from ..kafka import settings as settings_mod
from .launch import Worker
from .localkafka import free_port

T = TypeVar("T")
Record = tuple[bytes | None, bytes]


def topic_settings(bootstrap: str, prefix: str = "loopwarden.", partitions: int = 8) -> settings_mod.Settings:
    """Settings for the topics under `prefix` on `bootstrap`, the environment ignored."""
    return settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": partitions}, env={})


def setup_topics(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    """The topics under `prefix`, made if missing; their settings."""
    s = topic_settings(bootstrap, prefix, partitions)
    asyncio.run(create_topics(s))
    return s


def wait_until(cond: Callable[[], T], timeout: float, what: str | Callable[[], str], every: float = 0.05) -> T:
    """Poll `cond` until it returns something true, and return that; AssertionError
    naming `what` (a callable: called then, e.g. for a worker's log) once `timeout`
    seconds have passed."""
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        time.sleep(every)
    return got


# --- producing and reading -----------------------------------------------------------------


async def produce_async(bootstrap: str, topic: str, records: Iterable[Record], linger_ms: int = 5) -> None:
    """Produce (key, value) records, every one acknowledged by the broker on return."""
    s = topic_settings(bootstrap)
    p = clients.producer(s, acks="all", enable_idempotence=True, linger_ms=linger_ms)
    async with clients.opened(p, s):
        futs = [await p.send(topic, key=k, value=v) for k, v in records]
        await asyncio.gather(*futs)


def produce(bootstrap: str, topic: str, records: Iterable[Record]) -> None:
    asyncio.run(produce_async(bootstrap, topic, records))


def event_records(events: list[dict[str, Any]]) -> list[Record]:
    """Events as records keyed by their run id (None: no key, as a bad event may have)."""
    return [
        (e["run_id"].encode() if isinstance(e.get("run_id"), str) else None, json.dumps(e).encode()) for e in events
    ]


async def read_all_async(bootstrap: str, topic: str, timeout: float = 60.0, **consumer_kwargs: Any) -> list[Any]:
    """Every record of `topic` up to its end offsets now, each partition's in offset
    order, partition after partition ([] when there is no such topic)."""
    got: list[Any] = []
    await ranges.read_records(topic_settings(bootstrap), topic, got.extend, timeout=timeout, **consumer_kwargs)
    return sorted(got, key=lambda m: (m.partition, m.offset))


def read_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Any]:
    return asyncio.run(read_all_async(bootstrap, topic, timeout))


async def consume_async(bootstrap: str, topic: str, want: int, timeout: float = 60.0) -> list[Any]:
    """Every record of `topic` once at least `want` are there (all it has, up to its end
    offsets then) or `timeout` passed: the topic is followed from its start, and read to
    the end offsets it has when the count is reached."""
    s = topic_settings(bootstrap)
    deadline = time.monotonic() + timeout
    got: list[Any] = []
    r = await ranges.open_range(s)
    try:
        while not await r.add(topic, ranges.BEGINNING, follow=True, must_exist=False):
            if time.monotonic() >= deadline:
                return got
            await asyncio.sleep(0.2)
        while time.monotonic() < deadline:
            got.extend(await r.chunk(timeout_ms=200))
            if len(got) >= want and r.caught_up():
                break
        if len(got) >= want:  # and what came meanwhile, up to the end offsets now
            ends = await r.consumer.end_offsets(r.tps)
            while any(r.position[tp] < ends[tp] for tp in r.tps) and time.monotonic() < deadline:
                got.extend(await r.chunk(timeout_ms=200))
    finally:
        await r.close()
    return sorted(got, key=lambda m: (m.partition, m.offset))


def consume(bootstrap: str, topic: str, want: int, timeout: float = 60.0) -> list[Any]:
    return asyncio.run(consume_async(bootstrap, topic, want, timeout))


async def end_offsets_async(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of each partition of `topic` now ({} when there is no such topic)."""
    s = topic_settings(bootstrap)
    c = clients.reader(s)
    async with clients.opened(c, s):
        parts = await ranges.topic_partitions(c, topic)
        if not parts:
            return {}
        from aiokafka import TopicPartition

        ends = await c.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])
        return {tp.partition: n for tp, n in ends.items()}


async def wait_for_count(bootstrap: str, topic: str, want: int, timeout: float, every: float = 0.25) -> int:
    """Until `topic`'s end offsets add up to `want` records (asked of the broker, nothing
    read: a reader would compete with what a benchmark measures for the cores); the
    count then. TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        n = sum((await end_offsets_async(bootstrap, topic)).values())
        if n >= want:
            return n
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{topic} holds {n} records, not {want}, after {timeout:g} s")
        await asyncio.sleep(every)


async def committed_async(bootstrap: str, group: str, topic: str) -> int:
    """The offsets `group` has committed on the topic's partitions, summed (a worker's
    group is its app id, `Settings.app_id`): what its output covers, durably."""
    s = topic_settings(bootstrap)
    admin = clients.admin(s)
    async with clients.opened(admin, s):
        offsets = await admin.list_consumer_group_offsets(group)
    return sum(o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset > 0)


def committed(bootstrap: str, group: str, topic: str) -> int:
    return asyncio.run(committed_async(bootstrap, group, topic))


async def delete_topics_async(bootstrap: str, prefixes: Sequence[str]) -> None:
    """Delete every topic under the prefixes."""
    s = topic_settings(bootstrap)
    admin = clients.admin(s)
    async with clients.opened(admin, s):
        names = [t for t in await admin.list_topics() if t.startswith(tuple(prefixes))]
        if names:
            await admin.delete_topics(names)


# --- metrics and percentiles ------------------------------------------------------------------


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of metric `name` (or `name`_total, a counter's) in a
    Prometheus text page whose labels include `labels`; 0 when there is none."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        base, _, tags = sample.partition("{")
        if base in (name, f"{name}_total") and all(w in tags for w in want):
            total += float(value)
    return total


def percentile(values: Sequence[float], p: float) -> float | None:
    """The `p`-th percentile (0-100) of `values`, nearest rank; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def percentiles(values: Sequence[float], ps: Iterable[float] = (50, 99), scale: float = 1.0) -> dict[str, Any]:
    """{"p50": ..., "p99": ..., "max": ..., "n": ...} of `values` times `scale`, rounded."""
    out: dict[str, Any] = {}
    for p in ps:
        v = percentile(values, p)
        out[f"p{p:g}"] = round(v * scale, 2) if v is not None else None
    out["max"] = round(max(values) * scale, 2) if values else None
    out["n"] = len(values)
    return out


# --- worker processes ----------------------------------------------------------------------


class WorkerProcess(Worker):
    """`loopwarden worker` as a real child process (streams/tools/launch.py) on the topics
    under `prefix`, with a config file (config None: none, so it follows the config
    topic), its own data dir, a 6 s session timeout and `extra` flags; `env` is added to
    the child's environment. `topics`: the settings naming its topics."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        config: dict[str, Any] | None,
        tmp: Path,
        partitions: int = 8,
        name: str = "w",
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        log_level: str = "info",
    ) -> None:
        self.tmp = tmp
        self.topics = topic_settings(bootstrap, prefix, partitions)
        port = free_port()
        pinned: tuple[str, ...] = ()
        if config is not None:
            cfg = tmp / f"config-{name}.json"
            cfg.write_text(json.dumps(config))
            pinned = ("--config", str(cfg))
        flags = [
            *("--bootstrap", bootstrap, "--topic-prefix", prefix, "--partitions", str(partitions), *pinned),
            *("--data-dir", str(tmp / f"data-{name}"), "--log-level", log_level, "--session-timeout-s", "6"),
            *extra,
        ]
        super().__init__(flags, tmp / f"worker-{name}-{port}.log", port=port, cwd=cwd, stop_timeout=30, env=env)

    def partitions(self) -> list[int]:
        """The partitions its /health names (none while it does not answer)."""
        return list((self.health() or {}).get("partitions") or [])

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of metric `name` on its /metrics whose labels include
        `labels` (`metric_value`); 0 when there is none."""
        return metric_value(self.metrics(), name, **labels)

    def wait_metric(self, name: str, at_least: float, timeout: float = 30.0, **labels: str) -> float:
        """Until its metric `name` reaches `at_least`; the value then."""
        wait_until(
            lambda: self.metric(name, **labels) >= at_least,
            timeout,
            lambda: f"{name} >= {at_least:g} (it is {self.metric(name, **labels):g})\n{self.tail()}",
        )
        return self.metric(name, **labels)
