"""Bad input goes to the dead-letter topic; several workers and a killed worker change
no decision."""

from __future__ import annotations

import json
import random

import pytest

from detectors import DetectionConfig, Folded, encode_state, fold
from streams.tools.trace import generate
from streams.worker.run_store import ENDED
from tests.events import distinct, offline, per_run
from tests.integration.harness import (
    committed,
    consume,
    decisions_by_partition,
    event_records,
    produce,
    read_all,
    wait_assigned,
    wait_committed,
    wait_until,
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


def test_bad_input_goes_to_the_dead_letter_topic(bootstrap, start_worker):
    w = start_worker(None, CONFIG, extra=("--max-event-bytes", "65536"))
    s = w.topics
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
    w.wait_published(len(records))
    dead = read_all(bootstrap, s.deadletter_topic)
    decided = read_all(bootstrap, s.decisions_topic)
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
    assert got == offline(good, CONFIG)
    assert w.alive() and w.proc.pid == pid and w.starts == 1
    assert 'loopwarden_dead_letters_total{reason="decode_error"} 4.0' in w.metrics()


def trace(n: int, seed: int) -> list[dict]:
    return [json.loads(x) for x in generate(n, seed=seed, concurrent=60)]


def test_two_workers_decide_as_one(bootstrap, start_worker):
    events = trace(3000, seed=11)
    expected = per_run(offline(events, CONFIG))
    results = []
    for n_workers in (1, 2):
        first = start_worker(None, CONFIG, name=f"{n_workers}-0", wait=False)
        s = first.topics
        more = [start_worker(s.topic_prefix, CONFIG, name=f"{n_workers}-{i}", wait=False) for i in range(1, n_workers)]
        ws = [first, *more]
        for w in ws:
            w.wait_healthy()
        wait_assigned(ws, s.partitions)
        produce(bootstrap, s.events_topic, event_records(events))
        if n_workers == 1:  # it took every event, and what it published of them is on the topic
            first.wait_published(len(events), timeout=120)
        else:  # the group committed every event: all its members published of them is on the topic
            wait_committed(bootstrap, s.app_id, s.events_topic, timeout=120)
        msgs = read_all(bootstrap, s.decisions_topic)
        got = distinct([d for part in decisions_by_partition(msgs).values() for d in part])
        assert per_run(got) == expected, f"{n_workers} worker(s)"
        results.append(per_run(got))
        if n_workers == 2:
            assert all(w.alive() for w in ws)
            applied = [w.metric("loopwarden_events") for w in ws]
            assert all(n > 0 for n in applied), f"both workers must take partitions and apply events: {applied}"
            assert sum(applied) >= len(events)
        for w in ws:
            w.stop()
    assert results[0] == results[1]


def test_killed_worker_resumes_from_the_changelog(bootstrap, start_worker):
    events = trace(4000, seed=5)
    expected = offline(events, CONFIG)
    w = start_worker(None, CONFIG)
    s = w.topics
    half = len(events) // 2
    produce(bootstrap, s.events_topic, event_records(events[:half]))
    want_first = len(offline(events[:half], CONFIG))
    consume(bootstrap, s.decisions_topic, random.Random(1).randrange(want_first // 2, want_first), timeout=60)
    w.kill()  # SIGKILL, mid-stream or just after
    w.start()
    produce(bootstrap, s.events_topic, event_records(events[half:]))
    wait_committed(bootstrap, s.app_id, s.events_topic, timeout=120)  # all its successor publishes of them is there
    msgs = read_all(bootstrap, s.decisions_topic)
    got = distinct([d for part in decisions_by_partition(msgs).values() for d in part])
    assert per_run(got) == per_run(expected)
    assert w.starts == 2 and w.alive()


def test_a_stopped_worker_leaves_every_run_state_in_the_changelog(bootstrap, start_worker):
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
    w = start_worker(None, CONFIG, extra=("--flush-interval-ms", "60000"))
    s = w.topics
    produce(bootstrap, s.events_topic, event_records(events))
    consume(bootstrap, s.decisions_topic, len(offline(events, CONFIG)), timeout=60)
    w.stop()
    assert w.proc.returncode == 0, "the worker must exit by itself on SIGTERM, not be killed"
    stored: dict[bytes, bytes | None] = {}
    for m in read_all(bootstrap, s.changelog_topic):  # the worker has exited: all it wrote is there
        stored[m.key] = m.value
    assert stored == final


def test_a_run_that_ended_just_before_a_crash_is_answered_as_before(bootstrap, start_worker):
    # A run warns, then ends; the worker is killed before Faust commits the
    # run_end, so its successor replays the run. Each replayed call must get its first
    # decision back (not one of a run starting from nothing), and the same run_id, used
    # again afterwards, must start a new run (spec: run_end drops everything).
    events = [call("r-end", i, params={"path": "/same"}) for i in range(8)]
    events.append({"type": "run_end", "run_id": "r-end", "seq": 8, "gateway_id": "gw-1"})
    again = [call("r-end", 0, params={"path": "/other"})]  # a new run: same event_id as the first call
    first, later = offline(events, CONFIG), offline(again, CONFIG)
    assert "warn" in {d["action"] for d in first}
    w = start_worker(None, CONFIG, extra=("--flush-interval-ms", "100"))
    s = w.topics
    produce(bootstrap, s.events_topic, event_records(events[:4]))
    consume(bootstrap, s.decisions_topic, 4, timeout=60)
    # Faust commits every 2.8 s: once the first four are committed, the replay will start mid-run
    wait_until(lambda: committed(bootstrap, s.app_id, s.events_topic) >= 4, 30, "the first events' commit", every=0.2)
    produce(bootstrap, s.events_topic, event_records(events[4:]))
    consume(bootstrap, s.decisions_topic, 8, timeout=60)

    def ended_on_the_changelog() -> bool:  # the run's last state is flushed, and so its events acknowledged
        records = read_all(bootstrap, s.changelog_topic)
        return any(m.key == b"r-end" and (m.value or b"").startswith(ENDED) for m in records)

    wait_until(ended_on_the_changelog, 30, "the run's ended record on the changelog")
    w.kill()
    w.start()
    produce(bootstrap, s.events_topic, event_records(again))
    # The successor has committed every event: all it answered, the replayed calls and the
    # new run's, is on the topic.
    wait_committed(bootstrap, s.app_id, s.events_topic)
    got = [json.loads(m.value) for m in read_all(bootstrap, s.decisions_topic)]
    new_run = [d for d in got if d["args_hash"] == later[0]["args_hash"]]
    assert new_run == later
    assert distinct([d for d in got if d not in new_run]) == first
