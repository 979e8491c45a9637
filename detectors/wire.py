"""Wire types of wire-format.md: the events gateways publish and the decisions we answer.

One tagged union on `type`, one module-level decoder. Constraints live on the types so a
bad event fails at decode with a message naming the field. JSON float literals inside
free-form values (`params`, `result`, `error`) decode to their JavaScript spelling
(see canonical.py), which keeps hashing exact and fast.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from .canonical import FLOAT_HOOK, js_float_literal
from .errors import DecodeError

# JavaScript's String#trim: Unicode white space and line terminators.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)

# Limits every reader applies alike (wire-format.md, "Bad input").
MAX_SAFE_INTEGER = 2**53 - 1  # what every client language holds exactly
_JS_SPACE_OR_EMPTY = frozenset(JS_WHITESPACE) | {""}
MAX_DEPTH = 128  # JSON nesting, the event object itself counted as level 1
MAX_COST_USD = 1e9  # a usage event's cost_usd, from 0 to this

NonEmpty = Annotated[str, Meta(min_length=1)]
ToolName = Annotated[str, Meta(min_length=1)]  # blank after trimming: refused in decode_event
Seq = Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
Millis = Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]


class _Event(Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    run_id: NonEmpty
    seq: Seq
    gateway_id: NonEmpty
    agent_id: str | None = None
    session_id: str | None = None
    ts: Millis | None = None


class ToolCall(_Event, tag="tool_call", frozen=True):
    tool_name: ToolName
    tool_call_id: str | None = None
    params: Any = UNSET
    args_hash: str | UnsetType = UNSET
    known_poll: bool | UnsetType = UNSET


class ToolResult(_Event, tag="tool_result", frozen=True):
    tool_name: ToolName
    tool_call_id: str | None = None
    params: Any = UNSET
    args_hash: str | UnsetType = UNSET
    result: Any = UNSET
    error: Any = UNSET
    result_hash: str | UnsetType = UNSET
    unknown_tool_name: str | UnsetType = UNSET
    failed: bool | UnsetType = UNSET  # privacy mode: the tool failed (semantics.md section 9)


Tokens = Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
CostUsd = Annotated[float, Meta(ge=0, le=MAX_COST_USD)]


class Usage(_Event, tag="usage", frozen=True):
    """What one model call of the run used (semantics.md section 8)."""

    input_tokens: Tokens = 0
    output_tokens: Tokens = 0
    cost_usd: CostUsd = 0.0
    model: str | None = None


class CompactionRetry(_Event, tag="compaction_retry", frozen=True):
    pass


class RunEnd(_Event, tag="run_end", frozen=True):
    pass


Event = ToolCall | ToolResult | Usage | CompactionRetry | RunEnd


class Decision(Struct, frozen=True, gc=False):
    """The verdict for one event; field order is the wire order. The engine builds one
    per call by position (matching 20 keywords costs msgspec far more: benchmarks.replay); new
    fields go at the end, with defaults (so decisions recorded before them still decode).
    Every field is written, but `degraded`, which only a client sets."""

    run_id: str
    seq: int
    gateway_id: str
    agent_id: str | None
    tool_call_id: str | None
    tool_name: str | None  # None: a `usage` event's decision
    ts: int | None
    event_id: str
    action: str
    level: str
    detector: str | None
    count: int | None
    message: str | None
    warning_key: str | None
    paired_tool_name: str | None
    args_hash: str | None
    config_hash: str
    fleet_signal: str | None = None  # the breaker or stop order applied (semantics.md section 9)
    enforced: bool = True  # false: a run in shadow mode or held out (section 10); action is then allow
    shadow_action: str | None = None  # when not enforced: what enforcement would have done
    degraded: bool | UnsetType = UNSET  # True only from a client that gave up waiting (never from a worker)


_decoder = msgspec.json.Decoder(Event, float_hook=FLOAT_HOOK)
_decision_decoder = msgspec.json.Decoder(Decision)
_value_decoder = msgspec.json.Decoder(float_hook=FLOAT_HOOK)
_encoder = msgspec.json.Encoder()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_OPENERS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
# Strings that are stored in a run's state or published again in a decision.
_ID_FIELDS = (
    "run_id",
    "gateway_id",
    "agent_id",
    "tool_call_id",
    "tool_name",
    "args_hash",
    "result_hash",
    "unknown_tool_name",
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text (strings skipped)."""
    depth = deepest = 0
    for m in _OPENERS.finditer(data):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
        elif c in (b"]", b"}"):
            depth -= 1
    return deepest


# Every byte but the two openers: `len(data.translate(None, _NOT_OPENERS))` counts the
# openers in one pass (two `count`s take two, and cost more: benchmarks.replay).
_NOT_OPENERS = bytes(b for b in range(256) if b not in b"[{")


def decode_event(data: bytes | str) -> Event:
    """Decode one event; raise DecodeError naming the problem.

    Every reader (worker, offline replay, audit) decodes through here, so the limits of
    wire-format.md ("Bad input") hold alike: nesting depth, `seq` and `ts` range (on the
    types), and valid Unicode in the ids and the tool name."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # Depth can only exceed the limit when there are more openers than the limit: one C
    # pass clears almost every event; the exact scan runs only on the rest.
    if len(raw.translate(None, _NOT_OPENERS)) > MAX_DEPTH:
        deepest = nesting_depth(raw)
        if deepest > MAX_DEPTH:
            raise DecodeError(f"JSON nested {deepest} levels deep; the limit is {MAX_DEPTH}")
    try:
        ev = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc)) from None
    except msgspec.DecodeError as exc:
        # msgspec refuses a few valid JSON texts (lone surrogate escapes, numbers out of
        # double range); the standard parser takes those, and the types are checked again.
        try:
            obj = json.loads(data, parse_float=js_float_literal, parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise DecodeError(f"invalid JSON: {exc}") from None
        try:
            ev = msgspec.convert(obj, Event)
        except msgspec.ValidationError as exc2:
            raise DecodeError(str(exc2)) from None
        # Only this path can hold a lone surrogate (msgspec refuses them): in an id it
        # could not be published again, so it is a bad event; inside params or result it
        # is dropped when hashing, as JavaScript's sanitizer does.
        for field in _ID_FIELDS:
            v = getattr(ev, field, None)
            if isinstance(v, str) and _SURROGATE.search(v):
                raise DecodeError(f"a lone surrogate escape is not valid Unicode - at `$.{field}`") from None
    name = getattr(ev, "tool_name", "x")
    if name[:1] in _JS_SPACE_OR_EMPTY and not name.strip(JS_WHITESPACE):  # a name starting otherwise is not blank
        raise DecodeError("Expected `str` that is not blank after trimming - at `$.tool_name`")
    return ev


def encode(obj: Any) -> bytes:
    """JSON bytes of a wire object (a Decision or an Event)."""
    return _encoder.encode(obj)


def decode_value(data: bytes | str) -> Any:
    """A free-form JSON value as events carry it (floats in their JavaScript spelling)."""
    return _value_decoder.decode(data)


def decode_decision(data: bytes | str) -> Decision:
    return _decision_decoder.decode(data)
