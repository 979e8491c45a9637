"""What the framework adapters add over a bare `GatewayClient.check`, per tool call.

One broker (its own unless --bootstrap), one worker, one client. Three series of the same
varied calls (runs of 20, none of them a loop): a bare `check`; LangChain's
`LoopwardenMiddleware.awrap_tool_call` around a tool that returns at once; the OpenAI
Agents SDK's input and output guardrails around the same. The adapters' own cost is the
time of their hooks minus the time spent inside `check` (timed by a wrapper around it,
call by call), so the network round trip, which dominates, drops out instead of adding
its noise; it includes building the `tool_result` and handing it to the producer. Prints
one JSON line: milliseconds per call, median and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from statistics import median
from typing import Any

from agents import Agent
from agents.tool_context import ToolContext
from agents.tool_guardrails import ToolInputGuardrailData, ToolOutputGuardrailData
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from benchmarks.kafka import start_worker
from streams.gateway.adapters.langchain import RUN_KEY, LoopwardenMiddleware
from streams.gateway.adapters.openai_agents import LoopwardenGuard
from streams.gateway.client import GatewayClient
from streams.tools.harness import KEEP_HELP, own_broker, percentile, scratch, setup_topics_async

RUN_LEN = 20


def args_of(i: int) -> dict[str, Any]:
    return {"path": f"src/module_{i % 97}/file_{i}.py", "limit": i % 200}


def stats(xs: list[float]) -> dict[str, float]:
    """Milliseconds: the median and the p99 (harness.percentile)."""
    ys = [x * 1000 for x in xs]
    return {"median": round(median(ys), 4), "p99": round(percentile(ys, 99) or 0.0, 4)}


async def measure(client: GatewayClient, calls: int) -> dict[str, Any]:
    inside: list[float] = []
    bare = client.check

    async def timed(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return await bare(*a, **kw)
        finally:
            inside.append(time.perf_counter() - t)

    out: dict[str, Any] = {}
    # bare check
    lat: list[float] = []
    for i in range(calls):
        run = f"bare-{i // RUN_LEN}"
        t = time.perf_counter()
        d = await bare(run, "read_file", args_of(i), tool_call_id=f"c{i}")
        lat.append(time.perf_counter() - t)
        assert not d.degraded
        if i % RUN_LEN == RUN_LEN - 1:
            await client.end_run(run)
    out["bare_check_ms"] = stats(lat)

    client.check = timed  # type: ignore[method-assign]  # the adapters call client.check: time what happens inside it
    try:
        # LangChain
        mw = LoopwardenMiddleware(client)

        async def handler(req: ToolCallRequest) -> ToolMessage:
            return ToolMessage(
                content=f"contents of {req.tool_call['args']['path']}",
                tool_call_id=req.tool_call["id"],
                name=req.tool_call["name"],
            )

        inside.clear()
        total = []
        for i in range(calls):
            run = f"lc-{i // RUN_LEN}"
            req = ToolCallRequest(
                tool_call={"name": "read_file", "args": args_of(i), "id": f"c{i}", "type": "tool_call"},
                tool=None,
                state={RUN_KEY: run, "messages": []},
                runtime=None,  # type: ignore[arg-type]  # the middleware reads none
            )
            t = time.perf_counter()
            await mw.awrap_tool_call(req, handler)
            total.append(time.perf_counter() - t)
            if i % RUN_LEN == RUN_LEN - 1:
                await client.end_run(run)
        out["langchain"] = {
            "hook_ms": stats(total),
            "inside_check_ms": stats(inside),
            "overhead_ms": stats([a - b for a, b in zip(total, inside, strict=True)]),
        }

        # OpenAI Agents SDK
        guard = LoopwardenGuard(client)
        agent = Agent(name="bench")
        inside.clear()
        total = []
        for r in range(calls // RUN_LEN):
            async with guard.scope():
                for i in range(r * RUN_LEN, (r + 1) * RUN_LEN):
                    ctx = ToolContext(
                        context=None, tool_name="read_file", tool_call_id=f"c{i}", tool_arguments=json.dumps(args_of(i))
                    )
                    t = time.perf_counter()
                    before = await guard.input_guardrail.run(ToolInputGuardrailData(context=ctx, agent=agent))
                    assert before.behavior["type"] == "allow"
                    output = f"contents of {args_of(i)['path']}"  # the tool
                    await guard.output_guardrail.run(ToolOutputGuardrailData(context=ctx, agent=agent, output=output))
                    total.append(time.perf_counter() - t)
        out["openai_agents"] = {
            "hook_ms": stats(total),
            "inside_check_ms": stats(inside),
            "overhead_ms": stats([a - b for a, b in zip(total, inside, strict=True)]),
        }
    finally:
        client.check = bare  # type: ignore[method-assign]
    return out


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with own_broker(args.bootstrap, tmp) as (bootstrap, _):
        prefix = f"bench-ad-{int(time.time())}."
        s = await setup_topics_async(bootstrap, prefix)
        worker = await asyncio.get_running_loop().run_in_executor(None, start_worker, bootstrap, prefix, tmp, "ad")
        try:
            async with GatewayClient(settings=s, gateway_id="bench-adapters", timeout_s=10) as client:
                for i in range(args.warmup):  # connections, the worker's first batches
                    await client.check("warmup", "read_file", args_of(i))
                await client.end_run("warmup")
                res = await measure(client, args.calls)
            return {"benchmark": "adapters", "calls": args.calls, **res}
        finally:
            worker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start one)")
    ap.add_argument("--calls", type=int, default=1000, help="calls per series (a multiple of 20)")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = ap.parse_args()
    with scratch("loopwarden-adapters-", args.keep) as tmp:
        result = asyncio.run(run(args, tmp))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
