"""Each runtime's hooks as its documentation gives them: which hook events loopwarden
listens to, how a hook's JSON input reads as one `Hook`, and the answer (stdout; exit
code 0) each decision becomes. Standard library only: `hook.py` imports it.

    Claude Code   https://code.claude.com/docs/en/hooks
    Codex         https://developers.openai.com/codex/hooks, and the schemas in
                  codex-rs/hooks/schema/generated/ of github.com/openai/codex
    Gemini CLI    https://github.com/google-gemini/gemini-cli/blob/main/docs/hooks/reference.md

What a decision does, by runtime (README, "Claude Code, Codex and Gemini CLI"):

- allow: an empty answer (Codex marks any other allow output as a failed hook).
- warn: the message as extra context for the model: `hookSpecificOutput.additionalContext`
  on the call (Claude Code, Codex); Gemini CLI takes extra context only after the tool
  (AfterTool), so the sidecar holds the warning until the call's AfterTool.
- block: a deny with loopwarden's message as the reason the model reads
  (`permissionDecision: "deny"` + `permissionDecisionReason`; Gemini CLI's
  `decision: "deny"` + `reason`).
- abort: the run stopped (`continue: false` + `stopReason`, beside the deny) where the
  runtime's call hook can stop it: Claude Code and Gemini CLI. Codex rejects
  `continue: false` on PreToolUse (the hook counts as failed and the call runs), so
  there the abort is a deny, and every later call of the run is denied too. After a
  tool (PostToolUse, AfterTool) all three accept `continue: false`.
- pause (`PAUSE`: the sidecar's name for an abort by a fleet spend cap, detector
  `fleet_spend_cap`, semantics.md section 11): the call denied with the pause's message
  and the current turn stopped where the call hook can stop it, in the abort's form:
  Claude Code's `continue: false` ends the turn (the session goes on with the user's
  next prompt), Gemini CLI's BeforeTool `continue: false` ends the agent loop of the
  turn. Codex has no way to end a turn from PreToolUse (`continue` and `stopReason`
  are refused there; exit code 2 is a deny too), so there a pause is the deny alone and
  the model's next call is judged again. Unlike an abort, a pause ends no run: nothing
  is remembered, a result hook never stops for it, and the session's next call is
  judged again by the worker.
"""

from __future__ import annotations

import json

CALL, RESULT, FAILURE, COMPACTION, END = "call", "result", "failure", "compaction", "end"
PAUSE = "pause"  # a fleet spend cap's abort: the call and the current turn, not the run (see above)
MAX_INPUT_BYTES = 16 << 20  # 16 times the worker's default event limit (1 MiB)
FAIL_OPEN, FAIL_CLOSED = "fail-open", "fail-closed"


class BadInput(ValueError):
    """A hook's input loopwarden cannot judge; the message says why, for stderr."""


class Runtime:
    """`events`: hook event -> kind; `stops_on_call`: the call hook's answer can stop the
    run (and so the current turn); `context_on_call`: it can carry context for the model;
    `call_event`: the hook that judges a call. (Plain classes, not dataclasses or named
    tuples: the hook imports this module on every tool call, and those cost it
    milliseconds.)"""

    __slots__ = ("call_event", "context_on_call", "events", "name", "stops_on_call")

    def __init__(
        self, name: str, events: dict[str, str], stops_on_call: bool, context_on_call: bool, call_event: str
    ) -> None:
        self.name, self.events, self.call_event = name, events, call_event
        self.stops_on_call, self.context_on_call = stops_on_call, context_on_call


RUNTIMES: dict[str, Runtime] = {
    "claude-code": Runtime(
        "claude-code",
        {
            "PreToolUse": CALL,
            "PostToolUse": RESULT,
            "PostToolUseFailure": FAILURE,
            "PostCompact": COMPACTION,
            "SessionEnd": END,
        },
        stops_on_call=True,
        context_on_call=True,
        call_event="PreToolUse",
    ),
    "codex": Runtime(
        "codex",
        {"PreToolUse": CALL, "PostToolUse": RESULT, "PostCompact": COMPACTION},
        stops_on_call=False,
        context_on_call=True,
        call_event="PreToolUse",
    ),
    "gemini-cli": Runtime(
        "gemini-cli",
        {"BeforeTool": CALL, "AfterTool": RESULT, "PreCompress": COMPACTION, "SessionEnd": END},
        stops_on_call=True,
        context_on_call=False,
        call_event="BeforeTool",
    ),
}


