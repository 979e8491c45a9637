"""Latency and throughput on the project's local broker, measured side by side.

    python -m benchmarks.kafka [--bootstrap HOST:PORT] [--rates 300,1000] [--seconds 10]
                               [--latency-rounds 3] [--events 60000] [--rounds 3]
                               [--series echo,faust_echo,loopwarden] [--b-tree DIR] [--b-env K=V]
                               [--variant NAME=DIR[,K=V...]]

Without --bootstrap it starts its own local broker (full JIT) and stops it at the end.
Latency: after one round that is not counted (it warms the broker up), for each rate of
--rates in turn, each round runs four open loops at that many calls per second (3 s of
warm-up, then --seconds measured), 8 gateways, same message sizes and partitions; every
rate has its own percentiles, ratios and per-round figures:
  echo                  bare aiokafka request-reply (benchmarks/echo_responder.py), a
                        producer and a decisions consumer per gateway, as GatewayClient
                        has: the physical floor, and the denominator of p99_ratio;
  echo_shared_producer  the same with all gateways on one producer (what one process
                        can do, a fleet of gateways cannot);
  faust_echo            the same echo answered from a do-nothing Faust agent
                        (benchmarks/faust_echo.py): the framework's own floor;
  loopwarden            GatewayClient.check through a worker process (also: the CPU the
                        worker used per event, and its events per batch, each round);
  loopwarden_b          only with --b-tree or --b-env: the same through a worker run from
                        another source tree (a directory holding a `streams` package, e.g. a
                        copy of an older one) or with extra environment variables, so a change
                        is measured A/B in the same rounds; --variant adds more such series
                        (loopwarden_NAME), each with its tree and variables.
Throughput: a bare aiokafka consume-and-produce loop over a preloaded topic, then in
each round a do-nothing Faust agent (benchmarks/noop_agent.py), one loopwarden worker and
two workers, each joining an empty topic that then gets all events at once; the headline
uses privacy-form events (the client's default), and `raw_events` repeats the no-op
agent and one worker with raw payloads.
Prints one JSON object; a PNG of the latency distributions goes to benchmarks/out/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from streams.gateway.client import GatewayClient, partition_for
from streams.kafka import clients
from streams.kafka.producer import BatchProducer, OutRecord
from streams.tools.harness import (
    KEEP_HELP,
    WorkerProcess,
    cpu_seconds,
    following,
    own_broker,
    percentiles,
    read_all_async,
    scratch,
    setup_topics_async,
    topic_settings,
    wait_assigned_async,
    wait_for_count,
)
from streams.tools.launch import stop_process
from streams.tools.trace import CONFIG, generate

ROOT = Path(__file__).resolve().parents[1]
GATEWAYS = 8
Rounds = list[list[float]]  # a series' latencies in seconds, round by round
Figures = list[dict[str, Any]]  # a responder's or a worker's figures, round by round
Variants = dict[str, tuple[Path | None, dict[str, str]]]  # name -> (source tree, environment)


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A helper process (a responder, a no-op agent): its stdout piped (it prints `ready`
    and its result there), its stderr to `log`."""
    with open(log, "wb") as err:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, start_new_session=True)


def end(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, SIGKILL after 20 s (streams/tools/launch.py)."""
    stop_process(proc)


def run_and_print(
    prefix: str,
    args: argparse.Namespace,
    measure: Callable[[argparse.Namespace, Path], Coroutine[Any, Any, dict[str, Any]]],
) -> None:
    """`measure(args, tmp)` in a scratch folder of its own (kept with --keep, or when it
    fails: the logs are there); its result printed as JSON."""
    with scratch(prefix, args.keep) as tmp:
        result = asyncio.run(measure(args, tmp))
    print(json.dumps(result, indent=2))


async def read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The next line a helper process prints (read in a thread)."""
    assert proc.stdout is not None
    return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline), timeout)


def params_of(i: int) -> dict[str, Any]:
    return {
        "path": f"/workspace/src/module_{i % 97}/file_{i}.py",
        "query": "def handler(request): " + "x" * 120,
        "options": {"limit": i % 200, "recursive": True},
    }


