"""The spend anomaly watch on a real broker: a worker counts every agent's calls per
window in its spend stage, and a `spend_anomaly` alert fires on one agent's burst, once,
and not on the steady windows of the fleet before it."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.harness import consume, produce, wait_until

pytestmark = pytest.mark.integration

W = 4000
WATCH = {"enabled": True, "windowMs": W, "history": 4, "factor": 3, "minWindows": 3, "minToolCalls": 10}
CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"fleet": {"spendAnomaly": WATCH}}}


def call(run: str, seq: int, agent: str, ts: int) -> tuple[bytes, bytes]:
    ev = {"type": "tool_call", "run_id": run, "seq": seq, "gateway_id": "gw", "agent_id": agent, "ts": ts}
    return run.encode(), json.dumps(ev | {"tool_name": "read", "params": {"n": seq}}).encode()


def test_an_agents_burst_is_alerted_once_and_the_steady_fleet_never(bootstrap, start_worker):
    w = start_worker(None, CONFIG, partitions=4)
    s = w.topics
    base = (int(time.time() * 1000) - 5 * W) // W * W  # five steady windows up to about now, then the burst
    steady, seq = [], 0
    for k in range(5):
        for i in range(6):  # 6 calls a window for each agent: below the floor of 10 and steady
            for agent in ("a", "b"):
                seq += 1
                steady.append(call(f"{agent}-run-{k}", seq, agent, base + k * W + i * 100))
    produce(bootstrap, s.events_topic, steady)
    wait_until(lambda: w.metric("loopwarden_spend_records") >= len(steady), 30, lambda: w.tail())
    assert w.metric("loopwarden_spend_anomalies") == 0
    burst = [call("a-burst", 1000 + i, "a", base + 5 * W + i * 50) for i in range(30)]  # 30 > 3 x 6, and >= 10
    produce(bootstrap, s.events_topic, burst)
    wait_until(lambda: w.metric("loopwarden_spend_records") >= len(steady) + 30, 30, lambda: w.tail())
    alerts = [json.loads(m.value) for m in consume(bootstrap, s.alerts_topic, 1, timeout=10)]
    found = [a for a in alerts if a["kind"] == "spend_anomaly"]
    assert len(found) == 1, alerts
    (a,) = found
    assert (a["agent_id"], a["window_start"], a["unit"], a["median"]) == ("a", base + 5 * W, "calls", 6.0)
    assert a["used"] == 19  # the first call above 3 times the median of 6
    assert w.metric("loopwarden_spend_anomalies") == 1
