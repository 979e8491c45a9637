"""Real-broker helpers for the integration tests, on the harness they share with the
benchmarks (streams/tools/harness.py): worker processes (the one way a test starts one:
`launch_worker`, behind conftest.py's `start_worker` fixture), the test topics under a
prefix of their own and their deletion, produce, consume, read to the end offsets, wait
for a group's commits or a state."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from aiokafka.errors import KafkaError

from detectors.errors import LoopwardenError
from streams.tools.harness import (
    Send,
    SidecarProcess,
    WorkerProcess,
    committed,
    consume,
    delete_topics_async,
    event_records,
    produce,
    read_all,
    setup_topics,
    topic_settings,
    wait_assigned,
    wait_committed,
    wait_until,
)
from streams.tools.launch import command
from tests.events import distinct

__all__ = [
    "Send",
    "WorkerProcess",
    "audit",
    "committed",
    "consume",
    "consume_distinct",
    "decisions_by_partition",
    "delete_topics",
    "event_records",
    "fresh_worker",
    "launch_worker",
    "new_prefix",
    "produce",
    "read_all",
    "setup_topics",
    "sidecar_stack",
    "topic_settings",
    "wait_assigned",
    "wait_committed",
    "wait_until",
]

ROOT = Path(__file__).resolve().parents[2]
PREFIXES: list[str] = []  # every prefix new_prefix() gave, in order (conftest.py deletes their topics)


def new_prefix() -> str:
    """A topic prefix of its own for a test (its topics are deleted when the test ends)."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    PREFIXES.append(prefix)
    return prefix


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


def sidecar_stack(bootstrap: str, tmp: Path, config: dict, gateway: str) -> Iterator[tuple]:
    """A worker on fresh topics and a hooks sidecar as `gateway` in front of it, for a
    module's fixture: yields (settings, worker, sidecar), then stops both and fails if
    the sidecar logged a traceback."""
    started: list = []
    s, w = fresh_worker(bootstrap, tmp, started, config)
    side = SidecarProcess(bootstrap, s.topic_prefix, gateway, tmp / "sidecar.log").start()
    yield s, w, side
    side.stop()
    for x in started:
        x.kill()
    assert "Traceback" not in side.log.read_text(), side.log.read_text()[-3000:]


def delete_topics(bootstrap: str, prefixes: list[str]) -> None:
    """Delete every topic under the prefixes (the shared broker would otherwise gather
    thousands of partitions over a run); a broker that refuses is left as it is."""
    try:
        asyncio.run(delete_topics_async(bootstrap, prefixes))
    except (KafkaError, LoopwardenError):
        pass


def consume_distinct(bootstrap: str, topic: str, want: int, timeout: float = 60) -> list:
    """Every distinct decision of the topic (see `distinct`) once `want` of them arrived
    or time ran out."""
    deadline = time.monotonic() + timeout
    n = want
    while True:
        got = distinct(consume(bootstrap, topic, n, timeout=max(1.0, deadline - time.monotonic())))
        if len(got) >= want or time.monotonic() >= deadline:
            return got
        n += want - len(got)


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
