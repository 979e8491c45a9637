"""Scripted agents for the adapters' tests, without network or API key: LangChain's fake
chat model for `create_agent`, a `Model` subclass for the OpenAI Agents SDK's `Runner`,
each playing a list of tool calls (one per model call, then a final answer) and
reporting the token usage it is given; and the tools they call, whose outputs are fixed."""

from __future__ import annotations

import json

from agents import Model, ModelResponse, Usage, function_tool
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

FAILED = "make: *** No rule to make target 'all'. Stop. (exit 2)"
MODEL = "scripted-1"  # the model name both scripted models answer with


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


def lc_script(calls: list[tuple[str, dict]], usage: tuple[int, int] | None = None) -> list[AIMessage]:
    """One AI message per call, then a final answer; each reports `usage` (input and
    output tokens) and the model's name when given."""
    extra: dict = {}
    if usage is not None:
        tokens_in, tokens_out = usage
        extra = {
            "usage_metadata": {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
            "response_metadata": {"model_name": MODEL},
        }
    return [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call-{i}"}], **extra)
        for i, (n, a) in enumerate(calls)
    ] + [AIMessage(content="giving up", **extra)]


def tool_functions(ran: list) -> list:
    """The four tools as plain functions (name, function); each call's name goes to `ran`."""

    def exec_(command: str) -> str:
        """Run a shell command."""
        ran.append("exec")
        return tool_output("exec", {"command": command})

    def read_file(path: str) -> str:
        """Read a file."""
        ran.append("read_file")
        return tool_output("read_file", {"path": path})

    def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append("write_file")
        return tool_output("write_file", {"path": path, "text": text})

    def command_status(command_id: str) -> str:
        """Poll a background command."""
        ran.append("command_status")
        return tool_output("command_status", {"command_id": command_id})

    return [("exec", exec_), ("read_file", read_file), ("write_file", write_file), ("command_status", command_status)]


def lc_tools(ran: list | None = None) -> list:
    """The four tools as LangChain tools."""
    return [tool(name)(f) for name, f in tool_functions(ran if ran is not None else [])]


# --- OpenAI Agents SDK ------------------------------------------------------------------


class ScriptedModel(Model):
    """A scripted model: one tool call per turn, then a final answer; records its inputs.
    Each response reports `usage` (input and output tokens) when given; `model` is its
    name, as an SDK model's."""

    def __init__(
        self, calls: list[tuple[str, dict]], usage: tuple[int, int] | None = None, call_ids: str = "call"
    ) -> None:
        self.calls = list(calls)
        self.call_ids = call_ids  # the calls' ids are f"{call_ids}-{i}"
        self.usage = usage
        self.model = MODEL
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
                    type="function_call", call_id=f"{self.call_ids}-{i}", name=name, arguments=json.dumps(args)
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
        usage = Usage()
        if self.usage is not None:
            tokens_in, tokens_out = self.usage
            usage = Usage(
                requests=1, input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out
            )
        return ModelResponse(output=out, usage=usage, response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def oa_tools(ran: list) -> list:
    """The four tools as the OpenAI Agents SDK's function tools."""
    return [function_tool(f, name_override=name) for name, f in tool_functions(ran)]


def last_output(items: list) -> tuple[str, str]:
    """The call id and text of the newest tool output in a model's input."""
    out = [x for x in items if isinstance(x, dict) and x.get("type") == "function_call_output"][-1]
    return out["call_id"], out["output"]
