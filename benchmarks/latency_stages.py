"""Where a decision's time goes, stage by stage, and what the slowest 1% of calls met.

    python -m benchmarks.latency_stages [--bootstrap HOST:PORT] [--rate 300] [--seconds 20]
                                        [--tree DIR] [--env K=V]

Runs benchmarks.kafka's loopwarden series once (8 gateways, an open loop at --rate calls
per second after 3 s of warm-up) against a worker with LOOPWARDEN_TRACE_BATCHES set
(streams/worker/tracing.py), while each gateway's client stamps its own side. Every
stamp is the wall clock of the same machine, so one call's are joined by its event id:

  client_send   check() called -> the event queued on the gateway's producer
  to_worker     -> the event reached the worker's batch loop (the produce request, the
                broker, Faust's fetch, its conductor and stream, the agent); split into
    to_broker       -> the broker appended it (the events topic here has
                    message.timestamp.type=LogAppendTime: the record's timestamp, in ms)
    broker_to_worker  -> the batch loop (the fetch, Faust's consumer thread, the agent)
  wait_batch    -> its batch's fold began (the loop busy elsewhere: a batch, a flush)
  fold          the batch's fold
  wait_prev     the wait for the previous batch's decisions to be acknowledged
  queue         the decisions put on the producer
  publish       -> acknowledged by the broker (acks=all)
  to_gateway    -> the decision read by the gateway's reader task (the broker's fetch)
  wake          -> check() returned (the waiting task woken)

For all calls and for the slowest 1% it prints each stage's median and mean, how much
of the slow calls' excess over the median call each stage holds, and how often the
suspects were present: a state flush under way (and its phases' lengths), a garbage
collection in the worker, more than one event in the batch, a wait for the previous
batch. Starts its own broker unless --bootstrap names one. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path
from statistics import mean, median
from typing import Any

from benchmarks.kafka import GATEWAYS, paced, params_of, run_and_print, start_worker
from streams.gateway.client import GatewayClient
from streams.kafka import clients
from streams.kafka.settings import Settings
from streams.tools.harness import KEEP_HELP, cpu_seconds, own_broker, percentile, setup_topics_async
from streams.worker.tracing import ENV

STAGES = (
    "client_send",
    "to_worker",
    "to_broker",
    "broker_to_worker",
    "wait_batch",
    "fold",
    "wait_prev",
    "queue",
    "publish",
    "to_gateway",
    "wake",
)


class StampedClient(GatewayClient):
    """GatewayClient with the time each event was queued and each decision read."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.queued: dict[str, float] = {}
        self.read_at: dict[str, float] = {}
        self._ids: dict[bytes, str] = {}

    def _encode(self, ev: Any) -> tuple[bytes, bytes]:
        key, value = super()._encode(ev)
        self._ids[value] = f"{ev.run_id}:{ev.seq}"
        return key, value

    async def _send(self, key: bytes, value: bytes) -> None:
        await super()._send(key, value)
        self.queued[self._ids.pop(value)] = time.time()

    def _deliver(self, value: bytes) -> None:
        t = time.time()
        super()._deliver(value)
        i = value.find(b'"event_id":"')
        if i >= 0:
            i += 12
            self.read_at.setdefault(value[i : value.index(b'"', i)].decode(), t)


