"""The runtimes' hooks on a real broker and a real worker: `loopwarden hooks serve` as a
process, each hook a real `loopwarden-hook` process, and again the fast hook (the C program `hooks
install` builds, streams/hooks/fast.py), fed the runtime's documented input
(tests/unit/test_hooks_payloads.py cites the pages: Claude Code
https://code.claude.com/docs/en/hooks, Codex https://developers.openai.com/codex/hooks,
Gemini CLI https://github.com/google-gemini/gemini-cli/blob/main/docs/hooks/reference.md).

Per runtime: a looping session is warned, then denied, in the runtime's own answer
format, and every answer is what offline replay of the events the sidecar sent decides
(the worker published exactly the replayed decisions); a varied session is never
denied; a session end ends the run; with the worker stopped, fail-open lets calls
through and fail-closed denies them. The sidecar survives 1,000 malformed requests
mixed with valid ones. Run budgets from a Claude Code transcript's usage."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from detectors import replay
from detectors.config import load_config
from detectors.fingerprint import normalize_tool_name
from detectors.wire import RunEnd, ToolCall, decode_event, encode
from streams.hooks import fast
from streams.hooks.runtimes import RUNTIMES, answer
from streams.tools.harness import HOOK
from tests.integration.harness import consume, sidecar_stack
from tests.unit.test_hooks_payloads import PAYLOADS

pytestmark = pytest.mark.integration

CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}},
    "loopwarden": {"budgets": {"runTokens": 2000}},
}
RESULT_EVENT = {"claude-code": "PostToolUse", "codex": "PostToolUse", "gemini-cli": "AfterTool"}
END_EVENT = {"claude-code": "SessionEnd", "gemini-cli": "SessionEnd"}  # Codex has no session-end hook
LOOP = {  # the same call, the same output, each time
    "claude-code": (
        {"command": "pytest tests/test_api.py"},
        {"stdout": "1 failed", "stderr": "", "interrupted": False},
    ),
    "codex": ({"command": "cargo test"}, "error: 1 test failed"),
    "gemini-cli": ({"command": "npm run build"}, {"llmContent": "build failed", "returnDisplay": "build failed"}),
}


@pytest.fixture(scope="module")
def stack(bootstrap, tmp_path_factory):
    yield from sidecar_stack(bootstrap, tmp_path_factory.mktemp("hooks"), CONFIG, "gw-hooks")


@pytest.fixture
def live(stack):
    s, w, side = stack
    if not w.alive():
        w.start()
    if not side.alive():  # a test stopped it
        side.start()
    return stack


def run_hook(hook: Path, side, runtime: str, event: str, payload: dict, *flags: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")}
    p = subprocess.run(
        [str(hook), runtime, event, "--url", side.url, *flags],
        input=json.dumps(payload).encode(),
        capture_output=True,
        timeout=60,
        env=env,
    )
    return p.returncode, p.stdout.decode().strip(), p.stderr.decode()


def session_events(bootstrap: str, topic: str, run_id: str, want: int, timeout: float = 30) -> list:
    """The run's events as the sidecar sent them (one partition, in order), once `want` are there."""
    deadline = time.monotonic() + timeout
    while True:
        msgs = consume(bootstrap, topic, 0, timeout=1)
        evs = [decode_event(m.value) for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]
        evs = [e for e in evs if e.run_id == run_id]
        if len(evs) >= want or time.monotonic() > deadline:
            return evs


def published(bootstrap: str, topic: str, run_id: str) -> list[dict]:
    msgs = consume(bootstrap, topic, 0, timeout=1)
    out = [json.loads(m.value) for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]
    return [d for d in out if d["run_id"] == run_id]


