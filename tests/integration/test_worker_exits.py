"""A worker that crashed exits, non-zero, within its bound, and says it is not healthy
meanwhile; SIGTERM stops a worker within the same bound in every state it can be in."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.tools.trace import generate
from tests.integration.harness import WorkerProcess, event_records, new_prefix, produce, setup_topics, wait_until

pytestmark = pytest.mark.integration

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}
BOUND_S = 30.0  # the bound; workers are started with --stop-timeout-s 20


def unwritable(bootstrap: str, topic: str) -> None:
    """Make every produce to `topic` fail: no decision fits in 100 bytes."""

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "100"})]
            )
        finally:
            await admin.close()

    asyncio.run(go())


def calls(run: str, n: int) -> list[dict]:
    return [
        {
            "type": "tool_call",
            "run_id": run,
            "seq": i,
            "gateway_id": "gw-1",
            "tool_name": "read",
            "params": {"path": f"/{i}"},
        }
        for i in range(n)
    ]


def log_since(w: WorkerProcess, offset: int) -> str:
    with open(w.log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def watch_until_exit(
    w: WorkerProcess, offset: int, timeout: float, crash_within: float
) -> tuple[float | None, list[str]]:
    """Poll /health until the process exits: (seconds from the crash line to the exit, or
    None if no crash was logged within `crash_within` s of the start; the statuses seen
    after the crash was logged). The log (from `offset`, where this start's lines begin)
    is read before /health each time, so an 'ok' counted here was answered after the
    crash. (It samples /health on the way to the exit, every 0.05 s: not a wait for one
    state.)"""
    t0 = time.monotonic()
    crashed_at = None
    after_crash: list[str] = []
    assert w.proc is not None
    while w.proc.poll() is None:
        now = time.monotonic()
        if crashed_at is None and now - t0 > crash_within:
            return None, after_crash
        if crashed_at is not None and now - crashed_at > timeout:
            raise AssertionError(f"worker still running {timeout}s after its crash:\n{w.tail()}")
        if crashed_at is None and "stopping the worker" in log_since(w, offset):
            crashed_at = now
        h = w.health()
        if crashed_at is not None:
            after_crash.append(h["status"] if h else "no answer")
        time.sleep(0.05)
    if crashed_at is None:  # it crashed and exited between two polls
        crashed_at = time.monotonic()
    return time.monotonic() - crashed_at, after_crash


def doomed_worker(bootstrap: str, start_worker) -> tuple:
    """A worker (not started) whose decisions topic takes no decision: (settings, worker)."""
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, partitions=2)
    unwritable(bootstrap, s.decisions_topic)
    return s, start_worker(prefix, CONFIG, partitions=2, extra=("--stop-timeout-s", "20"), start=False)


def test_a_worker_whose_output_cannot_be_published_exits_every_time(bootstrap, start_worker):
    # 20 starts in all, by two doomed workers (topics of their own) side by side: each
    # start is mostly waiting for the group and the crash, so two halve the time.
    doomed = [doomed_worker(bootstrap, start_worker) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda sw: starts_until_exit(bootstrap, *sw, 10), doomed))
    took = [t for r in results for t in r[0]]
    codes = [c for r in results for c in r[1]]
    seen = [x for r in results for x in r[2]]
    assert len(took) == 20
    assert all(c != 0 for c in codes), codes
    assert max(took) < BOUND_S, took
    assert "ok" not in seen, seen


def starts_until_exit(bootstrap: str, s, w, starts: int) -> tuple[list[float], list[int], list[str]]:
    """Start the doomed worker `starts` times, each with new events: (seconds from each
    crash to its exit, the exit codes, the health statuses seen after the crashes)."""
    took, codes, seen, reread = [], [], [], 0
    for start in range(1, starts + 1):
        # From the second start on, the unacknowledged events of the last one are
        # replayed at once: the worker may crash before it ever says it is healthy.
        offset = w.log.stat().st_size if w.log.exists() else 0
        w.start(wait=False)
        # New events each time, beside the ones the last worker left unacknowledged.
        produce(bootstrap, s.events_topic, event_records(calls(f"run-{start}", 20)))
        secs, statuses = watch_until_exit(w, offset, BOUND_S + 15, crash_within=40)
        log = log_since(w, offset)
        # About one quick start in 60 (more on a busy machine), Faust fetches a partition
        # and loses its records on the way to the agent; the worker reads it again after
        # 5 quiet seconds (streams/kafka/delivery.py), and then crashes as it should.
        reread += "were fetched but never reached the agent" in log
        assert secs is not None, f"start {start}: no crash within 40 s ({reread} reread before):\n{w.tail()}"
        took.append(secs)
        codes.append(w.proc.returncode)
        seen.extend(statuses)
        assert "stopping the worker: output could not be published" in log, w.tail()
    return took, codes, seen


def test_sigterm_stops_an_idle_worker(start_worker):
    w = start_worker(None, CONFIG, extra=("--stop-timeout-s", "20"))
    t0 = time.monotonic()
    w.stop(timeout=BOUND_S + 10)
    assert time.monotonic() - t0 < BOUND_S and w.proc.returncode == 0, w.tail()


@pytest.mark.parametrize("flush_ms", ["100", "600000"], ids=["folding", "flushing"])
def test_sigterm_stops_a_busy_worker(bootstrap, start_worker, flush_ms):
    # "folding": a long burst is being folded; "flushing": nothing was flushed yet, so
    # the stop writes thousands of run states while events keep arriving.
    w = start_worker(None, CONFIG, extra=("--stop-timeout-s", "20", "--flush-interval-ms", flush_ms))
    s = w.topics
    events = [json.loads(x) for x in generate(30_000, seed=3, concurrent=3000)]
    produce(bootstrap, s.events_topic, event_records(events[:10_000]))
    wait_until(lambda: w.metric("loopwarden_events") > 0, 60, "the first events folded")
    t0 = time.monotonic()
    os.killpg(w.proc.pid, signal.SIGTERM)
    produce(bootstrap, s.events_topic, event_records(events[10_000:12_000]))
    w.proc.wait(BOUND_S + 10)
    assert time.monotonic() - t0 < BOUND_S, w.tail()
    assert w.proc.returncode == 0, w.tail()


def test_sigterm_stops_a_rebalancing_worker(bootstrap, start_worker):
    # With the tool breaker on, the worker has a Faust table (the breakers' windows), and
    # a rebalance includes Faust's recovery of its changelog: the longest rebalance a
    # worker goes through, and one long enough to be seen on /health. (A worker without
    # it consumes no failures topic and has no table: its rebalance can be over between
    # two looks.)
    config = {**CONFIG, "loopwarden": {"fleet": {"toolBreaker": {"enabled": True}}}}
    w1 = start_worker(None, config, extra=("--stop-timeout-s", "20"))
    s = w1.topics
    produce(bootstrap, s.events_topic, event_records(calls("r", 200)))
    w2 = start_worker(s.topic_prefix, config, name="second", extra=("--stop-timeout-s", "20"), wait=False)
    # the second member joined: the first is rebalancing now
    wait_until(lambda: (w1.health() or {}).get("status") != "ok", 60, "the group to rebalance")
    t0 = time.monotonic()
    w1.stop(timeout=BOUND_S + 10)
    assert time.monotonic() - t0 < BOUND_S, w1.tail()
    w2.stop(timeout=BOUND_S + 10)
    assert w2.proc.returncode is not None


def test_sigterm_stops_a_crashed_worker(bootstrap, start_worker):
    s, w = doomed_worker(bootstrap, start_worker)
    w.start()
    produce(bootstrap, s.events_topic, event_records(calls("r", 20)))
    crashed = lambda: "stopping the worker" in w.tail(1_000_000) or not w.alive()  # noqa: E731
    wait_until(crashed, 30, "the worker's crash", every=0.02)
    t0 = time.monotonic()
    if w.alive():
        os.killpg(w.proc.pid, signal.SIGTERM)
    w.proc.wait(BOUND_S + 10)
    assert time.monotonic() - t0 < BOUND_S
    assert w.proc.returncode != 0
