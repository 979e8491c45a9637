"""The fast hook (streams/hooks/fast_hook.c, built by streams/hooks/fast.py) answers as
the Python hook (`loopwarden-hook`, streams/hooks/hook.py) does: the same exit code and
the same bytes on stdout and stderr for the same input, command line and environment,
against sidecars that answer, refuse, reset, hang or answer something that is not HTTP,
and for input over the limit. Each case runs both programs as processes (a fuzzed
series compares with hook.run in this process, writing as the console script does).

The build needs a C compiler: without one these tests fail, they do not skip."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streams.hooks import fast
from streams.hooks.runtimes import PAUSE
from streams.hooks.runtimes import answer as runtime_answer
from tests.unit.test_hooks_payloads import PAYLOADS, body, claude, codex, gemini

PY_HOOK = Path(sys.executable).parent / "loopwarden-hook"
ENV = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")}
ENV |= {"LANG": "C.UTF-8", "LOOPWARDEN_HOOKS_URL": ""}
for _name in ("LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8"):
    ENV.pop(_name, None)


def run(exe: Path, argv: list[str], stdin: bytes, env: dict | None = None) -> tuple[int, bytes, bytes, float]:
    t0 = time.monotonic()
    p = subprocess.run([str(exe), *argv], input=stdin, capture_output=True, timeout=30, env=env or ENV)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def same(fast_hook: Path, argv: list[str], stdin: bytes, env: dict | None = None) -> tuple[int, bytes, bytes]:
    """Both hooks' (exit code, stdout, stderr), asserted equal; the fast hook's."""
    want = run(PY_HOOK, argv, stdin, env)[:3]
    got = run(fast_hook, argv, stdin, env)[:3]
    assert got == want, argv
    return got


class Sidecar:
    """A scripted HTTP peer on 127.0.0.1: reads each request (head and Content-Length
    body), keeps it, then answers `reply` (bytes), or with "hang" says nothing, with
    "reset" resets the connection."""

    def __init__(self, reply: bytes | str = b"") -> None:
        self.reply = reply
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = False
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                raw = b""
                while b"\r\n\r\n" not in raw and (chunk := conn.recv(65536)):
                    raw += chunk
                head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
                length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0]) if "content-length" in head else 0
                while len(raw) < len(head) + 4 + length and (chunk := conn.recv(65536)):
                    raw += chunk
                self.requests.append(raw)
                if self.reply == "hang":
                    self.held.append(conn.dup())
                    continue
                if self.reply == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    continue
                assert isinstance(self.reply, bytes)
                conn.sendall(self.reply)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def sidecar():
    made: list[Sidecar] = []

    def make(reply: bytes | str = b"") -> Sidecar:
        made.append(Sidecar(reply))
        return made[-1]

    yield make
    for s in made:
        s.close()


def http(status: bytes, body_: bytes = b"", *headers: bytes, length: bool = True) -> bytes:
    head = [b"HTTP/1.1 " + status, b"Content-Type: application/json"]
    if length:
        head.append(b"Content-Length: " + str(len(body_)).encode())
    return b"\r\n".join([*head, *headers]) + b"\r\n\r\n" + body_


DENY = (
    b'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"x"}}'
)
PAUSED = runtime_answer(  # a spend cap's pause: the deny, and the turn stopped
    "claude-code",
    "PreToolUse",
    PAUSE,
    "Paused: the fleet spend cap daily is reached for agent ci (calls: 100 tool calls used of 100 tool calls in its "
    "window); tool calls are paused until the window ends at 2026-12-04T00:00:00Z, unless an operator lifts the cap "
    "sooner. The run is not aborted.",
).encode()
ANSWERS = [  # what a sidecar, or something else on its port, may answer
    http(b"200 OK"),
    http(b"200 OK", DENY),
    http(b"200 OK", PAUSED),
    http(b"200 OK", DENY, b"X-Loopwarden-Error: held; the call runs"),
    http(b"200 OK", b"", b"X-Loopwarden-Error: loopwarden gave no decision within 2s; the call runs (fail-open)"),
    http(
        b"400 Bad Request",
        b'{"error": "x"}',
        b"X-Loopwarden-Error: the claude-code PreToolUse hook's input is not JSON",
    ),
    http(b"413 Content Too Large", b"{}"),
    http(b"500 Internal Server Error", b"", b"X-Loopwarden-Error: "),
    b"",
    b"garbage",
    b"HTTP/1.1 200 OK\r\n",  # no end of the head
    b"HTTP/1.1  200 OK\r\n\r\n",
    b"HTTP/1.1 200\r\n\r\n{}",
    b'HTTP/1.1 0200 OK\r\n\r\n{"a": 1}',
    b"HTTP/1.1 \xb200 OK\r\n\r\n",
    b"HTTP/1.1 0007 OK\r\n\r\n",
    b"HTTP/1.1 " + b"9" * 4301 + b" OK\r\n\r\n",
    b"HTTP/1.1 " + b"0" * 4300 + b" OK\r\n\r\n",
    http(b"200 OK", b"0123456789", b"Content-Length: 4", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: -3", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: -0", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: +1_0", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: 1__0", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: _1", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: 99999999999999999999999999", length=False),
    http(b"200 OK", b"0123456789", b"CONTENT-LENGTH :\xa0 5\x85", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: \xe95 'x\"", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: " + b"0" * 5000, length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: " + b"0" * 5000 + b"x", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: " + b"7" * 300 + b"x", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length: 3", b"content-length: 6", length=False),
    http(b"200 OK", b"0123456789", b"Content-Length:", length=False),
    http(b"200 OK", b" \t\r\n\x0b\x0c"),
    http(b"200 OK", b"\x1c"),
    http(b"200 OK", b"\xe2\x82A\xf0\x80\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf\xff\x00\xf0\x9f\x98"),
    http(b"200 OK", "d\u00e9j\u00e0 \U0001f600".encode()),
    http(b"503 Unavailable", b"", b'X-Loopwarden-Error: \xa0caf\xe9 "quoted" \\ \x01\ttab\x7f\x85'),
    http(b"200 OK", b"", b"X-Loopwarden-Error: \xe9t\xe9"),
    http(b"404 Not Found", b"", b"x-loopwarden-error: first", b"X-LOOPWARDEN-ERROR: second"),
    http(b"200 OK", b"{}", b"no colon here", b": empty name", b"X-Loopwarden-Error:"),
]
ENDPOINTS = [
    ("claude-code", "PreToolUse"),
    ("gemini-cli", "BeforeTool"),
    ("codex", "PreToolUse"),
    ("codex", "PostToolUse"),
]


@pytest.mark.parametrize("i", range(len(ANSWERS)))
def test_every_answer_of_the_sidecar_reads_the_same(fast_hook, sidecar, i):
    side = sidecar(ANSWERS[i])
    runtime, event = ENDPOINTS[i % len(ENDPOINTS)]
    payload = body(PAYLOADS[runtime](event))
    for policy in ("--fail-open", "--fail-closed"):
        same(fast_hook, [runtime, event, policy, "--url", side.url], payload)
    python_open, fast_open, python_closed, fast_closed = side.requests  # the same request from both hooks
    assert fast_open == python_open and fast_closed == python_closed


def test_the_request_is_the_python_hooks_byte_for_byte(fast_hook, sidecar):
    side = sidecar(http(b"200 OK"))
    env = {**ENV, "CLAUDE_PROJECT_DIR": '/home/\u00fc/my "proj"\\x\x7f', "LANG": "en_US.UTF-8"}
    argv = ["gemini-cli", "AfterTool", "--agent-id", "r\u00e9viewer \U0001f600\n\t", "--url", side.url + "/x"]
    code, out, err = same(fast_hook, argv, body(gemini("AfterTool")), env)
    assert (code, out, err) == (0, b"", b"")
    python, native = side.requests
    assert native == python
    assert b'X-Loopwarden-Agent: "r\\u00e9viewer \\ud83d\\ude00\\n\\t"\r\n' in native
    same(fast_hook, ["codex", "PostCompact", "--agent-id", "", "--url", side.url], body(codex("PostCompact")))
    assert side.requests[2] == side.requests[3] and b"X-Loopwarden-Agent" not in side.requests[2]


@pytest.mark.parametrize(
    "runtime,event",
    [
        ("claude-code", "PreToolUse"),
        ("codex", "PreToolUse"),
        ("gemini-cli", "BeforeTool"),
        ("claude-code", "SessionEnd"),
    ],
)
def test_without_a_sidecar_both_fail_open_or_closed_alike_within_a_second(fast_hook, runtime, event):
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        payload = body(PAYLOADS[runtime](event))
        for policy in ("--fail-open", "--fail-closed"):
            argv = [runtime, event, policy, "--url", url]
            want = run(PY_HOOK, argv, payload)[:3]
            *got, elapsed = run(fast_hook, argv, payload)
            assert tuple(got) == want and elapsed < 1.0
            assert f"cannot reach the loopwarden sidecar at {url} ([Errno 111] Connection refused)".encode() in got[2]
            denies = policy == "--fail-closed" and event in ("PreToolUse", "BeforeTool")
            assert got[0] == (0 if denies else 1) and bool(got[1]) == denies


def test_a_sidecar_that_hangs_or_resets_reads_the_same(fast_hook, sidecar):
    hang, reset = sidecar("hang"), sidecar("reset")
    payload = body(claude("PreToolUse"))
    code, out, err = same(fast_hook, ["claude-code", "PreToolUse", "--timeout-s", "0.3", "--url", hang.url], payload)
    assert (code, out) == (1, b"") and err.endswith(b"(timed out)\n")
    argv = ["claude-code", "PreToolUse", "--fail-closed", "--timeout-s", ".3", "--url", hang.url]
    assert json.loads(same(fast_hook, argv, payload)[1])["hookSpecificOutput"]["permissionDecision"] == "deny"
    code, out, err = same(fast_hook, ["gemini-cli", "BeforeTool", "--url", reset.url], body(gemini("BeforeTool")))
    assert err.endswith(b"([Errno 104] Connection reset by peer)\n")


@pytest.mark.parametrize(
    "url",
    [
        "nonsense",
        "http://127.0.0.1",
        "http://:80",
        "http://127.0.0.1:",
        "http://127.0.0.1:8o",
        "http://a..b:80",
        "http://.a:80",
        f"http://{'a' * 64}:80",
        f"http://{'a' * 63}.{'b' * 64}:80",
        "http://x'y:1/z",
        "http://x'y\"z\\:1",
        "http://[]:1",
        "http://127.0.0.1:0",
        "https://127.0.0.1:000001/ignored/path?q",
        "http://127.0.0.1:99999",  # the fast hook hands this one to Python
        "http://h\u00e9te:1",  # and this one
    ],
)
def test_urls_good_and_bad_read_the_same(fast_hook, url):
    payload = body(codex("PreToolUse"))
    for policy in ("--fail-open", "--fail-closed"):
        code, out, err = same(fast_hook, ["codex", "PreToolUse", policy, "--url", url], payload)
        assert err.startswith(f"loopwarden-hook: cannot reach the loopwarden sidecar at {url} (".encode())
    env = {**ENV, "LOOPWARDEN_HOOKS_URL": url}
    same(fast_hook, ["codex", "PreToolUse", "--fail-closed"], payload, env)


def test_input_over_the_limit_reads_the_same(fast_hook, sidecar):
    side = sidecar(http(b"200 OK"))
    big = body(claude("PreToolUse", tool_input={"content": "x" * 5000}))
    for flags in (["--max-input-bytes", "4096"], ["--max-input-bytes", "0004096", "--fail-closed"]):
        code, out, err = same(fast_hook, ["claude-code", "PreToolUse", *flags, "--url", side.url], big)
        assert b"the hook's input is over 4096 bytes; not sent to loopwarden" in err
    exact = b"{" + b" " * 4094 + b"}"
    assert same(fast_hook, ["claude-code", "PreToolUse", "--max-input-bytes", "4096", "--url", side.url], exact)[0] == 0
    assert side.requests and all(len(r) < 4400 for r in side.requests)  # the big one was never sent


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["claude-code"],
        ["claude-code", "PreToolUse", "extra"],
        ["cursor", "PreToolUse"],
        ["codex", "SessionEnd", "--fail-closed"],
        ["claude-code", "PreToolUse", "--timeout-s", "soon"],
        ["claude-code", "PreToolUse", "--timeout-s", "0", "--fail-closed"],
        ["claude-code", "PreToolUse", "--timeout-s", "-1"],
        ["claude-code", "PreToolUse", "--max-input-bytes", "1e3"],
        ["claude-code", "PreToolUse", "--url"],
        ["claude-code", "PreToolUse", "--help"],
        ["claude-code", "PreToolUse", "-"],
    ],
)
def test_command_line_errors_read_the_same(fast_hook, argv):
    code, out, err = same(fast_hook, argv, b"{}")
    assert code in (1, 2) and out == b"" and b"usage: loopwarden-hook" in err


def test_numbers_written_otherwise_are_read_by_python_alike(fast_hook):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        for flags in (["--timeout-s", "1e0"], ["--timeout-s", " 2"], ["--max-input-bytes", "1_000"]):
            same(fast_hook, ["claude-code", "PreToolUse", "--fail-closed", *flags, "--url", url], b"{}")
        same(fast_hook, ["claude-code", "PreToolUse", "--max-input-bytes", str(2 << 30), "--url", url], b"{}")


def test_environments_that_change_pythons_text_are_left_to_python(fast_hook, sidecar):
    side = sidecar(http(b"400 Bad Request", b"{}", b"X-Loopwarden-Error: caf\xe9"))
    argv = ["claude-code", "PreToolUse", "--fail-closed", "--url", side.url]
    for extra in ({"LANG": "en_US.ISO-8859-1"}, {"PYTHONIOENCODING": "latin-1"}, {"LC_ALL": "POSIX"}):
        same(fast_hook, argv, b"{}", {**ENV, **extra})
    env = {k.encode(): v.encode() for k, v in ENV.items()} | {b"CLAUDE_PROJECT_DIR": b"/home/\xff/p"}
    same(fast_hook, argv, b"{}", env)  # not UTF-8: Python escapes it in its own way


def test_the_fast_hook_starts_no_interpreter_for_what_it_reads_itself(tmp_path, sidecar):
    """Built to hand unusual command lines to a Python hook that is not there: the usual
    ones still answer, so no Python ran for them."""
    alone = fast.build("/nonexistent/loopwarden-hook", tmp_path / fast.NAME)
    side = sidecar(http(b"200 OK", DENY))
    code, out, err, _ = run(alone, ["claude-code", "PreToolUse", "--url", side.url], body(claude("PreToolUse")))
    assert (code, out, err) == (0, DENY + b"\n", b"")
    code, out, err, _ = run(alone, ["claude-code", "PreToolUse", "--timeout-s", "soon", "--fail-closed"], b"{}")
    assert code == 2 and out == b""
    assert err.startswith(b"loopwarden-hook: cannot run the Python hook /nonexistent/loopwarden-hook")


FRAGMENTS = [
    b"HTTP/1.1 ",
    b"200",
    b" OK",
    b"\r\n",
    b"\r\n\r\n",
    b"Content-Length: ",
    b"X-Loopwarden-Error: ",
    b"content-length:",
    b"-",
    b"+",
    b"_",
    b"0",
    b"7",
    b"12",
    b" ",
    b"\t",
    b"\xa0",
    b"\x85",
    b"\xb2",
    b"\xe9",
    b"\xff",
    b"\xe2\x82",
    b"\xc3",
    b"{}",
    b'"',
    b"'",
    b"\\",
    b"\x00",
    b"\x1c",
    b"abc",
    b":",
    b"400",
    b"HTTP/1.0 ",
    b"\xf0\x9f\x98\x80",
]


def test_fuzzed_answers_read_the_same(fast_hook, sidecar):
    """200 answers made of fragments of HTTP and odd bytes; the Python side is hook.run in
    this process, writing as the console script does (fast.python_answer)."""
    rnd = random.Random(43)
    answers = []
    for _ in range(250):
        head = b"HTTP/1.1 200 OK\r\n" if rnd.random() < 0.6 else b""
        answers.append(head + b"".join(rnd.choice(FRAGMENTS) for _ in range(rnd.randint(0, 30))))
    side = sidecar(b"")
    payload = body(claude("PreToolUse"))
    for n, answer in enumerate(answers):
        side.reply = answer
        argv = ["claude-code", "PreToolUse", "--fail-closed" if n % 2 else "--fail-open", "--url", side.url]
        code, out, err, _ = run(fast_hook, argv, payload)
        assert (code, out, err) == fast.python_answer(argv, payload), answer
