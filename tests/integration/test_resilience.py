"""Bad input goes to the dead-letter topic; several workers and a killed worker change
no decision."""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from benchmarks.trace import generate
from detectors import DetectionConfig, Folded, decode_event, encode, encode_state, fold, replay
from tests.integration.harness import (
    WorkerProcess,
    consume,
    decisions_by_partition,
    event_records,
    fresh_worker,
    new_prefix,
    produce,
    setup_topics,
)

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}
pytestmark = pytest.mark.integration


def call(run: str, seq: int, **kw) -> dict:
    return {
        "type": "tool_call",
        "run_id": run,
        "seq": seq,
        "gateway_id": "gw-1",
        "tool_name": "read",
        "params": {"path": "/a"},
        **kw,
    }


def offline(events: list[dict]) -> list[dict]:
    cfg = DetectionConfig(CONFIG)
    return [json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in events], cfg)]


def by_run(decisions) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in decisions:
        out.setdefault(d["run_id"], []).append(d)
    return out


def dedupe(decisions: list[dict]) -> list[dict]:
    """Decisions are idempotent by event_id: a repeat must be identical, and is dropped."""
    seen: dict[str, dict] = {}
    out = []
    for d in decisions:
        first = seen.setdefault(d["event_id"], d)
        if first is d:
            out.append(d)
        else:
            assert first == d, f"two different decisions for {d['event_id']}"
    return out


def test_bad_input_goes_to_the_dead_letter_topic(bootstrap, tmp_path, workers):
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix)
    w = WorkerProcess(bootstrap, prefix, CONFIG, tmp_path, extra=("--max-event-bytes", "65536"))
    workers.append(w)
    w.start()
    pid = w.proc.pid
    good = [call("r-bad", i) for i in range(6)]
    bad = [
        (b"r-bad", b"{not json"),
        (b"r-bad", b"[1, 2, 3]"),
        (b"r-bad", json.dumps({k: v for k, v in call("r-bad", 9).items() if k != "run_id"}).encode()),
        (b"r-bad", json.dumps(call("r-bad", "seven")).encode()),
        (b"r-bad", json.dumps(call("r-bad", 8, params={"blob": "x" * 100_000})).encode()),
    ]
    records = []
    for i, e in enumerate(good):
        records.append((b"r-bad", json.dumps(e).encode()))
        if i < len(bad):
            records.append(bad[i])
    produce(bootstrap, s.events_topic, records)
    dead = consume(bootstrap, s.deadletter_topic, len(bad), timeout=60)
    decided = consume(bootstrap, s.decisions_topic, len(good), timeout=30)
    assert sorted(m.value for m in dead) == sorted(v for _, v in bad)
    reasons = {}
    for m in dead:
        h = {k: v.decode() for k, v in m.headers}
        assert h["loopwarden.source.topic"] == s.events_topic
        assert int(h["loopwarden.source.offset"]) >= 0 and h["loopwarden.source.partition"].isdigit()
        reasons[m.value] = (h["loopwarden.error"], h["loopwarden.detail"])
    assert reasons[b"{not json"][0] == "decode_error"
    assert "run_id" in reasons[bad[2][1]][1]
    assert "$.seq" in reasons[bad[3][1]][1]
    assert reasons[bad[4][1]][0] == "oversize"
    got = [json.loads(m.value) for m in decided]
    assert got == offline(good)
    assert w.alive() and w.proc.pid == pid and w.starts == 1
    assert 'loopwarden_dead_letters_total{reason="decode_error"} 4.0' in w.metrics()


def trace(n: int, seed: int) -> list[dict]:
    return [json.loads(x) for x in generate(n, seed=seed, concurrent=60)]


def test_two_workers_decide_as_one(bootstrap, tmp_path, workers):
    events = trace(3000, seed=11)
    expected = by_run(offline(events))
    results = []
    for n_workers in (1, 2):
        prefix = new_prefix()
        s = setup_topics(bootstrap, prefix, partitions=8)
        ws = [WorkerProcess(bootstrap, prefix, CONFIG, tmp_path, name=f"{n_workers}-{i}") for i in range(n_workers)]
        workers.extend(ws)
        for w in ws:
            w.start(wait=False)
        for w in ws:
            w.wait_healthy()
        time.sleep(3 if n_workers > 1 else 0)  # let the group settle on two members
        produce(bootstrap, s.events_topic, event_records(events))
        want = sum(len(v) for v in expected.values())
        msgs = consume(bootstrap, s.decisions_topic, want, timeout=120, settle=2)
        got = dedupe([d for part in decisions_by_partition(msgs).values() for d in part])
        assert by_run(got) == expected, f"{n_workers} worker(s)"
        results.append(by_run(got))
        if n_workers == 2:
            assert all(w.alive() for w in ws)
            applied = [float(re.search(r"^loopwarden_events_total (\S+)$", w.metrics(), re.M).group(1)) for w in ws]
            assert all(n > 0 for n in applied), f"both workers must take partitions and apply events: {applied}"
            assert sum(applied) >= len(events)
        for w in ws:
            w.stop()
    assert results[0] == results[1]


