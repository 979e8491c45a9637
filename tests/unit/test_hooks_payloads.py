"""Hook inputs written from each runtime's own documentation, shared by the hook tests
(unit and integration), and checked here to read as loopwarden expects.

- Claude Code: https://code.claude.com/docs/en/hooks ("Common input fields": the
  PreToolUse example; "PostToolUse input"; "PostToolUseFailure input"; "PostCompact
  input"; "SessionEnd input").
- Codex: https://developers.openai.com/codex/hooks and the input schemas
  codex-rs/hooks/schema/generated/{pre-tool-use,post-tool-use,post-compact}.command.input.schema.json
  of https://github.com/openai/codex (Codex has no session-end hook).
- Gemini CLI: https://github.com/google-gemini/gemini-cli/blob/main/docs/hooks/reference.md
  ("Base input schema", BeforeTool, AfterTool, PreCompress, SessionEnd).
"""

from __future__ import annotations

import json

from streams.hooks.runtimes import CALL, COMPACTION, END, FAILURE, RESULT, parse

TRANSCRIPT = "/home/user/.claude/projects/my-project/abc123.jsonl"


def claude(event: str, session: str = "abc123", **kw) -> dict:
    """Claude Code's input for `event` (tool_name, tool_input, tool_use_id, tool_response,
    error, reason, trigger given as keywords where the event has them)."""
    base = {
        "session_id": session,
        "transcript_path": kw.pop("transcript_path", TRANSCRIPT),
        "cwd": kw.pop("cwd", "/home/user/my-project"),
        "hook_event_name": event,
    }
    if event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        base["permission_mode"] = "default"
        base["prompt_id"] = "550e8400-e29b-41d4-a716-446655440000"
        base["tool_name"] = kw.pop("tool_name", "Bash")
        base["tool_input"] = kw.pop(
            "tool_input", {"command": "npm test", "description": "Run test suite", "timeout": 120000}
        )
        base["tool_use_id"] = kw.pop("tool_use_id", "toolu_01ABC123")
    if event == "PostToolUse":
        base["tool_response"] = kw.pop("tool_response", {"stdout": "ok", "stderr": "", "interrupted": False})
        base["duration_ms"] = 12
    if event == "PostToolUseFailure":
        base["error"] = kw.pop("error", "Exit code 1\nError: Cannot find module 'express'")
        base["is_interrupt"] = False
        base["duration_ms"] = 4187
    if event == "PostCompact":
        base["trigger"] = "auto"
        base["compact_summary"] = "Summary of the compacted conversation..."
    if event == "SessionEnd":
        base["reason"] = "other"
    return {**base, **kw}


def codex(event: str, session: str = "019a-codex-thread", **kw) -> dict:
    base = {
        "session_id": session,
        "turn_id": kw.pop("turn_id", "turn-1"),
        "transcript_path": kw.pop("transcript_path", None),
        "cwd": kw.pop("cwd", "/home/user/service"),
        "hook_event_name": event,
        "model": "gpt-5-codex",
    }
    if event in ("PreToolUse", "PostToolUse"):
        base["permission_mode"] = "default"
        base["tool_name"] = kw.pop("tool_name", "Bash")
        base["tool_input"] = kw.pop("tool_input", {"command": "cargo test"})
        base["tool_use_id"] = kw.pop("tool_use_id", "call_1")
    if event == "PostToolUse":
        base["tool_response"] = kw.pop("tool_response", "test result: ok. 12 passed")
    if event == "PostCompact":
        base["trigger"] = "auto"
    return {**base, **kw}


def gemini(event: str, session: str = "gemini-session-1", **kw) -> dict:
    base = {
        "session_id": session,
        "transcript_path": kw.pop("transcript_path", "/home/user/.gemini/tmp/proj/chats/session-1.jsonl"),
        "cwd": kw.pop("cwd", "/home/user/webapp"),
        "hook_event_name": event,
        "timestamp": "2026-08-01T12:00:00.000Z",
    }
    if event in ("BeforeTool", "AfterTool"):
        base["tool_name"] = kw.pop("tool_name", "run_shell_command")
        base["tool_input"] = kw.pop("tool_input", {"command": "npm run build"})
    if event == "AfterTool":
        base["tool_response"] = kw.pop("tool_response", {"llmContent": "built", "returnDisplay": "built"})
    if event == "PreCompress":
        base["trigger"] = "auto"
    if event == "SessionEnd":
        base["reason"] = "exit"
    return {**base, **kw}


PAYLOADS = {"claude-code": claude, "codex": codex, "gemini-cli": gemini}


def body(payload: dict) -> bytes:
    return json.dumps(payload).encode()


def test_every_documented_input_reads_as_its_kind():
    kinds = {
        ("claude-code", "PreToolUse"): CALL,
        ("claude-code", "PostToolUse"): RESULT,
        ("claude-code", "PostToolUseFailure"): FAILURE,
        ("claude-code", "PostCompact"): COMPACTION,
        ("claude-code", "SessionEnd"): END,
        ("codex", "PreToolUse"): CALL,
        ("codex", "PostToolUse"): RESULT,
        ("codex", "PostCompact"): COMPACTION,
        ("gemini-cli", "BeforeTool"): CALL,
        ("gemini-cli", "AfterTool"): RESULT,
        ("gemini-cli", "PreCompress"): COMPACTION,
        ("gemini-cli", "SessionEnd"): END,
    }
    for (runtime, event), kind in kinds.items():
        hook = parse(runtime, event, body(PAYLOADS[runtime](event)))
        assert (hook.kind, hook.session_id) == (kind, PAYLOADS[runtime](event)["session_id"]), (runtime, event)
        if kind in (CALL, RESULT, FAILURE):
            assert hook.tool_name and isinstance(hook.params, dict)


def test_the_tool_use_id_and_the_transcript_are_read_where_the_runtime_gives_them():
    c = parse("claude-code", "PreToolUse", body(claude("PreToolUse")))
    assert (c.tool_use_id, c.transcript_path, c.cwd) == ("toolu_01ABC123", TRANSCRIPT, "/home/user/my-project")
    assert c.params == {"command": "npm test", "description": "Run test suite", "timeout": 120000}
    x = parse("codex", "PostToolUse", body(codex("PostToolUse")))
    assert (x.tool_use_id, x.transcript_path, x.result) == ("call_1", None, "test result: ok. 12 passed")
    g = parse("gemini-cli", "BeforeTool", body(gemini("BeforeTool")))
    assert (g.tool_use_id, g.tool_name) == (None, "run_shell_command")  # Gemini CLI gives no id


def test_failures_are_read_with_their_error():
    f = parse("claude-code", "PostToolUseFailure", body(claude("PostToolUseFailure")))
    assert f.failed and f.error.startswith("Exit code 1")
    failed = {"llmContent": "", "returnDisplay": "", "error": {"message": 'Tool "nope" not found', "type": "x"}}
    g = parse("gemini-cli", "AfterTool", body(gemini("AfterTool", tool_response=failed)))
    assert g.failed and g.error == 'Tool "nope" not found'
    ok = parse("gemini-cli", "AfterTool", body(gemini("AfterTool")))
    assert not ok.failed and ok.result == {"llmContent": "built", "returnDisplay": "built"}
