"""Real-broker helpers for the integration tests: worker processes, produce, consume."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.admin.topics import create_topics
from streams.gateway import settings as settings_mod
from streams.tools.launch import Worker, command
from streams.tools.localkafka import free_port

ROOT = Path(__file__).resolve().parents[2]


def new_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}."


def topic_settings(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    return settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": partitions}, env={})


class WorkerProcess(Worker):
    """`loopwarden worker` as a real child process (streams/tools/launch.py), on test
    topics, with a config file, its own data dir and a 6 s session timeout."""

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
        port = free_port()
        cfg = tmp / f"config-{name}.json"
        cfg.write_text(json.dumps(config or {}))
        super().__init__(
            [
                "--bootstrap",
                bootstrap,
                "--topic-prefix",
                prefix,
                "--partitions",
                str(partitions),
                "--config",
                str(cfg),
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


def setup_topics(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    s = topic_settings(bootstrap, prefix, partitions)
    asyncio.run(create_topics(s))
    return s


def fresh_worker(bootstrap: str, tmp: Path, started: list, config: dict | None, **kw) -> tuple:
    """New topics under a fresh prefix and one healthy worker on them: (settings, worker)."""
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, kw.get("partitions", 8))
    w = WorkerProcess(bootstrap, prefix, config, tmp, **kw)
    started.append(w)
    w.start()
    return s, w


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


def distinct(msgs) -> list:
    """Messages of the decisions topic, a decision's repeats (by event_id) dropped: a
    worker may publish a decision again (an event folded twice after a rebalance or a
    re-read is answered identically, and gateways keep the first), so a repeat must be
    identical to the first."""
    seen: dict[str, bytes] = {}
    out = []
    for m in msgs:
        eid = json.loads(m.value)["event_id"]
        first = seen.setdefault(eid, m.value)
        if first is m.value:
            out.append(m)
        else:
            assert json.loads(first) == json.loads(m.value), f"two different decisions for {eid}"
    return out


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
