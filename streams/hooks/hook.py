"""`loopwarden-hook RUNTIME EVENT`: the command hook a runtime runs around each tool
call. It reads the hook's JSON on stdin, sends it to the sidecar (`loopwarden hooks
serve`, http://127.0.0.1:7077 unless --url or LOOPWARDEN_HOOKS_URL says otherwise),
prints the sidecar's answer and exits 0.

It starts on every tool call, so it is small: the standard library only (socket and
json), none of the client, msgspec or aiokafka (tests/unit/test_hooks_hook.py checks
with `python -X importtime`).

When there is no decision (the sidecar cannot be reached or does not answer in time,
the input is refused as malformed or too large, the worker gave none in time), the
cause goes to stderr and the fail policy answers: `--fail-open` (the default) lets the
call run, exiting 1, which each runtime shows as a non-blocking hook error;
`--fail-closed` denies the call with a message naming the cause (exit 0, the deny on
stdout). A result, compaction or session-end hook has nothing to deny: it always lets
the runtime go on.

fast_hook.c is this hook as a C program (what `hooks install` writes by default): a
change to what this one sends or prints is a change to both, and
tests/unit/test_hooks_fast.py compares their bytes.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from .runtimes import FAIL_OPEN, MAX_INPUT_BYTES, BadInput, endpoint, fail_answer

TYPE_CHECKING = False  # not typing's: importing typing would cost the hook's start
if TYPE_CHECKING:
    from typing import BinaryIO, TextIO

DEFAULT_URL = "http://127.0.0.1:7077"
USAGE = (
    "usage: loopwarden-hook RUNTIME EVENT [--fail-open | --fail-closed] [--url URL] [--timeout-s S] "
    "[--agent-id ID] [--max-input-bytes N]\n"
    "  RUNTIME: claude-code, codex or gemini-cli; EVENT: the hook event (PreToolUse, BeforeTool, ...)"
)


class Options:
    def __init__(self) -> None:
        self.policy = FAIL_OPEN
        self.url = os.environ.get("LOOPWARDEN_HOOKS_URL") or DEFAULT_URL
        self.timeout_s = 10.0
        self.agent_id: str | None = None
        self.max_input_bytes = MAX_INPUT_BYTES


def parse_args(argv: list[str]) -> tuple[str, str, Options]:
    """RUNTIME, EVENT and the options; ValueError with the usage for a wrong command line."""
    opts = Options()
    words: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("--fail-open", "--fail-closed"):
            opts.policy = arg[2:]
        elif arg in ("--url", "--timeout-s", "--agent-id", "--max-input-bytes"):
            value = next(it, None)
            if value is None:
                raise ValueError(f"{arg} needs a value")
            if arg == "--url":
                opts.url = value
            elif arg == "--agent-id":
                opts.agent_id = value
            else:
                try:
                    number = float(value) if arg == "--timeout-s" else int(value)
                except ValueError:
                    raise ValueError(f"{arg} takes a number, got {value!r}") from None
                if number <= 0:
                    raise ValueError(f"{arg} must be positive, got {value!r}")
                if arg == "--timeout-s":
                    opts.timeout_s = float(number)
                else:
                    opts.max_input_bytes = int(number)
        elif arg.startswith("-"):
            raise ValueError(f"unknown option {arg}")
        else:
            words.append(arg)
    if len(words) != 2:
        raise ValueError("give the runtime and the hook event")
    return words[0], words[1], opts


def _address(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[1] if "://" in url else url
    hostport = rest.split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--url must be http://HOST:PORT, got {url!r}")
    return host.strip("[]"), int(port)


def post(
    url: str, path: str, body: bytes, headers: dict[str, str], timeout_s: float
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 POST to the sidecar: (status, headers with lower-case names, body).
    Raises OSError when it cannot be reached or does not answer within timeout_s."""
    host, port = _address(url)
    head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    top, sep, rest = raw.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        raise OSError("the sidecar's answer is not HTTP")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    length = int(fields.get("content-length", len(rest)))
    return int(parts[1]), fields, rest[:length]


def run(argv: list[str], stdin: BinaryIO, stdout: TextIO, stderr: TextIO) -> int:
    try:
        runtime, event, opts = parse_args(argv)
        endpoint(runtime, event)
    except (ValueError, BadInput) as exc:  # BadInput is a ValueError; named for the reader
        stderr.write(f"loopwarden-hook: {exc}\n{USAGE}\n")
        return 2 if "--fail-closed" in argv else 1  # 2 blocks in all three runtimes; 1 lets the call run

    def no_decision(cause: str) -> int:
        stderr.write(f"loopwarden-hook: {cause}\n")
        text = fail_answer(runtime, event, opts.policy, cause)
        if text:
            stdout.write(text + "\n")
            return 0
        return 1  # the runtimes' non-blocking error: shown, and the call runs

    body = stdin.read(opts.max_input_bytes + 1)
    if len(body) > opts.max_input_bytes:
        return no_decision(f"the hook's input is over {opts.max_input_bytes} bytes; not sent to loopwarden")
    headers = {"X-Loopwarden-Policy": opts.policy}
    project = os.environ.get("CLAUDE_PROJECT_DIR") or os.environ.get("GEMINI_PROJECT_DIR")
    if project:
        headers["X-Loopwarden-Project"] = json.dumps(project)  # ASCII, \u-escaped
    if opts.agent_id:
        headers["X-Loopwarden-Agent"] = json.dumps(opts.agent_id)
    try:
        status, fields, answer = post(opts.url, f"/{runtime}/{event}", body, headers, opts.timeout_s)
    except (OSError, ValueError) as exc:
        return no_decision(f"cannot reach the loopwarden sidecar at {opts.url} ({exc or type(exc).__name__})")
    error = fields.get("x-loopwarden-error")
    if status != 200:
        return no_decision(error or f"the loopwarden sidecar answered HTTP {status}")
    if answer.strip():
        if error:
            stderr.write(f"loopwarden-hook: {error}\n")
        stdout.write(answer.decode("utf-8", "replace") + "\n")
        return 0
    if error:  # no decision, the call runs: say so where the runtime shows it
        stderr.write(f"loopwarden-hook: {error}\n")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    code = run(sys.argv[1:] if argv is None else argv, sys.stdin.buffer, sys.stdout, sys.stderr)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
