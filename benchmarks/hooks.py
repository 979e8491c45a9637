"""`loopwarden-hook` through the sidecar and a worker carrying 50 calls/s: wall time of
the hook process from start to exit (p50, p99), beside a bare `python -c pass` of the
same interpreter (and of the system's python3), `GatewayClient.check` from this
process, and the sidecar's HTTP path (a POST to /claude-code/PreToolUse from this
process), all in the same run on the same topics. Prints one JSON object, with the
load average (the machine may be shared).

    python -m benchmarks.hooks [--bootstrap HOST:PORT] [--calls 300] [--rate 50] [--samples 150]
    python -m benchmarks.hooks --soak 600    # instead: 10 minutes of hook traffic, the sidecar's RSS

Phases: --calls calls by `check` and --calls through the HTTP path, taking turns at
--rate calls/s from one event loop; then the hook: while a thread keeps posting calls
to the sidecar at --rate, --samples hook processes and as many bare interpreters are
started one at a time, alternately, so both meet the same load. (Starting 50
interpreters a second is itself more than two cores can do: the hook's cost would
drown in the queue for a CPU.)

Goals (issue 27): hook p50 at most 40 ms over the bare interpreter, p99 at most 100 ms
over it; the HTTP path at most 2 ms over `check` at p99. The bootstrap defaults to
LOOPWARDEN_TEST_BOOTSTRAP; topics get a fresh prefix; the worker and the sidecar are
started here and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

from benchmarks.kafka import KEEP_HELP, scratch
from streams.gateway import settings as settings_mod
from streams.tools.launch import Worker, command, stop_process
from streams.tools.localkafka import free_port

ROOT = Path(__file__).resolve().parents[1]
HOOK = Path(sys.executable).parent / "loopwarden-hook"


class SidecarProcess:
    """`loopwarden hooks serve` as a child process on a free port (or `port`)."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        gateway_id: str,
        log: Path,
        timeout_s: float = 2.0,
        extra: tuple[str, ...] = (),
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.argv = command(
            "hooks",
            "serve",
            "--bootstrap",
            bootstrap,
            "--topic-prefix",
            prefix,
            "--listen",
            f"127.0.0.1:{self.port}",
            "--gateway-id",
            gateway_id,
            "--timeout-s",
            str(timeout_s),
            *extra,
        )
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> SidecarProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while self.health() is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the sidecar did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 20)


def call_payload(session: str, i: int) -> bytes:
    """A Claude Code PreToolUse input (https://code.claude.com/docs/en/hooks), a new command each time."""
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": None,
            "cwd": "/home/user/bench",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": f"pytest -k case{i}"},
            "tool_use_id": f"toolu_{i}",
        }
    ).encode()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def summary(ms: list[float]) -> dict:
    return {"p50": pct(ms, 0.50), "p99": pct(ms, 0.99), "max": round(max(ms), 2), "n": len(ms)}


def http_post(port: int, path: str, body: bytes) -> int:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode() + body)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    return int(raw.split(b" ", 2)[1])


async def check_and_http(s: settings_mod.Settings, port: int, n: int, rate: float) -> tuple[list, list, int, list]:
    """`n` calls by `GatewayClient.check` and `n` through the sidecar's HTTP path, taking
    turns at `rate` calls/s from one event loop, so both meet the same load: (check ms,
    HTTP ms, checks without a decision, HTTP statuses)."""
    from streams.gateway.client import GatewayClient

    async def post(body: bytes) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = f"POST /claude-code/PreToolUse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        raw = await reader.read()
        writer.close()
        return int(raw.split(b" ", 2)[1])

    async with GatewayClient(settings=s, gateway_id="bench-check") as client:
        run_id, session = f"check-{uuid.uuid4().hex[:8]}", f"http-{uuid.uuid4().hex[:8]}"
        await client.check(run_id, "exec", {"command": "warm up"})
        await post(call_payload(session, -1))
        checks, http, degraded, statuses = [], [], 0, []
        start = time.monotonic()
        for i in range(2 * n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            t0 = time.perf_counter()
            if i % 2 == 0:
                d = await client.check(run_id, "exec", {"command": f"pytest -k case{i}"})
                checks.append((time.perf_counter() - t0) * 1000)
                degraded += bool(d.degraded)
            else:
                statuses.append(await post(call_payload(session, i)))
                http.append((time.perf_counter() - t0) * 1000)
        await client.end_run(run_id)
    return checks, http, degraded, statuses


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def soak(sidecar: SidecarProcess, seconds: float, rate: float) -> dict:
    """Hook traffic through the sidecar for `seconds` at `rate` requests/s, from one
    thread: sessions of 20 Claude Code calls, each with its PostToolUse (a third of
    them repeat one call, so they are warned and denied), then SessionEnd; a new
    session id each time. The sidecar's RSS sampled every 30 s."""
    assert sidecar.proc is not None
    samples, start, n, statuses = [], time.monotonic(), 0, Counter()
    next_sample = start
    while (now := time.monotonic()) - start < seconds:
        if now >= next_sample:
            samples.append({"s": round(now - start), "rss_kib": rss_kib(sidecar.proc.pid)})
            next_sample += 30
        session = f"soak-{uuid.uuid4().hex[:12]}"
        loop = n % 3 == 0
        for i in range(20):
            command_ = "make test" if loop else f"pytest -k case{i}"
            call = json.loads(call_payload(session, i))
            call["tool_input"] = {"command": command_}
            statuses[http_post(sidecar.port, "/claude-code/PreToolUse", json.dumps(call).encode())] += 1
            result = {**call, "hook_event_name": "PostToolUse", "tool_response": {"stdout": f"out {i}", "stderr": ""}}
            statuses[http_post(sidecar.port, "/claude-code/PostToolUse", json.dumps(result).encode())] += 1
            n += 2
            time.sleep(max(0.0, start + n / rate - time.monotonic()))
        end = {"session_id": session, "cwd": "/home/user/bench", "hook_event_name": "SessionEnd", "reason": "other"}
        statuses[http_post(sidecar.port, "/claude-code/SessionEnd", json.dumps(end).encode())] += 1
        n += 1
    samples.append({"s": round(time.monotonic() - start), "rss_kib": rss_kib(sidecar.proc.pid)})
    return {"seconds": seconds, "requests": n, "statuses": dict(statuses), "rss": samples}


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True)
    return (time.perf_counter() - t0) * 1000


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("LOOPWARDEN_TEST_BOOTSTRAP"))
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--samples", type=int, default=150)
    ap.add_argument("--soak", type=float, metavar="S", help="instead: hook traffic for S seconds, the sidecar's RSS")
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args(argv)
    if not args.bootstrap:
        sys.exit("give --bootstrap (or LOOPWARDEN_TEST_BOOTSTRAP)")
    from streams.admin.topics import create_topics

    prefix = f"bh{uuid.uuid4().hex[:8]}."
    s = settings_mod.build({"bootstrap": args.bootstrap, "topic_prefix": prefix}, env={})
    asyncio.run(create_topics(s))
    with scratch("bench-hooks-", args.keep) as tmp:
        _measure(args, s, prefix, tmp)


