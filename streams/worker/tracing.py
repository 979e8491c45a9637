"""Per-batch timings for latency diagnosis, off unless LOOPWARDEN_TRACE_BATCHES names a file.

With it set, the batch loop appends one JSON line per batch, per state flush and per
garbage collection, all stamped with the wall clock (`time.time()`, seconds) so they
line up with a gateway's own stamps on the same machine; benchmarks/latency_stages.py
joins them with the gateways' send and receive times by event id. Lines:

    {"k": "batch", "ids": [...], "arr": [...], "ts": [...], "f0", "f1", "w0", "w1", "q", "ack", "n"}
        event ids of the batch's decisions, when each event reached the batch loop (its
        `add`), each event's Kafka timestamp (the broker's append time on a topic with
        message.timestamp.type=LogAppendTime), fold start/end, the wait for the previous batch's delivery (start/end),
        decisions queued on the producer, and acknowledged by the broker;
    {"k": "flush", "t0", "cp", "q", "dur", "ack", "states", "events"}
        a state flush: start, checkpoint taken, records queued, everything durable,
        input acknowledged, how many states and events;
    {"k": "gc", "gen", "t0", "t1"}  a collection of the worker's garbage collector.
"""

from __future__ import annotations

import gc
import json
import os
import time
from typing import Any, TextIO

ENV = "LOOPWARDEN_TRACE_BATCHES"


class Tracer:
    def __init__(self, path: str) -> None:
        self._out: TextIO = open(path, "a", buffering=1 << 16)  # noqa: SIM115 - open for the worker's life
        self._gc_start = 0.0
        self._gcs: list[dict[str, Any]] = []  # collections not written yet
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        # Kept for the next line, never written from here: a collection can start inside
        # a write to the trace, and a write re-entered from it garbled the file (heap
        # bytes in the middle of a line, seen once in benchmarks.latency_stages).
        if phase == "start":
            self._gc_start = time.time()
        else:
            self._gcs.append({"k": "gc", "gen": info.get("generation"), "t0": self._gc_start, "t1": time.time()})

    def batch(self, t: dict[str, Any], msgs: list[Any], arrivals: list[float], ids: list[Any], sent: Any) -> None:
        """A batch's line of the trace, written once its decisions are acknowledged
        (`sent`: the future of their delivery, or None)."""
        t["q"] = time.time()
        at = {(m.partition, m.offset): (a, m.timestamp) for m, a in zip(msgs, arrivals, strict=False)}
        t["ids"] = [i for i, _, _ in ids]
        t["arr"] = [at.get((p, o), (None, None))[0] for _, o, p in ids]
        t["ts"] = [at.get((p, o), (None, None))[1] for _, o, p in ids]  # the records' Kafka timestamps (s)

        def acked(_: Any) -> None:
            t["ack"] = time.time()
            self.line(t)

        if sent is not None and not sent.done() and ids:
            sent.add_done_callback(acked)
        else:
            t["ack"] = t["q"]
            self.line(t)

    def flush(self, t0: float, cp: float, q: float, dur: float, states: int, events: int) -> None:
        """A state flush's line, written once its input is acknowledged (now)."""
        self.line(
            {
                "k": "flush",
                "t0": t0,
                "cp": cp,
                "q": q,
                "dur": dur,
                "ack": time.time(),
                "states": states,
                "events": events,
            }
        )

    def line(self, record: dict[str, Any]) -> None:
        """Write a line, after the collections that ended since the last one."""
        done, self._gcs = self._gcs, []
        for r in (*done, record):
            self._out.write(json.dumps(r, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        if self._gcs:  # the last collection's line, after those before it
            self.line(self._gcs.pop())
        self._out.close()


def from_env() -> Tracer | None:
    path = os.environ.get(ENV)
    return Tracer(path) if path else None
