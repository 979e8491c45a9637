"""Call signatures and outcome digests (semantics.md section 2), and privacy mode.

`call_signature` and `outcome` read raw params and results; `fingerprint` turns a raw
event into its privacy form, which the engine judges identically.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import UNSET

from .canonical import UNDEFINED, canon, digest
from .wire import JS_WHITESPACE, ToolCall, ToolResult

_ALIASES = {"bash": "exec", "apply-patch": "apply_patch"}
_UNKNOWN_TOOL = (
    re.compile(r"unknown tool[:\s]+[\"']?([a-z0-9_.-]+)", re.IGNORECASE | re.ASCII),
    re.compile(r"tool\s+[\"']?([a-z0-9_.-]+)[\"']?\s+(?:not found|is not available)", re.IGNORECASE | re.ASCII),
)
_POLL_ACTIONS = frozenset({"poll", "log"})
_SPECIAL_OUTCOMES = frozenset({"exec", "process", "sessions_send", "message", "update_plan"})  # rules 6-9
_SEND_ACTIONS = frozenset(
    {"send", "broadcast", "reply", "thread-reply", "sendWithEffect", "sendAttachment", "upload-file", "sticker", "poll"}
)
_VOLATILE_KEYS = frozenset(
    {
        "messageId",
        "message_id",
        "messageIds",
        "platformMessageId",
        "platformMessageIds",
        "fileId",
        "file_id",
        "fileKey",
        "pollId",
        "poll_id",
        "receipt",
        "runId",
        "idempotencyKey",
        "ts",
        "timestamp",
        "sentAt",
        "deliveredAt",
        "createdAt",
    }
)


_NAMES: dict[str, str] = {}


def normalize_tool_name(name: str) -> str:
    n = _NAMES.get(name)
    if n is None:
        n = name.strip(JS_WHITESPACE).lower()
        n = _ALIASES.get(n, n)
        if len(_NAMES) < 4096:  # a bounded memo of a pure function
            _NAMES[name] = n
    return n


def _is_number(v: Any) -> bool:
    # Float literals arrive as Raw (their JavaScript spelling); a quoted Raw is a
    # non-finite value, which JavaScript still calls a number.
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or isinstance(v, msgspec.Raw)


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def plan_shape(value: Any) -> Any:
    """update_plan params (or result details) reduced to their shape."""
    if not isinstance(value, dict):
        return value
    raw = value.get("plan")
    plan = raw if isinstance(raw, list) else []
    statuses = []
    presence = []
    for step in plan:
        if isinstance(step, dict):
            statuses.append(_str_or_none(step.get("status")))
            s = step.get("step")
            presence.append(isinstance(s, str) and bool(s.strip(JS_WHITESPACE)))
        else:
            statuses.append(None)
            presence.append(False)
    expl = value.get("explanation")
    return {
        "planLength": len(plan),
        "statuses": statuses,
        "stepPresence": presence,
        "hasExplanation": isinstance(expl, str) and bool(expl.strip(JS_WHITESPACE)),
    }


def call_signature(tool_name: str, params: Any) -> str:
    """`args_hash` of a call; `tool_name` must already be normalized."""
    if tool_name == "update_plan":
        params = plan_shape(params)
    return tool_name + ":" + digest(params)


def is_known_poll(tool_name: str, params: Any) -> bool:
    if tool_name == "command_status":
        return True
    return tool_name == "process" and isinstance(params, dict) and params.get("action") in _POLL_ACTIONS


def unknown_tool_in(message: str) -> str | None:
    m = message.strip(JS_WHITESPACE)
    for rx in _UNKNOWN_TOOL:
        hit = rx.search(m)
        if hit:
            return hit.group(1).lower()
    return None


def _exec_outcome(details: dict[str, Any], text: str) -> str | None:
    status = details.get("status")
    if status == "running":
        return digest({"status": status, "tail": _str_or_none(details.get("tail")) or ""})
    if status in ("completed", "failed"):
        agg = details.get("aggregated")
        agg = agg.strip(JS_WHITESPACE) if isinstance(agg, str) else ""
        code = details.get("exitCode")
        return digest(
            {
                "status": status,
                "exitCode": code if _is_number(code) else None,
                "timedOut": details.get("timedOut") is True,
                "output": agg or text,
            }
        )
    if status in ("approval-pending", "approval-unavailable"):
        return digest(
            {
                "status": status,
                "reason": _str_or_none(details.get("reason")),
                "host": _str_or_none(details.get("host")),
                "command": _str_or_none(details.get("command")) or "",
                "warningText": _str_or_none(details.get("warningText")) or "",
            }
        )
    return None


def _nullish(v: Any) -> Any:
    return None if v is UNSET else v


def _process_outcome(action: str, details: dict[str, Any], text: str) -> str:
    g = details.get
    if action == "poll":
        return digest(
            {
                "action": action,
                "status": g("status", UNDEFINED),
                "exitCode": g("exitCode"),
                "exitSignal": g("exitSignal"),
                "aggregated": g("aggregated"),
                "text": text,
            }
        )
    return digest(
        {
            "action": action,
            "status": g("status", UNDEFINED),
            "totalLines": g("totalLines"),
            "totalChars": g("totalChars"),
            "truncated": g("truncated"),
            "exitCode": g("exitCode"),
            "exitSignal": g("exitSignal"),
            "text": text,
        }
    )


def _strip_volatile(v: Any) -> Any:
    if isinstance(v, list):
        return [_strip_volatile(x) for x in v]
    if not isinstance(v, dict):
        return v
    drop_id = (
        isinstance(v.get("id"), str)
        and isinstance(v.get("text"), str)
        and (
            isinstance(v.get("direction"), str)
            or isinstance(v.get("senderId"), str)
            or isinstance(v.get("accountId"), str)
            or isinstance(v.get("conversation"), dict)
        )
    )
    return {k: _strip_volatile(x) for k, x in v.items() if k not in _VOLATILE_KEYS and not (drop_id and k == "id")}


def _is_send_like(tool_name: str, params: Any) -> bool:
    if tool_name == "sessions_send":
        return True
    return tool_name == "message" and isinstance(params, dict) and params.get("action") in _SEND_ACTIONS


def outcome(tool_name: str, params: Any, result: Any, error: Any) -> tuple[str | None, str | None]:
    """(result_hash, unknown_tool_name) of a raw result; result_hash None: no digest."""
    if error is not UNSET:
        m = error if isinstance(error, str) else canon(error).decode()
        return "error:" + digest(m), unknown_tool_in(m)
    if result is UNSET:
        return None, None
    if not isinstance(result, dict):
        return digest(result), None
    d = result.get("details")
    details = d if isinstance(d, dict) else {}
    # The text of its content blocks. (Here, not in a function: this runs for every
    # result. A loop, not a comprehension, which would be a function call of its own.)
    text = ""
    content = result.get("content")
    if isinstance(content, list):
        parts = []
        for e in content:
            if isinstance(e, dict):
                t = e.get("text")
                if isinstance(t, str) and isinstance(e.get("type"), str):
                    parts.append(t)
        text = "\n".join(parts).strip(JS_WHITESPACE)
    if details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop":
        return None, None
    if tool_name in _SPECIAL_OUTCOMES:
        h = _special_outcome(tool_name, params, details, text)
        if h is not None:
            return h, None
    return digest({"details": details, "text": text}), None


def _special_outcome(tool_name: str, params: Any, details: dict[str, Any], text: str) -> str | None:
    """The outcome digest of rules 6 to 8 and update_plan's (None: rule 9's applies)."""
    if tool_name == "exec":
        return _exec_outcome(details, text)
    if tool_name == "process" and isinstance(params, dict):
        action = params.get("action")
        if action in _POLL_ACTIONS:
            return _process_outcome(action, details, text)
    if _is_send_like(tool_name, params):
        return digest(_strip_volatile(details))
    if tool_name == "update_plan":
        return digest({"details": plan_shape(details), "text": ""})
    return None


# --- what the engine reads from an event, in either form --------------------------------


def call_key(ev: ToolCall | ToolResult) -> tuple[str, str]:
    """(normalized tool name, args_hash) of a call or result event."""
    tool, sig, _ = call_facts(ev)
    return tool, sig


def call_facts(ev: ToolCall | ToolResult) -> tuple[str, str, bool]:
    """(normalized tool name, args_hash, known_poll) of a call or result event."""
    name = ev.tool_name  # the key (tool, args_hash), here and in result_facts: a call less per event
    tool = _NAMES.get(name) or normalize_tool_name(name)
    sig = ev.args_hash
    params = ev.params
    if sig is UNSET:
        sig = tool + ":" + digest(plan_shape(params) if tool == "update_plan" else params)
    poll: bool
    if params is UNSET and isinstance(ev, ToolCall) and isinstance(ev.known_poll, bool):
        poll = ev.known_poll
    elif tool == "command_status" or tool == "process":
        poll = is_known_poll(tool, _nullish(params))
    else:
        poll = False  # is_known_poll of any other tool
    return tool, sig, poll


def result_facts(ev: ToolResult) -> tuple[str, str, str | None, str | None]:
    """(normalized tool name, args_hash, result_hash, unknown_tool_name) of a result
    event, in either form."""
    name = ev.tool_name  # the key, as in call_facts
    tool = _NAMES.get(name) or normalize_tool_name(name)
    sig = ev.args_hash
    params = ev.params
    if sig is UNSET:
        sig = tool + ":" + digest(plan_shape(params) if tool == "update_plan" else params)
    if ev.result_hash is not UNSET:
        rh: str | None = ev.result_hash or None
        unknown = None
    else:
        rh, unknown = outcome(tool, params, ev.result, ev.error)
    if ev.unknown_tool_name is not UNSET:
        unknown = ev.unknown_tool_name.lower() or None
    return tool, sig, rh, unknown


def fingerprint(ev: Any) -> Any:
    """The privacy form of an event: hashes instead of params, results and errors."""
    if isinstance(ev, ToolCall):
        _, sig, poll = call_facts(ev)
        return msgspec.structs.replace(ev, params=UNSET, args_hash=sig, known_poll=poll)
    if isinstance(ev, ToolResult):
        _, sig, rh, unknown = result_facts(ev)
        return msgspec.structs.replace(
            ev,
            params=UNSET,
            result=UNSET,
            error=UNSET,
            args_hash=sig,
            result_hash=rh if rh is not None else UNSET,
            unknown_tool_name=unknown if unknown is not None else UNSET,
        )
    return ev
