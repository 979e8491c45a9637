"""The pure part of the runtimes' hooks: each decision in each runtime's documented
answer format, malformed input refused with a clear cause, the command hook's fail
policy when no sidecar answers, its imports, and transcripts read for usage.

Answer formats: Claude Code https://code.claude.com/docs/en/hooks ("PreToolUse decision
control", "JSON output", "Add context for Claude"); Codex
https://developers.openai.com/codex/hooks and codex-rs/hooks/src/engine/output_parser.rs
of https://github.com/openai/codex (PreToolUse rejects continue:false, stopReason and
permissionDecision "allow" without updatedInput as unsupported, so allow is an empty
answer); Gemini CLI https://github.com/google-gemini/gemini-cli/blob/main/docs/hooks/reference.md
(BeforeTool decision/reason and continue; AfterTool hookSpecificOutput.additionalContext).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from detectors.config import load_config
from detectors.fleet import FleetView, SpendCapSignal
from streams.hooks import hook as hook_mod
from streams.hooks.runtimes import PAUSE, RUNTIMES, BadInput, answer, fail_answer, parse
from streams.hooks.sidecar import Sidecar
from streams.hooks.transcripts import ModelCall, Tail
from tests.unit.test_client_unit import FakeWorker, offline
from tests.unit.test_hooks_payloads import PAYLOADS, body, claude, codex, gemini

ROOT = Path(__file__).resolve().parents[2]
MSG = "exec called 20 times with identical arguments"


def out(runtime: str, event: str, action: str, message: str | None = MSG):
    text = answer(runtime, event, action, message)
    return json.loads(text) if text else None


def test_allow_is_an_empty_answer_in_every_runtime():
    for runtime, event in (("claude-code", "PreToolUse"), ("codex", "PreToolUse"), ("gemini-cli", "BeforeTool")):
        assert answer(runtime, event, "allow", None) == ""
        assert answer(runtime, event, "allow", "ignored") == ""


def test_claude_code_answers():
    deny = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": f"loopwarden: {MSG}",
    }
    assert out("claude-code", "PreToolUse", "block") == {"hookSpecificOutput": deny}
    assert out("claude-code", "PreToolUse", "abort") == {
        "continue": False,
        "stopReason": f"loopwarden: {MSG}",
        "hookSpecificOutput": deny,
    }
    assert out("claude-code", "PreToolUse", "warn") == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": f"loopwarden: {MSG}"}
    }
    assert out("claude-code", "PostToolUse", "abort") == {"continue": False, "stopReason": f"loopwarden: {MSG}"}
    assert out("claude-code", "PostToolUseFailure", "warn") == {
        "hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": f"loopwarden: {MSG}"}
    }
    for event in ("PostCompact", "SessionEnd"):
        assert answer("claude-code", event, "abort", MSG) == ""


def test_codex_cannot_stop_a_run_from_pretooluse_so_abort_is_a_deny():
    deny = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": f"loopwarden: {MSG}",
    }
    assert out("codex", "PreToolUse", "block") == {"hookSpecificOutput": deny}
    assert out("codex", "PreToolUse", "abort") == {"hookSpecificOutput": deny}  # no continue / stopReason
    assert out("codex", "PreToolUse", "warn") == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": f"loopwarden: {MSG}"}
    }
    assert out("codex", "PostToolUse", "abort") == {"continue": False, "stopReason": f"loopwarden: {MSG}"}


def test_gemini_cli_answers_and_warns_only_after_the_tool():
    assert out("gemini-cli", "BeforeTool", "block") == {"decision": "deny", "reason": f"loopwarden: {MSG}"}
    assert out("gemini-cli", "BeforeTool", "abort") == {
        "continue": False,
        "stopReason": f"loopwarden: {MSG}",
        "decision": "deny",
        "reason": f"loopwarden: {MSG}",
    }
    assert answer("gemini-cli", "BeforeTool", "warn", MSG) == ""  # BeforeTool takes no context
    assert out("gemini-cli", "AfterTool", "warn") == {
        "hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": f"loopwarden: {MSG}"}
    }


PAUSED = "Paused: the fleet spend cap daily is reached for agent ci (calls: 100 used of 100 in its window); ..."


def test_a_pause_is_the_deny_and_stops_the_turn_where_the_call_hook_can():
    """A spend cap's pause (the sidecar's PAUSE) denies the call with its message in every
    runtime, and stops the current turn with `continue: false` where the call hook can:
    Claude Code and Gemini CLI; Codex refuses continue/stopReason on PreToolUse, so there
    it is the deny alone. After a tool, a pause stops nothing (it ends no run)."""
    text = f"loopwarden: {PAUSED}"
    claude_deny = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": text}
    assert out("claude-code", "PreToolUse", PAUSE, PAUSED) == {
        "continue": False,
        "stopReason": text,
        "hookSpecificOutput": claude_deny,
    }
    assert out("codex", "PreToolUse", PAUSE, PAUSED) == {"hookSpecificOutput": claude_deny}
    assert out("gemini-cli", "BeforeTool", PAUSE, PAUSED) == {
        "continue": False,
        "stopReason": text,
        "decision": "deny",
        "reason": text,
    }
    for runtime, rt in RUNTIMES.items():
        for event, kind in rt.events.items():
            if kind != "call":
                assert answer(runtime, event, PAUSE, PAUSED) == "", (runtime, event)


SPEND_CONFIG = load_config(
    json.dumps(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "loopwarden": {
                "fleet": {"spendCaps": [{"id": "daily", "per": "agent", "windowMs": 86_400_000, "toolCalls": 100}]}
            },
        }
    )
)


def spend_signal(now_ms: int, key: str, until_ts: int | None = None) -> SpendCapSignal:
    """The record the spend stage publishes when cap `daily` is reached for `key` now (a
    lift: the same with an earlier until_ts)."""
    start = now_ms // 86_400_000 * 86_400_000
    end = start + 86_400_000
    return SpendCapSignal(
        id=f"daily:{key}:{start}",
        cap="daily",
        key=key,
        window_start=start,
        window_end=end,
        from_ts=max(start, now_ms - 1000),
        until_ts=end if until_ts is None else until_ts,
        unit="calls",
        used=100,
        ceiling=100,
    )


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_the_sidecar_answers_a_pause_in_the_runtimes_form_and_judges_the_next_call_again(runtime):
    """Through the sidecar and a client answered by the offline fold: a call allowed, then
    the cap reached for the session's agent: the next call is paused (the deny, and the
    turn stopped where the call hook can), the earlier call's result hook stops nothing,
    and once the cap is lifted the session's next call is judged again and allowed."""
    rt, make = RUNTIMES[runtime], PAYLOADS[runtime]
    result_event = next(e for e, k in rt.events.items() if k == "result")
    worker = FakeWorker(SPEND_CONFIG, FleetView())
    sidecar = Sidecar(offline("gw-hooks", worker), agent_id="ci")
    session = f"pause-{runtime}"

    def hook(event: str, i: int, **kw) -> str:
        extra = {"tool_use_id": f"call-{i}"} if runtime != "gemini-cli" else {}
        payload = make(event, session, tool_input={"command": f"make step{i}"}, transcript_path=None, **extra, **kw)
        reply = asyncio.run(sidecar.handle(runtime, event, body(payload), {}))
        assert (reply.status, reply.error) == (200, None)
        return reply.body

    assert hook(rt.call_event, 0) == ""
    now = int(time.time() * 1000)
    assert worker.fleet is not None
    worker.fleet.put(spend_signal(now, "ci"))
    paused = hook(rt.call_event, 1)
    d = worker.decisions[-1]
    assert (d.action, d.level, d.detector, d.fleet_signal) == (
        "abort",
        "critical",
        "fleet_spend_cap",
        f"daily:ci:{now // 86_400_000 * 86_400_000}",
    )
    assert d.message is not None and d.message.startswith("Paused: the fleet spend cap daily is reached for agent ci")
    assert paused == answer(runtime, rt.call_event, PAUSE, d.message)
    assert ('"continue":false' in paused) == rt.stops_on_call
    assert sidecar.client.aborted.get(session) is None
    assert hook(result_event, 0, tool_response="ok") == ""  # a pause ends no run: nothing is stopped after it
    worker.fleet.put(spend_signal(now, "ci", until_ts=int(time.time() * 1000)))  # the operator's lift
    time.sleep(0.002)
    assert hook(rt.call_event, 2) == ""
    calls = [e for e in worker.events if type(e).__name__ == "ToolCall"]
    assert len(calls) == 3  # each call was sent and judged
    assert [d.action for d in worker.decisions if d.tool_name is not None] == ["allow", "abort", "allow"]
    assert (sidecar.counts["answer_pause"], sidecar.counts["answer_abort"], sidecar.counts["answer_allow"]) == (1, 0, 2)


