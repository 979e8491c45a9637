"""`loopwarden demo`: the whole pipeline on this machine, shown live, then stopped.

A local broker (unless --bootstrap), one worker process, a short simulated fleet; a live
table of decisions in the terminal; at the end the fleet's summary. Everything it
started is stopped, also on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter, deque
from pathlib import Path

from detectors.wire import Decision

from . import localkafka, settings as settings_mod
from .errors import BrokerError
from .simulate import simulate

EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "config.json5"
FALLBACK_CONFIG = {"tools": {"loopDetection": {"enabled": True}},
                   "agents": {"list": [{"id": "main", "default": True},
                                       {"id": "no-generic", "tools": {"loopDetection": {"detectors": {"genericRepeat": False}}}}]}}
COLORS = {"allow": "green", "warn": "yellow", "block": "red", "abort": "bold red"}


class LiveView:
    """The latest interesting decisions and running counts, as a rich table (or plain lines)."""

    def __init__(self) -> None:
        self.rows: deque[Decision] = deque(maxlen=14)
        self.counts: Counter[str] = Counter()
        self.tty = sys.stdout.isatty()

    def add(self, d: Decision) -> None:
        self.counts[d.action] += 1
        if d.action != "allow":  # suppressed repeats of a shown warning stay out of the table
            self.rows.append(d)
            if not self.tty:
                print(f"{d.gateway_id} {d.run_id} {d.tool_name}: {d.action} {d.detector} x{d.count}", flush=True)

    def render(self):
        from rich.table import Table

        t = Table(title="loopwarden decisions (warnings, blocks, aborts)   " +
                  "  ".join(f"{k}: {self.counts[k]}" for k in ("allow", "warn", "block", "abort")),
                  expand=True)
        for col in ("gateway", "run", "tool", "action", "detector", "count", "message"):
            t.add_column(col, overflow="ellipsis", no_wrap=True)
        for d in self.rows:
            c = COLORS.get(d.action, "white")
            t.add_row(d.gateway_id, d.run_id[-14:], d.tool_name, f"[{c}]{d.action}[/{c}]", d.detector or "",
                      str(d.count or ""), (d.message or "")[:70])
        return t


def _wait_healthy(port: int, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"the worker exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if json.loads(r.read()).get("status") == "ok":
                    return
        except Exception:
            pass
        time.sleep(0.3)
    raise BrokerError(f"the worker did not become ready within {timeout:.0f}s; see {log}")


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the broker and worker


def run_demo(args) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    work = Path(tempfile.mkdtemp(prefix="loopwarden-demo-"))
    broker = None
    worker = None
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            print("starting a local Kafka broker (the jars are fetched once with Maven)...", file=sys.stderr)
            broker = localkafka.start(work / "kafka")
            bootstrap = broker.bootstrap
        prefix = f"demo-{uuid.uuid4().hex[:6]}."
        config = EXAMPLE_CONFIG
        if not config.exists():
            config = work / "config.json"
            config.write_text(json.dumps(FALLBACK_CONFIG))
        port = localkafka.free_port()
        log = work / "worker.log"
        print(f"starting a worker on {bootstrap} (log: {log})...", file=sys.stderr)
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", bootstrap, "--topic-prefix", prefix,
             "--config", str(config), "--web-port", str(port), "--data-dir", str(work / "data")],
            stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        _wait_healthy(port, worker, log)
        settings = settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix}, env={})
        view = LiveView()
        print(f"fleet of {args.gateways} gateways for {args.seconds:g}s; metrics at http://127.0.0.1:{port}/metrics",
              file=sys.stderr)
        report = asyncio.run(_fleet(settings, args, view))
        print(json.dumps(report.summary(), indent=2))
        return 0
    finally:
        if worker and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        if broker:
            localkafka.stop(broker)


async def _fleet(settings, args, view: LiveView):
    if not view.tty:
        return await simulate(settings, args.gateways, 3, args.seconds, on_decision=view.add, progress=False,
                              think_ms=(20, 120))
    from rich.live import Live

    with Live(view.render(), refresh_per_second=4) as live:
        async def refresh():
            while True:
                live.update(view.render())
                await asyncio.sleep(0.25)

        task = asyncio.create_task(refresh())
        try:
            return await simulate(settings, args.gateways, 3, args.seconds, on_decision=view.add, progress=False,
                                  think_ms=(20, 120))
        finally:
            task.cancel()
            live.update(view.render())
