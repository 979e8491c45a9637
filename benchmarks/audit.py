"""Speed and memory of `loopwarden audit` beside `loopwarden replay` of the same events.

    python -m benchmarks.audit [--events 1000000] [--bootstrap HOST:PORT]

Generates a fleet's events (benchmarks/trace.py), decides them offline with the replay
command (timed: the file replay's speed), publishes the events (keyed by run) and those
decisions (keyed by gateway, as a worker records them) to fresh topics in chunks, so a
decision follows its event by well under a second, then times the audit command over
the topics. Both commands run as child processes, start-up included; peak memory is
each child's maximum resident set; the rounds interleave, and each command's best is
kept. Prints one JSON object; the goal is an audit at
least 0.7 times the file replay's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import msgspec

from benchmarks.kafka import own_broker, preload, publish
from benchmarks.trace import CONFIG, generate
from streams import settings as settings_mod
from streams.tools import localkafka
from streams.tools.launch import command
from streams.topics import create_topics
from streams.worker.producer import OutRecord

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 20_000


def _hwm_mib(pid: int) -> float | None:
    """The process's peak resident set so far (VmHWM), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def timed(cmd: list[str], stdout) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, exit code) of a child process. The peak is read
    from /proc while it runs (a fork's rusage would count the parent's pages)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as errors:  # a pipe nobody reads could fill up
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=errors)
        peak = 0.0
        while p.poll() is None:
            hwm = _hwm_mib(p.pid)
            if hwm is not None:
                peak = max(peak, hwm)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if p.returncode not in (0, 2):
        raise SystemExit(f"{cmd[3]} failed ({p.returncode}): {err[-2000:]}")
    return wall, peak, p.returncode


class _Ids(msgspec.Struct):
    run_id: str
    seq: int


class _Recorded(msgspec.Struct):
    event_id: str
    gateway_id: str


async def load(bootstrap: str, s: settings_mod.Settings, lines: list[bytes], decisions: list[bytes]) -> None:
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
        bootstrap, broker = own_broker(args.bootstrap, tmp, heap="768m")
        try:
            prefix = f"bench{uuid.uuid4().hex[:8]}."
            s = settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix}, env={})
            asyncio.run(create_topics(s))
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
                "--grace",
                "5s",
                "--json",
            )
            audits = []
            # Rounds in the order replay, audit, audit, replay, ...: a busy spell of the
            # machine falls on both alike; each command's best round is kept.
            for r in range(args.rounds):
                if r % 2 == 0:
                    with open(summary_path, "wb") as f:
                        audits.append(timed(audit_cmd, f))
                    replays.append(timed(replay_cmd, subprocess.DEVNULL))
                else:
                    replays.append(timed(replay_cmd, subprocess.DEVNULL))
                    with open(summary_path, "wb") as f:
                        audits.append(timed(audit_cmd, f))
            summary = json.loads(summary_path.read_text())
        finally:
            if broker is not None:
                localkafka.stop(broker)
    n = args.events
    replay_s, replay_rss, _ = min(replays)
    audit_s, audit_rss, code = min(audits)
    print(
        json.dumps(
            {
                "benchmark": "audit",
                "events": n,
                "decisions": len(decisions),
                "load_seconds": round(load_s, 1),
                "replay": {
                    "seconds": round(replay_s, 2),
                    "events_per_s": round(n / replay_s),
                    "peak_rss_mib": round(replay_rss),
                    "rounds_s": [round(x[0], 2) for x in replays],
                },
                "audit": {
                    "seconds": round(audit_s, 2),
                    "events_per_s": round(n / audit_s),
                    "peak_rss_mib": round(audit_rss),
                    "rounds_s": [round(x[0], 2) for x in audits],
                    "exit": code,
                    "inner_events_per_s": summary["events_per_s"],
                    "matched": summary["matched"],
                    "mismatched": summary["mismatched"],
                    "missing": summary["missing"],
                    "unexpected": summary["unexpected"],
                    "conflicting": summary["conflicting"],
                },
                "audit_vs_replay": round(replay_s / audit_s, 3),
                "goal": 0.7,
                "load_average": os.getloadavg(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
