"""Soak: does a worker's memory stay flat under steady load for half an hour?

    python -m benchmarks.soak [--bootstrap HOST:PORT] [--minutes 30] [--rate 400]
                              [--gateways 4] [--runs-per-gateway 200] [--abandon-share 0.05]
                              [--loop-share 0.2] [--warmup-minutes M] [--sample-s 10]

Without --bootstrap it starts its own local broker (fresh folder, 512 MB heap, full JIT)
and stops it at the end; every process it starts is stopped in any case.

One worker, with `loopwarden.runIdleTimeoutMs` 60000 in its config and
`--state-sweep-interval-s 10`, so runs idle for 2 minutes of event time are evicted.
--gateways GatewayClients in this process (privacy mode, the client's defaults) keep
--rate checks per second in all, each gateway paced at its share; each gateway keeps
--runs-per-gateway runs going at once, so a run makes a call about every
runs-per-gateway / (rate / gateways) seconds (2 s by default: enough runs that the rate
holds even while decisions take over a second; `slots_dropped` counts the calls the
pacer could not place because every run was still waiting). A run makes 5-40 calls,
each a check and, unless blocked, the tool's result, then its run_end; the calls are
streams/tools/trace.py's (varied tools and params; --loop-share of the runs slide into a
repeat, poll, ping-pong or unknown-tool loop and get warned and blocked; a blocked call
sends no result, and a run the worker aborts ends at once). --abandon-share of the runs never send run_end (a crashed
gateway): the worker must evict them. The client stamps every event with the wall
clock (`ts`, ms), which is the event time the eviction goes by.

Every --sample-s seconds: the worker's RSS (VmRSS), its /metrics (`loopwarden_active_runs`,
`loopwarden_runs_evicted_total`), the checks made and their latency. Warm-up: the first
--warmup-minutes (default: 5 minutes or 1/6 of the run, whichever is shorter; both are
5 for the default 30 minutes). Prints one JSON object: the series, the RSS at the end of
warm-up and at the end, `growth_after_warmup_pct` (end against end of warm-up), the
largest RSS after warm-up, a least-squares slope of RSS after warm-up (MB per hour),
the checks per second achieved and the CPU each process used (cores). A progress line
per sample goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.kafka import start_worker
from benchmarks.recovery import stoppable
from streams.gateway.client import GatewayClient
from streams.tools.harness import (
    WorkerProcess,
    cpu_seconds,
    metric_value,
    own_broker,
    percentile,
    rss_mb,
    scratch,
    setup_topics_async,
)
from streams.tools.trace import LOOP_KINDS, run_events

BROKER_HEAP = "512m"
IDLE_TIMEOUT_MS = 60_000
SWEEP_INTERVAL_S = 10


class Pacer:
    """Hands out call slots at a fixed rate (an open loop: a slow answer does not slow the
    next call). Slots missed by more than half a second are dropped, not made up in a burst."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next = time.monotonic()
        self.dropped = 0

    async def slot(self) -> None:
        now = time.monotonic()
        if now - self.next > 0.5:
            self.dropped += int((now - self.next) / self.interval)
            self.next = now
        due = self.next
        self.next += self.interval
        if due > now:
            await asyncio.sleep(due - now)


class Stats:
    def __init__(self) -> None:
        self.checks = 0
        self.results = 0
        self.runs_started = 0
        self.runs_ended = 0
        self.runs_abandoned = 0
        self.actions: dict[str, int] = {}
        self.degraded = 0
        self.errors: dict[str, int] = {}
        self.latencies: list[float] = []  # since the last sample


