"""Real-broker helpers for the integration tests: worker processes (the one way a test
starts one: `launch_worker`, behind conftest.py's `start_worker` fixture), produce,
consume, waiting for a state (`wait_until`), the test topics and their deletion."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streams.admin.topics import create_topics
from streams.gateway import settings as settings_mod
from streams.tools.launch import Worker, command
from streams.tools.localkafka import free_port
from tests.events import distinct

ROOT = Path(__file__).resolve().parents[2]
PREFIXES: list[str] = []  # every prefix new_prefix() gave, in order (conftest.py deletes their topics)
T = TypeVar("T")


def new_prefix() -> str:
    """A topic prefix of its own for a test (its topics are deleted when the test ends)."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    PREFIXES.append(prefix)
    return prefix


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


def topic_settings(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    return settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": partitions}, env={})


class WorkerProcess(Worker):
    """`loopwarden worker` as a real child process (streams/tools/launch.py), on test
    topics, with a config file (config None: none, so it follows the config topic), its
    own data dir and a 6 s session timeout. `topics`: the names of its topics."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        config: dict | None,
        tmp: Path,
        partitions: int = 8,
        name: str = "w",
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        self.topics = topic_settings(bootstrap, prefix, partitions)
        port = free_port()
        pinned: tuple[str, ...] = ()
        if config is not None:
            cfg = tmp / f"config-{name}.json"
            cfg.write_text(json.dumps(config))
            pinned = ("--config", str(cfg))
        super().__init__(
            [
                "--bootstrap",
                bootstrap,
                "--topic-prefix",
                prefix,
                "--partitions",
                str(partitions),
                *pinned,
                "--data-dir",
                str(tmp / f"data-{name}"),
                "--log-level",
                "info",
                "--session-timeout-s",
                "6",
                *extra,
            ],
            tmp / f"worker-{name}-{port}.log",
            port=port,
            cwd=ROOT,
            stop_timeout=30,
            env=env,
        )

    def partitions(self) -> list:
        """The partitions its /health names (none while it does not answer)."""
        return (self.health() or {}).get("partitions") or []

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of metric `name` (or `name`_total, a counter's) on
        /metrics whose labels include `labels`; 0 when there is none."""
        want = [f'{k}="{v}"' for k, v in labels.items()]
        total = 0.0
        for line in self.metrics().splitlines():
            sample, _, value = line.rpartition(" ")
            base, _, tags = sample.partition("{")
            if base in (name, f"{name}_total") and all(w in tags for w in want):
                total += float(value)
        return total


def setup_topics(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    s = topic_settings(bootstrap, prefix, partitions)
    asyncio.run(create_topics(s))
    return s


def launch_worker(
    bootstrap: str,
    tmp: Path,
    started: list,
    prefix: str | None,
    config: dict | None,
    start: bool = True,
    wait: bool = True,
    **kw,
) -> WorkerProcess:
    """A worker on `prefix`'s topics (None: a fresh prefix, its topics made first), added
    to `started` (whoever owns that list stops them), started unless start=False, and
    healthy on return unless wait=False. `kw`: WorkerProcess's (partitions, name, extra,
    env)."""
    if prefix is None:
        prefix = new_prefix()
        setup_topics(bootstrap, prefix, kw.get("partitions", 8))
    w = WorkerProcess(bootstrap, prefix, config, tmp, **kw)
    started.append(w)
    if start:
        w.start(wait=wait)
    return w


def fresh_worker(bootstrap: str, tmp: Path, started: list, config: dict | None, **kw) -> tuple:
    """New topics under a fresh prefix and one healthy worker on them: (settings, worker);
    for fixtures wider than a test (a test takes the `start_worker` fixture)."""
    w = launch_worker(bootstrap, tmp, started, None, config, **kw)
    return w.topics, w


async def _delete_topics(bootstrap: str, prefixes: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(tuple(prefixes))]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def _committed(bootstrap: str, group: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return sum(o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset > 0)
    finally:
        await admin.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The offsets the consumer group has committed on the topic's partitions, summed (a
    worker's group is its app id, `Settings.app_id`)."""
    return asyncio.run(_committed(bootstrap, group, topic))


def delete_topics(bootstrap: str, prefixes: list[str]) -> None:
    """Delete every topic under the prefixes (the shared broker would otherwise gather
    thousands of partitions over a run); a broker that refuses is left as it is."""
    try:
        asyncio.run(_delete_topics(bootstrap, prefixes))
    except KafkaError:
        pass


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5)
    await p.start()
    try:
        futs = [await p.send(topic, key=k, value=v) for k, v in records]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    asyncio.run(_produce(bootstrap, topic, records))


def event_records(events: list[dict]) -> list[tuple[bytes | None, bytes]]:
    return [
        (e["run_id"].encode() if isinstance(e.get("run_id"), str) else None, json.dumps(e).encode()) for e in events
    ]


async def _consume(bootstrap: str, topic: str, want: int, timeout: float, settle: float):
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    try:
        parts = c.partitions_for_topic(topic) or set()
        if not parts:
            await c._client.force_metadata_update()
            parts = c.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got = []
        deadline = time.monotonic() + timeout
        settle_until = None
        while time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=200)
            for msgs in batch.values():
                got.extend(msgs)
            if len(got) >= want:
                settle_until = settle_until or time.monotonic() + settle
                if time.monotonic() >= settle_until:
                    break
        return got
    finally:
        await c.stop()


def consume(bootstrap: str, topic: str, want: int, timeout: float = 60, settle: float = 1.0):
    """Every message of the topic (all partitions, from the start) once `want` arrived or time ran out."""
    return asyncio.run(_consume(bootstrap, topic, want, timeout, settle))


def consume_distinct(bootstrap: str, topic: str, want: int, timeout: float = 60, settle: float = 1.0) -> list:
    """Every distinct decision of the topic (see `distinct`) once `want` of them arrived
    or time ran out."""
    deadline = time.monotonic() + timeout
    n = want
    while True:
        msgs = consume(bootstrap, topic, n, timeout=max(1.0, deadline - time.monotonic()), settle=settle)
        got = distinct(msgs)
        if len(got) >= want or time.monotonic() >= deadline:
            return got
        n = len(msgs) + want - len(got)


def decisions_by_partition(msgs) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        out.setdefault(m.partition, []).append(json.loads(m.value))
    return out


def audit(bootstrap: str, prefix: str, *args: str) -> tuple[int, dict]:
    """`loopwarden audit --json` on the test topics: (exit code, summary); 0 or 2 only."""
    p = subprocess.run(
        command("audit", "--bootstrap", bootstrap, "--topic-prefix", prefix, "--json", *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode in (0, 2) and p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout)
