"""`loopwarden simulate`: a fleet of gateways running normal and looping agents.

Each gateway keeps M runs going; each run is one scripted agent: a normal one (every call
different, or a call repeated while making progress: paging through a file, rerunning a
test after each edit; it must never be warned or blocked) or one of the loops of
semantics.md, as streams/tools/loops.py describes them. Before each call the agent reports what its
model call used (a `usage` event: tokens drawn per run, a price per token), so budgets
apply and audits can count tokens.
At the end: decision latency, throughput, loops injected vs caught per detector, and
normal runs wrongly flagged.

With `--agents N` the runs of the default agent run as N named agents instead
(`sim-agent-0` ...), one per slot, each at a steady pace; `--burst AGENT@SECONDS:FACTOR`
makes one agent's runs, from SECONDS into the fleet's run on, report FACTOR times their
model usage and think FACTOR times less between calls: a spend burst for the anomaly
watch (`loopwarden.fleet.spendAnomaly`) to find. A run paused by a fleet spend cap ends
(the agent waits a second before its next run); it is counted apart, neither a loop
caught nor one missed, and the calls paused are counted by the cap's signal.

With `--holdout P` the simulator first publishes the config topic's current config (or
an empty one) with `loopwarden.holdoutPercent` set to P, and waits until the worker of
every events partition decides under it. Held-out runs are not stopped: a loop in one is
caught when the detector's verdict, in `shadow_action`, would have stopped it; the run
goes on to its last step and ends by itself.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from detectors import DetectionConfig, load_config
from detectors.errors import LoopwardenError
from detectors.policy import FLEET_SPEND_CAP, POLICY_NAMES
from detectors.wire import Decision

from ..gateway.client import GatewayClient
from ..kafka.partitioner import partition_for
from ..kafka.settings import Settings
from .loops import KINDS, LOOPS, NORMALS, result

PRICE_PER_TOKEN_USD = 0.000002  # what the simulated model charges
SWITCH_TIMEOUT_S = 60.0  # how long the workers get to switch to a published holdout config
PAUSED_WAIT_S = 1.0  # an agent whose run a spend cap paused waits this long before its next run
AGENT_NAME = "sim-agent-{}"  # the names of `--agents N`


def agent_names(agents: int) -> list[str]:
    """The agents the default agent's runs run as with `--agents N` (none: no agent id)."""
    return [AGENT_NAME.format(i) for i in range(agents)]


@dataclass(frozen=True)
class Burst:
    """`--burst AGENT@SECONDS:FACTOR`: from `at_s` seconds into the fleet's run on, the
    runs of `agent` report `factor` times their usage and think `factor` times less."""

    agent: str
    at_s: float
    factor: float

    def factor_for(self, agent: str | None, elapsed_s: float) -> float:
        """The factor for an agent's next step, `elapsed_s` into the run (1: no burst)."""
        if agent is None or elapsed_s < self.at_s or agent.strip().lower() != self.agent.strip().lower():
            return 1.0
        return self.factor


@dataclass(frozen=True)
class SimOptions:
    """`loopwarden simulate`'s command line, as values (parsed in cli.py)."""

    gateways: int = 8
    runs: int = 4
    seconds: float = 60
    loop_share: float = 0.3
    think_ms: tuple[float, float] = (5, 50)
    seed: int = 1
    timeout_s: float = 5.0
    holdout: int | None = None
    quiet: bool = False
    agents: int = 0  # the default agent's runs run as this many named agents (0: without an agent id)
    burst: Burst | None = None


