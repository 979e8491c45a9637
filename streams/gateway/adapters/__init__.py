"""loopwarden for agent frameworks: the glue between a framework's tool hook and
`GatewayClient`, one module per framework (`streams.gateway.adapters.<module>`).

    langchain      LangChain 1.x agents (`create_agent`)  pip install 'loopwarden[langchain]'
    openai_agents  the OpenAI Agents SDK                  pip install 'loopwarden[openai-agents]'

Importing this package needs neither framework; importing one of the modules needs
that framework (and says which extra to install when it is missing). What the helpers
here share: how a tool's output becomes a `tool_result`, how a warning reaches the
model, `RunStopped`, raised where the framework lets an exception end the run, and
`Prices`, the price table a model call's cost is computed from for `usage` events.

Decisions reach the adapters as the client executes them: one with `enforced: false`
(shadow mode, holdout) says `allow`, so an adapter runs the call, shows the model
nothing and never stops the run on it; the client logs it (see streams.gateway.client).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from detectors.errors import LoopwardenError
from detectors.wire import Decision

if TYPE_CHECKING:
    from ..client import GatewayClient

log = logging.getLogger("loopwarden.gateway")


class RunStopped(LoopwardenError):
    """loopwarden stopped the agent run: an `abort` decision (a loop that survived a
    compaction), or, under the fail-closed policy, no decision within the client's
    timeout. `decision` is the decision that stopped it (`decision.degraded` is true for
    the second), `run_id` the run."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message or f"loopwarden stopped run {decision.run_id!r} ({decision.action})")
        self.decision = decision
        self.run_id = decision.run_id


class Guard:
    """What every adapter holds: the client, the agent its events name, the callback
    told each decision, and the price table of the model calls' cost."""

    def __init__(
        self,
        client: GatewayClient,
        *,
        agent_id: str | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        prices: Prices | Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.on_decision = on_decision
        self.prices = prices if isinstance(prices, Prices) else Prices(prices)


class Prices:
    """What a model's tokens cost, in US dollars per million tokens, input and output:

        Prices({"gpt-4.1": (2.00, 8.00), "gpt-4.1-mini": (0.40, 1.60)})

    Models are looked up by their exact name; a model missing from a table that was
    given costs 0, with one warning per model name (a cost budget would otherwise be
    spent more slowly than the user thinks). No table (None or empty): every call costs
    0, without warnings, and only token budgets apply."""

    def __init__(self, table: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.table: dict[str, tuple[float, float]] = {}
        for model, pair in (table or {}).items():
            if not isinstance(model, str) or not model:
                raise LoopwardenError(f"a price table's model names are non-empty strings, got {model!r}")
            if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(_price(p) for p in pair):
                raise LoopwardenError(
                    f"the price of {model!r} must be a pair of finite numbers >= 0, US dollars per million "
                    f"input and output tokens, e.g. (2.5, 10.0); got {pair!r}"
                )
            self.table[model] = (float(pair[0]), float(pair[1]))
        self._unpriced: set[str | None] = set()

    def cost(self, models: tuple[str | None, ...], input_tokens: int, output_tokens: int) -> tuple[float, str | None]:
        """The cost of one call and the model name it was priced by: the first of `models`
        (names the call goes by, e.g. the one the provider answered with, then the one
        configured) that the table holds; else 0 and the first name given."""
        for model in models:
            if model is not None and model in self.table:
                per_in, per_out = self.table[model]
                return (input_tokens * per_in + output_tokens * per_out) / 1_000_000, model
        name = next((m for m in models if m), None)
        if self.table and name not in self._unpriced:
            self._unpriced.add(name)
            what = f"model {name!r}" if name else "a model call that names no model"
            log.warning("loopwarden: no price for %s in the price table; reported at cost 0", what)
        return 0.0, name


def _price(p: Any) -> bool:
    return isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and p >= 0


def stops_run(d: Decision) -> bool:
    """Whether a decision ends the agent run: an abort, or a fail-closed block given
    because the worker did not answer in time (every further call would wait for the
    timeout and be blocked too)."""
    return d.action == "abort" or (d.action == "block" and bool(d.degraded))


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


def as_result(output: Any, details: Any = None) -> dict[str, Any]:
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


__all__ = ["Prices", "RunStopped", "as_result", "params_of", "stops_run", "text_of", "with_warning"]