def drive(hook: Path, side, runtime: str, session: str, calls: list[tuple[dict, object]], end: bool) -> list[tuple]:
    """Each call through the runtime's call hook and, unless denied, its result hook;
    then the session-end hook. [(hook event, exit code, stdout)], in order."""
    make, rt = PAYLOADS[runtime], RUNTIMES[runtime]
    seen = []
    for i, (tool_input, output) in enumerate(calls):
        extra = {"tool_use_id": f"call-{i}"} if runtime != "gemini-cli" else {}
        code, out, err = run_hook(
            hook, side, runtime, rt.call_event, make(rt.call_event, session, tool_input=tool_input, **extra)
        )
        assert code == 0 and "Traceback" not in err, err
        seen.append((rt.call_event, code, out))
        denied = out and ("deny" in out)
        if not denied:
            ev = RESULT_EVENT[runtime]
            code, out, err = run_hook(
                hook, side, runtime, ev, make(ev, session, tool_input=tool_input, tool_response=output, **extra)
            )
            assert code == 0, err
            seen.append((ev, code, out))
    if end:
        code, out, err = run_hook(hook, side, runtime, END_EVENT[runtime], make(END_EVENT[runtime], session))
        assert (code, out) == (0, ""), err
    return seen


def expected_answers(runtime: str, decisions: list) -> list[tuple]:
    """What the hooks must have printed for the replayed decisions of the run's calls."""
    rt = RUNTIMES[runtime]
    out = []
    for d in decisions:
        out.append((rt.call_event, 0, answer(runtime, rt.call_event, d.action, d.message)))
        if d.action in ("allow", "warn"):
            held = d.action == "warn" and not rt.context_on_call  # Gemini CLI: the warning after the tool
            ev = RESULT_EVENT[runtime]
            out.append((ev, 0, answer(runtime, ev, "warn", d.message) if held else ""))
    return out


