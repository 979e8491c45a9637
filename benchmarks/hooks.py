"""The hooks through the sidecar and a worker carrying --rate calls/s. Per runtime
(Claude Code, Codex, Gemini CLI), side by side and taking turns call by call: the wall
time, from start to exit, of the hook `loopwarden hooks install` wrote for the runtime's
call event (the fast hook, where a C compiler is found; run as the command's words, not
through the runtime's shell) answering an allowed call; of `true`; of `python -c pass`
(this interpreter); of the Python hook `loopwarden-hook` on the same call; of
`/bin/sh -c 'exec curl ...'` posting the call to the sidecar (where curl is installed: the
least a shell-script hook would start); and of `GatewayClient.check` from this process.
Before that, --calls calls by `check` and --calls through the sidecar's HTTP path (a POST
to /claude-code/PreToolUse from this process), taking turns at --rate calls/s. Prints
one JSON object, with the load average before and after (the machine may be shared).

    python -m benchmarks.hooks [--bootstrap HOST:PORT] [--calls 300] [--rate 50] [--samples 200]
    python -m benchmarks.hooks --soak 600    # instead: 10 minutes of hook traffic, the sidecar's RSS

While the programs are timed, a thread keeps posting calls to the sidecar at --rate, so
the worker and the sidecar are busy as they would be; the programs are started one at a
time (starting 50 interpreters a second is itself more than two cores can do: a hook's
cost would drown in the queue for a CPU).

Goals: the installed hook's p50 at most 10 ms and p99 at most 25 ms (issue 43); the HTTP
path at most 2 ms over `check` at p99 (issue 27). The bootstrap defaults to
LOOPWARDEN_TEST_BOOTSTRAP; topics get a fresh prefix; the worker and the sidecar are
started here and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.kafka import start_worker
from streams.hooks.runtimes import RUNTIMES
from streams.kafka import settings as settings_mod
from streams.tools.harness import HOOK, KEEP_HELP, SidecarProcess, percentiles, rss_kib, scratch, setup_topics
from streams.tools.launch import command


def call_payload(session: str, i: int, runtime: str = "claude-code") -> bytes:
    """The runtime's call hook input, a new command each time: Claude Code's PreToolUse
    (https://code.claude.com/docs/en/hooks), Codex's PreToolUse (its
    pre-tool-use.command.input schema), Gemini CLI's BeforeTool (docs/hooks/reference.md)."""
    command_ = {"command": f"pytest -k case{i}"}
    if runtime == "gemini-cli":
        data: dict[str, Any] = {"session_id": session, "transcript_path": None, "cwd": "/home/user/bench"}
        data |= {"hook_event_name": "BeforeTool", "timestamp": "2026-08-01T12:00:00.000Z"}
        return json.dumps({**data, "tool_name": "run_shell_command", "tool_input": command_}).encode()
    data = {"session_id": session, "transcript_path": None, "cwd": "/home/user/bench", "permission_mode": "default"}
    if runtime == "codex":
        data |= {"turn_id": "turn-1", "model": "gpt-5-codex"}
    data |= {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": command_, "tool_use_id": f"toolu_{i}"}
    return json.dumps(data).encode()


def summary(ms: list[float]) -> dict[str, Any]:
    return percentiles(ms, (50, 99))


def http_post(port: int, path: str, body: bytes) -> int:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode() + body)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    return int(raw.split(b" ", 2)[1])


async def check_and_http(
    s: settings_mod.Settings, port: int, n: int, rate: float
) -> tuple[list[float], list[float], int, list[int]]:
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
        checks: list[float] = []
        http: list[float] = []
        statuses: list[int] = []
        degraded = 0
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


def soak(sidecar: SidecarProcess, seconds: float, rate: float) -> dict[str, Any]:
    """Hook traffic through the sidecar for `seconds` at `rate` requests/s, from one
    thread: sessions of 20 Claude Code calls, each with its PostToolUse (a third of
    them repeat one call, so they are warned and denied), then SessionEnd; a new
    session id each time. The sidecar's RSS sampled every 30 s."""
    assert sidecar.proc is not None
    samples: list[dict[str, Any]] = []
    statuses: Counter[int] = Counter()
    start, n = time.monotonic(), 0
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


def installed_command(runtime: str, tmp: Path, url: str) -> list[str]:
    """`loopwarden hooks install RUNTIME` into a project folder of its own, and the words
    of the command it wrote for the runtime's call event."""
    project = tmp / f"project-{runtime}"
    subprocess.run(command("hooks", "install", runtime, "--project", str(project), "--url", url), check=True)
    event = RUNTIMES[runtime].call_event
    if runtime == "codex":
        config = tomllib.loads((project / ".codex" / "config.toml").read_text())
    else:
        folder = ".claude" if runtime == "claude-code" else ".gemini"
        config = json.loads((project / folder / "settings.json").read_text())
    return shlex.split(config["hooks"][event][-1]["hooks"][0]["command"])


