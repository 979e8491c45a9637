"""The simulator's agents without a broker: options parsed once, usage reported before
each call, a held-out loop run on to its end and counted as caught in shadow, an
enforced one stopped at its block, budget verdicts kept apart from loop detection.
(tests/integration/test_audit_shadow.py runs the simulator against a real worker.)"""

from __future__ import annotations

import asyncio
import random

import msgspec
import pytest

from detectors.wire import Decision
from streams import cli
from streams.kafka.errors import SettingsError
from streams.tools.simulate import Agent, Report, SimOptions
from tests.unit.test_top import dec


def decision(run_id: str, seq: int, **kw) -> Decision:
    return msgspec.structs.replace(dec(run_id, seq, agent=None), **kw)


class Client:
    """What an Agent needs of a GatewayClient: each call answered by `verdict(i)`."""

    def __init__(self, verdict) -> None:
        self.verdict = verdict
        self.aborted: dict[str, Decision] = {}
        self.sent: list[tuple] = []

    async def usage(self, run_id, **kw):
        self.sent.append(("usage", kw["input_tokens"], kw["output_tokens"]))
        return self.aborted.get(run_id)

    async def check(self, run_id, tool, params, tool_call_id=None, agent_id=None):
        i = sum(1 for s in self.sent if s[0] == "check")
        self.sent.append(("check", tool))
        return self.verdict(run_id, i)

    async def result(self, run_id, tool, params, **kw):
        self.sent.append(("result", tool))

    async def compaction_retry(self, run_id):
        self.sent.append(("compaction_retry",))

    async def end_run(self, run_id):
        self.sent.append(("end",))


def run(kind: str, verdict) -> tuple[Report, Client]:
    report, client = Report(), Client(verdict)
    agent = Agent(client, "sim-r", kind, random.Random(3), (0, 0), report, None)  # type: ignore[arg-type]
    asyncio.run(agent.run())
    return report, client


def test_options_are_parsed_once_in_the_cli():
    def parsed(*argv: str) -> SimOptions:
        return cli.sim_options(cli.build_parser().parse_args(["simulate", *argv]))

    o = parsed("--gateways", "2", "--think-ms", "4", "--holdout", "20")
    assert (o.think_ms, o.holdout, o.gateways) == ((4.0, 4.0), 20, 2)
    with pytest.raises(SettingsError, match="--holdout 101"):
        parsed("--holdout", "101")
    with pytest.raises(SettingsError, match="--think-ms"):
        parsed("--think-ms", "a:b")


def test_a_held_out_loop_runs_to_its_end_and_is_caught_in_shadow():
    def verdict(run_id, i):
        if i < 5:
            return decision(run_id, i)
        return decision(
            run_id, i, enforced=False, shadow_action="block", level="critical", detector="generic_repeat", count=i
        )

    report, client = run("generic_repeat", verdict)
    checks = [s for s in client.sent if s[0] == "check"]
    assert len(checks) == 60 and client.sent[-1] == ("end",)  # not stopped: it went on to its last step
    assert report.caught == {"generic_repeat": 1} and report.caught_in_shadow == 1
    assert report.not_enforced == 55
    usage = [s for s in client.sent if s[0] == "usage"]
    assert len(usage) == 60 and client.sent[0][0] == "usage"  # each model call before its tool call
    assert report.tokens == sum(a + b for _, a, b in usage)
    again, _ = run("generic_repeat", verdict)
    assert again.tokens == report.tokens  # drawn per run: the same run reports the same tokens


def test_an_enforced_block_stops_the_run_and_budget_verdicts_are_not_loop_detections():
    def block(run_id, i):
        action = "block" if i == 4 else "allow"
        return decision(run_id, i, action=action, level="critical" if i == 4 else "none", detector="generic_repeat")

    report, client = run("generic_repeat", block)
    assert sum(s[0] == "check" for s in client.sent) == 5 and report.caught_in_shadow == 0
    assert report.caught == {"generic_repeat": 1}

    def budget(run_id, i):
        if i == 2:
            return decision(
                run_id, i, action="warn", level="warning", detector="run_budget", warning_key="budget:tokens:80"
            )
        if i == 3:
            return decision(
                run_id, i, action="abort", level="critical", detector="run_budget", warning_key="budget:tokens"
            )
        return decision(run_id, i)

    report, client = run("normal", budget)
    assert report.normal_runs == 1 and report.normal_flagged == 0  # a budget is not a loop found
    assert report.budget_stops == 1 and sum(s[0] == "check" for s in client.sent) == 4
