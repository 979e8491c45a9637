"""Recovery by the run store (streams/worker/recovery.py) on a real broker: a worker that
takes partitions over mid-stream, by a rebalance and after a SIGKILL, answers every
event as offline replay does, with runs that ended, runs evicted as idle and runs
still open; a partition kept across a rebalance is not read again; /health says
`recovering` while states are read."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.events import offline
from tests.integration.harness import WorkerProcess, consume, consume_distinct, event_records, produce, wait_until

pytestmark = pytest.mark.integration

IDLE_MS = 60_000
CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 4}},
    "loopwarden": {"runIdleTimeoutMs": IDLE_MS},
}
T0 = 1_790_000_000_000
RUNS = 1500


def ev(kind: str, run: str, seq: int, ts: int, **kw) -> dict:
    base = {"type": kind, "run_id": run, "seq": seq, "gateway_id": f"gw-{sum(map(ord, run)) % 4}", "ts": ts}
    if kind in ("tool_call", "tool_result"):
        base |= {"tool_name": "read", "params": {"path": f"/{run}"}}
    return base | kw


def phase(runs: list[str], start_seq: int, ts: int, end: set[str] = frozenset()) -> list[dict]:
    """A call and a failing result for each run; a run_end after them for the runs in `end`."""
    out = []
    for run in runs:
        out.append(ev("tool_call", run, start_seq, ts))
        out.append(ev("tool_result", run, start_seq + 1, ts + 1, error="ENOENT"))
        if run in end:
            out.append(ev("run_end", run, start_seq + 2, ts + 2))
    return out


class HealthWatch:
    """Polls a worker's /health every 5 ms from its start and keeps every status seen (a
    sampler, not a wait: it records the statuses on the way)."""

    def __init__(self, w: WorkerProcess) -> None:
        self.w, self.seen, self.stop = w, set(), False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            h = self.w.health()
            if h:
                self.seen.add(h.get("status"))
            time.sleep(0.005)

    def close(self) -> set:
        self.stop = True
        self.thread.join(5)
        return self.seen


def test_a_worker_taking_partitions_over_answers_as_offline_replay(bootstrap, start_worker):
    runs = [f"rec-{i}" for i in range(RUNS)]
    ended = set(runs[:200])
    idle = runs[200:400]  # their last event is far older than the partition's newest: evicted
    flags = ("--state-sweep-interval-s", "1")
    a = start_worker(None, CONFIG, name="a", extra=flags)
    s = a.topics
    events = phase(idle, 0, T0 - 10 * IDLE_MS) + phase(runs[:200] + runs[400:], 0, T0, ended)
    produce(bootstrap, s.events_topic, event_records(events))
    consume(bootstrap, s.decisions_topic, RUNS, timeout=90)
    evicted = lambda: a.metric("loopwarden_runs_evicted") >= len(idle)  # noqa: E731 (the sweep runs every second)
    wait_until(evicted, 30, lambda: f"the idle runs' eviction\n{a.tail()}", every=0.2)
    # A second worker joins: the partitions a keeps are not read again, b reads its own.
    b = start_worker(s.topic_prefix, CONFIG, name="b", extra=flags, wait=False)
    watch = HealthWatch(b)
    b.wait_healthy()
    a.wait_healthy()
    seen = watch.close()
    assert "recovering" in seen and "ok" in seen, seen
    assert a.metric("loopwarden_partitions_kept") >= 1, a.tail()
    assert b.metric("loopwarden_partitions_loaded") >= 1 and b.metric("loopwarden_states_loaded") > 0, b.tail()
    more = phase(runs, 10, T0 + 1000)  # every run again: open runs repeat, ended and idle runs start over
    produce(bootstrap, s.events_topic, event_records(more))
    consume_distinct(bootstrap, s.decisions_topic, 2 * RUNS, timeout=120)
    # a is killed: b takes its partitions over mid-stream and reads their states.
    loaded = b.metric("loopwarden_partitions_loaded")
    a.kill()
    last = phase(runs, 20, T0 + 2000)
    produce(bootstrap, s.events_topic, event_records(last))
    got = [json.loads(m.value) for m in consume_distinct(bootstrap, s.decisions_topic, 3 * RUNS, timeout=120)]
    assert b.metric("loopwarden_partitions_loaded") > loaded, b.tail()
    expected = offline(events + more + last, CONFIG)
    key = lambda d: d["event_id"]  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    # Open runs carried their history across owners: their third call is warned.
    third = {d["run_id"]: d["action"] for d in expected if d["seq"] == 20}
    assert {third[r] for r in runs[400:]} == {"warn"} and {third[r] for r in runs[:400]} == {"allow"}
    assert b.alive()
