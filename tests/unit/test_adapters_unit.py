"""The framework adapters without a broker: the price table, and how each adapter acts on
what the core decides (budgets, shadow mode, a fleet breaker, an operator's stop). The
client is a real `GatewayClient` whose producer is the fake worker of test_client_unit
(the engine's `apply`, with a fleet view); the agents are the scripted ones of
tests/scripted_agents.py. The real broker and worker are in
tests/integration/test_frameworks.py."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from agents import Agent, RunHooks, Runner, set_tracing_disabled
from agents.exceptions import ToolInputGuardrailTripwireTriggered
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage

from detectors.config import load_config
from detectors.errors import LoopwardenError
from detectors.fleet import Breaker, FleetView, StopOrder
from detectors.wire import Usage
from streams.gateway.adapters import Prices, RunStopped
from streams.gateway.adapters.langchain import LoopwardenMiddleware
from streams.gateway.adapters.openai_agents import LoopwardenGuard
from tests.scripted_agents import FAILED, MODEL, ScriptedChat, ScriptedModel, last_output, lc_script, lc_tools, oa_tools
from tests.unit.test_client_unit import FakeWorker, offline

set_tracing_disabled(True)

CONFIG = load_config(
    json.dumps(
        {
            "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
            "loopwarden": {"budgets": {"runTokens": 2000}},
            "agents": {"list": [{"id": "main"}, {"id": "trial", "loopwarden": {"enforce": False}}]},
        }
    )
)
PRICES = {MODEL: (2.0, 8.0)}  # per million tokens: 300 in and 100 out cost $0.0014
READS = [("read_file", {"path": f"src/m{i}.py"}) for i in range(8)]
REPEAT = [("exec", {"command": "make all"})] * 7
FOREVER = 2**52  # an until_ts no call reaches
BREAKER = Breaker(
    id="exec:o:1", tool_name="exec", outcome="o", from_ts=0, until_ts=FOREVER, runs=25, gateways=4, window_ms=300_000
)
STOP = StopOrder(id="stop-1", agent_id="main", from_ts=0, reason="Stopped by the on-call engineer: runaway spend.")


# --- the price table ----------------------------------------------------------------------


def test_prices_are_per_million_tokens_by_the_first_name_the_table_holds():
    p = Prices({"gpt-a": (2.5, 10.0), "gpt-a-2025-01-01": (1, 4)})
    assert p.cost(("gpt-a",), 1_000_000, 0) == (2.5, "gpt-a")
    assert p.cost(("gpt-a",), 300, 100) == ((300 * 2.5 + 100 * 10.0) / 1e6, "gpt-a")
    assert p.cost(("gpt-a-2025-01-01", "gpt-a"), 1_000_000, 1_000_000) == (5.0, "gpt-a-2025-01-01")
    assert p.cost(("gpt-a-2026", "gpt-a"), 0, 1_000_000) == (10.0, "gpt-a")  # answered name unknown: configured


def test_a_model_missing_from_a_given_table_costs_0_with_one_warning_per_name(caplog):
    p = Prices({"gpt-a": (1, 1)})
    with caplog.at_level(logging.WARNING, logger="loopwarden.gateway"):
        assert p.cost(("other",), 10, 10) == (0.0, "other")
        assert p.cost(("other",), 10, 10) == (0.0, "other")
        assert p.cost((None,), 10, 10) == (0.0, None)
    assert [r.getMessage() for r in caplog.records] == [
        "loopwarden: no price for model 'other' in the price table; reported at cost 0",
        "loopwarden: no price for a model call that names no model in the price table; reported at cost 0",
    ]


def test_no_table_prices_every_call_at_0_without_warnings(caplog):
    with caplog.at_level(logging.WARNING, logger="loopwarden.gateway"):
        assert Prices().cost(("gpt-a", None), 10**6, 10**6) == (0.0, "gpt-a")
        assert Prices({}).cost((None,), 1, 1) == (0.0, None)
    assert caplog.records == []


@pytest.mark.parametrize(
    "table",
    [
        {"m": (-1, 2)},
        {"m": (1, float("nan"))},
        {"m": (1, float("inf"))},
        {"m": (1,)},
        {"m": 3.0},
        {"m": (True, 1)},
        {"m": ("1", 1)},
        {"": (1, 1)},
    ],
)
def test_a_bad_price_table_is_refused_naming_the_model(table):
    with pytest.raises(LoopwardenError, match="price"):
        Prices(table)


# --- LangChain ----------------------------------------------------------------------------


def lc_run(worker: FakeWorker, calls, *, name: str = "main", usage=None, prices=None):
    """One agent run; (decisions, model inputs, tools that ran, RunStopped or None)."""
    decisions: list = []
    ran: list = []
    model = ScriptedChat(responses=lc_script(calls, usage), inputs=[])

    async def main():
        c = offline("gw-lc", worker, timeout_s=5.0)
        mw = LoopwardenMiddleware(c, on_decision=decisions.append, prices=prices)
        agent = create_agent(model, lc_tools(ran), middleware=[mw], name=name)
        try:
            await agent.ainvoke({"messages": [{"role": "user", "content": "build it"}]})
        except RunStopped as stopped:
            return stopped
        return None

    stopped = asyncio.run(main())
    return decisions, model.inputs, ran, stopped


def test_langchain_reports_priced_usage_is_warned_at_80_percent_and_stopped_when_spent():
    worker = FakeWorker(CONFIG)
    decisions, inputs, ran, stopped = lc_run(worker, READS, usage=(300, 100), prices=PRICES)
    usages = [e for e in worker.events if isinstance(e, Usage)]
    assert [(u.input_tokens, u.output_tokens, u.model) for u in usages] == [(300, 100, MODEL)] * 5
    assert all(u.cost_usd == pytest.approx(0.0014) for u in usages)
    # 400 tokens a model call: the 4th call's tool call is warned (1600 of 2000), the 5th spends the budget
    assert [(d.action, d.detector, d.count) for d in decisions[:4]] == [("allow", None, None)] * 3 + [
        ("warn", "run_budget", 80)
    ]
    assert decisions[3].warning_key == "budget:tokens:80" and decisions[3].message in inputs[4][-1].content
    assert stopped is not None and stopped.decision is decisions[-1] and len(decisions) == 5
    assert (stopped.decision.action, stopped.decision.detector, stopped.decision.tool_name) == (
        "abort",
        "run_budget",
        None,  # the usage event's own abort, returned by the next check without sending it
    )
    assert ran == ["read_file"] * 4 and len(inputs) == 5  # no tool and no model call after the spend


def test_langchain_without_usage_metadata_reports_nothing():
    worker = FakeWorker(CONFIG)
    decisions, _, ran, stopped = lc_run(worker, READS[:3])
    assert stopped is None and not any(isinstance(e, Usage) for e in worker.events) and len(ran) == 3


def test_langchain_shows_a_fleet_block_to_the_model_and_goes_on():
    worker = FakeWorker(CONFIG, FleetView([BREAKER]))
    calls = [("exec", {"command": "make all"}), ("read_file", {"path": "Makefile"})]
    decisions, inputs, ran, stopped = lc_run(worker, calls)
    assert stopped is None and ran == ["read_file"]
    block = decisions[0]
    assert (block.action, block.detector, block.fleet_signal) == ("block", "fleet_tool_breaker", BREAKER.id)
    shown = inputs[1][-1]
    assert isinstance(shown, ToolMessage) and shown.status == "error" and shown.content == block.message


def test_langchain_operator_stop_ends_the_run():
    worker = FakeWorker(CONFIG, FleetView([STOP]))
    decisions, inputs, ran, stopped = lc_run(worker, READS[:3])
    assert stopped is not None and ran == [] and len(inputs) == 1
    assert (stopped.decision.detector, stopped.decision.message) == ("operator_stop", STOP.reason)


# --- OpenAI Agents SDK ------------------------------------------------------------------


class Counting(RunHooks):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_llm_end(self, context, agent, response) -> None:
        self.seen.append("llm_end")

    async def on_tool_end(self, context, agent, tool, result) -> None:
        self.seen.append("tool_end")

    async def on_handoff(self, context, from_agent, to_agent) -> None:
        self.seen.append(f"handoff:{from_agent.name}>{to_agent.name}")


def oa_run(worker: FakeWorker, calls, *, name: str = "main", usage=None, prices=None, hooks=None):
    """One agent run; (decisions, model, tools that ran, the exception that ended it or None)."""
    decisions: list = []
    ran: list = []
    model = ScriptedModel(calls, usage)

    async def main():
        c = offline("gw-oa", worker, timeout_s=5.0)
        guard = LoopwardenGuard(c, on_decision=decisions.append, prices=prices)
        agent = Agent(name=name, model=model, tools=guard.protect(oa_tools(ran)))
        try:
            await guard.run(agent, "build it", max_turns=30, hooks=hooks)
        except (RunStopped, ToolInputGuardrailTripwireTriggered) as exc:
            return exc
        return None

    ended = asyncio.run(main())
    return decisions, model, ran, ended


def test_openai_guard_reports_priced_usage_is_warned_at_80_percent_and_stopped_when_spent():
    worker = FakeWorker(CONFIG)
    hooks = Counting()
    decisions, model, ran, ended = oa_run(worker, READS, usage=(300, 100), prices=PRICES, hooks=hooks)
    usages = [e for e in worker.events if isinstance(e, Usage)]
    assert [(u.input_tokens, u.output_tokens, u.model, u.agent_id) for u in usages] == [(300, 100, MODEL, "main")] * 5
    assert all(u.cost_usd == pytest.approx(0.0014) for u in usages)
    assert [(d.action, d.detector, d.count) for d in decisions[:4]] == [("allow", None, None)] * 3 + [
        ("warn", "run_budget", 80)
    ]
    assert decisions[3].message in last_output(model.inputs[4])[1]
    assert isinstance(ended, ToolInputGuardrailTripwireTriggered)
    info = ended.output.output_info
    assert (info["action"], info["detector"], info["tool_name"]) == ("abort", "run_budget", None)
    assert ran == ["read_file"] * 4 and len(model.inputs) == 5
    assert hooks.seen.count("llm_end") == 5 and hooks.seen.count("tool_end") == 4  # the user's hooks still run


def test_openai_guard_stops_a_run_aborted_meanwhile_before_its_next_model_call():
    worker = FakeWorker(CONFIG)
    model = ScriptedModel(READS)

    async def main():
        c = offline("gw-oa", worker)
        guard = LoopwardenGuard(c)
        agent = Agent(name="main", model=model, tools=guard.protect(oa_tools([])))
        async with guard.scope("run-x") as run_id:
            await c.usage(run_id, input_tokens=2500)  # spent; its abort arrives while nothing waits
            await asyncio.sleep(0)
            with pytest.raises(RunStopped) as stopped:
                await Runner.run(agent, "build it", hooks=guard.hooks())
        return stopped.value

    stopped = asyncio.run(main())
    assert (stopped.decision.detector, stopped.run_id) == ("run_budget", "run-x") and model.inputs == []


@pytest.mark.parametrize("framework", ["langchain", "openai-agents"])
def test_a_shadow_agent_runs_every_call_and_the_model_is_told_nothing(framework):
    worker = FakeWorker(CONFIG)
    if framework == "langchain":
        decisions, inputs, ran, ended = lc_run(worker, REPEAT, name="trial", usage=(300, 100))
        shown = [m.content for m in inputs[-1] if isinstance(m, ToolMessage)]
    else:
        decisions, model, ran, ended = oa_run(worker, REPEAT, name="trial", usage=(300, 100))
        shown = [last_output(model.inputs[i + 1])[1] for i in range(7)]
    assert ended is None and ran == ["exec"] * 7
    assert shown == [FAILED] * 7  # no warning appended, no block message
    assert {(d.action, d.enforced) for d in decisions} == {("allow", False)}
    # the loop's warning, then the budget spent by the 5th model call: abort from then on
    assert [d.shadow_action for d in decisions] == ["allow", "allow", "allow", "warn", "abort", "abort", "abort"]


def test_openai_guard_rejects_a_fleet_blocked_call_with_its_message_and_operator_stop_halts():
    worker = FakeWorker(CONFIG, FleetView([BREAKER]))
    calls = [("exec", {"command": "make all"}), ("read_file", {"path": "Makefile"})]
    decisions, model, ran, ended = oa_run(worker, calls)
    assert ended is None and ran == ["read_file"]
    assert (decisions[0].action, decisions[0].detector) == ("block", "fleet_tool_breaker")
    assert last_output(model.inputs[1]) == ("call-0", decisions[0].message)

    decisions, model, ran, ended = oa_run(FakeWorker(CONFIG, FleetView([STOP])), READS[:3])
    assert isinstance(ended, ToolInputGuardrailTripwireTriggered) and ran == []
    assert ended.output.output_info["detector"] == "operator_stop"


def test_openai_guard_reports_each_agents_usage_under_its_own_id_across_a_handoff():
    worker = FakeWorker(CONFIG)
    hooks = Counting()
    ran: list = []

    async def main():
        c = offline("gw-oa", worker)
        guard = LoopwardenGuard(c, prices=PRICES)
        tools = guard.protect(oa_tools(ran))
        helper = Agent(name="helper", model=ScriptedModel(READS[:1], (10, 5), "helper"), tools=tools)
        first = Agent(name="main", model=ScriptedModel([("transfer_to_helper", {})], (300, 100)), handoffs=[helper])
        return await guard.run(first, "build it", hooks=hooks)

    assert asyncio.run(main()).final_output == "giving up" and ran == ["read_file"]
    usages = [(e.agent_id, e.input_tokens, e.output_tokens) for e in worker.events if isinstance(e, Usage)]
    assert usages == [("main", 300, 100), ("helper", 10, 5), ("helper", 10, 5)]
    assert "handoff:main>helper" in hooks.seen  # the SDK passes a handoff's hook arguments by keyword


# --- section 12's detectors reach the model like every block --------------------------------

RULES = load_config(
    json.dumps(
        {
            "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
            "loopwarden": {"rules": {"progressAware": True, "cycles": {"enabled": True}}},
        }
    )
)
ROUND = [("read_file", {"path": p}) for p in ("a.py", "b.py", "c.py")] * 3 + [("read_file", {"path": "a.py"})]


@pytest.mark.parametrize("framework", ["langchain", "openai-agents"])
def test_a_cycle_is_blocked_and_the_model_reads_why(framework):
    if framework == "langchain":
        decisions, inputs, ran, ended = lc_run(FakeWorker(RULES), ROUND)
        shown = inputs[-1][-1]
        assert isinstance(shown, ToolMessage) and shown.status == "error"
        text = shown.content
    else:
        decisions, model, ran, ended = oa_run(FakeWorker(RULES), ROUND)
        text = last_output(model.inputs[-1])[1]
    assert ended is None and ran == ["read_file"] * 9  # the 10th call, a 4th round, did not run
    block = decisions[-1]
    assert (block.action, block.detector, block.count) == ("block", "cycle", 10)
    assert text == block.message and "cycle" in text and "read_file" in text
    # nothing before it: each path's identical outputs were a streak of 2 (progress-aware
    # warnings count the streak; OpenClaw's count of repeats would have warned at 3)
    assert {(d.action, d.level) for d in decisions[:-1]} == {("allow", "none")}
