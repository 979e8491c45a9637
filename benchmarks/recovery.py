"""Recovery at scale: how long a fresh worker takes to recover 100,000 active runs from
the changelog, and what Faust's RocksDB store would give instead.

    python -m benchmarks.recovery [--bootstrap HOST:PORT] [--runs 100000] [--calls 2:3]
                                  [--flush-interval-ms MS] [--partitions 8] [--no-rocksdb]
                                  [--compacted] [--keep]

Without --bootstrap it starts its own local broker (fresh folder, 768 MB heap, full JIT)
and stops it at the end; every process it starts is stopped in any case, and its temp
folder is removed unless --keep.

1. Load. --runs active runs (each a few tool calls with their results, --calls LO:HI
   calls, in the privacy form the client sends; no run_end, so every run stays in the
   table; event-time stamps close together, so none is idle) are produced with a batch
   producer into the events topic of a worker that is already running. The events are
   interleaved round by round (every run's first call, then every run's second…), as
   when many long runs are active at once: a run is touched in several flush intervals,
   so the changelog holds several records per run, as it does until Kafka compacts a
   closed segment. Once every call has its decision the worker gets SIGTERM (a stopping
   worker writes its states at once), and the changelog is read back: every run must
   have a live record.
2. Recovery. A fresh worker (new --data-dir, same topics and group) is started; one
   tool_call of an existing run is produced right after. Reported: seconds from process
   start to /health "ok" (`recovery_s`; the worker says ok only once Faust finished
   recovering its table) and to the probe call's decision (`first_decision_s`), its RSS
   after recovery, and the runs it then holds (`loopwarden_active_runs`).
   `empty_start_s` is the first worker's start on empty topics: the part of those
   figures that is only starting Python, Faust and the consumer group.
3. RocksDB. The worker keeps RunState objects in its store (the fold writes them there
   outside any Faust event), which a RocksDB store cannot hold, so the worker cannot
   simply be switched to `rocksdb://`. A throw-away Faust app with the worker's table
   definition over the same changelog topic (its own consumer group) recovers it with
   `memory://` (the worker's store), with `rocksdb://` (the rocksdict driver) into an
   empty data dir (cold: like a new machine or a lost disk), and with `rocksdb://` again
   on the data dir the cold start left (warm: a restart on the same disk, which reads
   only the changelog past the offsets RocksDB stored; here nothing was written in
   between, so this is its best case). Each: seconds from process start to recovered,
   the recovery itself (partitions assigned to recovered), the keys it holds and its RSS.
4. With --compacted: the memory:// table again, on a copy of the changelog holding only
   each run's last record (what Kafka's compaction would leave; with the default 1 GiB
   segments it compacts nothing of a changelog this size).

Recovery costs about the same per changelog record in every case (Faust's recovery loop,
not the store, is the bottleneck), so the `*_records_per_s` figures scale the results to
other changelog sizes. Defaults take about 9-10 minutes on 2 cores.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.kafka import ROOT, end, preload, publish, read_line, spawn, start_worker
from streams.gateway.client import partition_for
from streams.kafka import clients, ranges
from streams.kafka.producer import OutRecord
from streams.kafka.settings import Settings
from streams.tools.harness import (
    WorkerProcess,
    cpu_seconds,
    following,
    own_broker,
    produce_async,
    rss_mb,
    scratch,
    setup_topics_async,
    topic_settings,
    wait_for_count,
)
from streams.tools.trace import LOOP_KINDS, T0, privacy_form, run_events
from streams.worker.settings import WorkerSettings

T = TypeVar("T")
BROKER_HEAP = "768m"
PROBE_RUN = "run-000000"
PROBE_GATEWAY = "gw-00"  # the gateway of run 0 (runs are spread over 16 gateways)
PROBE_SEQ = 1_000_000  # above every seq the load gives a run
ROCKSDB_NOTE = (
    "measured with a throw-away Faust app holding the worker's table over the same changelog; the "
    "worker itself cannot use rocksdb:// as it is: its pipeline keeps RunState objects in the store "
    "and writes them outside any Faust event, while a RocksDB store holds bytes and takes each "
    "key's partition from the current event"
)


async def stoppable(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` so that SIGTERM (from `timeout`, say) cancels it as Ctrl-C does: its
    finally blocks then stop the broker and workers it started instead of orphaning them
    (they run in sessions of their own)."""
    task = asyncio.ensure_future(coro)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await task