async def paced(
    rate: float, seconds: float, call: Callable[[int], Awaitable[object]], warmup: float = 3.0
) -> list[float]:
    """Open loop: start call(i) every 1/rate s, each awaiting its own answer; latencies of
    the calls started after `warmup` seconds. One continuous stream: a pause between
    warm-up and measurement would make the first measured calls start from idle.

    The load generator's garbage collector is off meanwhile, as `timeit` does: its full
    collections (tens of milliseconds in this process, which holds 8 gateways' clients)
    would stall every call in flight and show in the tail of whatever series is running.
    The processes measured (responders, workers) keep theirs."""
    lat: list[float] = []
    pending: set[asyncio.Task[None]] = set()
    failed: list[BaseException] = []

    def finished(task: asyncio.Task[None]) -> None:
        pending.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            failed.append(exc)

    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        i = 0
        while True:
            due = t0 + i / rate
            now = time.perf_counter()
            if due - t0 > warmup + seconds:
                break
            if due > now:
                await asyncio.sleep(due - now)

            async def one(k: int, measured: bool) -> None:
                s = time.perf_counter()
                await call(k)
                if measured:
                    lat.append(time.perf_counter() - s)

            task = asyncio.create_task(one(i, due - t0 >= warmup))
            pending.add(task)
            task.add_done_callback(finished)
            i += 1
        await asyncio.gather(*pending)
    finally:
        gc.enable()
    if failed:
        raise failed[0]
    return lat