def check_against_replay(bootstrap, s, runtime: str, session: str, seen: list, end: bool) -> list:
    want = sum(1 for _ in seen) + (1 if end else 0)
    events = session_events(bootstrap, s.events_topic, session, want)
    assert len(events) == want, [type(e).__name__ for e in events]
    assert not end or isinstance(events[-1], RunEnd)
    assert {e.gateway_id for e in events} == {"gw-hooks"}
    cwd = PAYLOADS[runtime]("SessionEnd" if runtime != "codex" else "PostCompact", session)["cwd"]
    # the project directory's name, on every event of the session, its run_end too
    assert [e.agent_id for e in events] == [cwd.rsplit("/", 1)[1]] * len(events)
    decisions = replay(events, load_config(json.dumps(CONFIG)))
    deadline = time.monotonic() + 20
    while published(bootstrap, s.decisions_topic, session) != [json.loads(encode(d)) for d in decisions]:
        assert time.monotonic() < deadline, "the worker's decisions differ from offline replay"
        time.sleep(0.5)
    calls = [d for d in decisions if d.tool_name is not None]
    assert [d.event_id for d in calls] == [f"{e.run_id}:{e.seq}" for e in events if isinstance(e, ToolCall)]
    assert seen == expected_answers(runtime, calls)
    return calls


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_looping_session_is_warned_then_denied_as_replay_decides(bootstrap, live, hook, runtime):
    s, _, side = live
    session = f"loop-{runtime}-{uuid.uuid4().hex[:8]}"
    end = runtime in END_EVENT
    seen = drive(hook, side, runtime, session, [LOOP[runtime]] * 7, end)
    calls = check_against_replay(bootstrap, s, runtime, session, seen, end)
    actions = [d.action for d in calls]
    assert "warn" in actions and "block" in actions and actions.index("warn") < actions.index("block")
    assert {d.detector for d in calls if d.action != "allow"} == {"generic_repeat"}
    deny = json.loads(seen[-1][2])  # the last call, denied in the runtime's format
    if runtime == "gemini-cli":
        assert deny == {"decision": "deny", "reason": f"loopwarden: {calls[-1].message}"}
    else:
        assert deny["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert deny["hookSpecificOutput"]["permissionDecisionReason"] == f"loopwarden: {calls[-1].message}"
    # The model reads the tool's name as its runtime calls it (Bash, run_shell_command);
    # the decisions topic carries it normalized (semantics.md section 7).
    tool = PAYLOADS[runtime](RUNTIMES[runtime].call_event, session, tool_input=LOOP[runtime][0])["tool_name"]
    assert calls[-1].message.startswith(f"Blocked: {tool} was called")
    assert calls[-1].tool_name == normalize_tool_name(tool)
    warned = [out for _, _, out in seen if out and "additionalContext" in out]
    assert len(warned) == actions.count("warn")  # each warning reached the model as extra context
    if end:  # the session end ended the run: the same call starts from nothing
        code, out, _ = run_hook(
            hook,
            side,
            runtime,
            RUNTIMES[runtime].call_event,
            PAYLOADS[runtime](RUNTIMES[runtime].call_event, session, tool_input=LOOP[runtime][0]),
        )
        assert (code, out) == (0, "")


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_varied_session_is_never_denied(bootstrap, live, hook, runtime):
    s, _, side = live
    session = f"varied-{runtime}-{uuid.uuid4().hex[:8]}"
    calls = [({"command": f"pytest -k case{i}"}, f"{i} passed") for i in range(10)]
    end = runtime in END_EVENT
    seen = drive(hook, side, runtime, session, calls, end)
    assert all(out == "" for _, _, out in seen)
    decisions = check_against_replay(bootstrap, s, runtime, session, seen, end)
    assert {d.action for d in decisions} == {"allow"}


def test_claude_code_transcript_usage_spends_the_run_budget(bootstrap, live, hook, tmp_path):
    """Each model response in the transcript (Claude Code writes the Messages API usage of
    each assistant message to it) becomes a usage event before the next hook: 400
    tokens a response against a 2000-token budget, so the 4th call is warned at 80
    percent and the 5th stops the run."""
    s, _, side = live
    session = f"budget-{uuid.uuid4().hex[:8]}"
    transcript = tmp_path / f"{session}.jsonl"
    transcript.write_text("")
    answers = []
    for i in range(5):
        msg = {"id": f"msg_{i}", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 300, "output_tokens": 100}}
        with transcript.open("a") as f:
            f.write(json.dumps({"type": "assistant", "message": msg, "uuid": str(uuid.uuid4())}) + "\n")
        payload = PAYLOADS["claude-code"](
            "PreToolUse", session, tool_input={"command": f"make step{i}"}, transcript_path=str(transcript)
        )
        code, out, err = run_hook(hook, side, "claude-code", "PreToolUse", payload)
        assert code == 0, err
        answers.append(json.loads(out) if out else None)
    assert answers[:3] == [None] * 3
    assert "used 80% of its tokens budget" in answers[3]["hookSpecificOutput"]["additionalContext"]
    assert answers[4]["continue"] is False and answers[4]["hookSpecificOutput"]["permissionDecision"] == "deny"
    events = session_events(bootstrap, s.events_topic, session, 10)
    decisions = replay(events, load_config(json.dumps(CONFIG)))
    (spent,) = [d for d in decisions if d.tool_name is None]
    assert (spent.action, spent.detector, spent.count) == ("abort", "run_budget", 2000)
    calls = [d for d in decisions if d.tool_name is not None]
    assert [(d.action, d.detector) for d in calls[3:4]] == [("warn", "run_budget")]
    # the 5th call: the worker's abort, or the usage event's abort the client already had
    last = [calls[4]] if len(calls) == 5 else [spent]
    assert [answer("claude-code", "PreToolUse", d.action, d.message) for d in calls[:4] + last] == [
        json.dumps(a, separators=(",", ":")) if a else "" for a in answers
    ]


@pytest.mark.parametrize("runtime", list(END_EVENT))
def test_a_session_end_carries_the_sessions_agent(bootstrap, live, hook, runtime):
    """run_end is the session's last event and names its agent like the others (the
    hook's --agent-id here), so per-agent rules and audits see the end as that agent's."""
    s, _, side = live
    session = f"agent-end-{runtime}-{uuid.uuid4().hex[:8]}"
    call, end = RUNTIMES[runtime].call_event, END_EVENT[runtime]
    for event in (call, end):
        payload = PAYLOADS[runtime](event, session)
        code, out, err = run_hook(hook, side, runtime, event, payload, "--agent-id", "reviewer")
        assert (code, out) == (0, ""), err
    events = session_events(bootstrap, s.events_topic, session, 2)
    assert [(type(e), e.agent_id) for e in events] == [(ToolCall, "reviewer"), (RunEnd, "reviewer")]


