"""`loopwarden-hook` through the sidecar and a worker, at 50 calls/s: wall time of the hook
process from start to exit (p50, p99), beside a bare `python -c pass` (the same
interpreter) and `GatewayClient.check` in this process, and the sidecar's HTTP path
(a POST to /claude-code/PreToolUse from this process), all measured in the same run on
the same topics. Prints one JSON object, with the load average (the machine may be
shared).

    python -m benchmarks.hooks [--bootstrap HOST:PORT] [--calls 300] [--rate 50]

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
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

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


def paced(n: int, rate: float, one) -> list[float]:
    """Start `one(i)` every 1/rate s on its own thread (so a slow one does not slow the
    pace); the milliseconds each took."""
    out: list[float] = [0.0] * n
    threads = []
    start = time.monotonic()

    def run(i: int) -> None:
        t0 = time.perf_counter()
        one(i)
        out[i] = (time.perf_counter() - t0) * 1000

    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return out


def http_post(port: int, path: str, body: bytes) -> int:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode() + body)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    return int(raw.split(b" ", 2)[1])


async def check_latencies(s: settings_mod.Settings, n: int, rate: float) -> list[float]:
    from streams.gateway.client import GatewayClient

    async with GatewayClient(settings=s, gateway_id="bench-check") as client:
        run_id = f"check-{uuid.uuid4().hex[:8]}"
        await client.check(run_id, "exec", {"command": "warm up"})
        out = []
        start = time.monotonic()
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            t0 = time.perf_counter()
            d = await client.check(run_id, "exec", {"command": f"pytest -k case{i}"})
            out.append((time.perf_counter() - t0) * 1000)
            assert not d.degraded
        await client.end_run(run_id)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("LOOPWARDEN_TEST_BOOTSTRAP"))
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rate", type=float, default=50.0)
    args = ap.parse_args(argv)
    if not args.bootstrap:
        sys.exit("give --bootstrap (or LOOPWARDEN_TEST_BOOTSTRAP)")
    from streams.admin.topics import create_topics

    prefix = f"bh{uuid.uuid4().hex[:8]}."
    s = settings_mod.build({"bootstrap": args.bootstrap, "topic_prefix": prefix}, env={})
    asyncio.run(create_topics(s))
    tmp = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
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
        n, rate = args.calls, args.rate
        bare = paced(n, rate, lambda i: subprocess.run([sys.executable, "-c", "pass"], check=True))
        check = asyncio.run(check_latencies(s, n, rate))
        session = f"http-{uuid.uuid4().hex[:8]}"
        http_post(sidecar.port, "/claude-code/PreToolUse", call_payload(session, -1))  # warm up
        statuses: list[int] = []
        http = paced(
            n,
            rate,
            lambda i: statuses.append(http_post(sidecar.port, "/claude-code/PreToolUse", call_payload(session, i))),
        )
        hook_session = f"hook-{uuid.uuid4().hex[:8]}"

        def hook(i: int) -> None:
            p = subprocess.run(
                [str(HOOK), "claude-code", "PreToolUse", "--url", sidecar.url],
                input=call_payload(hook_session, i),
                capture_output=True,
            )
            if p.returncode != 0 or p.stderr:
                raise RuntimeError(f"loopwarden-hook failed: {p.returncode} {p.stderr!r}")

        hooks = paced(n, rate, hook)
        health = sidecar.health() or {}
    finally:
        sidecar.stop()
        worker.stop()
    b, c, h, k = summary(bare), summary(check), summary(http), summary(hooks)
    out = {
        "calls": n,
        "rate_per_s": rate,
        "bare_python_ms": b,
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
