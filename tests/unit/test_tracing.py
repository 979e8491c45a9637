"""The batch trace's lines (streams/worker/tracing.py), as benchmarks/latency_stages.py reads them."""

import json

from streams.worker.tracing import Tracer


def test_a_flush_line_names_its_stages_in_order_and_its_counts(tmp_path):
    path = tmp_path / "trace.jsonl"
    t = Tracer(str(path))
    t.flush(10.0, 10.5, 11.0, 12.0, states=3, events=7)
    t.close()
    (line,) = path.read_text().splitlines()
    r = json.loads(line)
    assert {k: r[k] for k in ("k", "t0", "cp", "q", "dur", "states", "events")} == {
        "k": "flush",
        "t0": 10.0,
        "cp": 10.5,
        "q": 11.0,
        "dur": 12.0,
        "states": 3,
        "events": 7,
    }
    assert r["ack"] >= r["dur"]  # acknowledged now, after everything was durable