def test_fail_closed_denies_calls_only():
    assert json.loads(fail_answer("codex", "PreToolUse", "fail-closed", "no sidecar")) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "loopwarden: no sidecar; the call is denied (fail-closed)",
        }
    }
    assert json.loads(fail_answer("gemini-cli", "BeforeTool", "fail-closed", "x"))["decision"] == "deny"
    assert fail_answer("claude-code", "PreToolUse", "fail-open", "x") == ""
    assert fail_answer("claude-code", "PostToolUse", "fail-closed", "x") == ""


@pytest.mark.parametrize(
    "raw,cause",
    [
        (b"not json {", "is not JSON"),
        (b"\xff\xfe\x00", "is not JSON"),
        (b"[1, 2]", "is not a JSON object"),
        (json.dumps({"tool_name": "Bash"}).encode(), "has no session_id"),
        (json.dumps({"session_id": "  ", "tool_name": "Bash"}).encode(), "has no session_id"),
        (json.dumps({"session_id": "s"}).encode(), "has no tool_name"),
        (json.dumps({"session_id": "s", "tool_name": " "}).encode(), "has no tool_name"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_malformed_input_names_its_cause(raw, cause):
    with pytest.raises(BadInput, match=cause):
        parse("claude-code", "PreToolUse", raw)


def test_unknown_endpoints_and_oversized_input_are_refused():
    with pytest.raises(BadInput, match="unknown runtime 'cursor'"):
        parse("cursor", "PreToolUse", b"{}")
    with pytest.raises(BadInput, match="has no hook event 'SessionEnd'"):
        parse("codex", "SessionEnd", b"{}")
    with pytest.raises(BadInput, match="over loopwarden's limit of 1000 bytes"):
        parse("claude-code", "PreToolUse", body(claude("PreToolUse", tool_input={"c": "x" * 2000})), 1000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hook(argv: list[str], stdin: bytes) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = hook_mod.run(argv, io.BytesIO(stdin), stdout, stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def test_hook_without_a_sidecar_follows_its_fail_policy():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, stdout, stderr = hook(["claude-code", "PreToolUse", "--url", url], body(claude("PreToolUse")))
    assert (code, stdout) == (1, "") and f"cannot reach the loopwarden sidecar at {url}" in stderr
    code, stdout, stderr = hook(["gemini-cli", "BeforeTool", "--fail-closed", "--url", url], body(gemini("BeforeTool")))
    assert code == 0 and "cannot reach the loopwarden sidecar" in stderr
    deny = json.loads(stdout)
    assert deny["decision"] == "deny" and "cannot reach the loopwarden sidecar" in deny["reason"]
    assert "fail-closed" in deny["reason"]
    code, stdout, _ = hook(["codex", "PostToolUse", "--fail-closed", "--url", url], body(codex("PostToolUse")))
    assert (code, stdout) == (1, "")  # nothing to deny after the tool ran


def test_hook_refuses_input_far_over_the_limit_without_sending_it():
    big = body(claude("PreToolUse", tool_input={"content": "x" * 5000}))
    code, stdout, stderr = hook(
        ["claude-code", "PreToolUse", "--fail-closed", "--max-input-bytes", "4096", "--url", "http://127.0.0.1:1"],
        big,
    )
    assert code == 0 and "over 4096 bytes" in stderr and "cannot reach" not in stderr
    assert json.loads(stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_hook_command_line_errors_are_named():
    code, stdout, stderr = hook(["claude-code"], b"{}")
    assert (code, stdout) == (1, "") and "give the runtime and the hook event" in stderr
    code, _, stderr = hook(["claude-code", "Stop", "--fail-closed"], b"{}")
    assert code == 2 and "no hook event 'Stop'" in stderr  # 2 blocks in every runtime
    code, _, stderr = hook(["codex", "PreToolUse", "--timeout-s", "soon"], b"{}")
    assert code == 1 and "--timeout-s takes a number" in stderr


def test_the_command_hook_imports_nothing_but_the_standard_library():
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import streams.hooks.hook"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    names = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    ours = {n for n in names if n.split(".")[0] in ("streams", "detectors")}
    assert ours == {"streams", "streams.hooks", "streams.hooks.runtimes", "streams.hooks.hook"}
    heavy = {"msgspec", "aiokafka", "asyncio", "json5", "dataclasses", "typing", "argparse", "http", "ssl", "logging"}
    assert not names & heavy, names & heavy


def test_the_console_script_runs_the_hook():
    exe = Path(sys.executable).parent / "loopwarden-hook"
    assert exe.exists(), "pip install -e . installs the loopwarden-hook console script"
    p = subprocess.run(
        [str(exe), "codex", "PreToolUse", "--fail-closed", "--url", f"http://127.0.0.1:{free_port()}"],
        input=body(codex("PreToolUse")),
        capture_output=True,
        env={**os.environ, "LOOPWARDEN_HOOKS_URL": ""},
    )
    assert p.returncode == 0 and b"Traceback" not in p.stderr
    assert json.loads(p.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def write_lines(path: Path, entries: list[dict]) -> None:
    with path.open("a") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")


def test_claude_code_transcript_usage_once_per_message(tmp_path):
    path = tmp_path / "abc123.jsonl"
    usage = {"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 5, "output_tokens": 30}
    msg = {"id": "msg_1", "model": "claude-sonnet-4-5", "usage": usage}
    write_lines(path, [{"type": "user", "message": {"content": "hi"}}, {"type": "assistant", "message": msg}])
    write_lines(path, [{"type": "assistant", "message": msg}])  # the same response, another content block
    tail = Tail("claude-code", str(path))
    assert tail.read() == [ModelCall(215, 30, "claude-sonnet-4-5")]
    with path.open("a") as f:
        f.write('{"type": "assistant", "message": {"id": "msg_2", "usage": {"output_tokens": 4}')  # being written
    assert tail.read() == []
    with path.open("a") as f:
        f.write("}}\nnot json\n")
    assert tail.read() == [ModelCall(0, 4, None)]
    assert tail.read() == []


def test_codex_and_gemini_transcript_usage(tmp_path):
    rollout = tmp_path / "rollout.jsonl"
    count = {"type": "event_msg", "payload": {"type": "token_count", "info": None}}
    info = {
        "total_token_usage": {"input_tokens": 900, "output_tokens": 33},
        "last_token_usage": {"input_tokens": 900, "cached_input_tokens": 400, "output_tokens": 33},
    }
    write_lines(
        rollout,
        [
            {"type": "turn_context", "payload": {"model": "gpt-5-codex"}},
            count,  # rate limits only
            {"type": "event_msg", "payload": {"type": "token_count", "info": info}},
            {"type": "event_msg", "payload": {"type": "token_count", "info": info}},  # repeated: not counted
        ],
    )
    assert Tail("codex", str(rollout)).read() == [ModelCall(900, 33, "gpt-5-codex")]
    chat = tmp_path / "session.jsonl"
    tokens = {"input": 120, "output": 15, "cached": 80, "thoughts": 4, "tool": 0, "total": 139}
    write_lines(
        chat,
        [
            {"sessionId": "s", "projectHash": "h", "startTime": "t"},
            {"id": "m1", "type": "gemini", "content": "", "model": "gemini-2.5-pro"},
            {"id": "m1", "type": "gemini", "content": "", "model": "gemini-2.5-pro", "tokens": tokens},
            {"id": "m1", "type": "gemini", "content": "more", "model": "gemini-2.5-pro", "tokens": tokens},
        ],
    )
    assert Tail("gemini-cli", str(chat)).read() == [ModelCall(120, 19, "gemini-2.5-pro")]
    assert Tail("gemini-cli", str(tmp_path / "missing.jsonl")).read() == []