def make_events(runs: int, lo: int, hi: int, seed: int = 11) -> tuple[list[bytes], int]:
    """(the events, the number of tool calls): `runs` runs of lo..hi calls each, a fifth
    of them sliding into one kind of loop (streams/tools/trace.py's runs without their
    run_end), interleaved round by round."""
    rng = random.Random(seed)
    per_run = []
    for i in range(runs):
        loop = rng.choice(LOOP_KINDS) if rng.random() < 0.2 else None
        evs = [
            privacy_form(json.dumps(ev, separators=(",", ":")).encode())
            for ev in run_events(rng, f"run-{i:06d}", f"gw-{i % 16:02d}", rng.randint(lo, hi), loop)
            if ev["type"] != "run_end"
        ]
        per_run.append(evs)
    lines: list[bytes] = []
    for k in range(2 * hi):
        lines.extend(evs[k] for evs in per_run if k < len(evs))
    return lines, sum(len(evs) for evs in per_run) // 2


async def read_changelog(
    bootstrap: str, topic: str, latest: dict[bytes, tuple[int, bytes | None]] | None = None
) -> dict[str, Any]:
    """Every record of the changelog, read with a bare consumer: records, bytes, the keys
    with a live (non-tombstone) last value, and how long the read took (the floor under
    any recovery: the same records without Faust). `latest`, if given, gets each key's
    last (partition, value): the changelog as compaction would leave it."""
    last: dict[bytes, bool] = {}
    seen = {"records": 0, "bytes": 0}

    def take(records: list[Any]) -> None:
        for m in records:
            last[m.key] = m.value is not None
            seen["bytes"] += len(m.value or b"")
            if latest is not None:
                latest[m.key] = (m.partition, m.value)
        seen["records"] += len(records)

    big = {"max_partition_fetch_bytes": 8 << 20, "fetch_max_bytes": 64 << 20}
    r = await ranges.open_range(topic_settings(bootstrap), **big)
    try:
        await r.add(topic)
        want = r.total
        t0 = time.monotonic()
        await r.drain(3600, take)
        read_s = time.monotonic() - t0
    finally:
        await r.close()
    return {
        "records": seen["records"],
        "expected_records": want,
        "value_mb": round(seen["bytes"] / 1e6, 1),
        "live_keys": sum(last.values()),
        "read_s": round(read_s, 2),
    }


async def first_decision(
    s: Settings, w: WorkerProcess, t0: float, probe: bytes, timeout: float = 600, seq: int = PROBE_SEQ
) -> dict[str, Any]:
    """Produce the probe call now, then wait for /health ok and for its decision."""
    bootstrap = s.bootstrap
    part = partition_for(PROBE_GATEWAY, s.partitions)
    async with following(bootstrap, s.decisions_topic, partitions=[part], fetch_max_wait_ms=50) as decisions:
        await produce_async(bootstrap, s.events_topic, [(PROBE_RUN.encode(), probe)], linger_ms=0)
        produced = time.monotonic() - t0
        loop = asyncio.get_running_loop()
        out: dict[str, Any] = {"probe_produced_s": round(produced, 2)}

        async def watch_health() -> None:
            seen = None
            while True:
                st = (await loop.run_in_executor(None, w.health) or {}).get("status")
                if st != seen:
                    out.setdefault("health_states", []).append([round(time.monotonic() - t0, 2), st])
                    seen = st
                if st == "ok":
                    out["recovery_s"] = round(time.monotonic() - t0, 2)
                    return
                if not w.alive():
                    raise RuntimeError(f"the fresh worker exited; see {w.log}")
                await asyncio.sleep(0.1)

        async def watch_decision() -> None:
            while True:
                for m in await decisions.chunk(timeout_ms=200):
                    d = json.loads(m.value)
                    if d.get("run_id") == PROBE_RUN and d.get("seq") == seq:
                        out["first_decision_s"] = round(time.monotonic() - t0, 2)
                        out["probe_decision"] = {k: d.get(k) for k in ("action", "level", "detector")}
                        return

        await asyncio.wait_for(asyncio.gather(watch_health(), watch_decision()), timeout)
        return out


