"""`loopwarden demo`: the whole pipeline on this machine, shown live, then stopped.

A local broker (unless --bootstrap), one worker process, a short simulated fleet; the
fleet shown live by `loopwarden top` (streams/tools/top.py: it reads the decisions topic and
the worker's /metrics, as it would for a real cluster); at the end the fleet's summary.
Everything it started is stopped, also on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import localkafka
from .harness import WorkerProcess
from .loops import BREAKER_AGENT
from .simulate import simulate
from .top import Top, show

if TYPE_CHECKING:
    from types import FrameType

    from ..kafka.settings import Settings
    from .simulate import Report

EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "config.json5"
FALLBACK_CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    "agents": {
        "list": [
            {"id": "main", "default": True},
            {"id": BREAKER_AGENT, "tools": {"loopDetection": {"detectors": {"genericRepeat": False}}}},
        ]
    },
}


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the broker and worker


@dataclass(frozen=True)
class DemoOptions:
    """`loopwarden demo`'s command line, as values (parsed in cli.py)."""

    seconds: float = 20.0
    gateways: int = 3
    bootstrap: str | None = None  # a broker to use instead of a local one


def run_demo(args: DemoOptions) -> int:
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
        config = EXAMPLE_CONFIG if EXAMPLE_CONFIG.exists() else FALLBACK_CONFIG
        worker = WorkerProcess(bootstrap, prefix, config, work, log_level="warning")
        port = worker.port
        print(f"starting a worker on {bootstrap} (log: {worker.log})...", file=sys.stderr)
        worker.start()
        settings = worker.topics
        print(
            f"fleet of {args.gateways} gateways for {args.seconds:g}s; metrics at http://127.0.0.1:{port}/metrics",
            file=sys.stderr,
        )
        report = asyncio.run(_fleet(settings, args, f"http://127.0.0.1:{port}/metrics"))
        print(json.dumps(report.summary(), indent=2))
        return 0
    finally:
        if worker:
            worker.stop()
        if broker:
            localkafka.stop(broker)


async def _fleet(settings: Settings, args: DemoOptions, metrics_url: str) -> Report:
    """The simulated fleet, shown by `top` meanwhile (in place on a terminal, one line a
    second otherwise); the view stays on the screen when the fleet is done."""
    top = Top(settings, "now", [metrics_url])
    await top.open(require=True)  # before the fleet starts: "now" is before its first decision
    stop = asyncio.Event()
    view = asyncio.create_task(show(top, stop, mode="live" if sys.stdout.isatty() else "plain", screen=False))
    try:
        report = await simulate(settings, args.gateways, 3, args.seconds, progress=False, think_ms=(20, 120))
        await asyncio.sleep(1.5)  # the last decisions reach the view
        return report
    finally:
        stop.set()
        try:
            await asyncio.wait_for(view, 5)
        except (TimeoutError, asyncio.CancelledError):
            pass
        await top.close()
