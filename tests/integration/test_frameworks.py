"""The framework adapters on a real broker and a real worker, each driven by its
framework's own scripted model (no network, no API key): LangChain's fake chat model in
`create_agent`, and a `Model` subclass under the OpenAI Agents SDK's `Runner`.

Every decision an agent got equals what an offline replay of the events its client sent
(read back from the events topic) decides, and the model's next input carries each
warning and block message. The scripted models report token usage where a test needs
it: a run is warned at 80 percent of its token budget and stopped when it is spent, and
a shadow agent's loop runs to its end while its decisions say what enforcement would
have done."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest

pytest.importorskip("langchain")
pytest.importorskip("agents")

from agents import Agent, set_tracing_disabled  # noqa: E402
from agents.exceptions import ToolInputGuardrailTripwireTriggered  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import SummarizationMiddleware  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import ToolMessage  # noqa: E402

from detectors import replay  # noqa: E402
from detectors.config import load_config  # noqa: E402
from detectors.wire import CompactionRetry, RunEnd, Usage, decode_event, encode  # noqa: E402
from streams.gateway.adapters import RunStopped  # noqa: E402
from streams.gateway.adapters.langchain import LoopwardenMiddleware  # noqa: E402
from streams.gateway.adapters.openai_agents import LoopwardenGuard  # noqa: E402
from streams.gateway.client import FAIL_CLOSED, FAIL_OPEN, GatewayClient  # noqa: E402
from tests.integration.harness import consume, fresh_worker, wait_until  # noqa: E402
from tests.scripted_agents import (  # noqa: E402
    MODEL,
    ScriptedChat,
    ScriptedModel,
    last_output,
    lc_script,
    lc_tools,
    oa_tools,
    tool_output,
)

pytestmark = pytest.mark.integration
set_tracing_disabled(True)

CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
    # every run may spend 2000 tokens; only the budget and shadow tests report any
    "loopwarden": {"budgets": {"runTokens": 2000}},
    # the compaction test repeats one call after a summary; only the post-compaction guard may stop it
    # (the first listed agent would be the default one: "main" is listed first, as itself)
    "agents": {
        "list": [
            {"id": "main"},
            {
                "id": "compacting",
                "tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}},
            },
            {"id": "trial", "loopwarden": {"enforce": False}},  # shadow mode
        ]
    },
}
ENFORCED = {**CONFIG, "agents": {"list": [a for a in CONFIG["agents"]["list"] if a["id"] != "trial"]}}
REPEAT = [("exec", {"command": "make all"})] * 7
PING_PONG = [("read_file", {"path": "a.txt"}), ("write_file", {"path": "a.txt", "text": "x"})] * 4
POLL = [("command_status", {"command_id": "job-7"})] * 7
VARIED = [
    ("read_file", {"path": f"src/m{i}.py"}) if i % 2 else ("exec", {"command": f"pytest -k t{i}"}) for i in range(12)
]
READS = [("read_file", {"path": f"src/m{i}.py"}) for i in range(8)]
USAGE = (300, 100)  # tokens a model call: 1600 of 2000 (80 percent) after the 4th, 2000 (spent) after the 5th
SHADOW_USAGE = (200, 50)  # 250 tokens a model call: the 8th, the final answer, spends the budget
PRICES = {MODEL: (2.0, 8.0)}  # US dollars per million tokens: a call costs $0.0014


@pytest.fixture(scope="module")
def worker_mod(bootstrap, tmp_path_factory):
    started: list = []
    s, w = fresh_worker(bootstrap, tmp_path_factory.mktemp("fw"), started, CONFIG)
    yield s, w
    for x in started:
        x.kill()


@pytest.fixture
def live(worker_mod):
    s, w = worker_mod
    if not w.alive():
        w.start()
    return s, w


def run_events(bootstrap: str, topic: str, run_id: str, timeout: float = 20) -> list:
    """The run's events as sent (one partition, in order), once its run_end is there."""

    def ended() -> list | None:
        msgs = consume(bootstrap, topic, 0, timeout=1)
        evs = [decode_event(m.value) for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]
        evs = [e for e in evs if e.run_id == run_id]
        return evs if evs and isinstance(evs[-1], RunEnd) else None

    return wait_until(ended, timeout, f"the run_end of {run_id} on {topic}", every=0.2)