def _measure(args: argparse.Namespace, s: settings_mod.Settings, prefix: str, tmp: Path) -> None:
    (tmp / "config.json").write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    worker = Worker(
        ["--bootstrap", args.bootstrap, "--topic-prefix", prefix, "--config", str(tmp / "config.json")]
        + ["--data-dir", str(tmp / "data")],
        tmp / "worker.log",
        port=free_port(),
        cwd=ROOT,
    )
    sidecar = SidecarProcess(args.bootstrap, prefix, "bench-hooks", tmp / "sidecar.log")
    try:
        worker.start()
        sidecar.start()
        if args.soak:
            print(
                json.dumps({**soak(sidecar, args.soak, args.rate), "loadavg": [round(x, 2) for x in os.getloadavg()]})
            )
            return
        n, rate = args.calls, args.rate
        check, http, check_degraded, statuses = asyncio.run(check_and_http(s, sidecar.port, n, rate))
        stop = threading.Event()

        def load() -> None:  # the sidecar and the worker at `rate` calls/s while the hooks are timed
            load_session, i, start = f"load-{uuid.uuid4().hex[:8]}", 0, time.monotonic()
            while not stop.is_set():
                threading.Thread(
                    target=http_post, args=(sidecar.port, "/claude-code/PreToolUse", call_payload(load_session, i))
                ).start()
                i += 1
                time.sleep(max(0.0, start + i / rate - time.monotonic()))

        hook_session = f"hook-{uuid.uuid4().hex[:8]}"
        bare, system, hooks, degraded = [], [], [], 0
        loader = threading.Thread(target=load)
        loader.start()
        try:
            for i in range(args.samples):
                bare.append(timed([sys.executable, "-c", "pass"]))
                system.append(timed(["/usr/bin/python3", "-c", "pass"]))
                t0 = time.perf_counter()
                p = subprocess.run(
                    [str(HOOK), "claude-code", "PreToolUse", "--url", sidecar.url],
                    input=call_payload(hook_session, i),
                    capture_output=True,
                )
                hooks.append((time.perf_counter() - t0) * 1000)
                degraded += p.returncode != 0
        finally:
            stop.set()
            loader.join()
        health = sidecar.health() or {}
    finally:
        sidecar.stop()
        worker.stop()
    b, c, h, k = summary(bare), summary(check), summary(http), summary(hooks)
    out = {
        "calls": n,
        "rate_per_s": rate,
        "hook_samples": len(hooks),
        "hook_without_decision": degraded,
        "check_without_decision": check_degraded,
        "bare_python_ms": b,
        "bare_system_python3_ms": summary(system),
        "check_ms": c,
        "sidecar_http_ms": h,
        "hook_ms": k,
        "hook_over_bare_ms": {"p50": round(k["p50"] - b["p50"], 2), "p99": round(k["p99"] - b["p99"], 2)},
        "http_over_check_p99_ms": round(h["p99"] - c["p99"], 2),
        "goals_met": {
            "hook_p50_within_40ms_of_bare": k["p50"] - b["p50"] <= 40,
            "hook_p99_within_100ms_of_bare": k["p99"] - b["p99"] <= 100,
            "http_p99_within_2ms_of_check": h["p99"] - c["p99"] <= 2,
        },
        "http_statuses": sorted(set(statuses)),
        "sidecar_counts": health,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
