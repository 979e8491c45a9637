"""loopwarden as LangChain agent middleware (langchain 1.x, `create_agent`).

    async with GatewayClient("127.0.0.1:9092", gateway_id="gw-1") as client:
        agent = create_agent(model, tools, middleware=[LoopwardenMiddleware(client)])
        await agent.ainvoke({"messages": [...]})

Async only (`ainvoke` / `astream`): the client is. What each hook does:

- `abefore_agent` opens the run: its id goes into the agent state.
- `awrap_tool_call` sends each tool call to loopwarden before it runs. `allow`: the tool
  runs. `warn`: the tool runs and the warning is appended to the `ToolMessage` the model
  reads (the tool's own output is what is reported). `block`: the tool does not run;
  the model gets a `ToolMessage` with status "error" whose content is loopwarden's
  message. `abort`: `RunStopped` is raised and ends the run (the ToolNode re-raises
  everything but tool-invocation errors). Every call that ran is reported as a
  `tool_result`: the ToolMessage's text (and a dict artifact as `details`), or its text
  as `error` when its status is "error" or the tool raised.
- `awrap_model_call`, before each model call: a run whose result was answered with
  `abort` is stopped here; a new summary message of LangChain's `SummarizationMiddleware`
  (its compaction; `additional_kwargs["lc_source"] == "summarization"`) is reported as
  `compaction_retry`, once per summary.
- `awrap_model_call`, after each model call: the model's `usage_metadata` (input and
  output tokens, summed over the AI messages of the response) is reported with
  `GatewayClient.usage`, its cost from the price table given as `prices` (US dollars per
  million input and output tokens by model name, looked up by the name the provider
  answered with, `response_metadata["model_name"]`, then by the chat model's
  `model_name` or `model`; no table: cost 0). A call without usage metadata, or with no
  tokens, is not reported. When an abort comes back (the run's budget is spent, or any
  abort received earlier), `RunStopped` ends the run, as for a call's abort; otherwise
  the budget's abort answers the next tool call.
- `aafter_agent` sends `run_end` when the agent finishes (and `RunStopped` sends it
  before it is raised).

Ids. run_id: the `run_id` of the invocation's config if the caller set one
(`agent.ainvoke(..., config={"run_id": uuid})`, as LangGraph's `execution_info.run_id`),
otherwise a new uuid per invocation; it is kept in the agent state
(`loopwarden_run_id`), so a run resumed from a checkpoint after an interrupt goes on
under the same id. agent_id: the `agent_id` given here, else the agent's name
(`create_agent(name=...)`, LangChain's `lc_agent_name` metadata, read from the graph's
config in a model call), else the client's
`agent_id`. gateway_id: the client's. tool_call_id: the model's tool call id.

Policy and privacy are the client's: `GatewayClient(policy=FAIL_OPEN | FAIL_CLOSED,
timeout_s=..., privacy=True)` (privacy mode, the default, sends hashes only). When the
worker does not answer within the timeout, fail-open runs the tool; fail-closed blocks
it and stops the run with `RunStopped` (`decision.degraded` true), as every further call
would wait out the timeout to be blocked again.

Shadow mode: a decision with `enforced: false` says `allow` (what enforcement would have
done is its `shadow_action`), so the tool runs and the model is shown nothing; the client
logs it at debug level. A fleet block (`fleet_tool_breaker`) reaches the model like any
block, and an operator's stop (`operator_stop`) ends the run like any abort.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

try:
    from langchain.agents.middleware.types import AgentMiddleware, AgentState, PrivateStateAttr
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.config import get_config
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "streams.gateway.adapters.langchain needs langchain 1.x: pip install 'loopwarden[langchain]'"
    ) from exc

from detectors.errors import LoopwardenError
from detectors.wire import Decision
from streams.gateway.client import GatewayClient

from . import Guard, Prices, RunStopped, as_result, stops_run, text_of, with_warning

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

RUN_KEY = "loopwarden_run_id"
_MAX_TRACKED_RUNS = 10_000


class LoopwardenState(AgentState):
    loopwarden_run_id: NotRequired[Annotated[str, PrivateStateAttr]]


class LoopwardenMiddleware(AgentMiddleware, Guard):
    """See the module docstring. `on_decision`, if given, is called with every decision
    (a degraded one included) before the adapter acts on it. `prices`: the price table
    of the model calls' cost (a `Prices` or the mapping it takes), None for cost 0."""

    state_schema = LoopwardenState

    def __init__(
        self,
        client: GatewayClient,
        *,
        agent_id: str | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        prices: Prices | Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        AgentMiddleware.__init__(self)
        Guard.__init__(self, client, agent_id=agent_id, on_decision=on_decision, prices=prices)
        self._summaries: dict[str, set[str]] = {}  # run_id -> summary messages already reported

    @property
    def name(self) -> str:
        return "LoopwardenMiddleware"

    # --- the run ----------------------------------------------------------------------

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        info = getattr(runtime, "execution_info", None)
        given = getattr(info, "run_id", None)
        return {RUN_KEY: str(given) if given else uuid.uuid4().hex}

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        run_id = _get(state, RUN_KEY)
        if run_id:
            await self._end(run_id)
        return None

    # --- tool calls -------------------------------------------------------------------

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        call = request.tool_call
        run_id = self._run_id(request.state, request.runtime)
        agent_id = self._agent_id(request.runtime)
        name, args, call_id = call["name"], call.get("args") or {}, call.get("id")
        d = await self.client.check(run_id, name, args, tool_call_id=call_id, agent_id=agent_id)
        if self.on_decision is not None:
            self.on_decision(d)
        if stops_run(d):
            await self._stop(d)
        if d.action == "block":
            return ToolMessage(
                content=d.message or "Blocked by loopwarden.", tool_call_id=call_id, name=name, status="error"
            )
        try:
            out = await handler(request)
        except Exception as exc:
            await self.client.result(
                run_id, name, args, tool_call_id=call_id, agent_id=agent_id, error=f"{type(exc).__name__}: {exc}"
            )
            raise
        if isinstance(out, ToolMessage):
            text = text_of(out.content)
            if out.status == "error":
                await self.client.result(run_id, name, args, tool_call_id=call_id, agent_id=agent_id, error=text)
            else:
                await self.client.result(
                    run_id,
                    name,
                    args,
                    tool_call_id=call_id,
                    agent_id=agent_id,
                    result=as_result(text, out.artifact if isinstance(out.artifact, dict) else None),
                )
            if d.action == "warn" and d.message:
                out = out.model_copy(update={"content": _append(out.content, d.message)})
        else:  # a Command: the tool updated the state itself; its outcome is not text
            await self.client.result(run_id, name, args, tool_call_id=call_id, agent_id=agent_id)
        return out

    # --- model calls ------------------------------------------------------------------

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        run_id = self._run_id(request.state, request.runtime)
        aborted = self.client.aborted.get(run_id)
        if aborted is not None:  # a tool_result was answered with abort
            if self.on_decision is not None:
                self.on_decision(aborted)
            await self._stop(aborted)
        for m in request.messages:
            if isinstance(m, HumanMessage) and (m.additional_kwargs or {}).get("lc_source") == "summarization":
                seen = self._summaries.setdefault(run_id, set())
                key = m.id or str(hash(text_of(m.content)))
                if key not in seen:
                    seen.add(key)
                    if len(self._summaries) > _MAX_TRACKED_RUNS:  # runs that ended without after_agent
                        del self._summaries[next(iter(self._summaries))]
                    await self.client.compaction_retry(run_id)
        response = await handler(request)
        d = await self._report_usage(run_id, request, response)
        if d is not None:  # the run was aborted: a budget spent, or an abort received meanwhile
            if self.on_decision is not None:
                self.on_decision(d)
            await self._stop(d)
        return response

    async def _report_usage(self, run_id: str, request: Any, response: Any) -> Decision | None:
        """Report the model call's token usage; the run's abort, if the client has one."""
        messages = _ai_messages(response)
        metas = [m.usage_metadata for m in messages if m.usage_metadata]
        tokens_in = sum(u.get("input_tokens") or 0 for u in metas)
        tokens_out = sum(u.get("output_tokens") or 0 for u in metas)
        if not tokens_in and not tokens_out:
            return None
        meta = [m.response_metadata or {} for m in messages]
        answered = _name(*(md.get(key) for md in meta for key in ("model_name", "model")))
        configured = _name(getattr(request.model, "model_name", None), getattr(request.model, "model", None))
        cost, model = self.prices.cost((answered, configured), tokens_in, tokens_out)
        return await self.client.usage(
            run_id,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost_usd=cost,
            model=model,
            agent_id=self._agent_id(request.runtime),
        )

    # --- helpers ----------------------------------------------------------------------

    def _run_id(self, state: Any, runtime: Any) -> str:
        run_id: str | None = _get(state, RUN_KEY)
        if run_id:
            return run_id
        info = getattr(runtime, "execution_info", None)
        for candidate in (getattr(info, "run_id", None), getattr(info, "thread_id", None)):
            if candidate:
                return str(candidate)
        raise LoopwardenError(
            "LoopwardenMiddleware found no run id: use it in create_agent(middleware=[...]), "
            "whose before_agent hook sets one"
        )

    def _agent_id(self, runtime: Any) -> str | None:
        if self.agent_id:
            return self.agent_id
        config = getattr(runtime, "config", None) or _graph_config()  # a model call's runtime has none
        name = (config.get("metadata") or {}).get("lc_agent_name")
        return name if isinstance(name, str) and name else None

    async def _end(self, run_id: str) -> None:
        self._summaries.pop(run_id, None)
        await self.client.end_run(run_id)

    async def _stop(self, d: Decision) -> None:
        await self._end(d.run_id)
        raise RunStopped(d)


def _graph_config() -> RunnableConfig:
    """The config of the graph node running now (LangGraph's), or {} outside one."""
    try:
        return get_config()
    except RuntimeError:
        return {}


def _get(state: Any, key: str) -> Any:
    if isinstance(state, dict):
        return state.get(key)
    return getattr(state, key, None)


def _ai_messages(response: Any) -> list[AIMessage]:
    """The AI messages of a model call's result (a ModelResponse, an AIMessage, or an
    ExtendedModelResponse that an inner middleware returned)."""
    if isinstance(response, AIMessage):
        return [response]
    inner = getattr(response, "model_response", response)
    return [m for m in getattr(inner, "result", None) or () if isinstance(m, AIMessage)]


def _name(*candidates: Any) -> str | None:
    """The first candidate that is a non-empty string (a model's name), or None."""
    return next((c for c in candidates if isinstance(c, str) and c), None)


def _append(content: Any, message: str) -> Any:
    """A ToolMessage's content with the warning after it (a string, or one more text block)."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": f"[loopwarden] {message}"}]
    return with_warning(text_of(content), message)


__all__ = ["LoopwardenMiddleware", "LoopwardenState", "RunStopped"]