def replayed(bootstrap: str, s, run_id: str, got: list) -> tuple[list, list]:
    """The run's events as sent and their offline replay, once the run ended: the worker
    published exactly the replayed decisions, and each decision the agent got is one of
    them (a remembered abort is not asked for again, so the agent may see fewer)."""
    events = run_events(bootstrap, s.events_topic, run_id)
    assert isinstance(events[-1], RunEnd)
    want = replay(events, load_config(json.dumps(CONFIG)))
    assert run_decisions(bootstrap, s.decisions_topic, run_id) == [json.loads(encode(d)) for d in want]
    by_id = {d.event_id: d for d in want}
    assert all(by_id[d.event_id] == d for d in got)
    return events, want


def spent_as_replay_decides(events: list, want: list, decisions: list) -> None:
    """Usage events as the scripted model reported them, priced; the 4th call warned at 80
    percent; the 5th model call's usage event spent the budget, its own abort, which
    answers (or, remembered, stands for) the next call."""
    usages = [e for e in events if isinstance(e, Usage)]
    assert [(u.input_tokens, u.output_tokens, u.model) for u in usages] == [(*USAGE, MODEL)] * 5
    assert all(u.cost_usd == pytest.approx(0.0014) for u in usages)
    assert [(d.action, d.detector, d.count) for d in decisions[:4]] == [("allow", None, None)] * 3 + [
        ("warn", "run_budget", 80)
    ]
    assert decisions[3].warning_key == "budget:tokens:80"
    (spent,) = [d for d in want if d.tool_name is None]
    assert (spent.action, spent.detector, spent.count) == ("abort", "run_budget", 2000)
    assert spent.event_id == f"{usages[-1].run_id}:{usages[-1].seq}"
    assert [d.action for d in want if d.tool_name is not None][4:] in ([], ["abort"])  # the call after the spend


def as_enforced(events: list, want: list) -> None:
    """A shadow run's decisions say what the same events decide with enforcement on: its
    `shadow_action` is the enforced action, every other verdict field the same."""
    enforced = replay(events, load_config(json.dumps(ENFORCED)))
    assert [d.event_id for d in enforced] == [d.event_id for d in want]
    verdict = ("level", "detector", "count", "message", "warning_key", "paired_tool_name", "args_hash")
    for shadow, e in zip(want, enforced, strict=True):
        assert (shadow.action, shadow.enforced, shadow.shadow_action) == ("allow", False, e.action)
        assert (e.enforced, e.shadow_action) == (True, None)
        assert [getattr(shadow, f) for f in verdict] == [getattr(e, f) for f in verdict]
    assert {"warn", "block", "abort"} <= {e.action for e in enforced}


def run_decisions(bootstrap: str, topic: str, run_id: str) -> list[dict]:
    """The run's decisions as published, each once: a worker that reads events again
    (after a rebalance, or a fetch it lost) publishes their decisions again, identical,
    and gateways drop the repeats by `event_id` (the decisions topic is at-least-once)."""
    msgs = consume(bootstrap, topic, 0, timeout=1)
    first: dict[str, dict] = {}
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        d = json.loads(m.value)
        if d["run_id"] == run_id:
            assert first.setdefault(d["event_id"], d) == d, "a decision published again must be identical"
    return list(first.values())


# --- LangChain ------------------------------------------------------------------------


async def lc_agent(s, gateway_id: str, calls, **client_kw):
    decisions = []
    model = ScriptedChat(responses=lc_script(calls), inputs=[])
    async with GatewayClient(settings=s, gateway_id=gateway_id, **client_kw) as client:
        agent = create_agent(model, lc_tools(), middleware=[LoopwardenMiddleware(client, on_decision=decisions.append)])
        out = await agent.ainvoke({"messages": [{"role": "user", "content": "build it"}]})
    return decisions, model.inputs, out


