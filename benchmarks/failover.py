"""Failover: how long the partitions of a SIGKILLed worker go without decisions.

    python -m benchmarks.failover [--bootstrap HOST:PORT] [--kills 5] [--rate 200]
                                  [--workers 3] [--partitions 12] [--session-timeout-s S]

Without --bootstrap it starts its own local broker and stops it at the end. N workers
share the events topic; a load generator in this process produces tool calls at --rate
per second over many runs (every partition gets events all the time) and reads every
decision back; a decision carries its event's `ts`, the wall-clock time it was sent.
Each round: the workers are healthy and the load has run for 8 s, one worker (a
different one each round) gets SIGKILL, the load goes on for 30 s, the worker is started
again and the group settles. Per round it reports, for the dead worker's partitions, the
seconds from the kill to the first decision of an event sent after the
kill, on each (their resume time;
the max over them is the round's failover), and for the other partitions the longest
gap between two decisions around the kill (Faust's rebalances are eager: every member
pauses while the group rebalances). Prints one JSON object: median and max over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from statistics import median

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import murmur2

from benchmarks.kafka import end, own_broker, start_worker
from streams.admin.topics import create_topics
from streams.gateway import settings as settings_mod
from streams.tools import localkafka
from streams.tools.launch import health


class Load:
    """Tool calls at a steady rate over `runs` runs; every decision's arrival, by partition."""

    def __init__(self, bootstrap: str, s: settings_mod.Settings, rate: float, runs: int = 600) -> None:
        self.bootstrap, self.s, self.rate = bootstrap, s, rate
        self.runs = [f"run-{i:05d}" for i in range(runs)]
        self.part = {r: (murmur2(r.encode()) & 0x7FFFFFFF) % s.partitions for r in self.runs}
        self.seq = dict.fromkeys(self.runs, 0)
        # partition -> [(arrival, monotonic; the event's ts, wall-clock ms)]
        self.arrivals: dict[int, list[tuple[float, int]]] = {p: [] for p in range(s.partitions)}
        self.stop = False

    async def produce(self) -> None:
        p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=2)
        await p.start()
        try:
            i, t0 = 0, time.monotonic()
            while not self.stop:
                run = self.runs[i % len(self.runs)]
                seq = self.seq[run]
                self.seq[run] = seq + 1
                ev = {
                    "type": "tool_call",
                    "run_id": run,
                    "seq": seq,
                    "gateway_id": f"gw-{i % 8}",
                    "tool_name": "read",
                    "params": {"path": f"/f{seq}"},
                    "ts": int(time.time() * 1000),
                }
                await p.send(self.s.events_topic, key=run.encode(), value=json.dumps(ev).encode())
                i += 1
                delay = t0 + i / self.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        finally:
            await p.stop()

    async def read(self) -> None:
        c = AIOKafkaConsumer(
            self.s.decisions_topic,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="latest",
            enable_auto_commit=False,
        )
        await c.start()
        try:
            while not self.stop:
                batch = await c.getmany(timeout_ms=100)
                now = time.monotonic()
                for msgs in batch.values():
                    for m in msgs:
                        d = json.loads(m.value)
                        self.arrivals[self.part[d["run_id"]]].append((now, d["ts"]))
        finally:
            await c.stop()


def gaps(arrivals: list[tuple[float, int]], start: float, start_ms: int, stop: float) -> tuple[float | None, float]:
    """(seconds from `start` to the first decision of an event sent after it; the longest
    gap between two decisions arriving in the window)."""
    xs = [t for t, _ in arrivals if start - 1 <= t <= stop]
    after = [t for t, ts in arrivals if ts > start_ms and t <= stop]
    first = after[0] - start if after else None
    longest = max((b - a for a, b in zip(xs, xs[1:], strict=False)), default=stop - start)
    return first, longest


async def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="loopwarden-failover-"))
    bootstrap, broker = own_broker(args.bootstrap, tmp)
    procs: dict[int, tuple] = {}
    try:
        prefix = f"fo{os.getpid()}."
        s = settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": args.partitions}, env={})
        await create_topics(s)
        extra = ["--partitions", str(args.partitions)]
        if args.session_timeout_s:
            extra += ["--session-timeout-s", str(args.session_timeout_s)]
        if args.standby_replicas is not None:
            extra += ["--standby-replicas", str(args.standby_replicas)]
        loop = asyncio.get_running_loop()
        for i in range(args.workers):
            procs[i] = await loop.run_in_executor(None, start_worker, bootstrap, prefix, tmp, f"w{i}", extra)
        load = Load(bootstrap, s, args.rate)
        tasks = [asyncio.ensure_future(load.produce()), asyncio.ensure_future(load.read())]
        rounds = []
        for k in range(args.kills):
            await settle(procs, args.partitions, 60)
            await asyncio.sleep(8)
            victim = k % args.workers
            proc, port = procs[victim]
            owned = (health(port) or {}).get("partitions", [])
            killed_at, killed_ms = time.monotonic(), int(time.time() * 1000)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            await asyncio.sleep(30)
            window_end = time.monotonic()
            dead, others = {}, {}
            for p, xs in load.arrivals.items():
                first, longest = gaps(xs, killed_at, killed_ms, window_end)
                if p in owned:
                    dead[p] = round(first, 2) if first is not None else None
                else:
                    others[p] = round(longest, 2)
            resumed = [x for x in dead.values() if x is not None]
            rounds.append(
                {
                    "killed": f"w{victim}",
                    "dead_partitions": owned,
                    "resume_s": dead,
                    "failover_s": max(resumed) if resumed and len(resumed) == len(dead) else None,
                    "others_longest_gap_s": max(others.values(), default=None),
                }
            )
            print(json.dumps(rounds[-1]), flush=True)
            procs[victim] = await loop.run_in_executor(None, start_worker, bootstrap, prefix, tmp, f"w{victim}", extra)
        load.stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for proc, _ in procs.values():
            end(proc)
        if broker:
            localkafka.stop(broker)
    fo = [r["failover_s"] for r in rounds]
    ok = [x for x in fo if x is not None]
    others = [r["others_longest_gap_s"] for r in rounds if r["others_longest_gap_s"] is not None]
    return {
        "benchmark": "failover",
        "workers": args.workers,
        "partitions": args.partitions,
        "rate_per_s": args.rate,
        "session_timeout_s": args.session_timeout_s or settings_mod.Settings().session_timeout_s,
        "standby_replicas": args.standby_replicas
        if args.standby_replicas is not None
        else settings_mod.Settings().standby_replicas,
        "kills": len(rounds),
        "failover_s_median": round(median(ok), 2) if ok else None,
        "failover_s_max": max(ok) if len(ok) == len(fo) and ok else None,
        "others_longest_gap_s_median": round(median(others), 2) if others else None,
        "others_longest_gap_s_max": max(others) if others else None,
        "rounds": rounds,
    }


async def settle(procs: dict, partitions: int, timeout: float) -> None:
    """Until every worker is healthy and together they own every partition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hs = [health(port) for _, port in procs.values()]
        owned = sorted(p for h in hs if h for p in h.get("partitions", []))
        if all(h and h["status"] == "ok" for h in hs) and owned == list(range(partitions)):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("the workers did not settle")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--session-timeout-s", type=float, help="passed to the workers (default: the worker's default)")
    ap.add_argument("--standby-replicas", type=int, help="passed to the workers (default: the worker's default)")
    print(json.dumps(asyncio.run(run(ap.parse_args())), indent=2))


if __name__ == "__main__":
    main()
