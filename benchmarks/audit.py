"""Speed and memory of `loopwarden audit` beside `loopwarden replay` of the same events.

    python -m benchmarks.audit [--events 1000000] [--bootstrap HOST:PORT]

Generates a fleet's events (streams/tools/trace.py), decides them offline with the replay
command (timed: the file replay's speed), publishes the events (keyed by run) and those
decisions (keyed by gateway, as a worker records them) to fresh topics in chunks, so a
decision follows its event by well under a second, then times the audit command over
the topics, once as `loopwarden audit` chooses (one shard per core at this size) and
once with `--jobs 1`. Every command runs as a child process, start-up included; its
peak memory is the sum of the peak resident sets of its processes, its CPU time that of
all of them (`cores_used` = CPU seconds / wall seconds); the rounds interleave, and each
command's best is kept. The broker runs on the same machine and competes for its cores.
Prints one JSON object; the goal (issue 44) is an audit in one process at least 0.85 times
the file replay's speed per core, in at most 200 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec

from benchmarks.kafka import preload, publish
from streams.kafka.producer import OutRecord
from streams.kafka.settings import Settings
from streams.tools.harness import own_broker, setup_topics
from streams.tools.launch import command
from streams.tools.trace import CONFIG, generate

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 20_000


def _proc_mib(path: str, field: str) -> float | None:
    """A `field:` line of a /proc file, in MiB (None: the process is gone)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _hwm_mib(pid: int) -> float | None:
    """The process's peak resident set so far (VmHWM)."""
    return _proc_mib(f"/proc/{pid}/status", "VmHWM:")


def _pss_mib(pid: int) -> float:
    """The process's proportional set size now: its own pages, and its share of the
    pages it shares (a forked shard shares the parent's imports)."""
    return _proc_mib(f"/proc/{pid}/smaps_rollup", "Pss:") or 0.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class Timed(NamedTuple):
    wall: float  # seconds
    peak_mib: float  # the peak of the processes' summed proportional set sizes, sampled
    peak_rss_sum_mib: float  # the sum of each process's own peak resident set (an upper bound)
    cpu: float  # user + system seconds of the command and its children
    processes: int
    code: int