def warned_then_blocked(decisions: list, detector: str | None) -> bool:
    """A normal agent (detector None) is only ever allowed: False. A loop is warned, then
    blocked, by `detector`: True."""
    actions = [d.action for d in decisions]
    if detector is None:
        assert set(actions) == {"allow"} and all(d.level == "none" for d in decisions)
        return False
    assert "warn" in actions and "block" in actions and actions.index("warn") < actions.index("block")
    assert {d.detector for d in decisions if d.action in ("warn", "block")} == {detector}
    return True


@pytest.mark.parametrize(
    "calls,detector",
    [(REPEAT, "generic_repeat"), (PING_PONG, "ping_pong"), (POLL, "known_poll_no_progress"), (VARIED, None)],
    ids=["repeat", "ping-pong", "poll", "varied"],
)
def test_langchain_agent_is_warned_then_blocked_as_replay_decides(bootstrap, live, calls, detector):
    s, _ = live
    decisions, inputs, out = asyncio.run(lc_agent(s, f"lc-{detector}", calls))
    assert len(decisions) == len(calls) and not any(d.degraded for d in decisions)
    run_id = decisions[0].run_id
    events = run_events(bootstrap, s.events_topic, run_id)
    assert isinstance(events[-1], RunEnd)
    assert replay(events, load_config(json.dumps(CONFIG))) == decisions
    if not warned_then_blocked(decisions, detector):
        return
    for i, d in enumerate(decisions):  # the model's next input ends with this call's ToolMessage
        last = inputs[i + 1][-1]
        assert isinstance(last, ToolMessage) and last.tool_call_id == f"call-{i}"
        if d.action in ("warn", "block"):
            assert d.message in last.content
        if d.action == "block":
            assert last.status == "error" and last.content == d.message  # the tool did not run
        else:
            assert tool_output(*calls[i]) in last.content


def test_langchain_summarization_is_sent_and_a_loop_surviving_it_aborts_the_run(bootstrap, live):
    s, _ = live
    decisions: list = []
    model = ScriptedChat(responses=lc_script([("exec", {"command": "make all"})] * 12), inputs=[])
    summarize = SummarizationMiddleware(
        model=FakeListChatModel(responses=["the build keeps failing"]), trigger=("messages", 8), keep=("messages", 2)
    )

    async def main():
        async with GatewayClient(settings=s, gateway_id="lc-compaction") as client:
            mw = LoopwardenMiddleware(client, on_decision=decisions.append)
            agent = create_agent(model, lc_tools(), middleware=[mw, summarize], name="compacting")
            with pytest.raises(RunStopped) as stopped:
                await agent.ainvoke({"messages": [{"role": "user", "content": "build it"}]})
            return stopped.value

    stopped = asyncio.run(main())
    assert stopped.decision.action == "abort" and stopped.decision.detector == "compaction_loop_persisted"
    run_id = stopped.run_id
    events = run_events(bootstrap, s.events_topic, run_id)
    assert any(isinstance(e, CompactionRetry) for e in events) and isinstance(events[-1], RunEnd)
    assert {e.agent_id for e in events if not isinstance(e, (CompactionRetry, RunEnd))} == {"compacting"}
    want = replay(events, load_config(json.dumps(CONFIG)))
    assert [d.event_id for d in want] == [d["event_id"] for d in run_decisions(bootstrap, s.decisions_topic, run_id)]
    assert want[-1].action == "abort" and stopped.decision.event_id in {d.event_id for d in want}
    assert not any(d.action == "block" for d in want)  # stopped by the guard, not by the repeat detector


