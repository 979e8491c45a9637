"""Malformed messages of every known kind mixed with valid events, through one worker
and through `loopwarden replay`: the worker never stops, every bad message reaches the
dead-letter topic with its reason, every valid run is decided as offline replay decides
it, and replay gives each bad line the worker's reason."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from streams.tools.launch import command
from tests.events import offline, per_run
from tests.fuzz import MAX_EVENT_BYTES, Message, mixed
from tests.integration.harness import ROOT, produce, read_all

pytestmark = pytest.mark.integration
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def test_fuzz_through_a_worker_and_through_replay(bootstrap, tmp_path, start_worker):
    msgs = mixed(seed=1)
    # One value larger than the dead-letter topic takes: its dead letter is cut down.
    huge = Message(
        b"poison-huge",
        json.dumps(
            {
                "type": "tool_call",
                "run_id": "poison-huge",
                "seq": 1,
                "gateway_id": "g",
                "tool_name": "read",
                "params": {"blob": "z" * 2_000_000},
            }
        ).encode(),
        "oversize",
        "oversize_2mb",
        in_file=False,
    )
    msgs.insert(len(msgs) // 2, huge)
    bad = [m for m in msgs if m.reason is not None]
    kinds = Counter(m.kind for m in bad)
    print("fuzz kinds:", json.dumps(dict(sorted(kinds.items()))), "valid:", len(msgs) - len(bad))
    expected = offline([m.value for m in msgs if m.reason is None], CONFIG)

    w = start_worker(None, CONFIG, extra=("--max-event-bytes", str(MAX_EVENT_BYTES)))
    s = w.topics
    pid = w.proc.pid
    # gzip and a large request size: the broker takes a 2 MB value this way, as it did
    # for the operator whose dead letter then could not be published.
    records = [(m.key, m.value) for m in msgs]
    produce(bootstrap, s.events_topic, records, compression_type="gzip", max_request_size=8 << 20)
    w.wait_published(len(msgs), timeout=90)
    dead = read_all(bootstrap, s.deadletter_topic)
    got = [json.loads(m.value) for m in read_all(bootstrap, s.decisions_topic)]
    assert w.alive() and w.proc.pid == pid and w.starts == 1, w.tail()

    # Every bad message, and nothing else, is in the dead-letter topic with its reason.
    want = Counter((m.key, m.value or b"", m.reason) for m in bad if m is not huge)
    seen = Counter()
    for d in dead:
        h = {k: v.decode() for k, v in d.headers}
        if d.key == huge.key:
            assert h["loopwarden.error"] == "oversize"
            assert int(h["loopwarden.original.value_bytes"]) == len(huge.value)
            assert huge.value.startswith(d.value) and len(d.value) < 1_000_000
            continue
        seen[(d.key, d.value, h["loopwarden.error"])] += 1
    assert seen == want
    assert len(dead) == len(bad)

    # Each valid run's decisions, in order, as offline (decisions of one gateway share a
    # partition, so per-run order is what the topic keeps).
    assert per_run(got) == per_run(expected)

    # The same bad lines through `loopwarden replay`: same decisions, same reasons.
    lines = [m for m in msgs if m.in_file]
    src = tmp_path / "events.jsonl"
    src.write_bytes(b"".join((m.value or b"") + b"\n" for m in lines))
    out, dl = tmp_path / "decisions.jsonl", tmp_path / "dead.jsonl"
    p = subprocess.run(
        command(
            "replay",
            "--config",
            str(tmp_path / "config-w.json"),
            "--input",
            str(src),
            "--output",
            str(out),
            "--dead-letter",
            str(dl),
            "--max-event-bytes",
            str(MAX_EVENT_BYTES),
        ),
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 3, p.stderr.decode(errors="replace")[-2000:]
    assert [json.loads(x) for x in out.read_text().splitlines()] == expected
    reasons = {r["line"]: r["error"] for r in map(json.loads, dl.read_text().splitlines())}
    assert reasons == {i: m.reason for i, m in enumerate(lines, 1) if m.reason is not None}
