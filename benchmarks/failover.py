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

With --active-runs N, N runs (benchmarks.recovery's: a few calls with their results, no
run_end) are loaded through the workers before the first round and stay open, so a
worker taking partitions over must first load their states (issue 26: 100,000).

With --rolling, the rounds restart the workers instead, one after another, as a deploy
does: SIGTERM, wait for the exit, start it again, wait until the group settled. The load
is then GatewayClient.check calls (8 gateways, each run's calls in sequence, each call's
result sent after its decision, a 20 s client timeout). Reported: the longest any check
waited, the degraded answers (none is the goal), and whether every decision on the
decisions topic equals what an offline fold of the events topic decides (byte for byte;
duplicates from at-least-once delivery are counted, and must be equal too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.kafka import preload, run_and_print
from benchmarks.recovery import make_events
from detectors import load_config
from detectors.ingest import Folded, fold
from streams.gateway.client import GatewayClient
from streams.kafka import clients
from streams.kafka.partitioner import partition_for
from streams.kafka.settings import Settings
from streams.tools.harness import (
    KEEP_HELP,
    WorkerProcess,
    follow_arrivals,
    own_broker,
    percentile,
    read_all_async,
    setup_topics_async,
    wait_assigned_async,
    wait_for_count,
)
from streams.tools.trace import CONFIG
from streams.worker.settings import WorkerSettings

Workers = dict[int, WorkerProcess]


class Load:
    """Tool calls at a steady rate over `runs` runs; every decision's arrival, by partition."""

    def __init__(self, s: Settings, rate: float, runs: int = 600) -> None:
        self.s, self.rate = s, rate
        self.runs = [f"run-{i:05d}" for i in range(runs)]
        self.part = {r: partition_for(r.encode(), s.partitions) for r in self.runs}
        self.seq = dict.fromkeys(self.runs, 0)
        # partition -> [(arrival, monotonic; the event's ts, wall-clock ms)]
        self.arrivals: dict[int, list[tuple[float, int]]] = {p: [] for p in range(s.partitions)}
        self.stop = False

    async def produce(self) -> None:
        s = self.s
        async with clients.opened(clients.producer(s, acks="all", enable_idempotence=True, linger_ms=2), s) as p:
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

    async def read(self) -> None:
        def arrived(now: float, m: Any) -> None:
            d = json.loads(m.value)
            self.arrivals[self.part[d["run_id"]]].append((now, d["ts"]))

        await follow_arrivals(self.s.bootstrap, self.s.decisions_topic, arrived, lambda: self.stop)


def gaps(arrivals: list[tuple[float, int]], start: float, start_ms: int, stop: float) -> tuple[float | None, float]:
    """(seconds from `start` to the first decision of an event sent after it; the longest
    gap between two decisions arriving in the window)."""
    xs = [t for t, _ in arrivals if start - 1 <= t <= stop]
    after = [t for t, ts in arrivals if ts > start_ms and t <= stop]
    first = after[0] - start if after else None
    longest = max((b - a for a, b in zip(xs, xs[1:], strict=False)), default=stop - start)
    return first, longest


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with own_broker(args.bootstrap, tmp, heap="768m") as (bootstrap, _):
        prefix = f"fo{os.getpid()}."
        s = await setup_topics_async(bootstrap, prefix, args.partitions)
        extra = ["--session-timeout-s", str(args.session_timeout_s)] if args.session_timeout_s else []
        if args.standby_replicas is not None:
            extra += ["--standby-replicas", str(args.standby_replicas)]
        workers: Workers = {
            i: WorkerProcess(bootstrap, prefix, CONFIG, tmp, args.partitions, f"w{i}", extra, log_level="warning")
            for i in range(args.workers)
        }
        loop = asyncio.get_running_loop()
        try:
            for w in workers.values():
                await loop.run_in_executor(None, w.start)
            loaded = await load_active(s, args.active_runs)
            if args.rolling:
                restarts = await rolling(args, s, workers)
                return {
                    "benchmark": "rolling_restart",
                    "workers": args.workers,
                    "partitions": args.partitions,
                    "rate_per_s": args.rate,
                    "active_runs": loaded,
                    **restarts,
                }
            rounds = await kills(args, s, workers)
        finally:
            for w in workers.values():
                w.stop()
    return summary(args, rounds, loaded)


async def load_active(s: Settings, runs: int) -> dict[str, Any] | None:
    """`runs` open runs loaded through the workers (every call decided), or None."""
    if not runs:
        return None
    t = time.monotonic()
    lines, calls = make_events(runs, 2, 3)
    await preload(s.bootstrap, s.events_topic, lines)
    await wait_for_count(s.bootstrap, s.decisions_topic, calls, 1800)
    out = {"runs": runs, "events": len(lines), "tool_calls": calls, "load_s": round(time.monotonic() - t, 1)}
    print(json.dumps({"loaded": out}), flush=True)
    return out


async def kills(args: argparse.Namespace, s: Settings, workers: Workers) -> list[dict[str, Any]]:
    """The rounds of SIGKILL: one worker each, the load running throughout; the worker is
    started again after each."""
    loop = asyncio.get_running_loop()
    load = Load(s, args.rate)
    tasks = [asyncio.ensure_future(load.produce()), asyncio.ensure_future(load.read())]
    rounds: list[dict[str, Any]] = []
    try:
        for k in range(args.kills):
            await wait_assigned_async(list(workers.values()), args.partitions)
            await asyncio.sleep(8)
            victim = workers[k % args.workers]
            owned = victim.partitions()
            killed_at, killed_ms = time.monotonic(), int(time.time() * 1000)
            victim.kill()
            await asyncio.sleep(30)
            window_end = time.monotonic()
            dead: dict[int, float | None] = {}
            others: dict[int, float] = {}
            for p, xs in load.arrivals.items():
                first, longest = gaps(xs, killed_at, killed_ms, window_end)
                if p in owned:
                    dead[p] = round(first, 2) if first is not None else None
                else:
                    others[p] = round(longest, 2)
            resumed = [x for x in dead.values() if x is not None]
            rounds.append(
                {
                    "killed": f"w{k % args.workers}",
                    "dead_partitions": owned,
                    "resume_s": dead,
                    "failover_s": max(resumed) if resumed and len(resumed) == len(dead) else None,
                    "others_longest_gap_s": max(others.values(), default=None),
                }
            )
            print(json.dumps(rounds[-1]), flush=True)
            await loop.run_in_executor(None, victim.start)
    finally:
        load.stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
    return rounds


class Checks:
    """GatewayClient.check at about `rate` calls per second: 8 gateways, `agents` runs in
    flight at once, each run 12 calls in sequence (a call's result after its decision,
    then run_end); a quarter of the runs repeat one call, so warnings are decided too."""

    def __init__(self, s: Settings, rate: float, agents: int = 32) -> None:
        self.s, self.rate, self.agents = s, rate, agents
        self.waits: list[float] = []
        self.degraded = 0
        self.stop = False

    async def run(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            gateways = [
                await stack.enter_async_context(
                    GatewayClient(settings=self.s, gateway_id=f"gw-roll-{i}", timeout_s=20.0)
                )
                for i in range(8)
            ]
            try:
                await asyncio.gather(*(self._agent(a, gateways[a % len(gateways)]) for a in range(self.agents)))
            finally:
                self.degraded = sum(c.degraded for c in gateways)

    async def _agent(self, a: int, client: GatewayClient) -> None:
        interval = self.agents / self.rate
        next_t = time.monotonic() + a * interval / self.agents
        n = 0
        while not self.stop:
            run = f"roll-{a:02d}-{n:05d}"
            for c in range(12):
                await asyncio.sleep(max(0.0, next_t - time.monotonic()))
                next_t += interval
                params = {"path": "/same" if n % 4 == 0 else f"/f{c % 3}"}
                t0 = time.monotonic()
                await client.check(run, "read", params)
                self.waits.append(time.monotonic() - t0)
                await client.result(run, "read", params, result={"content": [{"type": "text", "text": f"r{c % 3}"}]})
                if self.stop:
                    break
            await client.end_run(run)
            n += 1


async def rolling(args: argparse.Namespace, s: Settings, workers: Workers) -> dict[str, Any]:
    """Each worker restarted in turn (SIGTERM, start again, group settled) under `Checks`."""
    loop = asyncio.get_running_loop()
    checks = Checks(s, args.rate)
    task = asyncio.ensure_future(checks.run())
    restarts = []
    try:
        await wait_assigned_async(list(workers.values()), args.partitions)
        await asyncio.sleep(8)
        for i, w in workers.items():
            t0 = time.monotonic()
            await loop.run_in_executor(None, w.stop)
            exited = time.monotonic() - t0
            exit_code = w.proc.returncode if w.proc else None
            await loop.run_in_executor(None, w.start)
            await wait_assigned_async(list(workers.values()), args.partitions, 120)
            restarts.append(
                {
                    "worker": f"w{i}",
                    "exit_s": round(exited, 2),
                    "exit_code": exit_code,
                    "settled_s": round(time.monotonic() - t0, 2),
                }
            )
            print(json.dumps(restarts[-1]), flush=True)
            await asyncio.sleep(8)
    finally:
        checks.stop = True
        await asyncio.wait_for(task, 60)
    waits = checks.waits
    compared = await compare_offline(s)
    p99 = percentile(waits, 99)
    return {
        "client_timeout_s": 20.0,
        "checks": len(waits),
        "check_wait_max_s": round(max(waits), 2) if waits else None,
        "check_wait_p99_s": round(p99, 3) if p99 is not None else None,
        "degraded": checks.degraded,
        "restarts": restarts,
        **compared,
    }


async def compare_offline(s: Settings) -> dict[str, Any]:
    """The decisions topic against an offline fold of the events topic, per event_id."""
    events = await read_all_async(s.bootstrap, s.events_topic)
    published: dict[str, list[bytes]] = {}
    for m in await read_all_async(s.bootstrap, s.decisions_topic):
        published.setdefault(json.loads(m.value)["event_id"], []).append(m.value)
    offline: dict[str, bytes] = {}
    for f in fold(((m.offset, m.key, m.value) for m in events), load_config(json.dumps(CONFIG))):
        if type(f) is Folded:
            for d, b in zip(f.decisions, f.encoded, strict=True):
                offline[d.event_id] = b
    missing = [e for e in offline if e not in published]
    differ = [e for e, bs in published.items() if any(b != offline.get(e) for b in bs)]
    return {
        "events": len(events),
        "offline_decisions": len(offline),
        "published_decisions": sum(len(bs) for bs in published.values()),
        "duplicates": sum(len(bs) - 1 for bs in published.values()),
        "missing": len(missing),
        "missing_examples": missing[:5],
        "differing": len(differ),
        "differing_examples": differ[:5],
        "equal_to_offline": not missing and not differ,
    }


def summary(args: argparse.Namespace, rounds: list[dict[str, Any]], loaded: dict[str, Any] | None) -> dict[str, Any]:
    fo = [r["failover_s"] for r in rounds]
    ok = [x for x in fo if x is not None]
    others = [r["others_longest_gap_s"] for r in rounds if r["others_longest_gap_s"] is not None]
    return {
        "benchmark": "failover",
        "workers": args.workers,
        "partitions": args.partitions,
        "rate_per_s": args.rate,
        "session_timeout_s": args.session_timeout_s or WorkerSettings().session_timeout_s,
        "standby_replicas": args.standby_replicas
        if args.standby_replicas is not None
        else WorkerSettings().standby_replicas,
        "active_runs": loaded,
        "kills": len(rounds),
        "failover_s_median": round(median(ok), 2) if ok else None,
        "failover_s_max": max(ok) if len(ok) == len(fo) and ok else None,
        "others_longest_gap_s_median": round(median(others), 2) if others else None,
        "others_longest_gap_s_max": max(others) if others else None,
        "rounds": rounds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--session-timeout-s", type=float, help="passed to the workers (default: the worker's default)")
    ap.add_argument("--standby-replicas", type=int, help="passed to the workers (default: the worker's default)")
    ap.add_argument(
        "--active-runs",
        type=int,
        default=0,
        help="open runs loaded before the first round, which a worker taking over must load (issue 26: 100000)",
    )
    ap.add_argument(
        "--rolling",
        action="store_true",
        help="restart every worker in turn under GatewayClient checks instead of killing one per round",
    )
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    run_and_print("loopwarden-failover-", args, run)


if __name__ == "__main__":
    main()
