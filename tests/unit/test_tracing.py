"""The batch trace's lines (streams/worker/tracing.py), as benchmarks/latency_stages.py reads them."""

import gc
import json

from streams.worker.tracing import Tracer


def test_a_flush_line_names_its_stages_in_order_and_its_counts(tmp_path):
    path = tmp_path / "trace.jsonl"
    t = Tracer(str(path))
    t.flush(10.0, 10.5, 11.0, 12.0, states=3, events=7)
    t.close()
    (r,) = [
        r for r in map(json.loads, path.read_text().splitlines()) if r["k"] == "flush"
    ]  # (a collection may add one)
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


def test_a_collection_is_written_before_the_next_line_and_at_the_close(tmp_path):
    """Its line is kept until the next one is written (a collection can begin inside a
    write to the trace, which must not be entered again from there)."""
    path = tmp_path / "trace.jsonl"
    t = Tracer(str(path))
    before = t._out.tell()
    gc.collect(0)
    assert t._out.tell() == before  # nothing written from the collection's callback
    t.flush(10.0, 10.5, 11.0, 12.0, states=3, events=7)
    gc.collect(1)
    t.close()
    kinds = [(r["k"], r.get("gen")) for r in map(json.loads, path.read_text().splitlines())]
    first = kinds.index(("flush", None))
    assert ("gc", 0) in kinds[:first]  # before the line written after it
    assert ("gc", 1) in kinds[first + 1 :]  # written at the close, nothing after it
    assert gc.callbacks.count(t._gc) == 0


def test_collections_still_pending_at_the_close_are_each_written_once_in_order(tmp_path):
    path = tmp_path / "trace.jsonl"
    t = Tracer(str(path))
    gc.callbacks.remove(t._gc)  # only the collections this test reports
    for gen in (0, 1, 2):
        t._gc("start", {"generation": gen})
        t._gc("stop", {"generation": gen})
    t.close()
    assert [r["gen"] for r in map(json.loads, path.read_text().splitlines())] == [0, 1, 2]