async def gateway(
    client: GatewayClient, pacer: Pacer, stats: Stats, args: argparse.Namespace, stop: asyncio.Event, seed: int
) -> None:
    """One of the gateway's concurrent run slots: runs one after another until stopped. An
    error (counted) ends that run; the slot goes on with a new one, as a gateway would."""
    rng = random.Random(seed)
    n = 0
    while not stop.is_set():
        run = f"{client.gateway_id}-s{seed}-r{n}"
        n += 1
        try:
            await one_run(client, pacer, stats, args, stop, rng, run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            stats.errors[type(exc).__name__] = stats.errors.get(type(exc).__name__, 0) + 1
            await asyncio.sleep(1)


async def one_run(
    client: GatewayClient,
    pacer: Pacer,
    stats: Stats,
    args: argparse.Namespace,
    stop: asyncio.Event,
    rng: random.Random,
    run: str,
) -> None:
    loop = rng.choice(LOOP_KINDS) if rng.random() < args.loop_share else None
    abandon = rng.random() < args.abandon_share
    stats.runs_started += 1
    aborted = False
    blocked: set[str] = set()
    for ev in run_events(rng, run, client.gateway_id, rng.randint(5, 40), loop):
        if stop.is_set():
            return
        kind = ev["type"]
        if kind == "tool_call":
            await pacer.slot()
            t = time.perf_counter()
            d = await client.check(run, ev["tool_name"], ev["params"], tool_call_id=ev["tool_call_id"])
            stats.latencies.append(time.perf_counter() - t)
            stats.checks += 1
            stats.actions[d.action] = stats.actions.get(d.action, 0) + 1
            if d.degraded:
                stats.degraded += 1
            if d.action == "abort":
                aborted = True
                break
            if d.action == "block":
                blocked.add(ev["tool_call_id"])  # not executed: no result
        elif kind == "tool_result":
            if ev["tool_call_id"] in blocked:
                continue
            outcome = {k: ev[k] for k in ("result", "error") if k in ev}
            await client.result(run, ev["tool_name"], ev["params"], tool_call_id=ev["tool_call_id"], **outcome)
            stats.results += 1
        else:  # run_end
            break
    if abandon and not aborted:
        stats.runs_abandoned += 1  # a crashed gateway: no run_end
        return
    await client.end_run(run)
    stats.runs_ended += 1


def pct_ms(xs: list[float], p: float) -> float | None:
    """The `p`-th percentile (harness.percentile) of seconds, in ms to a tenth."""
    v = percentile(xs, p)
    return round(v * 1000, 1) if v is not None else None


def slope_mb_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) points, in MB per hour."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return round(sum((x - mx) * (y - my) for x, y in points) / sxx * 3600, 1)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with scratch("loopwarden-soak-", args.keep) as tmp:
        with own_broker(args.bootstrap, tmp, heap=BROKER_HEAP, full_jit=True) as (bootstrap, broker):
            return await soak(args, bootstrap, broker.pid if broker else None, tmp)