def test_langchain_agent_is_warned_at_80_percent_of_its_token_budget_and_stopped_at_100(bootstrap, live):
    s, _ = live
    decisions: list = []
    ran: list = []
    model = ScriptedChat(responses=lc_script(READS, USAGE), inputs=[])

    async def main():
        async with GatewayClient(settings=s, gateway_id="lc-budget") as client:
            mw = LoopwardenMiddleware(client, on_decision=decisions.append, prices=PRICES)
            agent = create_agent(model, lc_tools(ran), middleware=[mw])
            with pytest.raises(RunStopped) as stopped:
                await agent.ainvoke({"messages": [{"role": "user", "content": "build it"}]})
            return stopped.value

    stopped = asyncio.run(main())
    assert not any(d.degraded for d in decisions)
    assert decisions[3].message in model.inputs[4][-1].content  # the warning reached the model
    assert (stopped.decision.action, stopped.decision.detector) == ("abort", "run_budget")
    assert stopped.decision is decisions[-1] and len(decisions) == 5
    assert ran == ["read_file"] * 4 and len(model.inputs) == 5  # no tool and no model call after the spend
    events, want = replayed(bootstrap, s, stopped.run_id, decisions)
    spent_as_replay_decides(events, want, decisions)


# --- OpenAI Agents SDK ------------------------------------------------------------------


def test_openai_agent_is_warned_at_80_percent_of_its_token_budget_and_stopped_at_100(bootstrap, live):
    s, _ = live
    decisions: list = []
    ran: list = []
    model = ScriptedModel(READS, USAGE)

    async def main():
        async with GatewayClient(settings=s, gateway_id="oa-budget") as client:
            guard = LoopwardenGuard(client, on_decision=decisions.append, prices=PRICES)
            agent = Agent(name="builder", model=model, tools=guard.protect(oa_tools(ran)))
            with pytest.raises(ToolInputGuardrailTripwireTriggered) as tripped:
                await guard.run(agent, "build it", max_turns=30)
            return tripped.value.output.output_info

    info = asyncio.run(main())
    assert not any(d.degraded for d in decisions)
    assert decisions[3].message in last_output(model.inputs[4])[1]
    assert (info["action"], info["detector"]) == ("abort", "run_budget") and info == msgspec.to_builtins(decisions[-1])
    assert ran == ["read_file"] * 4 and len(model.inputs) == 5 and len(decisions) == 5
    events, want = replayed(bootstrap, s, decisions[0].run_id, decisions)
    assert {e.agent_id for e in events if not isinstance(e, RunEnd)} == {"builder"}
    spent_as_replay_decides(events, want, decisions)


# --- shadow mode ----------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["langchain", "openai-agents"])
def test_a_shadow_agent_runs_every_call_of_its_loop_and_is_told_what_enforcement_would_do(bootstrap, live, framework):
    s, _ = live
    decisions: list = []
    ran: list = []

    async def main():
        async with GatewayClient(settings=s, gateway_id=f"shadow-{framework}") as client:
            if framework == "langchain":
                model = ScriptedChat(responses=lc_script(REPEAT, SHADOW_USAGE), inputs=[])
                mw = LoopwardenMiddleware(client, on_decision=decisions.append)
                agent = create_agent(model, lc_tools(ran), middleware=[mw], name="trial")
                out = await agent.ainvoke({"messages": [{"role": "user", "content": "build it"}]})
                return out["messages"][-1].content, [m.content for m in model.inputs[-1] if isinstance(m, ToolMessage)]
            oa = ScriptedModel(REPEAT, SHADOW_USAGE)
            guard = LoopwardenGuard(client, on_decision=decisions.append)
            result = await guard.run(Agent(name="trial", model=oa, tools=guard.protect(oa_tools(ran))), "build it")
            return result.final_output, [last_output(oa.inputs[i + 1])[1] for i in range(len(REPEAT))]

    final, shown = asyncio.run(main())
    assert final == "giving up" and ran == ["exec"] * 7  # every call ran, the run ended by itself
    assert shown == [tool_output(*REPEAT[0])] * 7  # no warning, no block message
    assert {(d.action, d.enforced) for d in decisions} == {("allow", False)} and not any(d.degraded for d in decisions)
    assert [d.shadow_action for d in decisions] == ["allow", "allow", "allow", "warn", "allow", "block", "block"]
    events, want = replayed(bootstrap, s, decisions[0].run_id, decisions)
    spent = want[-1]  # the final answer's usage spent the budget: a shadow abort, which the agent did not wait for
    assert (spent.tool_name, spent.detector) == (None, "run_budget")
    assert (spent.action, spent.enforced, spent.shadow_action) == ("allow", False, "abort")
    assert want[:-1] == decisions
    as_enforced(events, want)