def test_killed_worker_resumes_from_the_changelog(bootstrap, tmp_path, workers):
    events = trace(4000, seed=5)
    expected = offline(events)
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix)
    w = WorkerProcess(bootstrap, prefix, CONFIG, tmp_path)
    workers.append(w)
    w.start()
    half = len(events) // 2
    produce(bootstrap, s.events_topic, event_records(events[:half]))
    want_first = len(offline(events[:half]))
    consume(bootstrap, s.decisions_topic, random.Random(1).randrange(want_first // 2, want_first), timeout=60, settle=0)
    w.kill()  # SIGKILL, mid-stream or just after
    w.start()
    produce(bootstrap, s.events_topic, event_records(events[half:]))
    msgs = consume(bootstrap, s.decisions_topic, len(expected), timeout=120, settle=3)
    got = dedupe([d for part in decisions_by_partition(msgs).values() for d in part])
    assert by_run(got) == by_run(expected)
    assert w.starts == 2 and w.alive()


def test_a_stopped_worker_leaves_every_run_state_in_the_changelog(bootstrap, tmp_path, workers):
    # States are written once per flush interval; a SIGTERM must store the last ones
    # before the worker exits, so the changelog holds each run's state after its last
    # event (a tombstone for an ended run), byte for byte the offline fold.
    events = [json.loads(x) for x in generate(1500, seed=23, concurrent=8)]
    cfg = DetectionConfig(CONFIG)
    final: dict[bytes, bytes | None] = {}
    for f in fold(((i, None, json.dumps(e).encode()) for i, e in enumerate(events)), cfg, keyed=False):
        assert isinstance(f, Folded), f
        final[f.event.run_id.encode()] = None if f.after is None else encode_state(f.after)
    assert any(v is None for v in final.values()) and any(v is not None for v in final.values())
    s, w = fresh_worker(bootstrap, tmp_path, workers, CONFIG, extra=("--flush-interval-ms", "60000"))
    produce(bootstrap, s.events_topic, event_records(events))
    consume(bootstrap, s.decisions_topic, len(offline(events)), timeout=60, settle=0)
    w.stop()
    assert w.proc.returncode == 0, "the worker must exit by itself on SIGTERM, not be killed"
    stored: dict[bytes, bytes | None] = {}
    for m in sorted(
        consume(bootstrap, s.changelog_topic, len(final), timeout=30, settle=2), key=lambda m: (m.partition, m.offset)
    ):
        stored[m.key] = m.value
    assert stored == final


def test_a_run_that_ended_just_before_a_crash_is_answered_as_before(bootstrap, tmp_path, workers):
    # A run warns, then ends; the worker is killed before Faust commits the
    # run_end, so its successor replays the run. Each replayed call must get its first
    # decision back (not one of a run starting from nothing), and the same run_id, used
    # again afterwards, must start a new run (spec: run_end drops everything).
    events = [call("r-end", i, params={"path": "/same"}) for i in range(8)]
    events.append({"type": "run_end", "run_id": "r-end", "seq": 8, "gateway_id": "gw-1"})
    again = [call("r-end", 0, params={"path": "/other"})]  # a new run: same event_id as the first call
    first, later = offline(events), offline(again)
    assert "warn" in {d["action"] for d in first}
    s, w = fresh_worker(bootstrap, tmp_path, workers, CONFIG, extra=("--flush-interval-ms", "100"))
    produce(bootstrap, s.events_topic, event_records(events[:4]))
    consume(bootstrap, s.decisions_topic, 4, timeout=60, settle=0)
    time.sleep(4)  # Faust commits every 2.8 s: the replay will start mid-run
    produce(bootstrap, s.events_topic, event_records(events[4:]))
    consume(bootstrap, s.decisions_topic, 8, timeout=60, settle=0)
    time.sleep(0.5)  # the run's last state is flushed and its events acknowledged
    w.kill()
    w.start()
    produce(bootstrap, s.events_topic, event_records(again))
    deadline = time.monotonic() + 60
    while True:
        got = [json.loads(m.value) for m in consume(bootstrap, s.decisions_topic, 9, timeout=5, settle=1)]
        new_run = [d for d in got if d["args_hash"] == later[0]["args_hash"]]
        if new_run or time.monotonic() > deadline:
            break
    assert new_run == later
    assert dedupe([d for d in got if d not in new_run]) == first
