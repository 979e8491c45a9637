"""Real-broker helpers for the integration tests: worker processes, produce, consume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams import settings as settings_mod
from streams.topics import create_topics
from streams.tools.localkafka import free_port

ROOT = Path(__file__).resolve().parents[2]


def new_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}."


def topic_settings(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    return settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": partitions}, env={})


class WorkerProcess:
    """`loopwarden worker` as a real child process."""

    def __init__(self, bootstrap: str, prefix: str, config: dict | None, tmp: Path, partitions: int = 8,
                 name: str = "w", extra: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.log = tmp / f"worker-{name}-{self.port}.log"
        cfg = tmp / f"config-{name}.json"
        cfg.write_text(json.dumps(config or {}))
        self.cmd = [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", bootstrap, "--topic-prefix", prefix,
                    "--partitions", str(partitions), "--config", str(cfg), "--web-port", str(self.port),
                    "--data-dir", str(tmp / f"data-{name}"), "--log-level", "info", "--session-timeout-s", "6", *extra]
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, wait: bool = True, timeout: float = 90) -> "WorkerProcess":
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=ROOT, start_new_session=True)
        self.starts += 1
        if wait:
            self.wait_healthy(timeout)
        return self

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return json.loads(r.read())
        except Exception:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            return r.read().decode()

    def wait_healthy(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.tail()}")
            h = self.health()
            if h and h.get("status") == "ok":
                return
            time.sleep(0.3)
        raise AssertionError(f"worker not healthy within {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


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
    return [(e["run_id"].encode() if isinstance(e.get("run_id"), str) else None, json.dumps(e).encode()) for e in events]


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
            for tp, msgs in batch.items():
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


def decisions_by_partition(msgs) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        out.setdefault(m.partition, []).append(json.loads(m.value))
    return out