class Checker:
    """A GatewayClient on an event loop of its own thread: `check` timed in the loop, from
    the call's start to its decision, so it can take turns with the processes timed here."""

    def __init__(self, s: settings_mod.Settings) -> None:
        from streams.gateway.client import GatewayClient

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = GatewayClient(settings=s, gateway_id="bench-hooks-check")
        self._run(self.client.__aenter__())

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def check(self, run_id: str, i: int) -> tuple[float, bool]:
        async def one() -> tuple[float, bool]:
            t0 = time.perf_counter()
            d = await self.client.check(run_id, "exec", {"command": f"pytest -k case{i}"})
            return (time.perf_counter() - t0) * 1000, bool(d.degraded)

        result: tuple[float, bool] = self._run(one())
        return result

    def close(self) -> None:
        self._run(self.client.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def timed_runtime(runtime: str, hook: list[str], samples: int, checker: Checker) -> dict[str, Any]:
    """`samples` rounds of: the installed hook, `true`, `python -c pass`, the Python hook
    and `check`, one after another, each on a call not seen before (allowed)."""
    session, python_session = f"hook-{uuid.uuid4().hex[:8]}", f"pyhook-{uuid.uuid4().hex[:8]}"
    run_id = f"check-{runtime}-{uuid.uuid4().hex[:8]}"
    python_hook = [str(HOOK), *hook[1:]]
    times: dict[str, list[float]] = {"hook": [], "true": [], "python_pass": [], "python_hook": [], "check": []}
    not_allowed = {"hook": 0, "python_hook": 0, "check": 0}
    programs: list[tuple[str, list[str], Callable[[int], bytes]]] = [
        ("hook", hook, lambda i: call_payload(session, i, runtime)),
        ("true", ["true"], lambda i: b""),
        ("python_pass", [sys.executable, "-c", "pass"], lambda i: b""),
        ("python_hook", python_hook, lambda i: call_payload(python_session, i, runtime)),
    ]
    curl = shutil.which("curl")
    if curl:  # the least a shell-script hook would run: sh and one curl, none of the hook's checks
        url = f"{hook[hook.index('--url') + 1]}/{runtime}/{RUNTIMES[runtime].call_event}"
        script = f"exec {curl} -sS -m 10 --data-binary @- -H 'Content-Type: application/json' {url}"
        curl_session = f"curl-{uuid.uuid4().hex[:8]}"
        programs.append(("sh_curl", ["/bin/sh", "-c", script], lambda i: call_payload(curl_session, i, runtime)))
        times["sh_curl"] = []
    checker.check(run_id, -1)  # the run's first call is not timed
    for i in range(samples):
        for name, argv, payload_of in programs:
            payload = payload_of(i)
            t0 = time.perf_counter()
            p = subprocess.run(argv, input=payload, capture_output=True)
            times[name].append((time.perf_counter() - t0) * 1000)
            if name in not_allowed and (p.returncode or p.stdout or p.stderr):
                not_allowed[name] += 1
        ms, degraded = checker.check(run_id, i)
        times["check"].append(ms)
        not_allowed["check"] += degraded
    return {
        "installed_command": shlex.join(hook),
        **{f"{name}_ms": summary(ms) for name, ms in times.items()},
        "not_allowed": not_allowed,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("LOOPWARDEN_TEST_BOOTSTRAP"))
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--samples", type=int, default=200, help="calls timed per program and runtime")
    ap.add_argument("--soak", type=float, metavar="S", help="instead: hook traffic for S seconds, the sidecar's RSS")
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args(argv)
    if not args.bootstrap:
        sys.exit("give --bootstrap (or LOOPWARDEN_TEST_BOOTSTRAP)")
    prefix = f"bh{uuid.uuid4().hex[:8]}."
    s = setup_topics(args.bootstrap, prefix)
    with scratch("bench-hooks-", args.keep) as tmp:
        _measure(args, s, prefix, tmp)


def _measure(args: argparse.Namespace, s: settings_mod.Settings, prefix: str, tmp: Path) -> None:
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    sidecar = SidecarProcess(args.bootstrap, prefix, "bench-hooks", tmp / "sidecar.log")
    worker = start_worker(args.bootstrap, prefix, tmp, "hooks")
    try:
        sidecar.start()
        if args.soak:
            print(
                json.dumps({**soak(sidecar, args.soak, args.rate), "loadavg": [round(x, 2) for x in os.getloadavg()]})
            )
            return
        n, rate = args.calls, args.rate
        check, http, check_degraded, statuses = asyncio.run(check_and_http(s, sidecar.port, n, rate))
        installed = {runtime: installed_command(runtime, tmp, sidecar.url) for runtime in RUNTIMES}
        stop = threading.Event()

        def load() -> None:  # the sidecar and the worker at `rate` calls/s while the programs are timed
            load_session, i, start = f"load-{uuid.uuid4().hex[:8]}", 0, time.monotonic()
            while not stop.is_set():
                threading.Thread(
                    target=http_post, args=(sidecar.port, "/claude-code/PreToolUse", call_payload(load_session, i))
                ).start()
                i += 1
                time.sleep(max(0.0, start + i / rate - time.monotonic()))

        loader = threading.Thread(target=load)
        checker = Checker(s)
        loader.start()
        try:
            per_runtime = {rt: timed_runtime(rt, installed[rt], args.samples, checker) for rt in RUNTIMES}
        finally:
            stop.set()
            loader.join()
            checker.close()
        health = sidecar.health() or {}
    finally:
        sidecar.stop()
        worker.stop()
    c, h = summary(check), summary(http)
    out = {
        "loadavg_before": loadavg_before,
        "calls": n,
        "rate_per_s": rate,
        "samples": args.samples,
        "runtimes": per_runtime,
        "check_ms": c,
        "sidecar_http_ms": h,
        "check_without_decision": check_degraded,
        "http_over_check_p99_ms": round(h["p99"] - c["p99"], 2),
        "goals_met": {
            **{
                f"{rt}_hook_p50_at_most_10ms_p99_at_most_25ms": r["hook_ms"]["p50"] <= 10 and r["hook_ms"]["p99"] <= 25
                for rt, r in per_runtime.items()
            },
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