@dataclass
class Report:
    latencies: list[float] = field(default_factory=list)
    checks: int = 0
    injected: dict[str, int] = field(default_factory=dict)
    caught: dict[str, int] = field(default_factory=dict)
    missed_by: dict[str, int] = field(default_factory=dict)
    normal_runs: int = 0
    normal_flagged: int = 0
    normal_by_kind: dict[str, int] = field(default_factory=dict)  # normal runs, by kind (normal, paging, ...)
    flagged_by_kind: dict[str, int] = field(default_factory=dict)
    degraded: int = 0
    tokens: int = 0
    not_enforced: int = 0  # decisions with enforced false (shadow or held out)
    caught_in_shadow: int = 0  # loops of held-out runs that would have been stopped
    budget_stops: int = 0  # runs aborted by their budget
    paused: dict[str, int] = field(default_factory=dict)  # calls paused by a spend cap, by its signal
    runs_paused: int = 0  # runs that a spend cap paused (loops among them before they were caught)
    loops_paused: int = 0  # loops paused by a spend cap before their detector caught them: counted apart
    started: float = field(default_factory=time.monotonic)

    def summary(self) -> dict[str, Any]:
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
            "normal_runs_by_kind": {
                k: {"runs": self.normal_by_kind.get(k, 0), "wrongly_flagged": self.flagged_by_kind.get(k, 0)}
                for k in NORMALS
            },
            "degraded_decisions": self.degraded,
            "tokens": self.tokens,
            "decisions_not_enforced": self.not_enforced,
            "loops_caught_in_shadow": self.caught_in_shadow,
            "runs_stopped_by_budget": self.budget_stops,
            "calls_paused": sum(self.paused.values()),
            "calls_paused_by_spend_cap": dict(sorted(self.paused.items())),
            "runs_paused": self.runs_paused,
            "loops_paused_before_caught": self.loops_paused,
        }


