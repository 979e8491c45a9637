"""A worker's run states stay within their bounds: runs idle past twice runIdleTimeoutMs
(event time) leave its table and its changelog, and a run warned under more keys than it
may remember keeps MAX_WARNING_KEYS of them; no decision changes."""

from __future__ import annotations

import json
import re
import time

import pytest

from detectors import DetectionConfig, decode_event, decode_state, encode, replay
from detectors.state import MAX_WARNING_KEYS
from tests.integration.harness import consume, event_records, fresh_worker, produce

pytestmark = pytest.mark.integration

CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}},
    "loopwarden": {"runIdleTimeoutMs": 1000},
}
T0 = 1_780_000_000_000


def calls(run: str, seqs: range, ts: int) -> list[dict]:
    return [
        {
            "type": "tool_call",
            "run_id": run,
            "seq": i,
            "gateway_id": "gw-1",
            "tool_name": "read",
            "params": {"path": "/x"},
            "ts": ts + i,
        }
        for i in seqs
    ]


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_idle_runs_are_dropped_and_tombstoned(bootstrap, tmp_path, workers):
    s, w = fresh_worker(
        bootstrap,
        tmp_path,
        workers,
        CONFIG,
        partitions=1,
        extra=("--state-sweep-interval-s", "0.5", "--flush-interval-ms", "100"),
    )
    old = calls("idle-a", range(3), T0) + calls("idle-b", range(3), T0)
    fresh = calls("busy", range(3), T0 + 60_000)  # a minute later: a and b are idle past 2 x 1 s
    later = calls("idle-a", range(3, 5), T0 + 60_100)  # a comes back: it starts over, as offline
    produce(bootstrap, s.events_topic, event_records(old + fresh))
    deadline = time.monotonic() + 30
    while metric(w.metrics(), "loopwarden_runs_evicted_total") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    m = w.metrics()
    assert metric(m, "loopwarden_runs_evicted_total") == 2, m
    tomb = {}
    for msg in consume(bootstrap, s.changelog_topic, 5, timeout=30, settle=1.5):
        tomb[msg.key] = msg.value
    assert tomb[b"idle-a"] is None and tomb[b"idle-b"] is None and tomb[b"busy"] is not None
    produce(bootstrap, s.events_topic, event_records(later))
    everything = old + fresh + later
    expected = [
        json.loads(encode(d))
        for d in replay([decode_event(json.dumps(e)) for e in everything], DetectionConfig(CONFIG))
    ]
    got = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, len(expected), timeout=30)]
    assert got == expected
    assert [d["action"] for d in got if d["run_id"] == "idle-a"] == ["allow", "allow", "warn", "allow", "allow"]


def test_warning_memory_is_bounded_in_a_worker(bootstrap, tmp_path, workers):
    # 300 different calls, each made three times: the third is warned under a key of its
    # own (warningThreshold 2), so the run is warned under more keys than it may remember.
    s, w = fresh_worker(bootstrap, tmp_path, workers, CONFIG, partitions=1, extra=("--flush-interval-ms", "100"))
    n_keys = MAX_WARNING_KEYS + 44
    events = [
        {
            "type": "tool_call",
            "run_id": "many-keys",
            "seq": seq,
            "gateway_id": "gw-1",
            "tool_name": "read",
            "params": {"n": k},
            "ts": T0 + seq,
        }
        for seq, k in enumerate(k for k in range(n_keys) for _ in range(3))
    ]
    produce(bootstrap, s.events_topic, event_records(events))
    expected = [
        json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in events], DetectionConfig(CONFIG))
    ]
    got = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, len(expected), timeout=60)]
    assert got == expected, w.tail()
    assert sum(d["action"] == "warn" for d in got) == n_keys
    time.sleep(1.0)  # the last flush of the run's state
    states = [m for m in consume(bootstrap, s.changelog_topic, 1, timeout=30, settle=1.5) if m.key == b"many-keys"]
    assert states, "the run's state never reached the changelog"
    last = decode_state(max(states, key=lambda m: m.offset).value)
    assert last.last_seq == len(events) - 1  # the state after every event
    assert len(last.warned) == MAX_WARNING_KEYS
    warned_keys = [d["warning_key"] for d in got if d["action"] == "warn"]
    assert set(last.warned) == set(warned_keys[-MAX_WARNING_KEYS:])  # the oldest were forgotten
