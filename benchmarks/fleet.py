"""The fleet's propagation: from a breaker's opening failure, from `loopwarden stop`'s
return, or from the usage event that reaches a spend cap, to the first call it decides on
each worker.

    python -m benchmarks.fleet [--bootstrap HOST:PORT] [--trials 20] [--rate 300]
                               [--workers 3] [--partitions 12]

Without --bootstrap it starts its own local broker and stops it at the end. N workers
share 12 partitions; a load generator sends --rate calls a second of other traffic the
whole time. Each breaker trial uses a tool of its own: `minRuns` failures of it are
sent, then probe calls of that tool go out every 20 ms on one run owned by each worker
(found from /health and Kafka's partitioner) until each worker has answered one with
`fleet_tool_breaker`. Each stop trial publishes a stop order for an agent of its own
(as `loopwarden stop` does, and times from its return), then probes that agent on each
worker until each has answered `operator_stop`. Each cap trial sends, for an agent of
its own, one `usage` event that reaches a per-agent cost cap (the workers forward it to
the spend stage, which publishes the cap's signal on the fleet topic), then probes that
agent on each worker until each has answered `fleet_spend_cap`. A trial's time on a
worker is from the acknowledgement of the opening failure (the order, the usage event)
to the arrival of the first blocked (aborted, paused) decision; probes are 20 ms apart,
so that much is resolution. Prints one JSON object: p50, p99 and max per kind, over
trials and workers, and the cores each process used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.kafka import run_and_print
from streams.admin import fleet_topic
from streams.kafka import clients
from streams.kafka.partitioner import partition_for
from streams.kafka.settings import Settings
from streams.tools.harness import (
    KEEP_HELP,
    WorkerProcess,
    cpu_seconds,
    follow_arrivals,
    own_broker,
    percentile,
    running_workers,
    setup_topics_async,
)

MIN_RUNS = 3
CAP_USD = 1.0
CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {
        "fleet": {
            "toolBreaker": {"enabled": True, "minRuns": MIN_RUNS, "windowMs": 600000, "coolDownMs": 600000},
            # the other traffic counts too (its calls, under the agent ""), never up to a ceiling
            "spendCaps": [{"id": "bench-cost", "per": "agent", "costUsd": CAP_USD}],
        }
    },
}
PROBE_EVERY_S = 0.02


class Bench:
    def __init__(self, s: Settings, owners: dict[int, int]) -> None:
        self.s, self.owners = s, owners  # partition -> worker index
        self.arrived: dict[str, tuple[float, dict[str, Any]]] = {}  # event_id -> (arrival, decision)
        self.producer = clients.producer(s, acks="all", linger_ms=0)
        self.seq = 0
        self.stop = False

    def run_on(self, worker: int, stem: str) -> str:
        """A run id whose partition the worker owns."""
        i = 0
        while True:
            run = f"{stem}-{i}"
            if self.owners.get(partition_for(run.encode(), self.s.partitions)) == worker:
                return run
            i += 1

    async def send(self, ev: dict[str, Any]) -> str:
        self.seq += 1
        ev = {"seq": self.seq, "gateway_id": "gw-bench", "ts": int(time.time() * 1000), **ev}
        await (await self.producer.send(self.s.events_topic, key=ev["run_id"].encode(), value=json.dumps(ev).encode()))
        return f"{ev['run_id']}:{ev['seq']}"

    async def read(self) -> None:
        def arrived(now: float, m: Any) -> None:
            d = json.loads(m.value)
            self.arrived[d["event_id"]] = (now, d)

        await follow_arrivals(self.s.bootstrap, self.s.decisions_topic, arrived, lambda: self.stop)

    async def load(self, rate: float) -> None:
        s = self.s
        async with clients.opened(clients.producer(s, acks="all", linger_ms=2), s) as p:
            i, t0 = 0, time.monotonic()
            while not self.stop:
                run = f"other-{i % 500}"
                ev = {"type": "tool_call", "run_id": run, "seq": i, "gateway_id": f"gw-{i % 8}", "tool_name": "read"}
                ev |= {"params": {"path": f"/f{i}"}, "ts": int(time.time() * 1000)}
                await p.send(self.s.events_topic, key=run.encode(), value=json.dumps(ev).encode())
                i += 1
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)

    async def probe_until(
        self,
        runs: list[str],
        make: Callable[[str], dict[str, Any]],
        detector: str,
        since: float,
        timeout: float = 30,
    ) -> list[float]:
        """Probe each run until its worker answers with `detector`; seconds from `since`."""
        got: dict[str, float] = {}
        sent: dict[str, list[str]] = {r: [] for r in runs}
        deadline = time.monotonic() + timeout
        while len(got) < len(runs) and time.monotonic() < deadline:
            for run in runs:
                if run not in got:
                    sent[run].append(await self.send(make(run)))
            await asyncio.sleep(PROBE_EVERY_S)
            for run in runs:
                for eid in sent[run]:
                    hit = self.arrived.get(eid)
                    if run not in got and hit is not None and hit[1]["detector"] == detector:
                        got[run] = hit[0] - since
        if len(got) < len(runs):
            raise RuntimeError(f"{detector}: not every worker answered within {timeout} s: {got}")
        return [got[r] for r in runs]

    async def breaker_trial(self, k: int, workers: int) -> list[float]:
        tool = f"bench_tool_{k}"
        probes = [self.run_on(w, f"b{k}-probe-w{w}") for w in range(workers)]
        # One ts for the failures: they reach the stage through different workers, in any
        # order, and a failure counts only those at or before its own ts.
        ts = int(time.time() * 1000)
        for i in range(MIN_RUNS):
            run = f"b{k}-fail-{i}"
            ev = {"type": "tool_result", "run_id": run, "tool_name": tool, "params": {}, "error": "503 quota", "ts": ts}
            await self.send(ev)
        opened = time.monotonic()  # the opening failure is acknowledged
        return await self.probe_until(
            probes,
            lambda run: {"type": "tool_call", "run_id": run, "tool_name": tool, "params": {"n": self.seq}},
            "fleet_tool_breaker",
            opened,
        )

    async def stop_trial(self, k: int, workers: int) -> list[float]:
        agent = f"bench-agent-{k}"
        probes = [self.run_on(w, f"s{k}-probe-w{w}") for w in range(workers)]
        now_ms = int(time.time() * 1000)
        order = fleet_topic.make_order(
            agent_id=agent,
            gateway_id=None,
            run_id=None,
            from_ts=now_ms,
            until_ts=None,
            reason="benchmark",
            issued_by="bench",
            order_id=fleet_topic.new_order_id(now_ms),
        )
        await fleet_topic.publish_order(self.s, order, now_ms)
        returned = time.monotonic()
        return await self.probe_until(
            probes,
            lambda run: {"type": "tool_call", "run_id": run, "agent_id": agent, "tool_name": "read", "params": {}},
            "operator_stop",
            returned,
        )

    async def cap_trial(self, k: int, workers: int) -> list[float]:
        agent = f"cap-agent-{k}-{int(time.time())}"
        probes = [self.run_on(w, f"c{k}-probe-w{w}") for w in range(workers)]
        await self.send({"type": "usage", "run_id": f"c{k}-usage", "agent_id": agent, "cost_usd": CAP_USD})
        reached = time.monotonic()  # the usage event that reaches the cap is acknowledged
        return await self.probe_until(
            probes,
            lambda run: {"type": "tool_call", "run_id": run, "agent_id": agent, "tool_name": "read", "params": {}},
            "fleet_spend_cap",
            reached,
        )


def summary(xs: list[float]) -> dict[str, Any]:
    """Seconds as milliseconds, to a tenth: p50, p99 (harness.percentile) and max."""
    return {
        "n": len(xs),
        **{f"p{p}_ms": round((percentile(xs, p) or 0.0) * 1000, 1) for p in (50, 99)},
        "max_ms": round(max(xs) * 1000, 1),
    }


async def main_async(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with own_broker(args.bootstrap, tmp) as (bootstrap, _):
        prefix = f"bfl{int(time.time())}."
        s = await setup_topics_async(bootstrap, prefix, args.partitions)
        group = running_workers(bootstrap, prefix, CONFIG, tmp, args.partitions, args.workers, log_level="warning")
        async with group as (workers, owners):
            return await trials(args, s, workers, owners)


async def trials(
    args: argparse.Namespace, s: Settings, workers: list[WorkerProcess], owners: dict[int, int]
) -> dict[str, Any]:
    bench = Bench(s, owners)
    await clients.start(bench.producer, s)
    reader = asyncio.create_task(bench.read())
    loader = asyncio.create_task(bench.load(args.rate))
    await asyncio.sleep(3)  # the load runs; the reader is at the end of the decisions
    cpu0 = [cpu_seconds(w.pid) for w in workers]
    t0 = time.monotonic()
    breaker: list[float] = []
    stops: list[float] = []
    caps: list[float] = []
    for k in range(args.trials):
        breaker += await bench.breaker_trial(k, args.workers)
        stops += await bench.stop_trial(k, args.workers)
        caps += await bench.cap_trial(k, args.workers)
    wall = time.monotonic() - t0
    cores = [round((cpu_seconds(w.pid) - c) / wall, 2) for w, c in zip(workers, cpu0, strict=True)]
    bench.stop = True
    await asyncio.gather(reader, loader)
    await bench.producer.stop()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {
        "workers": args.workers,
        "partitions": args.partitions,
        "other_traffic_calls_per_s": args.rate,
        "trials": args.trials,
        "breaker_open_to_first_block": summary(breaker),
        "stop_return_to_first_abort": summary(stops),
        "cap_reached_to_first_pause": summary(caps),
        "goal_cap_p99_ms": 1000,
        "probe_interval_s": PROBE_EVERY_S,
        "worker_cores_used": cores,
        "load_average_after": load,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rate", type=float, default=300.0, help="calls a second of other traffic")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    run_and_print("lw-fleet-", args, main_async)


if __name__ == "__main__":
    main()