def _would(d: Decision) -> str:
    """What a decision does, or would have done when it is not enforced."""
    return d.action if d.enforced else (d.shadow_action or d.action)


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
        usage: bool = True,
        agent_id: str | None = None,
        boost: Callable[[str | None], float] | None = None,
    ) -> None:
        self.c, self.run_id, self.kind, self.rng, self.think = client, run_id, kind, rng, think
        self.report, self.on_decision = report, on_decision
        # Its model's token counts: drawn from a generator of its own, so that the
        # calls' generator draws what it drew before usage was reported.
        self.usage = random.Random(f"{run_id}:usage") if usage else None
        self.agent_id = KINDS[kind].agent_id or agent_id  # a kind's own agent (its config) comes first
        self.boost = boost  # the burst's factor for an agent now (None: never)
        self.flagged = self.caught = self.paused = False

    async def run(self) -> None:
        kind = KINDS[self.kind]
        steps = self.rng.randrange(15, 40) if kind.detector is None else 60
        for i in range(steps):
            if i == kind.compaction_at:
                await self.c.compaction_retry(self.run_id)
            if await self._step(i):
                break
        await self.c.end_run(self.run_id)
        rep = self.report
        if kind.detector is None:
            rep.normal_runs += 1
            rep.normal_flagged += self.flagged
            rep.normal_by_kind[self.kind] = rep.normal_by_kind.get(self.kind, 0) + 1
            rep.flagged_by_kind[self.kind] = rep.flagged_by_kind.get(self.kind, 0) + self.flagged
        elif self.paused and not self.caught:
            rep.loops_paused += 1  # stopped by a spend cap before its detector could: neither caught nor missed
        else:
            rep.injected[self.kind] = rep.injected.get(self.kind, 0) + 1
            rep.caught[self.kind] = rep.caught.get(self.kind, 0) + self.caught
        if self.paused:
            rep.runs_paused += 1
            await asyncio.sleep(PAUSED_WAIT_S)  # a paused agent does not start over at once

    async def _step(self, i: int) -> bool:
        """One model call and the tool call it asks for; True when the run is stopped."""
        agent, call_id = self.agent_id, f"{self.run_id}-{i}"
        factor = self.boost(agent) if self.boost is not None else 1.0
        if self.usage is not None:
            tokens_in, tokens_out = self.usage.randrange(300, 1500), self.usage.randrange(20, 300)
            if factor != 1.0:  # a burst: the same draws, scaled
                tokens_in, tokens_out = round(tokens_in * factor), round(tokens_out * factor)
            self.report.tokens += tokens_in + tokens_out
            cost = round((tokens_in + tokens_out) * PRICE_PER_TOKEN_USD, 6)
            stop = await self.c.usage(
                self.run_id,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                cost_usd=cost,
                model="sim",
                agent_id=agent,
            )
            if stop is not None:
                return self._saw(stop)
        tool, params, text, error = KINDS[self.kind].step(i, self.rng)
        t0 = time.perf_counter()
        d = await self.c.check(self.run_id, tool, params, tool_call_id=call_id, agent_id=agent)
        self.report.latencies.append(time.perf_counter() - t0)
        self.report.checks += 1
        if d.degraded:
            self.report.degraded += 1
        if self._saw(d):
            return True
        await asyncio.sleep(self.rng.uniform(*self.think) / factor)
        kw = {"result": result(text)} if text is not None else {"error": error}
        await self.c.result(self.run_id, tool, params, tool_call_id=call_id, agent_id=agent, **kw)
        stop = self.c.aborted.get(self.run_id)
        return stop is not None and self._saw(stop)

    def _saw(self, d: Decision) -> bool:
        """Take a decision in; True when it stops the run."""
        if self.on_decision:
            self.on_decision(d)
        if not d.enforced:
            self.report.not_enforced += 1
        if d.detector in POLICY_NAMES:  # a budget (or the fleet): not a loop detector's verdict
            if d.action == "abort" and d.detector == "run_budget":
                self.report.budget_stops += 1
            if d.action == "abort" and d.detector == FLEET_SPEND_CAP:  # a pause: the run ends, not aborted
                self.paused = True
                signal = d.fleet_signal or ""
                self.report.paused[signal] = self.report.paused.get(signal, 0) + 1
            return d.action in ("block", "abort")
        if d.level != "none":
            self.flagged = True
        would = _would(d)
        if would in ("block", "abort") and not self.caught:
            self.caught = d.detector == KINDS[self.kind].detector
            self.report.caught_in_shadow += self.caught and not d.enforced
        return d.action in ("block", "abort")


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
    usage: bool = True,
    agents: int = 0,
    burst: Burst | None = None,
) -> Report:
    """`gateways` gateways keep `runs` runs each going for `seconds`; the report. With
    `agents`, slot s of gateway g runs as agent `sim-agent-{(g * runs + s) % agents}`;
    with `burst`, that agent's runs burst from `burst.at_s` on (`Burst`)."""
    report = Report()
    started = time.monotonic()
    deadline = started + seconds
    kinds = list(LOOPS)
    normals = list(NORMALS)
    think = (think_ms[0] / 1000, think_ms[1] / 1000)
    names = agent_names(agents)

    def boost(agent: str | None) -> float:
        return burst.factor_for(agent, time.monotonic() - started) if burst is not None else 1.0

    async def slot(client: GatewayClient, g: int, s: int) -> None:
        rng = random.Random(seed * 1000003 + g * 1009 + s)
        agent = names[(g * runs + s) % agents] if agents else None
        n = 0
        while time.monotonic() < deadline:
            kind = kinds[(n + s) % len(kinds)] if rng.random() < loop_share else normals[(n + g) % len(normals)]
            run_id = f"sim-{seed}-g{g}-s{s}-r{n}"
            await Agent(client, run_id, kind, rng, think, report, on_decision, usage, agent, boost).run()
            n += 1

    async def gateway(g: int) -> None:
        async with GatewayClient(gateway_id=f"sim-gw-{g:02d}", settings=settings, timeout_s=timeout_s) as client:
            await asyncio.gather(*(slot(client, g, s) for s in range(runs)))

    tick = asyncio.create_task(_ticker(report, deadline)) if progress else None
    try:
        await asyncio.gather(*(gateway(g) for g in range(gateways)))
    finally:
        if tick:
            tick.cancel()
            print(file=sys.stderr)
    return report