def test_input_over_the_sidecars_limit_is_refused_naming_the_limit_not_a_reset(live, hook):
    """With the hook's --max-input-bytes above the sidecar's (16 MiB), a 20 MiB input
    reaches the sidecar, which refuses it (413) and reads the body it refused, so the hook
    gets the answer and reports its cause, not a reset connection."""
    _, _, side = live
    payload = PAYLOADS["claude-code"]("PreToolUse", f"big-{uuid.uuid4().hex[:8]}", tool_input={"content": ""})
    raw = json.dumps(payload).encode()
    raw = raw.replace(b'"content": ""', b'"content": "' + b"x" * ((20 << 20) - len(raw)) + b'"')
    assert len(raw) == 20 << 20
    cause = "the hook's input is 20971520 bytes, over loopwarden's limit of 16777216"
    argv = [str(hook), "claude-code", "PreToolUse", "--url", side.url, "--max-input-bytes", str(32 << 20)]
    p = subprocess.run(argv, input=raw, capture_output=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (1, b"", f"loopwarden-hook: {cause}\n".encode())
    p = subprocess.run([*argv, "--fail-closed"], input=raw, capture_output=True, timeout=60)
    assert (p.returncode, p.stderr) == (0, f"loopwarden-hook: {cause}\n".encode())
    deny = answer("claude-code", "PreToolUse", "block", f"{cause}; the call is denied (fail-closed)")
    assert p.stdout.decode() == deny + "\n"
    assert side.alive()


def exchange(port: int, raw: bytes, read: bool = True) -> bytes:
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        try:
            c.sendall(raw)
            while read and (chunk := c.recv(65536)):
                got += chunk
        except ConnectionResetError:
            pass
    return got


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", "Connection: close", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_the_sidecar_survives_a_thousand_malformed_requests(bootstrap, live):
    s, _, side = live
    session = f"fuzz-{uuid.uuid4().hex[:8]}"
    call = PAYLOADS["claude-code"]
    malformed = [  # (request, status or None when the client hangs up, counted as bad hook input)
        (b"garbage\r\n\r\n", b"400", False),
        (b"GET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n", b"404", False),
        (b"POST /claude-code/PreToolUse HTTP/1.1\r\nConnection: close\r\n\r\n", b"411", False),
        (b"POST /claude-code/PreToolUse HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", b"413", True),
        (post("/claude-code/PreToolUse", b"not json {"), b"400", True),
        (post("/claude-code/PreToolUse", json.dumps({"tool_name": "Bash"}).encode()), b"400", True),
        (post("/codex/PreToolUse", json.dumps({"session_id": "s"}).encode()), b"400", True),
        (post("/cursor/PreToolUse", b"{}"), b"404", True),
        (post("/gemini-cli/BeforeTool", b"\xff\xfe", "X-Loopwarden-Policy: fail-closed"), b"200", True),  # denied
        (b"POST /claude-code/PreToolUse HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431", False),
        (b'POST /claude-code/PreToolUse HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"ses', None, False),  # cut short
        (b"\x00\x01\x02" * 1000, None, False),  # no request at all
    ]
    valid = bad = 0
    for i in range(1000):
        if i % 10 == 0:
            payload = call("PreToolUse", session, tool_input={"command": f"ls dir{i}"})
            got = exchange(side.port, post("/claude-code/PreToolUse", json.dumps(payload).encode()))
            assert got.startswith(b"HTTP/1.1 200 ") and b"X-Loopwarden-Error" not in got, got[:500]
            valid += 1
            continue
        raw, status, counted = malformed[i % len(malformed)]
        bad += counted
        got = exchange(side.port, raw, read=status is not None)
        if status == b"431" and not got:
            continue  # the server closed with the headers unread: the client may see a reset first
        if status is not None:
            assert got.startswith(b"HTTP/1.1 " + status), (raw[:80], got[:300])
            assert b"X-Loopwarden-Error: " in got
    assert side.alive()
    health = side.health()
    assert health["ok"] and health["bad_input"] >= bad and health["call"] >= valid
    events = session_events(bootstrap, s.events_topic, session, valid)
    assert len(events) == valid and all(isinstance(e, ToolCall) for e in events)


def test_with_the_worker_stopped_fail_open_lets_calls_run_and_fail_closed_denies(live, hook):
    _, w, side = live
    w.stop()
    for runtime, rt in RUNTIMES.items():
        session = f"down-{runtime}-{uuid.uuid4().hex[:8]}"
        payload = PAYLOADS[runtime](rt.call_event, session, tool_input={"command": "make deploy"})
        code, out, err = run_hook(hook, side, runtime, rt.call_event, payload)
        assert (code, out) == (1, "") and "no decision within 2s; the call runs (fail-open)" in err
        code, out, err = run_hook(hook, side, runtime, rt.call_event, payload, "--fail-closed")
        assert code == 0 and "no decision within 2s" in err
        assert out == answer(
            runtime, rt.call_event, "block", "loopwarden gave no decision within 2s; the call is denied (fail-closed)"
        )
    side.stop()  # and the sidecar gone: the hook's own policy answers, within a second
    for runtime, rt in RUNTIMES.items():
        payload = PAYLOADS[runtime](rt.call_event, "gone", tool_input={"command": "make deploy"})
        t0 = time.monotonic()
        code, out, err = run_hook(hook, side, runtime, rt.call_event, payload, "--fail-closed")
        closed_s = time.monotonic() - t0
        cause = f"cannot reach the loopwarden sidecar at {side.url} ([Errno 111] Connection refused)"
        assert (code, out) == (0, answer(runtime, rt.call_event, "block", f"{cause}; the call is denied (fail-closed)"))
        assert err == f"loopwarden-hook: {cause}\n"
        t0 = time.monotonic()
        code, out, err = run_hook(hook, side, runtime, rt.call_event, payload)
        open_s = time.monotonic() - t0
        assert (code, out, err) == (1, "", f"loopwarden-hook: {cause}\n")
        if hook.name == fast.NAME:
            assert closed_s < 1 and open_s < 1, (closed_s, open_s)


def test_both_hooks_answer_a_live_sidecar_byte_for_byte(bootstrap, live, fast_hook):
    """The same inputs, valid and malformed, through the Python hook in one session and the
    fast hook in another: the same exit codes, stdout and stderr at every step, through a
    loop's warnings and denials."""
    _, _, side = live
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")}

    def raw(exe: Path, runtime: str, event: str, data: bytes, *flags: str) -> tuple[int, bytes, bytes]:
        p = subprocess.run(
            [str(exe), runtime, event, "--url", side.url, *flags], input=data, capture_output=True, env=env, timeout=60
        )
        return p.returncode, p.stdout, p.stderr

    for runtime, rt in RUNTIMES.items():
        sessions = {HOOK: f"same-py-{uuid.uuid4().hex[:8]}", fast_hook: f"same-c-{uuid.uuid4().hex[:8]}"}
        seen: dict[Path, list] = {HOOK: [], fast_hook: []}
        tool_input, output = LOOP[runtime]
        for exe, session in sessions.items():
            make = PAYLOADS[runtime]
            for i in range(7):
                extra = {"tool_use_id": f"call-{i}"} if runtime != "gemini-cli" else {}
                call = make(rt.call_event, session, tool_input=tool_input, **extra)
                seen[exe].append(raw(exe, runtime, rt.call_event, json.dumps(call).encode()))
                result = make(RESULT_EVENT[runtime], session, tool_input=tool_input, tool_response=output, **extra)
                seen[exe].append(raw(exe, runtime, RESULT_EVENT[runtime], json.dumps(result).encode()))
            for data in (b"not json {", b"[]", json.dumps({"tool_name": "Bash"}).encode(), b"\xff\xfe"):
                for flags in ((), ("--fail-closed",)):
                    seen[exe].append(raw(exe, runtime, rt.call_event, data, *flags))
            no_tool = json.dumps({"session_id": session}).encode()
            seen[exe].append(raw(exe, runtime, rt.call_event, no_tool, "--fail-closed"))
            seen[exe].append(raw(exe, runtime, rt.call_event, b"{}", "--max-input-bytes", "1", "--fail-closed"))
        assert seen[fast_hook] == seen[HOOK], runtime
        outs = [out for _, out, _ in seen[HOOK]]
        assert any(b"additionalContext" in o for o in outs) and any(b'"deny"' in o for o in outs[:14])