class Hook:
    """One hook's input, read: `kind` is CALL, RESULT, FAILURE, COMPACTION or END; a call
    and a result have tool_name, params and tool_use_id; a failure has `error` and
    `failed`; cwd and transcript_path are None when the runtime gave none."""

    __slots__ = (
        "cwd",
        "error",
        "event",
        "failed",
        "kind",
        "params",
        "result",
        "runtime",
        "session_id",
        "tool_name",
        "tool_use_id",
        "transcript_path",
    )

    def __init__(
        self,
        runtime: str,
        event: str,
        kind: str,
        session_id: str,
        cwd: str | None = None,
        transcript_path: str | None = None,
        tool_name: str | None = None,
        params: object = None,
        tool_use_id: str | None = None,
        result: object = None,
        error: object = None,
        failed: bool = False,
    ) -> None:
        self.runtime, self.event, self.kind, self.session_id = runtime, event, kind, session_id
        self.cwd, self.transcript_path, self.tool_name, self.params = cwd, transcript_path, tool_name, params
        self.tool_use_id, self.result, self.error, self.failed = tool_use_id, result, error, failed


def endpoint(runtime: str, event: str) -> tuple[Runtime, str]:
    """The runtime and the kind of its hook event; BadInput when loopwarden has none."""
    rt = RUNTIMES.get(runtime)
    if rt is None:
        raise BadInput(f"unknown runtime {runtime!r} (loopwarden knows {', '.join(RUNTIMES)})")
    kind = rt.events.get(event)
    if kind is None:
        raise BadInput(f"{runtime} has no hook event {event!r} that loopwarden handles ({', '.join(rt.events)})")
    return rt, kind


def parse(runtime: str, event: str, body: bytes, max_bytes: int = MAX_INPUT_BYTES) -> Hook:
    """A hook's JSON input read as a Hook. Raises BadInput, naming the cause, for input
    that is too large, not a JSON object, or lacks the session or the tool name."""
    _rt, kind = endpoint(runtime, event)
    what = f"the {runtime} {event} hook's input"
    if len(body) > max_bytes:
        raise BadInput(f"{what} is {len(body)} bytes, over loopwarden's limit of {max_bytes} bytes")
    try:
        data = json.loads(body)
    except RecursionError:
        raise BadInput(f"{what} is JSON nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise BadInput(f"{what} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{what} is not a JSON object")
    session = data.get("session_id")
    if not isinstance(session, str) or not session.strip():
        raise BadInput(f"{what} has no session_id")
    cwd, transcript = _text(data.get("cwd")), _text(data.get("transcript_path"))
    if kind in (COMPACTION, END):
        return Hook(runtime, event, kind, session, cwd, transcript)
    tool = data.get("tool_name")
    if not isinstance(tool, str) or not tool.strip():
        raise BadInput(f"{what} has no tool_name")
    params, tool_use_id = data.get("tool_input", {}), _text(data.get("tool_use_id"))
    error: object = None
    if kind == FAILURE:  # Claude Code's PostToolUseFailure: `error` is the text the model got
        error = data.get("error")
        error = error if error is not None else "failed"
    response = data.get("tool_response") if kind == RESULT else None
    failure = response.get("error") if isinstance(response, dict) else None
    if failure:  # Gemini CLI's AfterTool: tool_response.error {message, type} when the tool failed
        message = failure.get("message") if isinstance(failure, dict) else None
        error, response = (message if isinstance(message, str) else failure), None
    failed = error is not None
    return Hook(runtime, event, kind, session, cwd, transcript, tool, params, tool_use_id, response, error, failed)


def answer(runtime: str, event: str, action: str, message: str | None) -> str:
    """What the hook prints for a decision's action (allow, warn, block, abort, or PAUSE
    for a spend cap's pause), exit 0. On a result hook, `warn` is context held from the
    call and `abort` a run already aborted; a pause stops nothing there."""
    rt, kind = endpoint(runtime, event)
    text = f"loopwarden: {message}" if message else "loopwarden stopped this call"
    if action == "allow" or kind in (COMPACTION, END) or (action == "warn" and not message):
        return ""
    if kind == CALL:
        if action == "warn":
            return _dump(_context(event, text)) if rt.context_on_call else ""
        if action in ("abort", PAUSE) and rt.stops_on_call:  # the run's end, or the turn's
            return _dump({"continue": False, "stopReason": text, **_deny(rt, event, text)})
        return _dump(_deny(rt, event, text))
    if action == "warn":
        return _dump(_context(event, text))
    if action == "abort":
        return _dump({"continue": False, "stopReason": text})
    return ""


def fail_answer(runtime: str, event: str, policy: str, cause: str) -> str:
    """The fail policy's answer when loopwarden gave no decision: fail-closed denies a
    call, naming the cause; anything else is an empty answer (the call runs)."""
    rt, kind = endpoint(runtime, event)
    if policy != FAIL_CLOSED or kind != CALL:
        return ""
    return _dump(_deny(rt, event, f"loopwarden: {cause}; the call is denied (fail-closed)"))


def _deny(rt: Runtime, event: str, text: str) -> dict[str, object]:
    if rt.name == "gemini-cli":
        return {"decision": "deny", "reason": text}
    return {
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": "deny",
            "permissionDecisionReason": text,
        }
    }


def _context(event: str, text: str) -> dict[str, object]:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def _dump(obj: dict[str, object]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v else None
