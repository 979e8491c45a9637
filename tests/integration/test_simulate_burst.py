"""`loopwarden simulate --burst` on a real broker and worker: a steady fleet of named
agents (`--agents`), one of which bursts from SECONDS into the run on, and the spend
anomaly watch (`loopwarden.fleet.spendAnomaly`) alerts on that agent's burst only, never
on the steady windows before it."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from detectors.config import parse_document
from streams.tools.launch import command
from tests.integration.harness import ROOT, read_all, wait_committed

pytestmark = pytest.mark.integration

W = 1000
BURST_AT_S = 9
# Tokens watched only, in 1 s windows; a norm needs six windows that all spent something
# (so the steady fleet's first, partial windows never make a median of nothing).
WATCH = {"enabled": True, "windowMs": W, "history": 6, "minWindows": 6, "factor": 3}
WATCH |= {"minTokens": 1000, "minCostUsd": None, "minToolCalls": None}


def test_the_anomaly_watch_alerts_on_the_simulated_burst_and_not_before(bootstrap, start_worker):
    config = parse_document((ROOT / "examples" / "config.json5").read_bytes())  # the recommended rules
    config["loopwarden"]["fleet"] = {"spendAnomaly": WATCH}
    w = start_worker(None, config, partitions=4)
    s = w.topics
    kafka = ("--bootstrap", bootstrap, "--topic-prefix", s.topic_prefix)
    launched_ms = int(time.time() * 1000)
    p = subprocess.run(
        command(
            "simulate",
            *kafka,
            *("--gateways", "2", "--runs", "2", "--agents", "2", "--seconds", "14", "--think-ms", "20:40"),
            *("--loop-share", "0", "--burst", f"sim-agent-1@{BURST_AT_S}:4", "--quiet"),
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr + p.stdout
    summary = json.loads(p.stdout)
    assert summary["normal_runs"] > 8 and summary["normal_runs_wrongly_flagged"] == 0
    wait_committed(bootstrap, s.app_id, s.spend_topic)  # the spend stage counted everything forwarded
    alerts = [json.loads(m.value) for m in read_all(bootstrap, s.alerts_topic)]
    found = [a for a in alerts if a["kind"] == "spend_anomaly"]
    assert found, (alerts, w.tail())
    assert {a["agent_id"] for a in found} == {"sim-agent-1"}, found  # the steady agent never
    burst_ms = launched_ms + BURST_AT_S * 1000  # the burst began no sooner than this
    assert all(a["window_start"] + W > burst_ms for a in found), (burst_ms, found)  # on the burst, not before
    assert all(a["unit"] == "tokens" and a["used"] > 3 * a["median"] for a in found)
