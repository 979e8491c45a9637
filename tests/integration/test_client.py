"""The gateway client on a real broker and a real worker."""

from __future__ import annotations

import asyncio

import pytest

from streams.client import FAIL_CLOSED, FAIL_OPEN, GatewayClient, partition_for
from tests.integration.harness import fresh_worker

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
        await client.result(run, "exec", {"command": "make", "retry": 1.0}, tool_call_id=f"{run}-{i}",
                            result={"details": {"status": "failed", "exitCode": 2, "aggregated": "no rule",
                                                "durationMs": i}})
    return out


def test_gateways_see_only_their_own_decisions_and_every_check_is_answered(bootstrap, tmp_path, workers):
    s, w = fresh_worker(bootstrap, tmp_path, workers, CONFIG)
    a, b, c = gateways_sharing_a_partition()

    async def main():
        async with GatewayClient(settings=s, gateway_id=a) as ca, GatewayClient(settings=s, gateway_id=b) as cb, \
                GatewayClient(settings=s, gateway_id=c) as cc:
            runs = [(cl, f"{cl.gateway_id}-run-{k}") for cl in (ca, cb, cc) for k in range(10)]
            results = await asyncio.gather(*(script(cl, run) for cl, run in runs))
            return ca, cb, cc, runs, results

    ca, cb, cc, runs, results = asyncio.run(main())
    for (cl, run), ds in zip(runs, results):
        assert [d.gateway_id for d in ds] == [cl.gateway_id] * 7
        assert [d.run_id for d in ds] == [run] * 7
        assert not any(d.degraded for d in ds)
        assert [d.action for d in ds] == ["allow", "allow", "allow", "warn", "allow", "block", "block"]
    assert ca.partition == cb.partition != cc.partition
    assert ca.received == cb.received == cc.received == 70
    assert ca.foreign > 0 and cb.foreign > 0 and cc.foreign == 0  # read on the shared partition, never delivered


def test_timeout_policy_both_ways_when_the_worker_is_down(bootstrap, tmp_path, workers):
    s, w = fresh_worker(bootstrap, tmp_path, workers, CONFIG)

    async def main():
        async with GatewayClient(settings=s, gateway_id="gw-open", timeout_s=1.0, policy=FAIL_OPEN) as op, \
                GatewayClient(settings=s, gateway_id="gw-closed", timeout_s=1.0, policy=FAIL_CLOSED) as cl:
            live = await op.check("r-open", "read", {"p": 1})
            w.stop()
            return live, await op.check("r-open", "read", {"p": 2}), await cl.check("r-closed", "read", {"p": 1})

    live, opened, closed = asyncio.run(main())
    assert not live.degraded and live.config_hash
    assert opened.degraded and opened.action == "allow" and "fail-open" in opened.message
    assert closed.degraded and closed.action == "block" and "fail-closed" in closed.message


def test_privacy_mode_and_raw_mode_decide_alike(bootstrap, tmp_path, workers):
    s, w = fresh_worker(bootstrap, tmp_path, workers, CONFIG)

    async def main():
        async with GatewayClient(settings=s, gateway_id="gw-p", privacy=True) as p, \
                GatewayClient(settings=s, gateway_id="gw-r", privacy=False) as r:
            return await script(p, "same-run-p", 8), await script(r, "same-run-r", 8)

    private, raw = asyncio.run(main())
    facts = lambda ds: [(d.action, d.level, d.detector, d.count, d.args_hash, d.warning_key, d.config_hash)  # noqa: E731
                        for d in ds]
    assert facts(private) == facts(raw)
    assert [d.action for d in raw][-1] == "block"
