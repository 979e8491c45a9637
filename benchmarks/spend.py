"""The spend stage under load: many agents, many caps, a steady stream of usage events.

    python -m benchmarks.spend [--bootstrap HOST:PORT] [--agents 50000] [--caps 20]
                               [--rate 2000] [--seconds 60] [--workers 2]

Without --bootstrap it starts its own local broker and stops it at the end. The workers
run a config of `--caps` spend caps (below: two for every agent, hourly and daily, one
for the whole fleet, one per gateway, and the rest each over a team of 100 agents), with
ceilings no one reaches, so every record is counted and none is paused. A load generator
sends `--rate` usage events a second for `--seconds`, each from one of `--agents` agents
(uniformly at random, on 1,000 runs, so the run states stay few and the stage's tables
are what grows), to 8 gateways.

Every 5 s it samples, per topic, how far the workers' group is behind the end offsets:
the events topic (what the workers fold and forward) and the spend topic (what the spend
stage counts). The lag is "not growing" when the mean over the last third of the run is
no more than the mean over the middle third plus one second of that topic's input (usage
events for the events topic, spend records for the spend topic), and it drains to zero
once the load stops; the lag's fitted slope and its error are given beside it. The
stage's memory per key: the workers' resident memory grown from before the load to its
end, over the windows the tables hold then (`loopwarden_spend_keys`), beside the bytes
each stored window takes on the changelog (key and value). Prints one JSON object; it
says how many cores each process used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from statistics import mean
from typing import Any

from streams.kafka import clients
from streams.kafka.settings import Settings
from streams.tools.harness import (
    KEEP_HELP,
    WorkerProcess,
    committed_offsets_async,
    cpu_seconds,
    end_offsets_async,
    own_broker,
    read_all_async,
    rss_kib,
    running_workers,
    scratch,
    setup_topics_async,
)

TEAM = 100  # agents in each team cap
RUNS = 1000
GATEWAYS = 8
SAMPLE_S = 5.0


def agent(i: int) -> str:
    return f"agent-{i:05d}"


def caps(n: int) -> list[dict[str, Any]]:
    """`n` caps with ceilings no one reaches: every record is counted, none paused."""
    out: list[dict[str, Any]] = [
        {"id": "agent-hourly", "per": "agent", "windowMs": 3_600_000, "costUsd": 1e6},
        {"id": "agent-daily", "per": "agent", "windowMs": 86_400_000, "tokens": 10**12},
        {"id": "fleet-hourly", "per": "all", "windowMs": 3_600_000, "costUsd": 1e8},
        {"id": "gateway-hourly", "per": "gateway", "windowMs": 3_600_000, "toolCalls": 10**9},
    ][:n]
    for t in range(n - len(out)):
        team = [agent(t * TEAM + k) for k in range(TEAM)]
        out.append({"id": f"team-{t:02d}", "per": "agent", "agents": team, "windowMs": 3_600_000, "tokens": 10**11})
    return out


async def load(s: Settings, rate: float, seconds: float, agents: int) -> int:
    """`rate` usage events a second for `seconds`; how many were sent."""
    rnd = random.Random(7)
    seqs = [0] * RUNS
    sent = 0
    async with clients.opened(clients.producer(s, acks=1, linger_ms=5), s) as p:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            r = rnd.randrange(RUNS)
            seqs[r] += 1
            run = f"run-{r}"
            ev = {"type": "usage", "run_id": run, "seq": seqs[r], "gateway_id": f"gw-{r % GATEWAYS}"}
            ev |= {"agent_id": agent(rnd.randrange(agents)), "input_tokens": 1200, "output_tokens": 300}
            ev |= {"cost_usd": 0.0042, "ts": int(time.time() * 1000)}
            await p.send(s.events_topic, key=run.encode(), value=json.dumps(ev).encode())
            sent += 1
            delay = t0 + sent / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await p.flush()
    return sent


async def lag(s: Settings, group: str, topic: str) -> int:
    ends = await end_offsets_async(s.bootstrap, topic)
    done = await committed_offsets_async(s.bootstrap, group, topic)
    return sum(max(0, end - done.get(p, 0)) for p, end in ends.items())


async def sample(s: Settings, group: str, t0: float, out: list[dict[str, Any]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        row = {"t_s": round(time.monotonic() - t0, 1)}
        row |= {"events_lag": await lag(s, group, s.events_topic), "spend_lag": await lag(s, group, s.spend_topic)}
        out.append(row)
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_S)
        except TimeoutError:
            pass


def growing(samples: list[dict[str, Any]], name: str, seconds: float, per_s: float) -> dict[str, Any]:
    """The lag's means over the middle and last thirds of the load; growing when the last
    is above the middle by more than one second of that topic's input (`per_s`, in the
    lag's own unit: events, or spend records). Beside it, the lag's least-squares slope
    per second (over the samples from the 10th second on) with its standard error, and
    that slope as a percentage of the input."""
    during = [x[name] for x in samples if x["t_s"] <= seconds]
    third = max(1, len(during) // 3)
    middle, last = during[third : 2 * third] or during, during[2 * third :] or during
    fitted = [(x["t_s"], x[name]) for x in samples if 10 <= x["t_s"] <= seconds]
    slope, error = fit(fitted) if len(fitted) >= 3 else (None, None)
    return {
        "middle_third_mean": round(mean(middle), 1),
        "last_third_mean": round(mean(last), 1),
        "max": max(during),
        "slope_per_s": None if slope is None else round(slope, 1),
        "slope_error_per_s": None if error is None else round(error, 1),
        "slope_percent_of_input": None if slope is None or not per_s else round(100 * slope / per_s, 2),
        "growing": mean(last) > mean(middle) + per_s,
    }


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares slope of y over x, and its standard error."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    residue = sum((y - my - slope * (x - mx)) ** 2 for x, y in points)
    return slope, (residue / (n - 2) / sxx) ** 0.5


async def stored_bytes(s: Settings, changelogs: list[str]) -> float | None:
    """Mean key + value bytes of the windows on the stage's changelog topics."""
    sizes: list[int] = []
    for topic in changelogs:
        latest: dict[bytes, int] = {}
        for m in await read_all_async(s.bootstrap, topic, timeout=120):
            latest[m.key] = len(m.key or b"") + len(m.value or b"")
        sizes += latest.values()
    return round(mean(sizes), 1) if sizes else None


