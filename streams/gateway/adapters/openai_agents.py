"""loopwarden as OpenAI Agents SDK tool guardrails (`openai-agents`).

    async with GatewayClient("127.0.0.1:9092", gateway_id="gw-1") as client:
        guard = LoopwardenGuard(client)
        agent = Agent(name="builder", tools=guard.protect([run_make, read_file]))
        result = await guard.run(agent, "build the project")   # Runner.run in a run scope

`protect` adds one tool input guardrail and one tool output guardrail
(`agents.tool_input_guardrail` / `tool_output_guardrail`) to each function tool. The
input guardrail sends the call to loopwarden before the tool runs. `allow`: the tool
runs. `warn`: the tool runs and the output guardrail hands the model the tool's output
with the warning after it (`reject_content` with that text: the SDK's only way to change
what the model reads). `block`: `reject_content` with loopwarden's message; the tool
does not run and the model reads the message instead. `abort`: `raise_exception`, so
`Runner.run` raises `ToolInputGuardrailTripwireTriggered` (or, for an abort answered to
a result, `ToolOutputGuardrailTripwireTriggered`) and the run halts; the guardrail's
`output_info` is the decision as a dict. The output guardrail reports what the tool
returned as a `tool_result` (a string as text; a dict as `details`). Compactions are not
reported: the SDK's (`OpenAIResponsesCompactionSession`) happen where no tool guardrail
sees them, so call `guard.client.compaction_retry(run_id)` yourself after one.

Usage. `guard.hooks()` is the SDK's run hooks (`RunHooks`) that report each model
response's usage (`on_llm_end`: `response.usage.input_tokens` and `output_tokens`) with
`GatewayClient.usage`, its cost from the price table given as `prices` (US dollars per
million input and output tokens, by the agent's model name: `agent.model`, or a `Model`'s
`model`; no table: cost 0); a response with no tokens is not reported. `guard.run`
passes them to `Runner.run` (around any `hooks=` of your own, which still get every
call); with `Runner.run` inside `guard.scope()`, pass `hooks=guard.hooks(yours)`. When
an abort comes back, or is known for the run before a model call (`on_llm_start`: a
spent budget, an abort answered to a result), `RunStopped` is raised and ends the run
before the model is called again; otherwise the budget's abort answers the next tool
call.

Shadow mode: a decision with `enforced: false` says `allow` (what enforcement would have
done is its `shadow_action`), so the tool runs and the model is shown nothing; the client
logs it at debug level. A fleet block (`fleet_tool_breaker`) is rejected content like
any block, and an operator's stop (`operator_stop`) halts the run like any abort.

Ids. run_id: one per run scope, `guard.run(...)` or `async with guard.scope(run_id=None)`
(a new uuid unless given; a context variable, which the SDK's tool tasks inherit);
`run_end` is sent when the scope closes, however the run ended. A tool called outside
any scope raises `LoopwardenError` rather than guess. agent_id: the `agent_id` given
here, else the SDK agent's `name` (so each agent of a handoff chain can have its own
config override). gateway_id: the client's. tool_call_id: the SDK's `call_id`.

Policy and privacy are the client's: `GatewayClient(policy=FAIL_OPEN | FAIL_CLOSED,
timeout_s=..., privacy=True)` (privacy mode, the default, sends hashes only). When the
worker does not answer within the timeout, fail-open runs the tool; fail-closed halts
the run (`raise_exception`, `output_info["degraded"]` true), as every further call would
wait out the timeout to be blocked again.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

try:
    from agents import FunctionTool, ModelResponse, RunContextWrapper, RunHooks, Runner
    from agents.tool_guardrails import (
        ToolGuardrailFunctionOutput,
        ToolInputGuardrailData,
        ToolOutputGuardrailData,
        tool_input_guardrail,
        tool_output_guardrail,
    )
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "streams.gateway.adapters.openai_agents needs the OpenAI Agents SDK: pip install 'loopwarden[openai-agents]'"
    ) from exc

import msgspec

from detectors.errors import LoopwardenError
from detectors.wire import Decision
from streams.gateway.client import GatewayClient

from . import Guard, Prices, RunStopped, as_result, params_of, stops_run, text_of, with_warning

if TYPE_CHECKING:
    from agents import TResponseInputItem

_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("loopwarden_run_id", default=None)


class LoopwardenGuard(Guard):
    """See the module docstring. `on_decision`, if given, is called with every decision
    (a degraded one included) before the guardrail acts on it. `prices`: the price table
    of the model calls' cost (a `Prices` or the mapping it takes), None for cost 0."""

    def __init__(
        self,
        client: GatewayClient,
        *,
        agent_id: str | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        prices: Prices | Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        super().__init__(client, agent_id=agent_id, on_decision=on_decision, prices=prices)
        self._warnings: dict[tuple[str, str], str] = {}  # (run_id, call_id) -> warning for the output
        self.input_guardrail = tool_input_guardrail(name="loopwarden")(self._before)
        self.output_guardrail = tool_output_guardrail(name="loopwarden")(self._after)

    def protect(self, tools: Iterable[Any]) -> list[Any]:
        """The tools, each function tool with loopwarden's guardrails added (first, so a
        blocked call reaches no other guardrail); other tools are returned unchanged."""
        out = []
        for t in tools:
            if isinstance(t, FunctionTool):
                t.tool_input_guardrails = [
                    self.input_guardrail,
                    *[g for g in t.tool_input_guardrails or () if g is not self.input_guardrail],
                ]
                t.tool_output_guardrails = [
                    self.output_guardrail,
                    *[g for g in t.tool_output_guardrails or () if g is not self.output_guardrail],
                ]
            out.append(t)
        return out

    @asynccontextmanager
    async def scope(self, run_id: str | None = None) -> AsyncIterator[str]:
        """One agent run: the guardrails use `run_id` (a new uuid unless given) while the
        scope is open; `run_end` is sent when it closes."""
        rid = run_id or uuid.uuid4().hex
        token = _RUN.set(rid)
        try:
            yield rid
        finally:
            _RUN.reset(token)
            for key in [k for k in self._warnings if k[0] == rid]:
                del self._warnings[key]
            await self.client.end_run(rid)

    async def run(self, agent: Any, input: Any, *, run_id: str | None = None, **kwargs: Any) -> Any:
        """`Runner.run(agent, input, **kwargs)` in a run scope, with the guard's hooks
        around `kwargs["hooks"]` if given."""
        kwargs["hooks"] = self.hooks(kwargs.get("hooks"))
        async with self.scope(run_id):
            return await Runner.run(agent, input, **kwargs)

    def hooks(self, inner: RunHooks | None = None) -> RunHooks:
        """Run hooks that report each model response's usage and stop an aborted run
        before its next model call; `inner`, your own run hooks, get every call first."""
        return _UsageHooks(self, inner)

    # --- model calls --------------------------------------------------------------------

    def _stop_if_aborted(self) -> None:
        aborted = self.client.aborted.get(_run_id())
        if aborted is not None:
            self._stop(aborted)

    async def _report_usage(self, agent: Any, response: ModelResponse) -> None:
        usage = response.usage
        tokens_in, tokens_out = usage.input_tokens or 0, usage.output_tokens or 0
        if not tokens_in and not tokens_out:
            return
        cost, model = self.prices.cost((_model_name(agent),), tokens_in, tokens_out)
        d = await self.client.usage(
            _run_id(),
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost_usd=cost,
            model=model,
            agent_id=self.agent_id or _agent_id(agent),
        )
        if d is not None:
            self._stop(d)

    def _stop(self, d: Decision) -> None:
        if self.on_decision is not None:
            self.on_decision(d)
        raise RunStopped(d)  # the scope sends run_end as the exception leaves it

    # --- the guardrails -----------------------------------------------------------------

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        run_id = _run_id()
        d = await self.client.check(
            run_id,
            ctx.tool_name,
            params_of(ctx.tool_arguments),
            tool_call_id=ctx.tool_call_id,
            agent_id=self.agent_id or _agent_id(data.agent),
        )
        if self.on_decision is not None:
            self.on_decision(d)
        info = msgspec.to_builtins(d)
        if stops_run(d):
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        if d.action == "block":
            return ToolGuardrailFunctionOutput.reject_content(d.message or "Blocked by loopwarden.", output_info=info)
        if d.action == "warn" and d.message:
            self._warnings[(run_id, ctx.tool_call_id)] = d.message
        return ToolGuardrailFunctionOutput.allow(output_info=info)

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        run_id = _run_id()
        warning = self._warnings.pop((run_id, ctx.tool_call_id), None)
        await self.client.result(
            run_id,
            ctx.tool_name,
            params_of(ctx.tool_arguments),
            tool_call_id=ctx.tool_call_id,
            agent_id=self.agent_id or _agent_id(data.agent),
            result=as_result(data.output),
        )
        aborted = self.client.aborted.get(run_id)
        if aborted is not None:  # an abort answered to an earlier result of this run
            if self.on_decision is not None:
                self.on_decision(aborted)
            return ToolGuardrailFunctionOutput.raise_exception(output_info=msgspec.to_builtins(aborted))
        if warning:
            return ToolGuardrailFunctionOutput.reject_content(with_warning(text_of(data.output), warning))
        return ToolGuardrailFunctionOutput.allow()


def _passed_on(name: str) -> Any:
    """A run hook that only hands its call on to the user's hooks, if any."""

    async def hook(self: _UsageHooks, *args: Any, **kwargs: Any) -> None:
        if self.inner is not None:
            await getattr(self.inner, name)(*args, **kwargs)

    hook.__name__ = name
    return hook


class _UsageHooks(RunHooks):
    """The guard's run hooks (see LoopwardenGuard.hooks), around the user's own."""

    def __init__(self, guard: LoopwardenGuard, inner: RunHooks | None) -> None:
        self.guard = guard
        self.inner = inner

    async def on_llm_start(
        self, context: RunContextWrapper, agent: Any, system_prompt: str | None, input_items: list[TResponseInputItem]
    ) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)
        self.guard._stop_if_aborted()

    async def on_llm_end(self, context: RunContextWrapper, agent: Any, response: ModelResponse) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)
        await self.guard._report_usage(agent, response)

    on_agent_start = _passed_on("on_agent_start")
    on_agent_end = _passed_on("on_agent_end")
    on_handoff = _passed_on("on_handoff")  # the SDK passes its arguments by keyword
    on_tool_start = _passed_on("on_tool_start")
    on_tool_end = _passed_on("on_tool_end")


def _model_name(agent: Any) -> str | None:
    """The agent's model name: `agent.model` when a string, else a `Model`'s `model`."""
    model = getattr(agent, "model", None)
    name = model if isinstance(model, str) else getattr(model, "model", None)
    return name if isinstance(name, str) and name else None


def _run_id() -> str:
    rid = _RUN.get()
    if rid is None:
        raise LoopwardenError(
            "a loopwarden-guarded tool ran outside a run scope: run the agent with "
            "`await guard.run(agent, input)` or inside `async with guard.scope():`"
        )
    return rid


def _agent_id(agent: Any) -> str | None:
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else None


__all__ = ["LoopwardenGuard", "RunStopped"]
