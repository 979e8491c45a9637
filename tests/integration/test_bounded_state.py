"""A worker's run states stay within their bounds: runs idle past twice runIdleTimeoutMs
(event time) leave its table and its changelog, and a run warned under more keys than it
may remember keeps MAX_WARNING_KEYS of them; no decision changes."""

from __future__ import annotations

import json

import pytest

from detectors import decode_state
from detectors.state import MAX_WARNING_KEYS
from tests.events import offline
from tests.integration.harness import consume, event_records, produce, read_all, wait_until

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


def test_idle_runs_are_dropped_and_tombstoned(bootstrap, start_worker):
    w = start_worker(
        None, CONFIG, partitions=1, extra=("--state-sweep-interval-s", "0.5", "--flush-interval-ms", "100")
    )
    s = w.topics
    old = calls("idle-a", range(3), T0) + calls("idle-b", range(3), T0)
    fresh = calls("busy", range(3), T0 + 60_000)  # a minute later: a and b are idle past 2 x 1 s
    later = calls("idle-a", range(3, 5), T0 + 60_100)  # a comes back: it starts over, as offline
    produce(bootstrap, s.events_topic, event_records(old + fresh))
    wait_until(lambda: w.metric("loopwarden_runs_evicted") >= 2, 30, "two runs evicted", every=0.2)
    assert w.metric("loopwarden_runs_evicted") == 2, w.metrics()

    def tombstoned() -> dict | None:  # each run's last record on the changelog, once both idle ones are tombstones
        last = {m.key: m.value for m in read_all(bootstrap, s.changelog_topic)}
        gone = [k for k in (b"idle-a", b"idle-b") if k in last and last[k] is None]
        return last if len(gone) == 2 else None

    tomb = wait_until(tombstoned, 30, "the idle runs' tombstones on the changelog", every=0.2)
    assert tomb[b"idle-a"] is None and tomb[b"idle-b"] is None and tomb[b"busy"] is not None
    produce(bootstrap, s.events_topic, event_records(later))
    expected = offline(old + fresh + later, CONFIG)
    got = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, len(expected), timeout=30)]
    assert got == expected
    assert [d["action"] for d in got if d["run_id"] == "idle-a"] == ["allow", "allow", "warn", "allow", "allow"]


def test_warning_memory_is_bounded_in_a_worker(bootstrap, start_worker):
    # 300 different calls, each made three times: the third is warned under a key of its
    # own (warningThreshold 2), so the run is warned under more keys than it may remember.
    w = start_worker(None, CONFIG, partitions=1, extra=("--flush-interval-ms", "100"))
    s = w.topics
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
    expected = offline(events, CONFIG)
    got = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, len(expected), timeout=60)]
    assert got == expected, w.tail()
    assert sum(d["action"] == "warn" for d in got) == n_keys

    def last_state():  # the run's state after every event, once its last flush reached the changelog
        states = [m for m in read_all(bootstrap, s.changelog_topic) if m.key == b"many-keys"]
        last = decode_state(max(states, key=lambda m: m.offset).value) if states else None
        return last if last is not None and last.last_seq == len(events) - 1 else None

    last = wait_until(last_state, 30, "the run's last state on the changelog", every=0.2)
    assert len(last.warned) == MAX_WARNING_KEYS
    warned_keys = [d["warning_key"] for d in got if d["action"] == "warn"]
    assert set(last.warned) == set(warned_keys[-MAX_WARNING_KEYS:])  # the oldest were forgotten
