"""Throughput of the full `loopwarden replay` command (read JSONL, decide, write JSONL).

    python -m benchmarks.replay [--events 200000]

Prints one JSON object. `command_events_per_s` times the real command in a subprocess
(interpreter start-up included); `inprocess_events_per_s` times the same fold in this
process, and `profile_top` names where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

from benchmarks.trace import CONFIG, generate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lines = generate(args.events)
    with tempfile.TemporaryDirectory() as d:
        src, cfg, out = (os.path.join(d, n) for n in ("events.jsonl", "config.json", "decisions.jsonl"))
        with open(src, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        with open(cfg, "w") as f:
            json.dump(CONFIG, f)
        size = os.path.getsize(src)
        cmd = [sys.executable, "-m", "streams.cli", "replay", "--config", cfg, "--input", src, "--output", out]
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True)
            best = min(best, time.perf_counter() - t0)
        with open(out, "rb") as f:
            decisions = [json.loads(x) for x in f]

        from detectors import load_config
        from streams.replay import run_replay

        config = load_config(json.dumps(CONFIG))
        t0 = time.perf_counter()
        with open(src, "rb") as f:
            run_replay(config, f, io.BytesIO(), io.StringIO())
        inproc = time.perf_counter() - t0

        prof = cProfile.Profile()
        with open(src, "rb") as f:
            prof.runcall(run_replay, config, f, io.BytesIO(), io.StringIO())
        stats = pstats.Stats(prof)
        top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]  # by own time
        total = sum(v[2] for v in stats.stats.values())

    actions: dict[str, int] = {}
    for dd in decisions:
        actions[dd["action"]] = actions.get(dd["action"], 0) + 1
    print(json.dumps({
        "benchmark": "replay",
        "events": len(lines),
        "input_bytes": size,
        "mean_event_bytes": round(size / len(lines)),
        "decisions": len(decisions),
        "actions": actions,
        "command_seconds": round(best, 3),
        "command_events_per_s": round(len(lines) / best),
        "inprocess_events_per_s": round(len(lines) / inproc),
        "goal_events_per_s": 75_000,
        "profile_top": [
            {"function": f"{os.path.basename(k[0])}:{k[2]}", "own_share": round(v[2] / total, 3)} for k, v in top
        ],
    }, indent=2))


if __name__ == "__main__":
    main()