async def wait_ready(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """Until a responder prints `ready` (it has joined its group and has its partitions)."""
    if (await read_line(proc, 90)).strip() != b"ready":
        raise RuntimeError(f"{what} did not start; see {log}")


async def echo_latency(
    bootstrap: str,
    rate: float,
    seconds: float,
    tmp: Path,
    responder: str = "bare",
    producers: int = GATEWAYS,
    stats: Figures | None = None,
) -> list[float]:
    """The request-reply floor: `producers` producers (one per gateway, as each GatewayClient
    has its own; 1 lets the gateways share one, which a fleet cannot), one consumer per
    gateway reading its decisions partition, and a responder that answers each request:
    a bare aiokafka loop ("bare") or a Faust agent ("faust"). Appends to `stats` the CPU
    the responder used per call (µs, over the whole open loop)."""
    prefix = f"bench-echo-{uuid.uuid4().hex[:6]}."
    s = await setup_topics_async(bootstrap, prefix)
    req, rep = s.events_topic, s.decisions_topic
    module = {"bare": "benchmarks.echo_responder", "faust": "benchmarks.faust_echo"}[responder]
    log = tmp / f"echo-{responder}.log"
    argv = [sys.executable, "-m", module, bootstrap, req, rep, prefix + "g"]
    if responder == "faust":
        argv.append(str(tmp / f"{prefix}faust"))  # its datadir
    proc = spawn(argv, log)
    try:
        await wait_ready(proc, f"the {responder} echo responder", log)
        async with contextlib.AsyncExitStack() as stack:
            senders = [
                await stack.enter_async_context(
                    clients.opened(clients.producer(s, acks="all", enable_idempotence=True), s)
                )
                for _ in range(producers)
            ]
            decisions = [  # each gateway's decisions partition, from its end now
                await stack.enter_async_context(
                    following(bootstrap, rep, partitions=[partition_for(f"sim-gw-{g:02d}", 8)], fetch_max_wait_ms=100)
                )
                for g in range(GATEWAYS)
            ]
            return await echo_calls(proc, senders, decisions, req, rate, seconds, producers, stats)
    finally:
        end(proc)


async def echo_calls(
    proc: subprocess.Popen[bytes],
    senders: list[Any],
    decisions: Sequence[Any],
    req: str,
    rate: float,
    seconds: float,
    producers: int,
    stats: Figures | None,
) -> list[float]:
    """The echo's open loop: each call sent by its gateway's producer, answered when its
    reply is read from the gateway's decisions partition (`decisions`: a Range each)."""
    waiting: dict[bytes, asyncio.Future[None]] = {}

    async def read(r: Any) -> None:
        while True:
            for m in await r.chunk(timeout_ms=500):
                f = waiting.pop(m.value.split(b"\n", 1)[0], None)
                if f and not f.done():
                    f.set_result(None)

    readers = [asyncio.create_task(read(r)) for r in decisions]
    try:
        # A request of the size a privacy-mode tool_call has on the wire.
        body = json.dumps(
            {
                "type": "tool_call",
                "run_id": "r" * 20,
                "seq": 0,
                "gateway_id": "sim-gw-00",
                "tool_name": "read",
                "tool_call_id": "c" * 24,
                "ts": 1,
                "args_hash": "read:" + "a" * 64,
                "known_poll": False,
            }
        ).encode()

        async def call(i: int) -> None:
            g = i % GATEWAYS
            ident = f"r{i}:0".encode()
            fut = asyncio.get_running_loop().create_future()
            waiting[ident] = fut
            await senders[g % producers].send(
                req, key=f"run-{i}".encode(), value=body, headers=[("gw", f"sim-gw-{g:02d}".encode()), ("id", ident)]
            )
            await asyncio.wait_for(fut, 10)

        cpu0 = cpu_seconds(proc.pid)
        lat = await paced(rate, seconds, call)
        if stats is not None:
            stats.append({"cpu_us_per_event": round((cpu_seconds(proc.pid) - cpu0) / (rate * (seconds + 3)) * 1e6)})
        return lat
    finally:
        for t in readers:
            t.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


def start_worker(
    bootstrap: str,
    prefix: str,
    tmp: Path,
    name: str,
    extra: Sequence[str] = (),
    tree: Path | None = None,
    env: dict[str, str] | None = None,
    partitions: int = 8,
    wait: bool = True,
    config: Mapping[str, Any] = CONFIG,
) -> WorkerProcess:
    """A worker on the topics under `prefix` with `config` and the worker's own log level,
    healthy on return unless `wait` is false. `tree`: run it from that directory (its
    `streams` package); `env`: extra variables for it."""
    w = WorkerProcess(
        bootstrap, prefix, config, tmp, partitions, name, extra, env=env, cwd=tree or ROOT, log_level="warning"
    )
    w.start(wait=wait)
    return w


async def loopwarden_latency(
    bootstrap: str,
    rate: float,
    seconds: float,
    tmp: Path,
    stats: Figures | None = None,
    tree: Path | None = None,
    env: dict[str, str] | None = None,
) -> list[float]:
    """GatewayClient.check through a worker; appends to `stats` the CPU the worker used per
    event (µs, over the whole open loop, warm-up included) and its mean events per batch."""
    prefix = f"bench-lw-{uuid.uuid4().hex[:6]}."
    s = await setup_topics_async(bootstrap, prefix)
    worker = start_worker(bootstrap, prefix, tmp, "latency", tree=tree, env=env)
    try:
        clients = [GatewayClient(settings=s, gateway_id=f"sim-gw-{g:02d}", timeout_s=10) for g in range(GATEWAYS)]
        for c in clients:
            await c.__aenter__()

        async def call(i: int) -> None:
            d = await clients[i % GATEWAYS].check(f"run-{i % 400}", "read", params_of(i))
            assert not d.degraded

        ev0, b0 = worker.metric("loopwarden_events_total"), worker.metric("loopwarden_batch_events_count")
        cpu0 = cpu_seconds(worker.pid)
        lat = await paced(rate, seconds, call)
        cpu1 = cpu_seconds(worker.pid)
        ev1, b1 = worker.metric("loopwarden_events_total"), worker.metric("loopwarden_batch_events_count")
        if stats is not None and ev1 > ev0:
            stats.append(
                {
                    "cpu_us_per_event": round((cpu1 - cpu0) / (ev1 - ev0) * 1e6),
                    "events_per_batch": round((ev1 - ev0) / max(1.0, b1 - b0), 2),
                }
            )
        for c in clients:
            await c.__aexit__(None, None, None)
        return lat
    finally:
        worker.stop()


async def publish(bootstrap: str, records: list[OutRecord]) -> None:
    """Publish records in explicit produce batches and wait for every acknowledgement."""
    p = BatchProducer(topic_settings(bootstrap))
    await p.start()
    try:
        await p.publish(records)
    finally:
        await p.stop()


async def preload(bootstrap: str, topic: str, lines: list[bytes]) -> None:
    """Publish the events keyed by run_id in explicit produce batches: a fraction of a
    second, so the load generator hardly competes with what is measured for the cores."""
    records = []
    for ln in lines:
        run = ln[ln.index(b'"run_id":"') + 10 :]
        records.append(OutRecord(topic, run[: run.index(b'"')], ln))
    await publish(bootstrap, records)


async def decision_span(bootstrap: str, topic: str, want: int, timeout: float) -> float:
    """Seconds between the 10th-percentile and the last decision (their timestamps, set by
    the worker's producer), scaled to the whole count: steady-state throughput without
    start-up and rebalancing. Read once all are there."""
    stamps: list[int] = sorted(m.timestamp for m in await read_all_async(bootstrap, topic, timeout))
    if len(stamps) < want:
        raise RuntimeError(f"only {len(stamps)} of {want} decisions arrived")
    lo = stamps[len(stamps) // 10]
    return (stamps[-1] - lo) / 1000 / 0.9


def run_json(args: list[str], tmp: Path, name: str, timeout: float = 600) -> dict[str, Any]:
    p = spawn(args, tmp / f"{name}.log")
    try:
        out, _ = p.communicate(timeout=timeout)
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return result
    finally:
        end(p)


async def worker_throughput(
    bootstrap: str,
    lines: list[bytes],
    calls: int,
    tmp: Path,
    n_workers: int,
    broker_pid: int | None,
    tree: Path | None = None,
) -> dict[str, Any]:
    """Start the workers on empty topics, wait until the group has settled on every one,
    then publish the events at once and time the decisions; also the CPU each process
    used meanwhile. `tree`: run the workers from that directory (its `streams` package:
    the B side of an A/B)."""
    prefix = f"bench-tp{n_workers}-{uuid.uuid4().hex[:6]}."
    s = await setup_topics_async(bootstrap, prefix)
    procs: list[WorkerProcess] = []
    try:
        for i in range(n_workers):
            procs.append(start_worker(bootstrap, prefix, tmp, f"tp{n_workers}-{i}", tree=tree))
        await wait_assigned_async(procs, s.partitions)
        cpu0 = [cpu_seconds(p.pid) for p in procs] + [cpu_seconds(broker_pid) if broker_pid else 0.0]
        t0 = time.time()
        await preload(bootstrap, s.events_topic, lines)
        await wait_for_count(bootstrap, s.decisions_topic, calls, 600)
        wall = time.time() - t0
        cpu1 = [cpu_seconds(p.pid) for p in procs] + [cpu_seconds(broker_pid) if broker_pid else 0.0]
        span = await decision_span(bootstrap, s.decisions_topic, calls, 600)
        used = [round((b - a) / wall, 2) for a, b in zip(cpu0, cpu1, strict=True)]
        eps = round(len(lines) / span)
        return {
            "events_per_s": eps,
            "cores_used_by_workers": used[:-1],
            "cores_used_by_broker": used[-1] if broker_pid else None,
            # events per second per core the workers used, over the whole wall time
            "events_per_worker_core": round(len(lines) / wall / max(0.01, sum(used[:-1]))),
        }
    finally:
        for p in procs:
            p.stop()


async def noop_throughput(bootstrap: str, lines: list[bytes], tmp: Path) -> float:
    """The do-nothing Faust agent, measured as the workers are: it joins an empty topic
    (it says `ready` once it has its partitions), then the events are published at once."""
    prefix = f"bench-noop-{uuid.uuid4().hex[:6]}."
    s = await setup_topics_async(bootstrap, prefix)
    p = spawn(
        [sys.executable, "-m", "benchmarks.noop_agent", bootstrap, s.events_topic, str(len(lines)), prefix + "noop"]
        + [str(tmp / f"{prefix}faust")],  # its datadir
        tmp / "noop.log",
    )
    try:
        await wait_ready(p, "the no-op agent", tmp / "noop.log")
        await preload(bootstrap, s.events_topic, lines)
        out = await read_line(p, 600)
        seconds: float = json.loads(out)["seconds"]
        return len(lines) / seconds
    finally:
        end(p)


async def throughput(
    bootstrap: str, n: int, rounds: int, tmp: Path, broker_pid: int | None, b_tree: Path | None = None
) -> dict[str, Any]:
    """The headline figures use events in the form the client library sends by default
    (privacy mode: hashes, no payloads); `raw_events` repeats noop and one worker with
    raw params and results, which the worker hashes itself. Each round measures the
    no-op agent, one worker and (privacy form) two workers back to back; the figures are
    the medians over the rounds, and each ratio is the median of the per-round ratios."""
    out: dict[str, Any] = {}
    for form in ("privacy", "raw"):
        lines = generate(n, seed=21, concurrent=800, privacy=form == "privacy")
        calls = sum(1 for ln in lines if b'"type":"tool_call"' in ln)
        row: dict[str, Any] = {"mean_event_bytes": round(sum(map(len, lines)) / len(lines))}
        if form == "privacy":
            bares = []
            for _ in range(2):  # the first one also warms the broker up
                prefix = f"bench-tp-{uuid.uuid4().hex[:6]}."
                s = await setup_topics_async(bootstrap, prefix)
                await preload(bootstrap, s.events_topic, lines)
                bare = run_json(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.echo_responder",
                        bootstrap,
                        s.events_topic,
                        prefix + "bare-out",
                        prefix + "bare",
                        str(n),
                    ],
                    tmp,
                    "bare",
                )
                bares.append(round(n / bare["seconds"]))
            row["bare_events_per_s"] = max(bares)
        noop: list[int] = []
        one: list[int] = []
        two: list[int] = []
        one_b: list[int] = []
        cpu1: Figures = []
        cpu2: Figures = []
        for _ in range(rounds):
            noop.append(round(await noop_throughput(bootstrap, lines, tmp)))
            r1 = await worker_throughput(bootstrap, lines, calls, tmp, 1, broker_pid)
            one.append(r1.pop("events_per_s"))
            cpu1.append(r1)
            if b_tree is not None and form == "privacy":  # the B worker, in the same round
                one_b.append(
                    (await worker_throughput(bootstrap, lines, calls, tmp, 1, broker_pid, b_tree))["events_per_s"]
                )
            if form == "privacy":
                r2 = await worker_throughput(bootstrap, lines, calls, tmp, 2, broker_pid)
                two.append(r2.pop("events_per_s"))
                cpu2.append(r2)
        row["noop_faust_events_per_s"] = round(median(noop))
        row["worker_events_per_s"] = round(median(one))
        row["throughput_ratio"] = round(median([w / z for w, z in zip(one, noop, strict=True)]), 2)
        row["rounds"] = {"noop_faust": noop, "worker": one}
        if one_b:
            row["worker_b_events_per_s"] = round(median(one_b))
            row["worker_over_b"] = round(median([a / b for a, b in zip(one, one_b, strict=True)]), 3)
            row["rounds"]["worker_b"] = one_b
        if form == "privacy":
            row["two_workers_events_per_s"] = round(median(two))
            row["bare_ratio"] = round(row["worker_events_per_s"] / row["bare_events_per_s"], 2)
            row["two_worker_scaling"] = round(median([b / a for a, b in zip(one, two, strict=True)]), 2)
            row["rounds"]["two_workers"] = two
            out.update(row)
            out["cpu"] = {"one_worker": cpu1, "two_workers": cpu2, "machine_cores": os.cpu_count()}
        else:
            out["raw_events"] = {**row, "cpu": {"one_worker": cpu1}}
    return out


SERIES = {  # name -> what it is
    "echo": "bare aiokafka echo, a producer per gateway (the floor: the topology GatewayClient has)",
    "echo_shared_producer": "bare aiokafka echo, the gateways sharing one producer (fewer, fuller requests)",
    "faust_echo": "the same echo answered from a do-nothing Faust agent (the framework's floor)",
    "loopwarden": "GatewayClient.check through a loopwarden worker",
    "loopwarden_b": "the same through a worker from --b-tree and/or with --b-env (A/B in the same rounds)",
}


def runners(
    bootstrap: str,
    rate: float,
    seconds: float,
    tmp: Path,
    stats: dict[str, Figures],
    variants: Variants,
) -> dict[str, Callable[[], Awaitable[list[float]]]]:
    """Each series at one rate: name -> a coroutine function giving one round's latencies."""
    run: dict[str, Callable[[], Awaitable[list[float]]]] = {
        "echo": lambda: echo_latency(bootstrap, rate, seconds, tmp),
        "echo_shared_producer": lambda: echo_latency(bootstrap, rate, seconds, tmp, producers=1),
        "faust_echo": lambda: echo_latency(bootstrap, rate, seconds, tmp, responder="faust", stats=stats["faust_echo"]),
        "loopwarden": lambda: loopwarden_latency(bootstrap, rate, seconds, tmp, stats["loopwarden"]),
    }
    for name, (tree, env) in variants.items():
        run[name] = functools.partial(loopwarden_latency, bootstrap, rate, seconds, tmp, stats[name], tree, env)
    return run


async def latency(
    bootstrap: str,
    rates: list[float],
    seconds: float,
    rounds: int,
    tmp: Path,
    names: list[str],
    variants: Variants,
) -> dict[float, tuple[dict[str, Rounds], dict[str, Figures]]]:
    """Per rate, every series in each round, in an order rotated from round to round, so
    slow drifts of a shared, noisy machine fall on all of them alike; per rate and series,
    each round's latencies (pooled for the headline percentiles) and the worker's figures.
    An uncounted round goes first (at the first rate)."""
    out: dict[float, tuple[dict[str, Rounds], dict[str, Figures]]] = {}
    warm = True
    for rate in rates:
        stats: dict[str, Figures] = {"faust_echo": [], "loopwarden": [], **{n: [] for n in variants}}
        run = runners(bootstrap, rate, seconds, tmp, stats, variants)
        lat: dict[str, Rounds] = {n: [] for n in names}
        if warm:  # a round not counted: the broker's JIT needs about a minute of traffic
            for name in names:
                await run[name]()
            for v in stats.values():
                v.clear()
            warm = False
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                lat[name].append(await run[name]())
        out[rate] = (lat, {k: v for k, v in stats.items() if v})
    return out


def ms(xs: Sequence[float], p: float) -> float:
    """The `p`-th percentile (0-100) of latencies in seconds, in ms (harness.percentiles)."""
    value: float = percentiles(xs, (p,), scale=1000)[f"p{p:g}"]
    return value


def latency_report(lat: dict[str, Rounds], stats: dict[str, Figures]) -> dict[str, Any]:  # noqa: C901
    """One rate's figures: pooled percentiles per series, the ratios of p99s (pooled, and
    per round beside their median), each round's p50 and p99, the worker's CPU per event."""
    pooled = {name: [x for xs in rounds for x in xs] for name, rounds in lat.items()}
    res: dict[str, Any] = {}
    for name, xs in pooled.items():
        for p in (50, 95, 99):
            res[f"{name}_p{p}_ms"] = ms(xs, p)
    ratios = {
        "p99_ratio": ("loopwarden", "echo"),
        "p99_ratio_to_faust_echo": ("loopwarden", "faust_echo"),
        "faust_echo_p99_ratio": ("faust_echo", "echo"),
        "b_p99_ratio": ("loopwarden_b", "loopwarden"),
        "b_p99_ratio_to_faust_echo": ("loopwarden_b", "faust_echo"),
    }
    for name in lat:
        if name.startswith("loopwarden_") and name != "loopwarden_b":
            ratios[f"{name}_p99_ratio_to_loopwarden"] = (name, "loopwarden")
            ratios[f"{name}_p99_ratio_to_faust_echo"] = (name, "faust_echo")
    ratios = {k: v for k, v in ratios.items() if v[0] in lat and v[1] in lat}
    rounds: dict[str, Any] = {
        "calls": {n: [len(xs) for xs in r] for n, r in lat.items()},
        "p50_ms": {n: [ms(xs, 50) for xs in r] for n, r in lat.items()},
        "p99_ms": {n: [ms(xs, 99) for xs in r] for n, r in lat.items()},
    }
    for key, (a, b) in ratios.items():
        res[key] = round(ms(pooled[a], 99) / ms(pooled[b], 99), 2)
        per = [round(ms(x, 99) / ms(y, 99), 2) for x, y in zip(lat[a], lat[b], strict=True)]
        rounds[key] = per
        res[f"{key}_median_of_rounds"] = median(per)
    res["rounds"] = rounds
    for name, st in stats.items():  # the responder's or the worker's CPU per event, per round
        res[f"{name}_worker"] = {k: [x[k] for x in st] for k in st[0]} if st else {}
    return res


def plot(series: dict[str, list[float]], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    hi = max(ms(xs, 99.5) for xs in series.values())
    bins = [hi * i / 80 for i in range(81)]
    for name, xs in series.items():
        ax.hist([x * 1000 for x in xs], bins=bins, histtype="step", linewidth=1.5, label=name)
    ax.set_xlabel("request-reply latency (ms)")
    ax.set_ylabel("calls")
    ax.legend()
    ax.set_title("Latency through the same broker (all rounds pooled)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return str(path)


async def main_async(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    given = args.bootstrap or os.environ.get("LOOPWARDEN_BOOTSTRAP")
    rates = [float(r) for r in (args.rates or str(args.rate)).split(",")]
    names = [n for n in (args.series or "echo,echo_shared_producer,faust_echo,loopwarden").split(",") if n]
    b_env = dict(kv.split("=", 1) for kv in args.b_env)
    variants: Variants = {}
    if args.b_tree or b_env:
        variants["loopwarden_b"] = (Path(args.b_tree) if args.b_tree else None, b_env)
    for spec in args.variant:  # NAME=DIR[,K=V...]; DIR may be empty (this tree)
        name, rest = spec.split("=", 1)
        tree, *kvs = rest.split(",")
        variants["loopwarden_" + name] = (Path(tree) if tree else None, dict(kv.split("=", 1) for kv in kvs))
    names += [n for n in variants if n not in names]
    SERIES.update(
        {
            n: f"loopwarden through a worker from {t or 'this tree'} with {e or 'no extra variables'}"
            for n, (t, e) in variants.items()
            if n != "loopwarden_b"
        }
    )
    if unknown := [n for n in names if n not in SERIES]:
        raise SystemExit(f"unknown series {unknown}; known: {list(SERIES)}")
    load0 = os.getloadavg()
    with own_broker(given, tmp, heap="768m", full_jit=True) as (bootstrap, broker):
        lat = (
            await latency(bootstrap, rates, args.seconds, args.latency_rounds, tmp, names, variants)
            if args.seconds
            else {}
        )
        tp = (
            await throughput(
                bootstrap,
                args.events,
                args.rounds,
                tmp,
                broker.pid if broker else None,
                Path(args.b_tree) if args.b_tree else None,
            )
            if args.events
            else {}
        )
    result: dict[str, Any] = {
        "benchmark": "kafka",
        "rates_per_s": rates,
        "seconds_per_round": args.seconds,
        "loadavg_1m_before_after": [round(load0[0], 2), round(os.getloadavg()[0], 2)],
    }
    if variants:
        result["variants"] = {n: {"tree": str(t) if t else None, "env": e} for n, (t, e) in variants.items()}
    if lat:
        result["latency"] = {f"{rate:g}": latency_report(*lat[rate]) for rate in rates}
        result["latency_series"] = {n: SERIES[n] for n in names}
        result["plots"] = [
            plot(
                {n: [x for xs in r for x in xs] for n, r in lat[rate][0].items()},
                ROOT / "benchmarks" / "out" / f"latency-{rate:g}.png",
            )
            for rate in rates
        ]
    result.update(tp)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--rates", help="comma-separated calls per second, each measured in turn (default: --rate)")
    ap.add_argument("--rate", type=float, default=1000.0, help="one rate, when --rates is not given")
    ap.add_argument(
        "--series", help="comma-separated latency series (default: echo, echo_shared_producer, faust_echo, loopwarden)"
    )
    ap.add_argument("--b-tree", help="add loopwarden_b: a worker run from this directory (its streams package)")
    ap.add_argument(
        "--b-env",
        action="append",
        default=[],
        metavar="K=V",
        help="add loopwarden_b: a worker with this environment variable (repeatable)",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=DIR[,K=V...]",
        help="add loopwarden_NAME: a worker from DIR (empty: this tree) with these variables",
    )
    ap.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="seconds each latency series runs per round, after 3 s of warm-up (0: skip latency)",
    )
    ap.add_argument(
        "--latency-rounds",
        type=int,
        default=3,
        help="latency rounds; each runs every series, the percentiles pool the rounds (default 3)",
    )
    ap.add_argument("--events", type=int, default=60000, help="events for the throughput part (0: skip it)")
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds; medians are reported (default 3)")
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    run_and_print("loopwarden-bench-", args, main_async)


if __name__ == "__main__":
    main()