async def append_time(s: Settings, topic: str) -> None:
    """Records of `topic` get the broker's clock as their timestamp (when it appended them)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async with clients.opened(clients.admin(s), s) as admin:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"message.timestamp.type": "LogAppendTime"})]
        )


def ms(x: float) -> float:
    return round(x * 1000, 3)


def summary(rows: list[dict[str, Any]], base: dict[str, float] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": len(rows)}
    for st in ("total", *STAGES):
        xs = [r[st] for r in rows]
        out[st] = {"median_ms": ms(median(xs)), "mean_ms": ms(mean(xs)), "max_ms": ms(max(xs))}
    if base is not None:  # the share of the excess over the median call, by stage
        excess = {
            st: mean(r[st] for r in rows) - base[st] for st in STAGES if st not in ("to_broker", "broker_to_worker")
        }
        total = sum(excess.values()) or 1.0
        out["excess_over_median_call_ms"] = ms(mean(r["total"] for r in rows) - base["total"])
        out["share_of_excess"] = {st: round(v / total, 2) for st, v in excess.items()}
    return out


def overlaps(a0: float, a1: float, spans: list[tuple[float, float]]) -> bool:
    return any(s0 < a1 and s1 > a0 for s0, s1 in spans)


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    trace = tmp / "trace.jsonl"
    env = {ENV: str(trace), **dict(kv.split("=", 1) for kv in args.env)}
    load0 = os.getloadavg()[0]
    given = args.bootstrap or os.environ.get("LOOPWARDEN_BOOTSTRAP")
    with own_broker(given, tmp, heap="768m", full_jit=True) as (bootstrap, _):
        prefix = f"bench-stages-{uuid.uuid4().hex[:6]}."
        s = await setup_topics_async(bootstrap, prefix)
        await append_time(s, s.events_topic)
        worker = start_worker(bootstrap, prefix, tmp, "stages", tree=Path(args.tree) if args.tree else None, env=env)
        calls: list[tuple[str, float, float]] = []
        try:
            gateways = [StampedClient(settings=s, gateway_id=f"sim-gw-{g:02d}", timeout_s=10) for g in range(GATEWAYS)]
            for c in gateways:
                await c.__aenter__()

            async def call(i: int) -> None:
                t0 = time.time()
                d = await gateways[i % GATEWAYS].check(f"run-{i % 400}", "read", params_of(i))
                calls.append((d.event_id, t0, time.time()))
                assert not d.degraded

            ev0, cpu0 = worker.metric("loopwarden_events_total"), cpu_seconds(worker.pid)
            b0 = worker.metric("loopwarden_batch_events_count")
            t_start = time.time()
            await paced(args.rate, args.seconds, call)
            ev1, cpu1 = worker.metric("loopwarden_events_total"), cpu_seconds(worker.pid)
            b1 = worker.metric("loopwarden_batch_events_count")
            for c in gateways:
                await c.__aexit__(None, None, None)
        finally:
            worker.stop()  # SIGTERM: the worker closes its trace
    measured_from = t_start + 3.0
    queued = {k: v for c in gateways for k, v in c.queued.items()}
    read_at = {k: v for c in gateways for k, v in c.read_at.items()}
    batches: dict[str, dict[str, Any]] = {}
    flushes: list[dict[str, Any]] = []
    gcs: list[dict[str, Any]] = []
    for line in trace.read_text().splitlines():
        r = json.loads(line)
        if r["k"] == "batch":
            for i, eid in enumerate(r["ids"]):
                batches[eid] = {**r, "arr_i": r["arr"][i], "ts_i": r["ts"][i]}
        elif r["k"] == "flush":
            flushes.append(r)
        else:
            gcs.append(r)
    rows: list[dict[str, Any]] = []
    for eid, t0, t1 in calls:
        b = batches.get(eid)
        if (
            t0 < measured_from
            or b is None
            or b["arr_i"] is None
            or b["ts_i"] is None
            or eid not in queued
            or eid not in read_at
        ):
            continue
        q, rd = queued[eid], read_at[eid]
        rows.append(
            {
                "id": eid,
                "t0": t0,
                "t1": t1,
                "n": b["n"],
                "total": t1 - t0,
                "client_send": q - t0,
                "to_worker": b["arr_i"] - q,
                "to_broker": b["ts_i"] - q,
                "broker_to_worker": b["arr_i"] - b["ts_i"],
                "wait_batch": b["f0"] - b["arr_i"],
                "fold": b["f1"] - b["f0"],
                "wait_prev": b["w1"] - b["w0"],
                "queue": b["q"] - b["w1"],
                "publish": b["ack"] - b["q"],
                "to_gateway": rd - b["ack"],
                "wake": t1 - rd,
            }
        )
    if args.rows:  # every joined call, in the order made, for a closer look
        with open(args.rows, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    rows.sort(key=lambda r: r["total"])
    med = rows[len(rows) // 2]
    base = {st: median(r[st] for r in rows) for st in ("total", *STAGES)}
    slow = rows[int(0.99 * len(rows)) :]
    flush_spans = [(f["t0"], f["ack"]) for f in flushes]
    gc_spans = {g: [(x["t0"], x["t1"]) for x in gcs if x["gen"] == g] for g in (0, 1, 2)}

    def suspects(rs: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(rs) or 1
        return {
            "during_state_flush": round(sum(overlaps(r["t0"], r["t1"], flush_spans) for r in rs) / n, 3),
            **{
                f"during_worker_gc_gen{g}": round(sum(overlaps(r["t0"], r["t1"], sp) for r in rs) / n, 3)
                for g, sp in gc_spans.items()
            },
            "batch_of_more_than_one": round(sum(r["n"] > 1 for r in rs) / n, 3),
            "waited_for_previous_batch": round(sum(r["wait_prev"] > 0.0001 for r in rs) / n, 3),
            "mean_events_per_batch": round(mean(r["n"] for r in rs), 2),
        }

    in_run = [f for f in flushes if f["t0"] >= measured_from]
    gcs_in = [g for g in gcs if g["t0"] >= measured_from]
    return {
        "benchmark": "latency_stages",
        "rate_per_s": args.rate,
        "seconds": args.seconds,
        "tree": args.tree,
        "env": {k: v for k, v in env.items() if k != ENV},
        "loadavg_1m_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "calls_joined": len(rows),
        "calls_made": len(calls),
        "median_call_ms": ms(med["total"]),
        "p99_ms": ms(p99) if (p99 := percentile([r["total"] for r in rows], 99)) is not None else None,
        "all_calls": {**summary(rows), "suspects": suspects(rows)},
        "slowest_1pct": {**summary(slow, base), "suspects": suspects(slow)},
        "slowest_calls": [
            {k: (ms(v) if k in ("total", *STAGES) else v) for k, v in r.items() if k not in ("t0", "t1")}
            for r in rows[-8:]
        ],
        "state_flushes": {
            "count": len(in_run),
            **{
                f"{name}_ms": {"median": ms(median(xs)), "max": ms(max(xs))}
                for name, xs in (
                    ("checkpoint", [f["cp"] - f["t0"] for f in in_run]),
                    ("encode_and_queue", [f["q"] - f["cp"] for f in in_run]),
                    ("until_durable", [f["dur"] - f["q"] for f in in_run]),
                    ("acknowledge_input", [f["ack"] - f["dur"] for f in in_run]),
                )
                if xs
            },
            "states_median": median([f["states"] for f in in_run]) if in_run else 0,
            "events_median": median([f["events"] for f in in_run]) if in_run else 0,
        },
        "worker_gc": {
            f"gen{g}": {"count": len(xs), "max_ms": ms(max(xs)) if xs else 0.0, "total_ms": ms(sum(xs))}
            for g in (0, 1, 2)
            for xs in [[x["t1"] - x["t0"] for x in gcs_in if x["gen"] == g]]
        },
        "worker_cpu_us_per_event": round((cpu1 - cpu0) / max(1.0, ev1 - ev0) * 1e6),
        "worker_events_per_batch": round((ev1 - ev0) / max(1.0, b1 - b0), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tree", help="run the worker from this directory (its streams package)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="extra worker environment")
    ap.add_argument("--rows", help="also write every joined call's stages to this file (JSON lines)")
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    run_and_print("loopwarden-stages-", args, run)


if __name__ == "__main__":
    main()
