"""A broker killed (SIGKILL) and restarted on its data: the worker says it is not
healthy while the broker is gone, recovers by itself, and every call is decided as an
offline replay decides it, with no duplicate that differs. A broker of its own."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from benchmarks.trace import generate
from detectors import DetectionConfig, decode_event, encode, replay
from streams.tools import localkafka
from tests.integration.harness import (
    WorkerProcess,
    consume,
    decisions_by_partition,
    event_records,
    new_prefix,
    produce,
    setup_topics,
)
from tests.integration.test_resilience import by_run, dedupe

pytestmark = pytest.mark.integration
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def wait_status(w: WorkerProcess, want, timeout: float) -> tuple[str | None, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        h = w.health()
        st = h["status"] if h else None
        if want(st):
            return st, time.monotonic() - t0
        time.sleep(0.2)
    return None, timeout


def test_broker_killed_and_restarted(tmp_path, workers):
    broker = localkafka.start(tmp_path / "kafka", heap="256m")
    try:
        b = broker.bootstrap
        prefix = new_prefix()
        s = setup_topics(b, prefix, partitions=4)
        w = WorkerProcess(b, prefix, CONFIG, tmp_path, partitions=4)
        workers.append(w)
        w.start()
        events = [json.loads(x) for x in generate(3000, seed=17, concurrent=40)]
        cfg = DetectionConfig(CONFIG)
        expected = [json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in events], cfg)]
        half = len(events) // 2
        produce(b, s.events_topic, event_records(events[:half]))
        consume(
            b, s.decisions_topic, sum(1 for e in events[:half] if e["type"] == "tool_call") // 2, timeout=60, settle=0
        )
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
        msgs = consume(b, s.decisions_topic, len(expected), timeout=120, settle=3)
        got = dedupe([d for part in decisions_by_partition(msgs).values() for d in part])
        assert by_run(got) == by_run(expected)
        assert w.alive() and w.starts == 1
    finally:
        for w in workers:
            w.kill()
        localkafka.stop(broker)