async def _ticker(report: Report, deadline: float) -> None:
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


async def publish_holdout(settings: Settings, percent: int) -> tuple[str, DetectionConfig]:
    """Publish the config topic's current config (an empty one when there is none) with
    `loopwarden.holdoutPercent` set to `percent`, and make it current: (its id, it)."""
    from ..admin.config_topic import publish_config, read_configs

    history = await read_configs(settings)
    got = history.configs.get(history.current) if history.current is not None else None
    doc = got[1].document if got is not None else {}  # (a copy below: the history's config keeps its own)
    doc = dict(doc) if isinstance(doc, dict) else {}
    block = doc.get("loopwarden")
    doc["loopwarden"] = {**(block if isinstance(block, dict) else {}), "holdoutPercent": percent}
    text = json.dumps(doc, indent=2).encode()
    source = f"loopwarden simulate --holdout {percent}"
    cid = await publish_config(settings, text, source, warn=lambda w: print(f"warning: {source}: {w}", file=sys.stderr))
    return cid, load_config(text, source=source)


async def wait_for_config(
    settings: Settings, config: DetectionConfig, seed: int, timeout: float, answer_s: float = 5.0
) -> None:
    """Until a probe run on every partition of the events topic is decided under
    `config` (its default agent's hash), or LoopwardenError after `timeout` seconds;
    `answer_s`: how long a probe waits for its decision."""
    want = config.for_agent(None).config_hash
    runs: dict[int, str] = {}
    k = 0
    while len(runs) < settings.partitions:  # one run id per partition
        run_id = f"sim-{seed}-probe-{k}"
        runs.setdefault(partition_for(run_id.encode(), settings.partitions), run_id)
        k += 1
    deadline = time.monotonic() + timeout
    async with GatewayClient(gateway_id="sim-probe", settings=settings, timeout_s=answer_s) as client:

        async def switched(run_id: str) -> bool:
            d = await client.check(run_id, "sim_probe", {})
            await client.end_run(run_id)
            return not d.degraded and d.config_hash == want

        attempt = 0
        while runs:
            probed = list(runs.items())
            answers = await asyncio.gather(*(switched(f"{run_id}-{attempt}") for _, run_id in probed))
            for (p, _), ok in zip(probed, answers, strict=True):
                if ok:
                    del runs[p]
            if runs and time.monotonic() > deadline:
                raise LoopwardenError(
                    f"no worker decided calls on {len(runs)} of the events topic's {settings.partitions} partitions "
                    f"under the published config within {timeout:.0f} s: is a worker running there? Workers pinned "
                    "with --config do not follow the config topic: set loopwarden.holdoutPercent in their file"
                )
            attempt += 1
            if runs:
                await asyncio.sleep(0.5)


async def _main(settings: Settings, o: SimOptions) -> Report:
    if o.holdout is not None:
        cid, config = await publish_holdout(settings, o.holdout)
        print(f"published config {cid[:12]} (holdoutPercent {o.holdout}); waiting for the workers", file=sys.stderr)
        await wait_for_config(settings, config, o.seed, SWITCH_TIMEOUT_S, o.timeout_s)
    return await simulate(
        settings,
        o.gateways,
        o.runs,
        o.seconds,
        o.loop_share,
        o.think_ms,
        o.seed,
        o.timeout_s,
        progress=not o.quiet,
        agents=o.agents,
        burst=o.burst,
    )


def main_simulate(settings: Settings, opts: SimOptions) -> int:
    rep = asyncio.run(_main(settings, opts))
    print(json.dumps(rep.summary(), indent=2))
    ok = rep.normal_flagged == 0 and all(rep.caught.get(k, 0) == v for k, v in rep.injected.items())
    return 0 if ok else 2  # cli.ExitCode.FOUND
