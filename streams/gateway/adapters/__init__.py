"""loopwarden for agent frameworks: the glue between a framework's tool hook and
`GatewayClient`, one module per framework (`streams.gateway.adapters.<module>`).

    langchain      LangChain 1.x agents (`create_agent`)  pip install 'loopwarden[langchain]'
    openai_agents  the OpenAI Agents SDK                  pip install 'loopwarden[openai-agents]'

Importing this package needs neither framework; importing one of the modules needs
that framework (and says which extra to install when it is missing). What the helpers
here share: how a tool's output becomes a `tool_result`, how a warning reaches the
model, and `RunStopped`, raised where the framework lets an exception end the run.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from detectors.errors import LoopwardenError
from detectors.wire import Decision


class RunStopped(LoopwardenError):
    """loopwarden stopped the agent run: an `abort` decision (a loop that survived a
    compaction), or, under the fail-closed policy, no decision within the client's
    timeout. `decision` is the decision that stopped it (`decision.degraded` is true for
    the second), `run_id` the run."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message or f"loopwarden stopped run {decision.run_id!r} ({decision.action})")
        self.decision = decision
        self.run_id = decision.run_id


def stops_run(d: Decision) -> bool:
    """Whether a decision ends the agent run: an abort, or a fail-closed block given
    because the worker did not answer in time (every further call would wait for the
    timeout and be blocked too)."""
    return d.action == "abort" or (d.action == "block" and d.degraded)


def text_of(output: Any) -> str:
    """The text a tool's output shows the model: a string as is, a list of content blocks
    by their text parts, anything else as JSON (or its str when it is not JSON)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(b, (str, dict)) for b in output):
        parts = [b if isinstance(b, str) else b.get("text") for b in output]
        return "\n".join(p for p in parts if isinstance(p, str))
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def as_result(output: Any, details: Any = None) -> dict:
    """A tool's output in the result shape the detectors read (semantics.md): its text as
    one text content block, and a JSON object the tool returned (or gave as `details`,
    e.g. a LangChain artifact) as `details`, so outcome digests see the same fields
    whether the tool returned a string or an object."""
    if details is None and isinstance(output, dict):
        details, text = output, ""
    else:
        text = text_of(output)
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if isinstance(details, dict) and _jsonable(details):
        out["details"] = details
    return out


def params_of(arguments: Any) -> Any:
    """A call's arguments as JSON: a JSON string decoded (the OpenAI SDK passes the raw
    string the model wrote), anything JSON-encodable as is, anything else by its str."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
    return arguments if _jsonable(arguments) else str(arguments)


def with_warning(text: str, message: str) -> str:
    """A tool's text output with loopwarden's warning after it."""
    return f"{text}\n\n[loopwarden] {message}" if text else f"[loopwarden] {message}"


def _jsonable(value: Any) -> bool:
    try:
        msgspec.json.encode(value)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


__all__ = ["RunStopped", "as_result", "params_of", "stops_run", "text_of", "with_warning"]
