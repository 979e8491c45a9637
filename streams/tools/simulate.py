"""`loopwarden simulate`: a fleet of gateways running normal and looping agents.

Each gateway keeps M runs going; each run is one scripted agent: a normal one (every call
different, so it must never be warned or blocked) or one of the loops of semantics.md,
as streams/tools/loops.py describes them.
At the end: decision latency, throughput, loops injected vs caught per detector, and
normal runs wrongly warned or blocked.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from detectors.wire import Decision

from ..gateway.client import GatewayClient
from ..gateway.settings import Settings
from .loops import KINDS, LOOPS, result


@dataclass
class Report:
    latencies: list[float] = field(default_factory=list)
    checks: int = 0
    injected: dict[str, int] = field(default_factory=dict)
    caught: dict[str, int] = field(default_factory=dict)
    missed_by: dict[str, int] = field(default_factory=dict)
    normal_runs: int = 0
    normal_flagged: int = 0
    degraded: int = 0
    started: float = field(default_factory=time.monotonic)

    def summary(self) -> dict:
        lat = sorted(self.latencies)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else None

        elapsed = time.monotonic() - self.started
        return {
            "seconds": round(elapsed, 1),
            "checks": self.checks,
            "checks_per_s": round(self.checks / elapsed, 1) if elapsed else 0,
            "latency_ms": {
                "p50": pct(0.50),
                "p95": pct(0.95),
                "p99": pct(0.99),
                "max": round(lat[-1] * 1000, 2) if lat else None,
            },
            "loops": {
                k: {
                    "injected": self.injected.get(k, 0),
                    "caught": self.caught.get(k, 0),
                    "recall": (round(self.caught.get(k, 0) / self.injected[k], 4) if self.injected.get(k) else None),
                }
                for k in LOOPS
            },
            "normal_runs": self.normal_runs,
            "normal_runs_wrongly_flagged": self.normal_flagged,
            "degraded_decisions": self.degraded,
        }


class Agent:
    """One scripted run on one gateway."""

    def __init__(
        self,
        client: GatewayClient,
        run_id: str,
        kind: str,
        rng: random.Random,
        think: tuple[float, float],
        report: Report,
        on_decision: Callable[[Decision], None] | None,
    ) -> None:
        self.c, self.run_id, self.kind, self.rng, self.think = client, run_id, kind, rng, think
        self.report, self.on_decision = report, on_decision

    async def run(self) -> None:
        kind = KINDS[self.kind]
        expected, agent = kind.detector, kind.agent_id
        steps = self.rng.randrange(15, 40) if expected is None else 60
        flagged = caught = False
        for i in range(steps):
            if i == kind.compaction_at:
                await self.c.compaction_retry(self.run_id)
            tool, params, text, error = kind.step(i, self.rng)
            t0 = time.perf_counter()
            d = await self.c.check(self.run_id, tool, params, tool_call_id=f"{self.run_id}-{i}", agent_id=agent)
            self.report.latencies.append(time.perf_counter() - t0)
            self.report.checks += 1
            if d.degraded:
                self.report.degraded += 1
            if self.on_decision:
                self.on_decision(d)
            if d.level != "none":
                flagged = True
                if d.action in ("block", "abort"):
                    caught = d.detector == expected
                    break
            await asyncio.sleep(self.rng.uniform(*self.think))
            kw = {"result": result(text)} if text is not None else {"error": error}
            await self.c.result(self.run_id, tool, params, tool_call_id=f"{self.run_id}-{i}", agent_id=agent, **kw)
            if self.run_id in self.c.aborted:
                d = self.c.aborted[self.run_id]
                if self.on_decision:
                    self.on_decision(d)
                caught = d.detector == expected
                flagged = True
                break
        await self.c.end_run(self.run_id)
        if expected is None:
            self.report.normal_runs += 1
            self.report.normal_flagged += flagged
        else:
            self.report.injected[self.kind] = self.report.injected.get(self.kind, 0) + 1
            self.report.caught[self.kind] = self.report.caught.get(self.kind, 0) + caught


async def simulate(
    settings: Settings,
    gateways: int,
    runs: int,
    seconds: float,
    loop_share: float = 0.3,
    think_ms: tuple[float, float] = (5, 50),
    seed: int = 1,
    timeout_s: float = 5.0,
    on_decision: Callable[[Decision], None] | None = None,
    progress: bool = True,
) -> Report:
    report = Report()
    deadline = time.monotonic() + seconds
    kinds = list(LOOPS)
    think = (think_ms[0] / 1000, think_ms[1] / 1000)
    counter = 0

    async def slot(client: GatewayClient, g: int, s: int) -> None:
        nonlocal counter
        rng = random.Random(seed * 1000003 + g * 1009 + s)
        n = 0
        while time.monotonic() < deadline:
            kind = kinds[(n + s) % len(kinds)] if rng.random() < loop_share else "normal"
            counter += 1
            await Agent(client, f"sim-{seed}-g{g}-s{s}-r{n}", kind, rng, think, report, on_decision).run()
            n += 1

    async def gateway(g: int) -> None:
        async with GatewayClient(gateway_id=f"sim-gw-{g:02d}", settings=settings, timeout_s=timeout_s) as client:
            await asyncio.gather(*(slot(client, g, s) for s in range(runs)))

    async def ticker() -> None:
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            s = report.summary()
            caught = sum(report.caught.values())
            print(
                f"\r{s['seconds']:6.0f}s  checks {s['checks']:7d} ({s['checks_per_s']:.0f}/s)  "
                f"p99 {s['latency_ms']['p99']} ms  loops caught {caught}/{sum(report.injected.values())}  "
                f"normal flagged {report.normal_flagged}/{report.normal_runs}   ",
                end="",
                file=sys.stderr,
                flush=True,
            )

    tick = asyncio.create_task(ticker()) if progress else None
    try:
        await asyncio.gather(*(gateway(g) for g in range(gateways)))
    finally:
        if tick:
            tick.cancel()
            print(file=sys.stderr)
    return report


def main_simulate(settings: Settings, args) -> int:
    lo, _, hi = args.think_ms.partition(":")
    rep = asyncio.run(
        simulate(
            settings,
            args.gateways,
            args.runs,
            args.seconds,
            args.loop_share,
            (float(lo), float(hi or lo)),
            args.seed,
            args.timeout,
            progress=not args.quiet,
        )
    )
    print(json.dumps(rep.summary(), indent=2))
    ok = rep.normal_flagged == 0 and all(rep.caught.get(k, 0) == v for k, v in rep.injected.items())
    return 0 if ok else 2  # cli.ExitCode.FOUND
