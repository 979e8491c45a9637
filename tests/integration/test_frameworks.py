"""The framework adapters on a real broker and a real worker, each driven by its
framework's own scripted model (no network, no API key): LangChain's fake chat model in
`create_agent`, and a `Model` subclass under the OpenAI Agents SDK's `Runner`.

Every decision an agent got equals what an offline replay of the events its client sent
(read back from the events topic) decides, and the model's next input carries each
warning and block message."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("langchain")
pytest.importorskip("agents")

from agents import Agent, Model, ModelResponse, Usage, function_tool, set_tracing_disabled  # noqa: E402
from agents.exceptions import ToolInputGuardrailTripwireTriggered  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import SummarizationMiddleware  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel, FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from detectors import replay  # noqa: E402
from detectors.config import load_config  # noqa: E402
from detectors.wire import CompactionRetry, RunEnd, decode_event  # noqa: E402
from streams.gateway.adapters import RunStopped  # noqa: E402
from streams.gateway.adapters.langchain import LoopwardenMiddleware  # noqa: E402
from streams.gateway.adapters.openai_agents import LoopwardenGuard  # noqa: E402
from streams.gateway.client import FAIL_CLOSED, FAIL_OPEN, GatewayClient  # noqa: E402
from tests.integration.harness import consume, fresh_worker  # noqa: E402

pytestmark = pytest.mark.integration
set_tracing_disabled(True)

CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
    # the compaction test repeats one call after a summary; only the post-compaction guard may stop it
    # (the first listed agent would be the default one: "main" is listed first, as itself)
    "agents": {
        "list": [
            {"id": "main"},
            {
                "id": "compacting",
                "tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}},
            },
        ]
    },
}
FAILED = "make: *** No rule to make target 'all'. Stop. (exit 2)"
REPEAT = [("exec", {"command": "make all"})] * 7
PING_PONG = [("read_file", {"path": "a.txt"}), ("write_file", {"path": "a.txt", "text": "x"})] * 4
POLL = [("command_status", {"command_id": "job-7"})] * 7
VARIED = [
    ("read_file", {"path": f"src/m{i}.py"}) if i % 2 else ("exec", {"command": f"pytest -k t{i}"}) for i in range(12)
]


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
    deadline = time.monotonic() + timeout
    while True:
        msgs = consume(bootstrap, topic, 0, timeout=1, settle=0)
        evs = [decode_event(m.value) for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]
        evs = [e for e in evs if e.run_id == run_id]
        if (evs and isinstance(evs[-1], RunEnd)) or time.monotonic() > deadline:
            return evs
        time.sleep(0.2)


def run_decisions(bootstrap: str, topic: str, run_id: str) -> list[dict]:
    msgs = consume(bootstrap, topic, 0, timeout=1, settle=0)
    return [
        json.loads(m.value)
        for m in sorted(msgs, key=lambda m: (m.partition, m.offset))
        if json.loads(m.value)["run_id"] == run_id
    ]


def tool_output(name: str, args: dict) -> str:
    if name == "exec" and args["command"] == "make all":
        return FAILED
    if name == "command_status":
        return "job-7: running, 0 of 40 steps done"
    if name == "read_file":
        return f"contents of {args['path']}"
    if name == "write_file":
        return "EACCES: permission denied"
    return f"ok: {args}"


# --- LangChain ------------------------------------------------------------------------


class ScriptedChat(FakeMessagesListChatModel):
    """LangChain's fake chat model, recording every input; tools are bound as is."""

    inputs: list = []

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.inputs.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def lc_script(calls: list[tuple[str, dict]]) -> list[AIMessage]:
    return [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call-{i}"}]) for i, (n, a) in enumerate(calls)
    ] + [AIMessage(content="giving up")]


def lc_tools():
    @tool("exec")
    def exec_(command: str) -> str:
        """Run a shell command."""
        return tool_output("exec", {"command": command})

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return tool_output("read_file", {"path": path})

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        return tool_output("write_file", {"path": path, "text": text})

    @tool
    def command_status(command_id: str) -> str:
        """Poll a background command."""
        return tool_output("command_status", {"command_id": command_id})

    return [exec_, read_file, write_file, command_status]


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


# --- OpenAI Agents SDK ------------------------------------------------------------------


class ScriptedModel(Model):
    """A scripted model: one tool call per turn, then a final answer; records its inputs."""

    def __init__(self, calls: list[tuple[str, dict]]) -> None:
        self.calls = list(calls)
        self.inputs: list = []

    async def get_response(
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        *,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
    ):
        self.inputs.append(input if isinstance(input, str) else list(input))
        i = len(self.inputs) - 1
        if i < len(self.calls):
            name, args = self.calls[i]
            out = [
                ResponseFunctionToolCall(
                    type="function_call", call_id=f"call-{i}", name=name, arguments=json.dumps(args)
                )
            ]
        else:
            out = [
                ResponseOutputMessage(
                    id="msg",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text="giving up", annotations=[])],
                )
            ]
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def oa_tools(ran: list):
    @function_tool(name_override="exec")
    def exec_(command: str) -> str:
        """Run a shell command."""
        ran.append("exec")
        return tool_output("exec", {"command": command})

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append("read_file")
        return tool_output("read_file", {"path": path})

    @function_tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append("write_file")
        return tool_output("write_file", {"path": path, "text": text})

    @function_tool
    def command_status(command_id: str) -> str:
        """Poll a background command."""
        ran.append("command_status")
        return tool_output("command_status", {"command_id": command_id})

    return [exec_, read_file, write_file, command_status]


def last_output(items: list) -> tuple[str, str]:
    out = [x for x in items if isinstance(x, dict) and x.get("type") == "function_call_output"][-1]
    return out["call_id"], out["output"]


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