def probe_event(seq: int = PROBE_SEQ) -> bytes:
    """A new tool_call of run 0, seq and ts above everything the load gave it."""
    call = {
        "type": "tool_call",
        "run_id": PROBE_RUN,
        "seq": seq,
        "gateway_id": PROBE_GATEWAY,
        "ts": T0 + seq,
        "tool_call_id": f"{PROBE_RUN}-probe",
        "tool_name": "read",
        "params": {"path": "/workspace/after-restart.md"},
    }
    return privacy_form(json.dumps(call, separators=(",", ":")).encode())


# ---------------------------------------------------------------------------------------
# The throw-away Faust app: the worker's table over the same changelog, any store.


def table_probe(args: argparse.Namespace) -> None:
    """Run as a child (`--table-probe STORE`): recover the table, print one JSON line."""
    import faust

    t_assigned: list[float] = []
    # Any: Faust's decorators and signals are untyped (as streams/worker/app.py's are)
    app: Any = faust.App(
        args.app_id,
        broker=f"kafka://{args.bootstrap}",
        store=args.table_probe,
        autodiscover=False,
        web_enabled=False,
        datadir=args.datadir,
        topic_partitions=args.partitions,
        consumer_auto_offset_reset="earliest",
    )
    # As the worker's table (streams/worker/app.py) and the topic Faust would make for it, under
    # the worker's changelog name.
    changelog = app.topic(
        args.changelog,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=args.partitions,
        compacting=True,
        acks=False,
        internal=True,
        maxsize=131_072,
        allow_empty=True,
    )
    table = app.Table(
        "runs",
        default=None,
        key_type=bytes,
        value_type=bytes,
        partitions=args.partitions,
        use_partitioner=True,
        changelog_topic=changelog,
    )

    @app.on_partitions_assigned.connect
    async def assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        if not t_assigned:
            t_assigned.append(time.time())

    @app.timer(0.05)
    async def done() -> None:
        if app.rebalancing or not app.consumer.assignment() or not app.tables.recovery.completed.is_set():
            return
        t = time.time()
        keys = len(table)
        print(
            json.dumps(
                {
                    "recovered_at": t,
                    "assigned_at": t_assigned[0] if t_assigned else None,
                    "keys": keys,
                    "rss_mb": rss_mb(os.getpid()),
                }
            ),
            flush=True,
        )
        await asyncio.sleep(3600)  # the parent stops this process

    worker = faust.Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False)
    worker.spinner = None
    worker.execute_from_commandline()


async def run_probe(
    store: str,
    bootstrap: str,
    changelog: str,
    partitions: int,
    app_id: str,
    datadir: Path,
    log: Path,
    timeout: float = 900,
) -> dict[str, Any]:
    t0 = time.time()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "benchmarks.recovery",
            "--table-probe",
            store,
            "--bootstrap",
            bootstrap,
            "--changelog",
            changelog,
            "--partitions",
            str(partitions),
            "--app-id",
            app_id,
            "--datadir",
            str(datadir),
        ],
        log,
    )
    try:
        line = await read_line(proc, timeout)
        if not line.strip():
            raise RuntimeError(f"the {store} table probe did not recover; see {log}")
        r = json.loads(line)
        return {
            "recovery_s": round(r["recovered_at"] - t0, 2),
            "assigned_to_recovered_s": round(r["recovered_at"] - r["assigned_at"], 2) if r["assigned_at"] else None,
            "keys": r["keys"],
            "rss_mb": r["rss_mb"],
        }
    finally:
        end(proc)