async def soak(args: argparse.Namespace, bootstrap: str, broker_pid: int | None, tmp: Path) -> dict[str, Any]:
    worker: WorkerProcess | None = None
    clients: list[GatewayClient] = []
    tasks: list[asyncio.Task[None]] = []
    warmup_s = args.warmup_minutes * 60 if args.warmup_minutes is not None else min(300.0, args.minutes * 60 / 6)
    try:
        prefix = f"soak-{uuid.uuid4().hex[:6]}."
        s = await setup_topics_async(bootstrap, prefix)
        config = {
            "tools": {"loopDetection": {"enabled": True}},
            "loopwarden": {"runIdleTimeoutMs": args.idle_timeout_ms},
        }
        extra = ["--state-sweep-interval-s", str(args.sweep_interval_s)]
        loop = asyncio.get_running_loop()
        worker = await loop.run_in_executor(
            None, lambda: start_worker(bootstrap, prefix, tmp, "soak", extra, config=config)
        )
        for g in range(args.gateways):
            c = GatewayClient(settings=s, gateway_id=f"soak-gw-{g}")
            await c.__aenter__()
            clients.append(c)

        stats, stop = Stats(), asyncio.Event()
        pacers = [Pacer(args.rate / args.gateways) for _ in clients]
        pids = {"worker": worker.pid, "load_generator": os.getpid()}
        if broker_pid:
            pids["broker"] = broker_pid
        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
        t0 = time.monotonic()
        for g, (c, p) in enumerate(zip(clients, pacers, strict=True)):
            for k in range(args.runs_per_gateway):
                seed = g * 100_000 + k + args.seed * 10_000_000
                tasks.append(asyncio.create_task(gateway(c, p, stats, args, stop, seed)))

        series: list[dict[str, Any]] = []
        last_checks, last_t = 0, t0
        duration = args.minutes * 60
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= duration:
                break
            await asyncio.sleep(min(args.sample_s, duration - elapsed))
            if not worker.alive():
                raise RuntimeError(f"the worker exited; see {worker.log}")
            now = time.monotonic()
            page = await loop.run_in_executor(None, worker.metrics)
            lat, stats.latencies = stats.latencies, []
            row = {
                "minute": round((now - t0) / 60, 2),
                "rss_mb": rss_mb(worker.pid),
                "active_runs": metric_value(page, "loopwarden_active_runs"),
                "evicted": metric_value(page, "loopwarden_runs_evicted_total"),
                "checks_per_s": round((stats.checks - last_checks) / (now - last_t), 1),
                "p50_ms": pct_ms(lat, 50),
                "p99_ms": pct_ms(lat, 99),
            }
            series.append(row)
            last_checks, last_t = stats.checks, now
            print(json.dumps(row), file=sys.stderr, flush=True)
        wall = time.monotonic() - t0
        cpu = {k: round((cpu_seconds(pid) - cpu0[k]) / wall, 2) for k, pid in pids.items()}
        final = worker.metrics()
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        tasks = []
        worker_alive = worker.alive()
        degraded_by_client = sum(c.degraded for c in clients)
    finally:
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            try:
                await c.__aexit__(None, None, None)
            except Exception:
                pass
        if worker is not None:
            worker.stop()

    after = [r for r in series if r["minute"] * 60 >= warmup_s - 1e-6 and r["rss_mb"] is not None]
    rss_warm = after[0]["rss_mb"] if after else None
    rss_end = series[-1]["rss_mb"] if series else None
    growth = round((rss_end - rss_warm) / rss_warm * 100, 2) if rss_warm and rss_end else None
    peak = max((r["rss_mb"] for r in after), default=None)
    return {
        "benchmark": "soak",
        "minutes": args.minutes,
        "warmup": {
            "minutes": round(warmup_s / 60, 2),
            "rule": "--warmup-minutes"
            if args.warmup_minutes is not None
            else "default: min(5 minutes, 1/6 of the run)",
        },
        "rss_mb_start": series[0]["rss_mb"] if series else None,
        "rss_mb_warmup_end": rss_warm,
        "rss_mb_end": rss_end,
        "growth_after_warmup_pct": growth,
        "max_growth_after_warmup_pct": round((peak - rss_warm) / rss_warm * 100, 2) if peak and rss_warm else None,
        "rss_slope_after_warmup_mb_per_hour": slope_mb_per_hour([(r["minute"] * 60, r["rss_mb"]) for r in after]),
        "flat_within_5pct": growth is not None
        and abs(growth) <= 5
        and peak is not None
        and (peak - rss_warm) / rss_warm * 100 <= 5,
        "checks_per_s": round(stats.checks / wall, 1),
        "target_checks_per_s": args.rate,
        "checks": stats.checks,
        "results": stats.results,
        "runs_started": stats.runs_started,
        "runs_ended": stats.runs_ended,
        "runs_abandoned": stats.runs_abandoned,
        "actions": stats.actions,
        "degraded": stats.degraded,
        "degraded_by_client": degraded_by_client,
        "slots_dropped": sum(p.dropped for p in pacers),
        "errors": stats.errors,
        "median_p99_ms": round(median(p99s), 1)
        if (p99s := [r["p99_ms"] for r in series if r["p99_ms"] is not None])
        else None,
        "final_metrics": {
            k: metric_value(final, k)
            for k in (
                "loopwarden_active_runs",
                "loopwarden_runs_evicted_total",
                "loopwarden_events_total",
                "loopwarden_state_records_total",
            )
        },
        "worker_alive_at_end": worker_alive,
        "cpu_cores": {**cpu, "machine_cores": os.cpu_count()},
        "settings": {
            "broker": "external" if args.bootstrap else f"local, fresh, heap {BROKER_HEAP}, full JIT",
            "gateways": args.gateways,
            "runs_per_gateway": args.runs_per_gateway,
            "calls_per_run": "5-40",
            "loop_share": args.loop_share,
            "abandon_share": args.abandon_share,
            "runIdleTimeoutMs": args.idle_timeout_ms,
            "state_sweep_interval_s": args.sweep_interval_s,
            "event_ts": "wall clock ms, set by GatewayClient",
            "sample_s": args.sample_s,
        },
        "series": series,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    ap.add_argument("--minutes", type=float, default=30.0, help="how long the load runs (default 30)")
    ap.add_argument("--rate", type=float, default=400.0, help="checks per second, all gateways (default 400)")
    ap.add_argument("--gateways", type=int, default=4, help="GatewayClients (default 4)")
    ap.add_argument("--runs-per-gateway", type=int, default=200, help="concurrent runs per gateway (default 200)")
    ap.add_argument("--abandon-share", type=float, default=0.05, help="runs that never send run_end (default 0.05)")
    ap.add_argument("--loop-share", type=float, default=0.2, help="runs that slide into a loop (default 0.2)")
    ap.add_argument(
        "--idle-timeout-ms",
        type=int,
        default=IDLE_TIMEOUT_MS,
        help="the worker's loopwarden.runIdleTimeoutMs (default 60000: evicted after 2 min idle)",
    )
    ap.add_argument(
        "--sweep-interval-s",
        type=float,
        default=SWEEP_INTERVAL_S,
        help="the worker's --state-sweep-interval-s (default 10)",
    )
    ap.add_argument(
        "--warmup-minutes",
        type=float,
        help="warm-up not judged (default: 5 minutes or 1/6 of the run, whichever is shorter)",
    )
    ap.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (worker log, broker data)")
    print(json.dumps(asyncio.run(stoppable(main_async(ap.parse_args()))), indent=2))


if __name__ == "__main__":
    main()