async def drained(s: Settings, group: str, timeout: float = 120.0) -> float | None:
    """Seconds until both lags are zero after the load, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await lag(s, group, s.events_topic) == 0 and await lag(s, group, s.spend_topic) == 0:
            return round(time.monotonic() - t0, 1)
        await asyncio.sleep(0.5)
    return None


async def run(args: argparse.Namespace, s: Settings, workers: list[WorkerProcess]) -> dict[str, Any]:
    group = s.app_id  # the workers' group
    await asyncio.sleep(SAMPLE_S)  # the tables' timers have reported once
    rss0 = [rss_kib(w.pid) or 0 for w in workers]
    cpu0 = [cpu_seconds(w.pid) for w in workers]
    samples: list[dict[str, Any]] = []
    stop = asyncio.Event()
    t0 = time.monotonic()
    sampler = asyncio.create_task(sample(s, group, t0, samples, stop))
    sent = await load(s, args.rate, args.seconds, args.agents)
    wall = time.monotonic() - t0
    cores = [round((cpu_seconds(w.pid) - c) / wall, 2) for w, c in zip(workers, cpu0, strict=True)]
    drain_s = await drained(s, group)
    stop.set()
    await sampler
    await asyncio.sleep(SAMPLE_S + 1)  # the key counts are reported again
    keys = sum(w.metric("loopwarden_spend_keys") for w in workers)
    grown = sum((rss_kib(w.pid) or 0) - r for w, r in zip(workers, rss0, strict=True)) * 1024
    counted = sum(w.metric("loopwarden_spend_records") for w in workers)
    changelogs = [f"{group}-spend-{ms}-changelog" for ms in sorted({c["windowMs"] for c in caps(args.caps)})]
    return {
        "usage_events_sent": sent,
        "usage_events_per_s": round(sent / wall, 1),
        "spend_records_counted": int(counted),
        "spend_records_per_s": round(counted / wall, 1),
        "events_lag": growing(samples, "events_lag", args.seconds, sent / wall),
        "spend_lag": growing(samples, "spend_lag", args.seconds, counted / wall),
        "drained_after_load_s": drain_s,
        "lag_samples": samples,
        "windows_held": int(keys),
        "rss_grown_bytes_per_window": round(grown / keys, 1) if keys else None,
        "stored_bytes_per_window": await stored_bytes(s, changelogs),
        "worker_cores_used": cores,
    }


async def main_async(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with own_broker(args.bootstrap, tmp) as (bootstrap, _):
        prefix = f"bsp{int(time.time())}."
        s = await setup_topics_async(bootstrap, prefix, args.partitions)
        config = {"loopwarden": {"fleet": {"spendCaps": caps(args.caps)}}}
        group = running_workers(bootstrap, prefix, config, tmp, args.partitions, args.workers, log_level="warning")
        async with group as (workers, _):
            with open("/proc/loadavg") as f:
                before = f.read().split()[:3]
            result = await run(args, s, workers)
    return {
        "benchmark": "spend",
        "agents": args.agents,
        "caps": args.caps,
        "rate": args.rate,
        "seconds": args.seconds,
        "workers": args.workers,
        "partitions": args.partitions,
        "load_average_before": before,
        **result,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="a broker to use instead of a local one of its own")
    ap.add_argument("--agents", type=int, default=50_000)
    ap.add_argument("--caps", type=int, default=20, help="spend caps in the config (at least 4 of them)")
    ap.add_argument("--rate", type=float, default=2000.0, help="usage events a second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="workers, each counting its share of the spend topic (how far one goes: benchmarks/RESULTS.md)",
    )
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    with scratch("lw-spend-", args.keep) as tmp:
        result = asyncio.run(main_async(args, tmp))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
