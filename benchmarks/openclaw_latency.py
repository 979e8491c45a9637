"""Check latency at 200 calls/s through the TypeScript client (clients/openclaw, the
OpenClaw plugin's client) and through the Python `GatewayClient`, against the same worker
on the same broker, in one run; prints one JSON object.

Each client is one gateway running an open loop: a `check` starts every 1/rate s and
awaits its own decision, with the same calls (a `read` with distinct params, runs
`run-{i % 400}`, so every call is allowed). The two clients take turns, in rounds whose
order alternates (TS, Python, Python, TS, ...) after one uncounted round of each that
warms the broker, the worker and both clients up; percentiles pool a client's rounds.

    .venv/bin/python -m benchmarks.openclaw_latency [--bootstrap HOST:PORT] [--rate 200] [--seconds 20] [--rounds 2]

Starts a broker of its own unless --bootstrap names one; needs `npm ci` in clients/openclaw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.kafka import paced, params_of, start_worker
from streams.gateway.client import GatewayClient
from streams.kafka.settings import Settings
from streams.tools.harness import KEEP_HELP, own_broker, percentiles, scratch, setup_topics

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "clients" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"


def stats(ms: list[float]) -> dict[str, Any]:
    """Milliseconds: p50, p99 and max (harness.percentiles), and the mean."""
    pc = percentiles(ms, (50, 99))
    return {
        "calls": len(ms),
        "p50_ms": pc["p50"],
        "p99_ms": pc["p99"],
        "max_ms": pc["max"],
        "mean_ms": round(sum(ms) / len(ms), 2),
    }


def typescript_round(bootstrap: str, prefix: str, rate: float, seconds: float, warmup: float) -> list[float]:
    out = subprocess.run(
        [
            str(NODE),
            "scripts/latency.ts",
            "--bootstrap",
            bootstrap,
            "--prefix",
            prefix,
            "--rate",
            str(rate),
            "--seconds",
            str(seconds),
            "--warmup",
            str(warmup),
        ],
        cwd=PLUGIN,
        capture_output=True,
        text=True,
        timeout=seconds + warmup + 120,
    )
    if out.returncode != 0:
        raise SystemExit(f"the TypeScript client failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout)
    if got["degraded"]:
        raise SystemExit(f"the TypeScript client got {got['degraded']} degraded (timed out) decisions")
    latencies: list[float] = got["latencies_ms"]
    return latencies


async def python_round(settings: Settings, rate: float, seconds: float, warmup: float) -> list[float]:
    async with GatewayClient(settings=settings, gateway_id="bench-py-gw", timeout_s=10) as client:

        async def call(i: int) -> None:
            d = await client.check(f"run-{i % 400}", "read", params_of(i))
            assert not d.degraded, "a decision timed out"

        return [x * 1000 for x in await paced(rate, seconds, call, warmup=warmup)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="a broker to use (default: start one)")
    ap.add_argument("--rate", type=float, default=200.0, help="calls per second (default 200)")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per round (default 20)")
    ap.add_argument("--warmup", type=float, default=3.0, help="uncounted seconds at the start of each round")
    ap.add_argument("--rounds", type=int, default=2, help="measured rounds per client (default 2)")
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    if not NODE.exists():
        raise SystemExit(f"{NODE} is missing: run `npm ci` in clients/openclaw")
    with scratch("lw-openclaw-bench-", args.keep) as tmp, own_broker(args.bootstrap, tmp) as (bootstrap, _):
        prefix = f"bench-oc-{uuid.uuid4().hex[:6]}."
        settings = setup_topics(bootstrap, prefix)
        worker = start_worker(bootstrap, prefix, tmp, "openclaw-latency")
        try:
            print(json.dumps(measure(args, bootstrap, prefix, settings)))
        finally:
            worker.stop()


def measure(args: argparse.Namespace, bootstrap: str, prefix: str, settings: Settings) -> dict[str, Any]:
    series: dict[str, list[list[float]]] = {"typescript": [], "python": []}
    order = ["typescript", "python"]
    started = time.time()
    for r in range(args.rounds + 1):  # round 0 warms everything up and is not counted
        for name in order if r % 2 == 0 else order[::-1]:
            if name == "typescript":
                lat = typescript_round(bootstrap, prefix, args.rate, args.seconds, args.warmup)
            else:
                lat = asyncio.run(python_round(settings, args.rate, args.seconds, args.warmup))
            if r:
                series[name].append(lat)
    return {
        "rate_per_s": args.rate,
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
        "worker": "one loopwarden worker, 8 partitions",
        "broker": "given" if args.bootstrap else "local KRaft",
        "typescript_client": stats([x for rnd in series["typescript"] for x in rnd]),
        "python_gateway_client": stats([x for rnd in series["python"] for x in rnd]),
        "per_round_p50_ms": {k: [round(median(v), 2) for v in rounds] for k, rounds in series.items()},
        "per_round_p99_ms": {k: [stats(v)["p99_ms"] for v in rounds] for k, rounds in series.items()},
        "wall_s": round(time.time() - started, 1),
    }


if __name__ == "__main__":
    main()
