"""The gateway client on a real broker and a real worker."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from detectors import replay
from detectors.config import load_config
from detectors.wire import ToolCall, decode_event
from streams.gateway.client import FAIL_CLOSED, FAIL_OPEN, GatewayClient, partition_for
from tests.integration.harness import read_all

pytestmark = pytest.mark.integration
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def gateways_sharing_a_partition(n: int = 8) -> tuple[str, str, str]:
    """Two gateway ids on one decisions partition and a third on another."""
    first: dict[int, str] = {}
    for i in range(1000):
        g = f"gw-{i}"
        p = partition_for(g, n)
        if p in first:
            other = next(x for x in (f"gw-{j}" for j in range(1000)) if partition_for(x, n) != p)
            return first[p], g, other
        first[p] = g
    raise AssertionError("no two ids share a partition")


async def script(client: GatewayClient, run: str, n: int = 7) -> list:
    out = []
    for i in range(n):
        d = await client.check(run, "exec", {"command": "make", "retry": 1.0}, tool_call_id=f"{run}-{i}")
        out.append(d)
        if d.action == "block":
            continue
        await client.result(
            run,
            "exec",
            {"command": "make", "retry": 1.0},
            tool_call_id=f"{run}-{i}",
            result={"details": {"status": "failed", "exitCode": 2, "aggregated": "no rule", "durationMs": i}},
        )
    return out


def test_gateways_see_only_their_own_decisions_and_every_check_is_answered(bootstrap, start_worker):
    w = start_worker(None, CONFIG)
    s = w.topics
    a, b, c = gateways_sharing_a_partition()

    async def main():
        async with (
            GatewayClient(settings=s, gateway_id=a) as ca,
            GatewayClient(settings=s, gateway_id=b) as cb,
            GatewayClient(settings=s, gateway_id=c) as cc,
        ):
            runs = [(cl, f"{cl.gateway_id}-run-{k}") for cl in (ca, cb, cc) for k in range(10)]
            results = await asyncio.gather(*(script(cl, run) for cl, run in runs))
            return ca, cb, cc, runs, results

    ca, cb, cc, runs, results = asyncio.run(main())
    for (cl, run), ds in zip(runs, results, strict=True):
        assert [d.gateway_id for d in ds] == [cl.gateway_id] * 7
        assert [d.run_id for d in ds] == [run] * 7
        assert not any(d.degraded for d in ds)
        assert [d.action for d in ds] == ["allow", "allow", "allow", "warn", "allow", "block", "block"]
    assert ca.partition == cb.partition != cc.partition
    assert ca.received == cb.received == cc.received == 70
    assert ca.foreign > 0 and cb.foreign > 0 and cc.foreign == 0  # read on the shared partition, never delivered


def test_timeout_policy_both_ways_when_the_worker_is_down(bootstrap, start_worker):
    w = start_worker(None, CONFIG)
    s = w.topics

    async def main():
        async with (
            GatewayClient(settings=s, gateway_id="gw-open", timeout_s=1.0, policy=FAIL_OPEN) as op,
            GatewayClient(settings=s, gateway_id="gw-closed", timeout_s=1.0, policy=FAIL_CLOSED) as cl,
        ):
            live = await op.check("r-open", "read", {"p": 1})
            w.stop()
            return live, await op.check("r-open", "read", {"p": 2}), await cl.check("r-closed", "read", {"p": 1})

    live, opened, closed = asyncio.run(main())
    assert not live.degraded and live.config_hash
    assert opened.degraded and opened.action == "allow" and "fail-open" in opened.message
    assert closed.degraded and closed.action == "block" and "fail-closed" in closed.message


def test_privacy_mode_and_raw_mode_decide_alike(bootstrap, start_worker):
    w = start_worker(None, CONFIG)
    s = w.topics

    async def main():
        async with (
            GatewayClient(settings=s, gateway_id="gw-p", privacy=True) as p,
            GatewayClient(settings=s, gateway_id="gw-r", privacy=False) as r,
        ):
            return await script(p, "same-run-p", 8), await script(r, "same-run-r", 8)

    private, raw = asyncio.run(main())

    def facts(ds):
        return [(d.action, d.level, d.detector, d.count, d.args_hash, d.warning_key, d.config_hash) for d in ds]

    assert facts(private) == facts(raw)
    assert [d.action for d in raw][-1] == "block"


def test_a_gateway_restarted_mid_run_gets_every_call_its_own_decision(bootstrap, start_worker):
    """A gateway restarts mid-run: a new client, same gateway_id and run_id, while the
    worker still holds the run. Its events continue above the old ones' seqs, so none is
    taken for a duplicate (answered with another call's decision, or dead-lettered as a
    stale seq and timed out): every check is answered for that very call, as an offline
    replay of the events as sent decides."""
    w = start_worker(None, CONFIG)
    s = w.topics
    run = "restarted-run"
    failed = {"details": {"status": "failed", "exitCode": 2, "aggregated": "no rule"}}

    async def session(plan: list[tuple[str, dict, str]]):
        async with GatewayClient(settings=s, gateway_id="gw-restart", timeout_s=15) as c:
            out = []
            for tool, params, call_id in plan:
                d = await c.check(run, tool, params, tool_call_id=call_id)
                out.append(d)
                if d.action != "block":
                    await c.result(run, tool, params, tool_call_id=call_id, result=failed)
            return c, out

    make = ("exec", {"command": "make"})
    first_plan = [(*make, f"call-{i}") for i in range(3)]
    second_plan = [("read", {"path": "Makefile"}, "call-3"), *[(*make, f"call-{i}") for i in range(4, 8)]]
    first, before = asyncio.run(session(first_plan))
    second, after = asyncio.run(session(second_plan))

    decisions = before + after
    plan = first_plan + second_plan
    assert first.degraded == second.degraded == 0 and not any(d.degraded for d in decisions)
    assert [(d.run_id, d.gateway_id, d.tool_name, d.tool_call_id) for d in decisions] == [
        (run, "gw-restart", tool, call_id) for tool, _, call_id in plan
    ]
    # The run went on across the restart: make after read after make is a ping-pong, the
    # 4th failing make a repeat, the 5th is blocked.
    assert [(d.action, d.detector, d.count) for d in decisions] == [("allow", None, None)] * 4 + [
        ("warn", "ping_pong", 3),
        ("warn", "generic_repeat", 4),
        ("block", "generic_repeat", 5),
        ("block", "generic_repeat", 5),
    ]

    # The events as sent (one run: one partition, in order), with the seqs the clients used.
    want = len(decisions) + sum(d.action != "block" for d in decisions)
    msgs = sorted(read_all(bootstrap, s.events_topic), key=lambda m: m.offset)  # the clients have closed
    events = [decode_event(m.value) for m in msgs]
    assert len(events) == want
    seqs = [ev.seq for ev in events]
    assert seqs == sorted(set(seqs)), "seqs must increase strictly within the run, across the restart"
    assert min(d.seq for d in after) > max(seqs[: len(before) * 2])
    sent_calls = [ev for ev in events if isinstance(ev, ToolCall)]
    for d, ev in zip(decisions, sent_calls, strict=True):
        assert (d.seq, d.event_id, d.tool_name, d.tool_call_id, d.args_hash) == (
            ev.seq,
            f"{run}:{ev.seq}",
            ev.tool_name,
            ev.tool_call_id,
            ev.args_hash,
        )
    assert replay(events, load_config(json.dumps(CONFIG))) == decisions


def test_a_usage_event_that_spends_the_budget_aborts_the_run_and_the_next_check_returns_its_abort(
    bootstrap, start_worker
):
    """usage() returns at once (it waits for no decision); the usage event's own abort
    reaches the client on its decisions partition, keyed `run_id:seq`, is remembered, and
    is what the next check and usage of the run return, until end_run forgets it."""
    config = {**CONFIG, "loopwarden": {"budgets": {"runTokens": 1000}}}
    w = start_worker(None, config)
    s = w.topics
    run = "spending-run"

    async def main():
        async with GatewayClient(settings=s, gateway_id="gw-usage", timeout_s=15) as c:
            allowed = await c.check(run, "read", {"p": 1})
            t0 = time.monotonic()
            first = await c.usage(run, input_tokens=600, output_tokens=400, cost_usd=0.01, model="m-1")
            returned = time.monotonic() - t0
            while run not in c.aborted and time.monotonic() - t0 < 15:
                await asyncio.sleep(0.01)
            arrived = time.monotonic() - t0
            again = await c.usage(run, output_tokens=5)
            stopped = await c.check(run, "read", {"p": 2})
            await c.end_run(run)
            fresh = await c.check(run, "read", {"p": 3})
            return allowed, first, returned, arrived, c.aborted, again, stopped, fresh

    allowed, first, returned, arrived, aborted, again, stopped, fresh = asyncio.run(main())
    assert allowed.action == "allow" and first is None and returned < 1.0 and arrived < 15
    assert again is stopped and (stopped.action, stopped.detector, stopped.tool_name) == ("abort", "run_budget", None)
    assert fresh.action == "allow" and not fresh.degraded and run not in aborted
    msgs = sorted(read_all(bootstrap, s.events_topic), key=lambda m: m.offset)  # the client has closed
    events = [decode_event(m.value) for m in msgs]
    assert [type(e).__name__ for e in events] == ["ToolCall", "Usage", "Usage", "RunEnd", "ToolCall"]
    spent = events[1]
    assert (spent.input_tokens, spent.output_tokens, spent.cost_usd, spent.model) == (600, 400, 0.01, "m-1")
    assert stopped.event_id == f"{run}:{spent.seq}" and stopped.count == 1000
    assert replay(events, load_config(json.dumps(config))) == [allowed, stopped, fresh]
