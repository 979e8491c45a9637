"""The simulator's agents without a broker: options parsed once, usage reported before
each call, a held-out loop run on to its end and counted as caught in shadow, an
enforced one stopped at its block, budget verdicts kept apart from loop detection, an
agent's spend burst, a run paused by a spend cap counted apart. (tests/integration/
test_audit_shadow.py and test_simulate_burst.py run the simulator against a real worker.)"""

from __future__ import annotations

import asyncio
import random

import msgspec
import pytest

from detectors.wire import Decision
from streams import cli
from streams.kafka.errors import SettingsError
from streams.tools import simulate
from streams.tools.loops import BREAKER_AGENT
from streams.tools.simulate import Agent, Burst, Report, SimOptions
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


def test_the_simulators_burst_and_agents_are_parsed_once_in_the_cli():
    def sim(*argv: str) -> SimOptions:
        return cli.sim_options(cli.build_parser().parse_args(["simulate", *argv]))

    o = sim("--agents", "4", "--burst", "sim-agent-2@30:5")
    assert (o.agents, o.burst.agent, o.burst.at_s, o.burst.factor) == (4, "sim-agent-2", 30.0, 5.0)
    assert sim().burst is None and sim().agents == 0
    assert sim("--burst", "no-generic@1.5:2").burst.at_s == 1.5  # the breaker loops' own agent
    for argv, message in (
        (("--agents", "2", "--burst", "sim-agent-2@30:5"), "not an agent of the simulated fleet"),
        (("--burst", "sim-agent-0@30:5"), "with --agents 1 its agents are sim-agent-0"),
        (("--agents", "2", "--burst", "sim-agent-0@soon:5"), "is not AGENT@SECONDS:FACTOR"),
        (("--agents", "2", "--burst", "sim-agent-0-30-5"), "is not AGENT@SECONDS:FACTOR"),
        (("--agents", "2", "--burst", "sim-agent-0@30:0.5"), "FACTOR a number of at least 1"),
        (("--agents", "2", "--burst", "sim-agent-0@-3:2"), "SECONDS must be at least 0"),
        (("--agents", "-1"), "--agents -1"),
    ):
        with pytest.raises(SettingsError, match=message):
            sim(*argv)


class AgentsClient(Client):
    """A Client that also records the agent each call and usage event names."""

    async def usage(self, run_id, **kw):
        self.sent.append(("usage", kw["input_tokens"], kw["output_tokens"], kw.get("agent_id")))
        return self.aborted.get(run_id)

    async def check(self, run_id, tool, params, tool_call_id=None, agent_id=None):
        i = sum(1 for s in self.sent if s[0] == "check")
        self.sent.append(("check", tool, agent_id))
        return self.verdict(run_id, i)


def run_as(kind: str, verdict, agent: str | None, boost=None) -> tuple[Report, AgentsClient]:
    report, client = Report(), AgentsClient(verdict)
    a = Agent(client, "sim-r", kind, random.Random(3), (0, 0), report, None, True, agent, boost)  # type: ignore[arg-type]
    asyncio.run(a.run())
    return report, client


def test_a_burst_is_one_agents_from_its_time_on():
    b = Burst("Sim-Agent-1", at_s=30.0, factor=4.0)
    assert b.factor_for("sim-agent-1", 29.9) == 1.0 and b.factor_for("sim-agent-1", 30.0) == 4.0
    assert b.factor_for(" SIM-AGENT-1 ", 31.0) == 4.0  # agent ids compare trimmed and lower-cased
    assert b.factor_for("sim-agent-0", 99.0) == 1.0 and b.factor_for(None, 99.0) == 1.0


def test_a_bursting_agent_reports_factor_times_its_usage_and_runs_as_its_agent():
    steady, calm = run_as("normal", lambda r, i: decision(r, i), "sim-agent-1")
    burst = Burst("sim-agent-1", at_s=0.0, factor=3.0)
    bursting, loud = run_as("normal", lambda r, i: decision(r, i), "sim-agent-1", lambda a: burst.factor_for(a, 5.0))
    calm_usage = [s for s in calm.sent if s[0] == "usage"]
    loud_usage = [s for s in loud.sent if s[0] == "usage"]
    assert len(calm_usage) == len(loud_usage) > 10  # the same draws: the same calls
    assert [(3 * a, 3 * b) for _, a, b, _ in calm_usage] == [(a, b) for _, a, b, _ in loud_usage]
    assert bursting.tokens == 3 * steady.tokens
    assert {s[-1] for s in loud.sent if s[0] in ("usage", "check")} == {"sim-agent-1"}
    # another agent's runs do not burst; a kind with an agent of its own keeps it
    _, other = run_as("normal", lambda r, i: decision(r, i), "sim-agent-0", lambda a: burst.factor_for(a, 5.0))
    assert [s for s in other.sent if s[0] == "usage"] == [(*s[:3], "sim-agent-0") for s in calm_usage]
    _, breaker = run_as("global_circuit_breaker", lambda r, i: decision(r, i), "sim-agent-0")
    assert {s[-1] for s in breaker.sent if s[0] == "check"} == {BREAKER_AGENT}


def test_a_run_a_spend_cap_pauses_ends_and_is_counted_apart(monkeypatch):
    monkeypatch.setattr(simulate, "PAUSED_WAIT_S", 0.0)

    def pause_at(n: int):
        def verdict(run_id, i):
            if i < n:
                return decision(run_id, i)
            return decision(
                run_id, i, action="abort", level="critical", detector="fleet_spend_cap", fleet_signal="cap:k:0"
            )

        return verdict

    report, client = run("generic_repeat", pause_at(3))
    assert sum(s[0] == "check" for s in client.sent) == 4 and client.sent[-1] == ("end",)
    assert report.paused == {"cap:k:0": 1} and report.runs_paused == 1 and report.loops_paused == 1
    assert report.injected == {} and report.caught == {}  # paused before caught: neither caught nor missed
    summary = report.summary()
    assert (summary["calls_paused"], summary["calls_paused_by_spend_cap"]) == (1, {"cap:k:0": 1})
    assert summary["loops_paused_before_caught"] == 1 and summary["runs_paused"] == 1
    report, _ = run("normal", pause_at(2))
    assert (report.normal_runs, report.normal_flagged, report.runs_paused, report.loops_paused) == (1, 0, 1, 0)