def timed(cmd: list[str], stdout: IO[bytes] | int) -> Timed:
    """Wall time, peak memory and CPU time of a child process and the processes it
    starts (an audit in several shards). Memory is read from /proc while it runs (a
    fork's rusage would count the parent's pages): the total proportional set size
    every 50 ms (pages shared by the shards counted once), and each process's peak
    resident set, whose sum bounds the whole's peak from above."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as errors:  # a pipe nobody reads could fill up
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=errors)
        peaks: dict[int, float] = {}
        peak = 0.0
        while p.poll() is None:
            pids = [p.pid, *_children(p.pid)]
            peak = max(peak, sum(_pss_mib(pid) for pid in pids))
            for pid in pids:
                hwm = _hwm_mib(pid)
                if hwm is not None:
                    peaks[pid] = max(peaks.get(pid, 0.0), hwm)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 2):
        raise SystemExit(f"{cmd[3]} failed ({p.returncode}): {err[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, peak, sum(peaks.values()), cpu, len(peaks), p.returncode)


class _Ids(msgspec.Struct):
    run_id: str
    seq: int


class _Recorded(msgspec.Struct):
    event_id: str
    gateway_id: str


async def load(bootstrap: str, s: Settings, lines: list[bytes], decisions: list[bytes]) -> None:
    """Events and their decisions, chunk by chunk (a decision lands right after its event)."""
    ids, recorded = msgspec.json.Decoder(_Ids), msgspec.json.Decoder(_Recorded)
    by_event: dict[str, tuple[bytes, bytes]] = {}
    for d in decisions:
        r = recorded.decode(d)
        by_event[r.event_id] = (r.gateway_id.encode(), d)
    for i in range(0, len(lines), CHUNK):
        chunk = lines[i : i + CHUNK]
        await preload(bootstrap, s.events_topic, chunk)
        out = []
        for ln in chunk:
            e = ids.decode(ln)
            got = by_event.pop(f"{e.run_id}:{e.seq}", None)
            if got is not None:
                out.append(OutRecord(s.decisions_topic, got[0], got[1]))
        if out:
            await publish(bootstrap, out)
    assert not by_event, f"{len(by_event)} decisions without their event"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", help="use this broker (default: start a local one, stopped at the end)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds of each command, interleaved (default 2)")
    ap.add_argument(
        "--grace",
        help="the audits' --grace (default: the audit's own, 5m: the whole trace's decisions are then "
        "held at once, as a fleet's busiest grace period's would be)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lines = generate(args.events)
        src, cfg, out = tmp / "events.jsonl", tmp / "config.json", tmp / "decisions.jsonl"
        src.write_bytes(b"\n".join(lines) + b"\n")
        cfg.write_text(json.dumps(CONFIG))
        replay_cmd = command("replay", "--config", str(cfg), "--input", str(src), "--output", str(out))
        replays = [timed(replay_cmd, subprocess.DEVNULL)]
        decisions = out.read_bytes().splitlines()
        with own_broker(args.bootstrap, tmp, heap="768m") as (bootstrap, _):
            prefix = f"bench{uuid.uuid4().hex[:8]}."
            s = setup_topics(bootstrap, prefix)
            t0 = time.perf_counter()
            asyncio.run(load(bootstrap, s, lines, decisions))
            load_s = time.perf_counter() - t0
            del lines
            summary_path = tmp / "summary.json"
            audit_cmd = command(
                "audit",
                "--bootstrap",
                bootstrap,
                "--topic-prefix",
                prefix,
                "--worker-config",
                str(cfg),
                *(["--grace", args.grace] if args.grace else []),
                "--json",
            )
            one_process = [*audit_cmd, "--jobs", "1"]
            runs: dict[str, list[Timed]] = {"replay": replays, "audit": [], "audit_one_process": []}
            # Rounds in rotating order (replay, audit, audit in one process; then audit,
            # ...): a busy spell of the machine falls on all alike; each one's best round
            # is kept.
            summaries: dict[str, dict[str, Any]] = {}
            order = [("audit", audit_cmd), ("audit_one_process", one_process), ("replay", replay_cmd)]
            for r in range(args.rounds):
                for name, cmd in order[r % 3 :] + order[: r % 3]:
                    if name == "replay":
                        runs[name].append(timed(cmd, subprocess.DEVNULL))
                    else:
                        with open(summary_path, "wb") as f:
                            runs[name].append(timed(cmd, f))
                        summaries[name] = json.loads(summary_path.read_text())
                        assert summaries[name]["matched"] == len(decisions), summaries[name]
    n = args.events

    def best(name: str) -> dict[str, Any]:
        got = runs[name]
        b = min(got)
        return {
            "seconds": round(b.wall, 2),
            "events_per_s": round(n / b.wall),
            "peak_mib": round(b.peak_mib),
            "peak_rss_sum_mib": round(b.peak_rss_sum_mib),
            "processes": b.processes,
            "cpu_seconds": round(b.cpu, 2),
            "cores_used": round(b.cpu / b.wall, 2),
            "rounds_s": [round(x.wall, 2) for x in got],
        }

    audit = best("audit")
    summary = summaries["audit"]
    audit.update(
        exit=min(runs["audit"]).code,
        inner_events_per_s=summary["events_per_s"],
        **{k: summary[k] for k in ("matched", "mismatched", "missing", "unexpected", "conflicting")},
    )
    replay, one = best("replay"), best("audit_one_process")
    print(
        json.dumps(
            {
                "benchmark": "audit",
                "events": n,
                "decisions": len(decisions),
                "grace": args.grace or "5m (the default)",
                "load_seconds": round(load_s, 1),
                "cpu_count": os.cpu_count(),
                "replay": replay,
                "audit": audit,
                "audit_one_process": one,
                "audit_vs_replay": round(replay["seconds"] / audit["seconds"], 3),
                "audit_one_process_vs_replay": round(replay["seconds"] / one["seconds"], 3),
                "audit_one_process_vs_replay_per_core": round(replay["cpu_seconds"] / one["cpu_seconds"], 3),
                "goal": 0.85,
                "goal_peak_mib": 200,
                "load_average": os.getloadavg(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