async def compacted_part(
    bootstrap: str, s: Settings, tmp: Path, latest: dict[bytes, tuple[int, bytes | None]]
) -> dict[str, Any]:
    """The memory:// table recovering the changelog as compaction would leave it: one
    record per live run, each in its partition, in a topic of its own."""
    from aiokafka.admin import NewTopic

    topic = f"{s.topic_prefix}compacted-runs-changelog"
    async with clients.opened(clients.admin(s), s) as admin:
        await admin.create_topics([NewTopic(topic, s.partitions, 1, topic_configs={"cleanup.policy": "compact"})])
    records = [OutRecord(topic, k, v, None, part) for k, (part, v) in latest.items() if v is not None]
    await publish(bootstrap, records)
    r = await run_probe(
        "memory://",
        bootstrap,
        topic,
        s.partitions,
        f"{s.topic_prefix}probe-compacted",
        tmp / "probe-compacted",
        tmp / "probe-compacted.log",
    )
    r["changelog_records"] = len(records)
    return r


async def rocksdb_part(bootstrap: str, s: Settings, tmp: Path, live_keys: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if importlib.util.find_spec("rocksdict") is not None:  # the driver faust-streaming's rocksdb:// store uses
        out["rocksdb_driver"] = f"rocksdict {importlib.metadata.version('rocksdict')}"
    else:
        out["rocksdb_recovery_s_cold"] = out["rocksdb_recovery_s_warm"] = None
        out["rocksdb_not_measured"] = (
            "faust-streaming's rocksdb:// store needs the rocksdict (or python-rocksdb) "
            "package, which is not installed in this environment: "
            "pip install rocksdict"
        )
    mem = await run_probe(
        "memory://",
        bootstrap,
        s.changelog_topic,
        s.partitions,
        f"{s.topic_prefix}probe-memory",
        tmp / "probe-memory",
        tmp / "probe-memory.log",
    )
    out["memory_store_recovery_s"] = mem["recovery_s"]
    out["memory_store"] = mem
    if "rocksdb_not_measured" not in out:
        app_id, datadir = f"{s.topic_prefix}probe-rocksdb", tmp / "probe-rocksdb"
        cold = await run_probe(
            "rocksdb://", bootstrap, s.changelog_topic, s.partitions, app_id, datadir, tmp / "probe-rocksdb-cold.log"
        )
        warm = await run_probe(
            "rocksdb://", bootstrap, s.changelog_topic, s.partitions, app_id, datadir, tmp / "probe-rocksdb-warm.log"
        )
        cold["disk_mb"] = round(sum(f.stat().st_size for f in datadir.rglob("*") if f.is_file()) / 1e6, 1)
        out["rocksdb_recovery_s_cold"] = cold["recovery_s"]
        out["rocksdb_recovery_s_warm"] = warm["recovery_s"]
        out["rocksdb_cold"] = cold
        out["rocksdb_warm"] = warm
        out["rocksdb_speedup_cold"] = round(mem["recovery_s"] / cold["recovery_s"], 2)
        out["rocksdb_speedup_warm"] = round(mem["recovery_s"] / warm["recovery_s"], 2)
        for name, r in (("memory", mem), ("rocksdb_cold", cold), ("rocksdb_warm", warm)):
            if r["keys"] != live_keys:
                out.setdefault("key_count_mismatch", {})[name] = r["keys"]
    elif mem["keys"] != live_keys:
        out["key_count_mismatch"] = {"memory": mem["keys"]}
    return out


async def baseline_part(rev: str, s: Settings, tmp: Path, extra: list[str]) -> dict[str, Any]:
    """A fresh worker of revision `rev` (checked out into a git worktree and run from there
    with this interpreter) on the same topics: its first decision, as the fresh one's."""
    tree = tmp / "baseline-tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
    try:
        short = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        t0 = time.monotonic()
        w = start_worker(s.bootstrap, s.topic_prefix, tmp, "baseline", extra, tree, partitions=s.partitions, wait=False)
        try:
            rec = await first_decision(s, w, t0, probe_event(PROBE_SEQ + 1), seq=PROBE_SEQ + 1)
            rss = rss_mb(w.pid)
        finally:
            w.stop()
        return {
            "rev": short,
            "recovery_s": rec["recovery_s"],
            "first_decision_s": rec["first_decision_s"],
            "rss_mb": rss,
        }
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with scratch("loopwarden-recovery-", args.keep) as tmp:
        with own_broker(args.bootstrap, tmp, heap=BROKER_HEAP, full_jit=True) as (bootstrap, _):
            return await measure(args, bootstrap, tmp)


async def measure(args: argparse.Namespace, bootstrap: str, tmp: Path) -> dict[str, Any]:
    lo, hi = (int(x) for x in args.calls.split(":"))
    flush_interval_ms = args.flush_interval_ms or WorkerSettings().flush_interval_ms
    procs: list[WorkerProcess] = []
    try:
        prefix = f"rec-{uuid.uuid4().hex[:6]}."
        s = await setup_topics_async(bootstrap, prefix, args.partitions)
        extra = ["--flush-interval-ms", str(args.flush_interval_ms)] if args.flush_interval_ms is not None else []

        t = time.monotonic()
        lines, calls = make_events(args.runs, lo, hi)
        gen_s = time.monotonic() - t

        # 1. Load the runs through a worker, stop it, check the changelog.
        loop = asyncio.get_running_loop()
        t = time.monotonic()
        load = await loop.run_in_executor(
            None, lambda: start_worker(bootstrap, prefix, tmp, "load", extra, partitions=args.partitions)
        )
        empty_start_s = time.monotonic() - t
        procs.append(load)
        cpu0, t = cpu_seconds(load.pid), time.monotonic()
        await preload(bootstrap, s.events_topic, lines)
        await wait_for_count(bootstrap, s.decisions_topic, calls, 1800)
        load_s = time.monotonic() - t
        load_cpu = cpu_seconds(load.pid) - cpu0
        await asyncio.sleep(2 * flush_interval_ms / 1000 + 5.5)  # the gauge of active runs is updated every 5 s
        loaded = {
            "events": len(lines),
            "tool_calls": calls,
            "load_s": round(load_s, 1),
            "events_per_s": round(len(lines) / load_s),
            "worker_cores": round(load_cpu / load_s, 2),
            "worker_rss_mb": rss_mb(load.pid),
            "worker_active_runs": load.metric("loopwarden_active_runs"),
            "state_records_written": load.metric("loopwarden_state_records_total"),
            "generate_s": round(gen_s, 1),
        }
        t = time.monotonic()
        load.stop()
        loaded["sigterm_exit_s"] = round(time.monotonic() - t, 1)
        loaded["sigterm_exit_code"] = load.proc.returncode if load.proc else None
        del lines
        latest: dict[bytes, tuple[int, bytes | None]] | None = {} if args.compacted else None
        changelog = await read_changelog(bootstrap, s.changelog_topic, latest)
        if changelog["live_keys"] != args.runs:
            raise RuntimeError(f"the changelog holds {changelog['live_keys']} live runs, not {args.runs}")

        # 2. A fresh worker recovers them.
        t0 = time.monotonic()
        fresh = start_worker(bootstrap, prefix, tmp, "fresh", extra, partitions=args.partitions, wait=False)
        procs.append(fresh)
        rec = await first_decision(s, fresh, t0, probe_event())
        rss_at_first_decision = rss_mb(fresh.pid)
        await asyncio.sleep(5.5)  # one more update of the active-runs gauge
        result_worker = {
            "recovery_s": rec["recovery_s"],
            "first_decision_s": rec["first_decision_s"],
            "rss_mb": rss_mb(fresh.pid),
            "rss_mb_at_first_decision": rss_at_first_decision,
            "active_runs_after_recovery": fresh.metric("loopwarden_active_runs"),
            "empty_start_s": round(empty_start_s, 2),
            "fresh_worker_cpu_s": round(cpu_seconds(fresh.pid), 1),
            "probe_produced_s": rec["probe_produced_s"],
            "probe_decision": rec["probe_decision"],
            "health_states": rec["health_states"],
        }
        fresh.stop()
        result_worker["over_empty_start_s"] = round(rec["first_decision_s"] - empty_start_s, 2)
        result_worker["goal_s"] = round(3 * changelog["read_s"] + 1, 2)  # issue 26: 3 x the bare read + 1 s
        # 2b. The same, by the worker of --baseline (another revision, run from a git worktree).
        baseline = await baseline_part(args.baseline, s, tmp, extra) if args.baseline else None

        # 3. The same changelog into a throw-away table: memory:// and rocksdb://.
        stores: dict[str, Any] = (
            await rocksdb_part(bootstrap, s, tmp, changelog["live_keys"])
            if not args.no_rocksdb
            else {"rocksdb_not_measured": "skipped (--no-rocksdb)"}
        )
        # 4. Optionally: the same, had Kafka compacted the changelog.
        if latest is not None:
            stores["memory_store_compacted"] = await compacted_part(bootstrap, s, tmp, latest)
            stores["memory_store_recovery_s_compacted"] = stores["memory_store_compacted"]["recovery_s"]
            latest = None
        n = changelog["records"]
        result_worker["records_per_s"] = round(
            n / max(0.01, rec["recovery_s"] - empty_start_s)
        )  # beyond an empty start
        for name in ("memory_store", "rocksdb_cold", "memory_store_compacted"):
            r = stores.get(name)
            if r and r.get("assigned_to_recovered_s"):
                r["records_per_s"] = round(r.get("changelog_records", n) / max(0.01, r["assigned_to_recovered_s"]))
    finally:
        for w in procs:
            w.stop()
    return {
        "benchmark": "recovery",
        "runs": args.runs,
        "changelog_records": changelog["records"],
        **{k: result_worker[k] for k in ("recovery_s", "first_decision_s", "rss_mb")},
        "memory_store_recovery_s": stores.get("memory_store_recovery_s"),
        "rocksdb_recovery_s_cold": stores.get("rocksdb_recovery_s_cold"),
        "rocksdb_recovery_s_warm": stores.get("rocksdb_recovery_s_warm"),
        "rocksdb_speedup_cold": stores.get("rocksdb_speedup_cold"),
        "rocksdb_speedup_warm": stores.get("rocksdb_speedup_warm"),
        "rocksdb_note": ROCKSDB_NOTE if "rocksdb_not_measured" not in stores else stores["rocksdb_not_measured"],
        "worker": result_worker,
        "baseline": baseline,
        "bare_read_s": changelog["read_s"],
        "changelog": changelog,
        "load": loaded,
        "table_probes": stores,
        "settings": {
            "broker": "external" if args.bootstrap else f"local, fresh, heap {BROKER_HEAP}, full JIT",
            "partitions": args.partitions,
            "calls_per_run": args.calls,
            "flush_interval_ms": flush_interval_ms,
            "worker": "streams.cli worker, defaults otherwise (memory:// store)",
            "machine_cores": os.cpu_count(),
            "tmp": str(tmp) if args.keep else None,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    ap.add_argument("--runs", type=int, default=100_000, help="active runs to recover (default 100000)")
    ap.add_argument("--calls", default="2:3", help="tool calls per run, LO:HI, each with its result (default 2:3)")
    ap.add_argument("--flush-interval-ms", type=float, help="passed to the workers (default: the worker's, 1000)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions of the topics (default 8)")
    ap.add_argument("--no-rocksdb", action="store_true", help="skip the throw-away table probes")
    ap.add_argument(
        "--compacted",
        action="store_true",
        help="also recover (memory://) a copy of the changelog as compaction would leave it, one record "
        "per run (about a quarter more time)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs, broker data)")
    ap.add_argument("--baseline", help="also recover with the worker of this git revision (e.g. the previous HEAD)")
    # The throw-away table app (run as a child by this benchmark).
    ap.add_argument("--table-probe", help=argparse.SUPPRESS)
    ap.add_argument("--changelog", help=argparse.SUPPRESS)
    ap.add_argument("--app-id", help=argparse.SUPPRESS)
    ap.add_argument("--datadir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table_probe:
        table_probe(args)
        return
    print(json.dumps(asyncio.run(stoppable(main_async(args))), indent=2))


if __name__ == "__main__":
    main()
