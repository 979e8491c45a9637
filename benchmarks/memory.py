"""Bytes of state per active run, for 100,000 runs held at once.

    python -m benchmarks.memory [--runs 100000]

`typical`: each run has applied 40 events of the realistic trace (20 calls and their
results). `worst_case`: runs driven to every bound at once (full history, 64 remembered
decisions, 256 warning keys), measured on fewer runs since it is per-run anyway.
Both report resident memory per run (RSS growth of this process, allocator overhead
included) and the encoded size a Faust changelog message carries.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from detectors import Folded, RunState, encode_state, fold, load_config
from streams.tools.harness import rss_kib
from streams.tools.trace import CONFIG, run_events

config = load_config(json.dumps(CONFIG))


def final_states(events: Iterable[dict[str, Any]]) -> dict[str, RunState | None]:
    """Each run's state after its events, through the one fold (detectors.ingest)."""
    source = ((i, None, json.dumps(e).encode()) for i, e in enumerate(events))
    return {f.event.run_id: f.after for f in fold(source, config, keyed=False) if isinstance(f, Folded)}


def typical_states(n: int) -> dict[str, RunState | None]:
    rng = random.Random(3)

    def events() -> Iterator[dict[str, Any]]:
        for i in range(n):
            run = f"run-{i:06d}"
            for ev in run_events(rng, run, f"gw-{i % 16}", 20, None):
                if ev["type"] == "run_end":
                    break  # keep the state the run had before it ended
                yield ev

    return final_states(events())


def worst_states(n: int) -> dict[str, RunState | None]:
    def events() -> Iterator[dict[str, Any]]:
        for i in range(n):
            run = f"worst-{i:05d}"
            for seq in range(3600):  # 300 signatures, each called 12 times in a row: every bound is reached
                yield {
                    "type": "tool_call",
                    "run_id": run,
                    "seq": seq,
                    "gateway_id": "gw-01",
                    "tool_name": "read",
                    "tool_call_id": f"{run}-{seq}",
                    "params": {"path": f"/p/{seq // 12}"},
                }

    return final_states(events())


def rss_bytes() -> int:
    return (rss_kib(os.getpid()) or 0) * 1024


def measure(build: Callable[[int], dict[str, RunState | None]], n: int) -> dict[str, Any]:
    gc.collect()
    before = rss_bytes()
    states = build(n)
    gc.collect()
    after = rss_bytes()
    sample = [st for st in states.values() if st is not None][: min(n, 1000)]
    s0 = sample[0]
    return {
        "runs": n,
        "rss_bytes_per_run": round((after - before) / n),
        "encoded_bytes_per_run": round(sum(len(encode_state(s)) for s in sample) / len(sample)),
        "history": len(s0.history),
        "remembered_decisions": len(s0.answers),
        "warning_keys": len(s0.warned),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--worst-runs", type=int, default=300)
    args = ap.parse_args()
    print(
        json.dumps(
            {
                "benchmark": "memory",
                "typical": measure(typical_states, args.runs),
                "worst_case": measure(worst_states, args.worst_runs),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