@pytest.mark.parametrize(
    "calls,detector",
    [(REPEAT, "generic_repeat"), (PING_PONG, "ping_pong"), (POLL, "known_poll_no_progress"), (VARIED, None)],
    ids=["repeat", "ping-pong", "poll", "varied"],
)
def test_openai_agent_is_warned_then_blocked_as_replay_decides(bootstrap, live, calls, detector):
    s, _ = live
    decisions: list = []
    ran: list = []
    model = ScriptedModel(calls)

    async def main():
        async with GatewayClient(settings=s, gateway_id=f"oa-{detector}") as client:
            guard = LoopwardenGuard(client, on_decision=decisions.append)
            agent = Agent(name="builder", model=model, tools=guard.protect(oa_tools(ran)))
            return await guard.run(agent, "build it", max_turns=30)

    result = asyncio.run(main())
    assert result.final_output == "giving up"
    assert len(decisions) == len(calls) and not any(d.degraded for d in decisions)
    assert {d.agent_id for d in decisions} == {"builder"}
    run_id = decisions[0].run_id
    events = run_events(bootstrap, s.events_topic, run_id)
    assert isinstance(events[-1], RunEnd)
    assert replay(events, load_config(json.dumps(CONFIG))) == decisions
    assert len(ran) == sum(d.action != "block" for d in decisions)
    if not warned_then_blocked(decisions, detector):
        return
    for i, d in enumerate(decisions):
        call_id, text = last_output(model.inputs[i + 1])
        assert call_id == f"call-{i}"
        if d.action in ("warn", "block"):
            assert d.message in text
        if d.action == "block":
            assert text == d.message
        else:
            assert tool_output(*calls[i]) in text


# --- the worker stopped ---------------------------------------------------------------


def test_worker_stopped_fail_open_goes_on_and_fail_closed_stops_within_the_timeout(bootstrap, live):
    s, w = live
    w.stop()
    timeout = 1.0
    calls = [("read_file", {"path": "a"}), ("read_file", {"path": "b"})]

    t0 = time.monotonic()
    decisions, inputs, out = asyncio.run(lc_agent(s, "lc-open", calls, timeout_s=timeout, policy=FAIL_OPEN))
    assert [d.action for d in decisions] == ["allow", "allow"] and all(d.degraded for d in decisions)
    assert out["messages"][-1].content == "giving up"
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == [tool_output(*c) for c in calls]
    assert time.monotonic() - t0 < 2 * timeout + 8  # two timed-out checks, the client's start and stop

    t0 = time.monotonic()
    with pytest.raises(RunStopped) as stopped:
        asyncio.run(lc_agent(s, "lc-closed", calls, timeout_s=timeout, policy=FAIL_CLOSED))
    assert stopped.value.decision.degraded and stopped.value.decision.action == "block"
    assert "fail-closed" in str(stopped.value)
    assert time.monotonic() - t0 < timeout + 8

    async def oa(policy: str, ran: list):
        model = ScriptedModel(calls)
        async with GatewayClient(settings=s, gateway_id=f"oa-{policy}", timeout_s=timeout, policy=policy) as client:
            guard = LoopwardenGuard(client)
            agent = Agent(name="builder", model=model, tools=guard.protect(oa_tools(ran)))
            return await guard.run(agent, "build it", max_turns=30)

    ran: list = []
    t0 = time.monotonic()
    assert asyncio.run(oa(FAIL_OPEN, ran)).final_output == "giving up"
    assert ran == ["read_file", "read_file"] and time.monotonic() - t0 < 2 * timeout + 8

    ran = []
    t0 = time.monotonic()
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as tripped:
        asyncio.run(oa(FAIL_CLOSED, ran))
    info = tripped.value.output.output_info
    assert info.get("degraded") and info["action"] == "block" and ran == []
    assert time.monotonic() - t0 < timeout + 8
