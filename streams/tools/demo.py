"""`loopwarden demo`: the whole pipeline on this machine, shown live, then stopped.

A local broker (unless --bootstrap), one worker process, a short simulated fleet; the
fleet shown live by `loopwarden top` (streams/tools/top.py: it reads the decisions topic and
the worker's /metrics, as it would for a real cluster); at the end the fleet's summary.
Everything it started is stopped, also on Ctrl-C.

The worker decides with the recommended config (examples/config.json5) plus one fleet
spend cap of the demo's own (`DEMO_CAP`): the default agent's runs run as three named
agents, and the first of them makes enough calls to reach the cap within the demo's
seconds, so its calls are paused from then on (`top` shows it; the summary says which
cap was reached and how many calls were paused). examples/config.json5 is not changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detectors import load_config
from detectors.config import parse_document

from ..admin.spend import spend_report
from . import localkafka
from .harness import WorkerProcess
from .loops import BREAKER_AGENT
from .simulate import agent_names, simulate
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


DEMO_AGENTS = 3  # the default agent's runs run as sim-agent-0 to sim-agent-2, one per slot
DEMO_CAP: dict[str, Any] = {
    # sim-agent-0 runs in one slot of each gateway: it reaches the cap within the first
    # half of the demo's 20 s, and its calls are paused after that
    "id": "demo-agent-hourly-calls",
    "per": "agent",
    "agents": agent_names(1),
    "windowMs": 3_600_000,
    "toolCalls": 250,
}


def demo_config() -> dict[str, Any]:
    """The worker's config: the recommended one (examples/config.json5; the fallback
    document without it) with the demo's spend cap added to its `spendCaps`."""
    if EXAMPLE_CONFIG.exists():
        doc = parse_document(EXAMPLE_CONFIG.read_bytes(), str(EXAMPLE_CONFIG))
    else:
        doc = copy.deepcopy(FALLBACK_CONFIG)
    fleet = doc.setdefault("loopwarden", {}).setdefault("fleet", {})
    fleet["spendCaps"] = [*(fleet.get("spendCaps") or []), DEMO_CAP]
    return dict(doc)


def cap_summary(rows: list[dict[str, Any]], paused: dict[str, int]) -> dict[str, Any]:
    """The summary's `spend_cap`: the demo's cap, the keys that reached it (from `loopwarden
    spend`'s rows) and the calls its pauses answered (the simulator's count by signal)."""
    cap = DEMO_CAP["id"]
    reached = [
        {"key": r["key"], "signal": r["signal"], "reached_at": r["reached_at"], "paused_now": r["paused"]}
        | {k["unit"]: {"used": k["used"], "ceiling": k["ceiling"]} for k in r["kinds"]}
        for r in rows
        if r["cap"] == cap and r["reached"]
    ]
    mine = {sig: n for sig, n in paused.items() if sig.startswith(f"{cap}:")}
    return {
        "cap": cap,
        "agents": DEMO_CAP["agents"],
        "tool_calls_per_window": DEMO_CAP["toolCalls"],
        "window_ms": DEMO_CAP["windowMs"],
        "reached": reached,
        "calls_paused": sum(mine.values()),
        "calls_paused_by_signal": mine,
    }


async def _spend_cap(settings: Settings, doc: dict[str, Any], report: Report) -> dict[str, Any]:
    config = load_config(json.dumps(doc).encode(), source="the demo's config")
    rep = await spend_report(settings, config, "the demo's config", int(time.time() * 1000))
    return cap_summary(rep["rows"], report.paused)


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
        config = demo_config()
        worker = WorkerProcess(bootstrap, prefix, config, work, log_level="warning")
        port = worker.port
        print(f"starting a worker on {bootstrap} (log: {worker.log})...", file=sys.stderr)
        worker.start()
        settings = worker.topics
        print(
            f"fleet of {args.gateways} gateways for {args.seconds:g}s; metrics at http://127.0.0.1:{port}/metrics; "
            f"agent {DEMO_CAP['agents'][0]} has a spend cap of {DEMO_CAP['toolCalls']} calls an hour "
            f"({DEMO_CAP['id']})",
            file=sys.stderr,
        )
        report = asyncio.run(_fleet(settings, args, f"http://127.0.0.1:{port}/metrics"))
        summary = report.summary()
        summary["spend_cap"] = asyncio.run(_spend_cap(settings, config, report))
        print(json.dumps(summary, indent=2))
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
        report = await simulate(
            settings, args.gateways, 3, args.seconds, progress=False, think_ms=(20, 120), agents=DEMO_AGENTS
        )
        await asyncio.sleep(1.5)  # the last decisions reach the view
        return report
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(view, 5)
        await top.close()
