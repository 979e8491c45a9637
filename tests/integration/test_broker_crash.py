"""A broker killed (SIGKILL) and restarted on its data: the worker says it is not
healthy while the broker is gone, recovers by itself, and every call is decided as an
offline replay decides it, with no duplicate that differs. A broker of its own."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from streams.tools import localkafka
from streams.tools.trace import generate
from tests.events import distinct, offline, per_run
from tests.integration.harness import (
    WorkerProcess,
    consume,
    decisions_by_partition,
    event_records,
    produce,
    read_all,
    wait_committed,
    wait_until,
)

pytestmark = pytest.mark.integration
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def wait_status(w: WorkerProcess, want, timeout: float) -> tuple[str | None, float]:
    """(the first /health status that `want` accepts, None when nothing answers; the
    seconds it took), polled every 0.2 s."""
    t0 = time.monotonic()
    seen: list[str | None] = []

    def accepted() -> bool:
        seen.append((w.health() or {}).get("status"))
        return want(seen[-1])

    wait_until(accepted, timeout, lambda: f"another /health status than {seen[-1]}\n{w.tail()}", every=0.2)
    return seen[-1], time.monotonic() - t0


def test_broker_killed_and_restarted(tmp_path, start_worker):
    broker = localkafka.start(tmp_path / "kafka", heap="256m")
    w = None
    try:
        b = broker.bootstrap
        w = start_worker(None, CONFIG, bootstrap=b, partitions=4)
        s = w.topics
        events = [json.loads(x) for x in generate(3000, seed=17, concurrent=40)]
        expected = offline(events, CONFIG)
        half = len(events) // 2
        produce(b, s.events_topic, event_records(events[:half]))
        consume(b, s.decisions_topic, sum(1 for e in events[:half] if e["type"] == "tool_call") // 2, timeout=60)
        os.killpg(broker.pid, signal.SIGKILL)  # mid-stream
        os.waitpid(broker.pid, 0)  # the broker is this process's child: reap it
        st, took = wait_status(w, lambda x: x not in ("ok",), 20)
        assert st in ("broker_unreachable", "not_consuming", None), st
        assert took < 15, f"/health said ok for {took:.1f}s with the broker gone"
        assert w.alive()
        broker = localkafka.start(tmp_path / "kafka", heap="256m")
        assert broker.bootstrap == b
        st, took = wait_status(w, lambda x: x == "ok", 90)
        assert st == "ok", w.tail()
        produce(b, s.events_topic, event_records(events[half:]))
        wait_committed(b, s.app_id, s.events_topic, timeout=120)  # all it publishes of them is on the topic
        msgs = read_all(b, s.decisions_topic)
        got = distinct([d for part in decisions_by_partition(msgs).values() for d in part])
        assert per_run(got) == per_run(expected)
        assert w.alive() and w.starts == 1
    finally:
        if w is not None:
            w.kill()  # before its broker stops
        localkafka.stop(broker)
