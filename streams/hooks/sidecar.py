"""`loopwarden hooks serve`: the local sidecar the hooks talk to. One long-lived
GatewayClient (privacy mode by default) behind a small HTTP server on 127.0.0.1:7077,
with one endpoint per runtime and hook event: POST /claude-code/PreToolUse,
/codex/PostToolUse, /gemini-cli/BeforeTool, ... (streams.hooks.runtimes lists them).
The body is the hook's JSON input, as `loopwarden-hook` forwards it or a Claude Code
http hook posts it; the answer's body is what the runtime reads (empty for allow).

Ids. run_id: the hook's `session_id`. agent_id: `--agent-id` of the hook, else of the
sidecar, else the name of the project directory (CLAUDE_PROJECT_DIR or
GEMINI_PROJECT_DIR as the hook saw them, else the hook's `cwd`), fixed for a session at
its first hook. gateway_id: the sidecar's (`--gateway-id`, default the host name).
tool_call_id: the hook's `tool_use_id` (Gemini CLI gives none).

Events. A call hook is a `tool_call` and waits for the decision; a result hook a
`tool_result` (a failure with the error: privacy mode sends `failed: true`); a
compaction hook `compaction_retry`; a session end `run_end`. Before a call or result,
the model calls the transcript shows since the previous hook are sent as `usage` events
(streams.hooks.transcripts).

Aborts and pauses. An abort is answered in the runtime's form (streams.hooks.runtimes),
and the client remembers it: the run's next call is answered with it at once, and its
next result hook stops the runtime where the result hook can. A fleet spend cap's pause
(an abort with detector `fleet_spend_cap`, semantics.md section 11) is answered as
`PAUSE`: the call denied with the pause's message and the current turn stopped where the
call hook can stop it; nothing is remembered (the client keeps no pause in `aborted`),
so the session is neither ended nor aborted, its result hooks stop nothing, and its next
call (the rest of a turn the runtime could not stop, or a later turn) is judged again by
the worker: paused while the cap is in force, judged as before once its window ended or
an operator lifted it. /health counts answers by action (`answer_pause` apart).

No decision: when the worker does not answer in time (or Kafka cannot be reached), a
call is answered by the fail policy: the hook's (`X-Loopwarden-Policy`, which
loopwarden-hook sends) or the sidecar's `--fail-closed` for http hooks. Fail-open lets
the call run; fail-closed denies it naming the cause; either way the cause is in the
`X-Loopwarden-Error` header. Malformed requests (not HTTP, not JSON, no session or tool
name, over the size limit) are answered the same way, 400 when the answer is to let the
call run; the server goes on serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from detectors.errors import LoopwardenError
from detectors.policy import FLEET_SPEND_CAP
from detectors.wire import CompactionRetry, Decision
from streams.gateway.adapters import as_result
from streams.gateway.client import GatewayClient

from .runtimes import (
    CALL,
    COMPACTION,
    END,
    FAIL_CLOSED,
    FAIL_OPEN,
    MAX_INPUT_BYTES,
    PAUSE,
    RUNTIMES,
    BadInput,
    Hook,
    answer,
    endpoint,
    fail_answer,
    parse,
)
from .transcripts import Tail

log = logging.getLogger("loopwarden.hooks")

DEFAULT_LISTEN = "127.0.0.1:7077"
_SESSIONS = 10_000  # sessions whose agent, transcript position and held warnings are kept
_HEAD_LIMIT = 64 << 10  # bytes of request line and headers
_IDLE_S = 60.0  # a kept-alive connection with no request for this long is closed
_BODY_S = 10.0  # the longest a body may take to arrive


@dataclass(frozen=True)
class Reply:
    status: int
    body: str = ""
    error: str | None = None  # why there was no decision (X-Loopwarden-Error)


class Sidecar:
    """Hook inputs in, runtime answers out, through one GatewayClient (see the module
    docstring). `handle` never raises for anything a request carries."""

    def __init__(
        self,
        client: GatewayClient,
        *,
        agent_id: str | None = None,
        policy: str = FAIL_OPEN,
        max_input_bytes: int = MAX_INPUT_BYTES,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.policy = policy
        self.max_input_bytes = max_input_bytes
        self.counts: Counter[str] = Counter()
        self._agents: dict[str, str | None] = {}
        self._tails: dict[tuple[str, str], Tail] = {}
        self._held: dict[str, str] = {}  # Gemini CLI: warnings held for the call's AfterTool

    async def handle(self, runtime: str, event: str, body: bytes, headers: dict[str, str]) -> Reply:
        policy = headers.get("x-loopwarden-policy")
        if policy not in (FAIL_OPEN, FAIL_CLOSED):
            policy = self.policy
        try:
            hook = parse(runtime, event, body, self.max_input_bytes)
        except BadInput as exc:
            self.counts["bad_input"] += 1
            return self.no_decision(runtime, event, policy, str(exc))
        limit = self.client.timeout_s * 2 + 2  # a send that hangs (Kafka unreachable) is not waited for
        try:
            reply = await asyncio.wait_for(self._judge(hook, policy, headers), limit)
        except TimeoutError:
            reply = self.no_decision(runtime, event, policy, f"loopwarden could not send the event within {limit:g}s")
        except LoopwardenError as exc:  # EventTooLarge, an amount the worker would refuse, a broker error
            reply = self.no_decision(runtime, event, policy, str(exc))
        except Exception as exc:  # a bug or an unexpected client failure: log it, answer by the policy
            log.exception("loopwarden hooks: %s %s failed", runtime, event)
            reply = self.no_decision(runtime, event, policy, f"loopwarden failed: {type(exc).__name__}: {exc}")
        self.counts[hook.kind] += 1
        return reply

    def no_decision(self, runtime: str, event: str, policy: str, cause: str) -> Reply:
        """The fail policy's reply: 200 with the deny (fail-closed call), else 400."""
        try:
            text = fail_answer(runtime, event, policy, cause)
        except BadInput as exc:
            return Reply(404, json.dumps({"error": str(exc)}), str(exc))
        if text:
            return Reply(200, text, cause)
        return Reply(400, json.dumps({"error": cause}), cause)

    async def _judge(self, hook: Hook, policy: str, headers: dict[str, str]) -> Reply:
        run_id = hook.session_id
        agent = self._agent(hook, headers)
        if hook.kind == END:
            await self.client.end_run(run_id, agent)
            self._forget(hook)
            return Reply(200)
        if hook.kind == COMPACTION:
            ev = CompactionRetry(
                run_id=run_id,
                seq=self.client._next_seq(),  # the client's compaction_retry takes no agent_id
                gateway_id=self.client.gateway_id,
                agent_id=agent,
                ts=int(time.time() * 1000),
            )
            await self.client._send(*self.client._encode(ev))
            return Reply(200)
        await self._usage(hook, agent)
        if hook.kind == CALL:
            d = await self.client.check(run_id, hook.tool_name or "", hook.params, hook.tool_use_id, agent)
            action, message, error = self._verdict(hook, d, policy)
            self.counts[f"answer_{action}"] += 1
            if action == "warn" and not RUNTIMES[hook.runtime].context_on_call:
                _keep(self._held, self._call_key(hook), message or "")
            return Reply(200, answer(hook.runtime, hook.event, action, message), error)
        outcome: dict[str, Any] = {"error": hook.error} if hook.failed else {"result": as_result(hook.result)}
        await self.client.result(
            run_id, hook.tool_name or "", hook.params, tool_call_id=hook.tool_use_id, agent_id=agent, **outcome
        )
        aborted = self.client.aborted.get(run_id)
        if aborted is not None:
            return Reply(200, answer(hook.runtime, hook.event, "abort", aborted.message))
        held = self._held.pop(self._call_key(hook), None)
        return Reply(200, answer(hook.runtime, hook.event, "warn", held) if held else "")

    def _verdict(self, hook: Hook, d: Decision, policy: str) -> tuple[str, str | None, str | None]:
        """(action, message for the model, cause of no decision) of a call's decision; a
        spend cap's pause is the action PAUSE (see the module docstring)."""
        if d.degraded:
            cause = f"loopwarden gave no decision within {self.client.timeout_s:g}s"
            if policy == FAIL_CLOSED and d.enforced:
                return "block", f"{cause}; the call is denied (fail-closed)", cause
            return "allow", None, f"{cause}; the call runs (fail-open)"
        if not d.enforced:
            log.debug(
                "loopwarden hooks: %s %s of run %r not enforced (shadow_action %s), answered as allow",
                hook.runtime,
                d.tool_name,
                d.run_id,
                d.shadow_action,
            )
            return "allow", None, None
        if d.action == "abort" and d.detector == FLEET_SPEND_CAP:
            return PAUSE, d.message, None
        return d.action, d.message, None

    def _agent(self, hook: Hook, headers: dict[str, str]) -> str | None:
        given = _header_text(headers.get("x-loopwarden-agent")) or self.agent_id
        if given:
            return given
        if hook.session_id in self._agents:
            return self._agents[hook.session_id]
        project = _header_text(headers.get("x-loopwarden-project")) or hook.cwd
        name = os.path.basename(os.path.normpath(project)) if project else ""
        _keep(self._agents, hook.session_id, name or None)
        return name or None

    async def _usage(self, hook: Hook, agent: str | None) -> None:
        if not hook.transcript_path:
            return
        key = (hook.runtime, hook.session_id)
        tail = self._tails.get(key)
        if tail is None or tail.path != hook.transcript_path:
            tail = Tail(hook.runtime, hook.transcript_path)
            _keep(self._tails, key, tail)
        for call in tail.read():
            await self.client.usage(
                hook.session_id,
                input_tokens=call.input_tokens,
                output_tokens=call.output_tokens,
                model=call.model,
                agent_id=agent,
            )
            self.counts["usage"] += 1

    def _call_key(self, hook: Hook) -> str:
        canon = json.dumps([hook.session_id, hook.tool_name, hook.params], sort_keys=True, default=str)
        return hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()

    def _forget(self, hook: Hook) -> None:
        self._agents.pop(hook.session_id, None)
        self._tails.pop((hook.runtime, hook.session_id), None)


def _keep(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Remember `key` (newest last), forgetting the oldest past _SESSIONS entries."""
    table.pop(key, None)
    table[key] = value
    if len(table) > _SESSIONS:
        del table[next(iter(table))]


def _header_text(value: str | None) -> str | None:
    """A JSON-quoted header value (as loopwarden-hook sends it) or a plain one."""
    if not value:
        return None
    if value.startswith('"'):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, str) and value.strip() else None


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required"}
_REASONS |= {413: "Content Too Large", 431: "Request Header Fields Too Large", 500: "Internal Server Error"}


class HttpServer:
    """HTTP/1.1 over asyncio streams, enough for the hooks: POST /RUNTIME/EVENT with a
    Content-Length body, GET /health; keep-alive unless the client says close."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._connection, host, port, limit=_HEAD_LIMIT)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except Exception:  # never let one connection take the server down
            log.exception("loopwarden hooks: a connection failed")
        finally:
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; whether the connection stays open."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _IDLE_S)
        except asyncio.LimitOverrunError:
            await self._send(writer, Reply(431, "", "request headers too large"), False)
            return False
        except (asyncio.IncompleteReadError, TimeoutError):
            return False
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._send(writer, Reply(400, "", "not an HTTP/1.x request"), False)
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        path = target.split("?", 1)[0].strip("/").split("/")
        if method == "GET" and path == ["health"]:
            await self._send(writer, Reply(200, json.dumps({"ok": True, **self.sidecar.counts})), keep)
            return keep
        if method != "POST" or len(path) != 2:
            await self._send(writer, Reply(405 if len(path) == 2 else 404, "", f"no endpoint {method} {target}"), False)
            return False
        policy = headers.get("x-loopwarden-policy", self.sidecar.policy)
        length = headers.get("content-length", "")
        if "chunked" in headers.get("transfer-encoding", "").lower() or not length.isdigit():
            await self._send(writer, Reply(411, "", "a Content-Length is required"), False)
            return False
        if int(length) > self.sidecar.max_input_bytes:
            cause = f"the hook's input is {length} bytes, over loopwarden's limit of {self.sidecar.max_input_bytes}"
            self.sidecar.counts["bad_input"] += 1
            reply = self.sidecar.no_decision(path[0], path[1], policy, cause)
            await self._send(writer, Reply(413 if reply.status == 400 else reply.status, reply.body, cause), False)
            await _discard(reader, writer, int(length))
            return False
        body = await asyncio.wait_for(reader.readexactly(int(length)), _BODY_S)
        reply = await self.sidecar.handle(path[0], path[1], body, headers)
        await self._send(writer, reply, keep)
        return keep

    async def _send(self, writer: asyncio.StreamWriter, reply: Reply, keep: bool) -> None:
        body = reply.body.encode()
        head = [
            f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            f"Connection: {'keep-alive' if keep else 'close'}",
        ]
        if reply.error:
            one_line = " ".join(reply.error.split()).encode("ascii", "backslashreplace").decode()[:2000]
            head.append(f"X-Loopwarden-Error: {one_line}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()


async def _discard(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int) -> None:
    """Read and drop a refused body (up to `length` bytes, for at most _BODY_S), the answer
    already sent and the sending side shut. Closing with the body unread would reset the
    connection, and a client still sending (loopwarden-hook sends all before it reads)
    would see the reset, not the answer."""
    if writer.can_write_eof():
        writer.write_eof()  # a client reading to the end has the answer now
    try:
        async with asyncio.timeout(_BODY_S):
            while length > 0:
                chunk = await reader.read(min(length, 1 << 20))
                if not chunk:
                    return
                length -= len(chunk)
    except (TimeoutError, ConnectionError):
        pass


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise LoopwardenError(f"--listen must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


async def serve(client: GatewayClient, listen: str, stop: asyncio.Event, **sidecar_kw: Any) -> None:
    """Serve until `stop` is set: the client started, the HTTP server on `listen`."""
    host, port = parse_listen(listen)
    async with client:
        http = HttpServer(Sidecar(client, **sidecar_kw))
        bound = await http.start(host, port)
        log.warning("loopwarden hooks: serving on http://%s:%d as gateway %s", host, bound, client.gateway_id)
        try:
            await stop.wait()
        finally:
            await http.close()


@dataclass(frozen=True)
class ServeOptions:
    """`loopwarden hooks serve`'s command line, as values (parsed in cli.py)."""

    listen: str = DEFAULT_LISTEN
    gateway_id: str | None = None  # None: the host name
    agent_id: str | None = None  # None: the project directory's name
    timeout_s: float = 2.0
    fail_closed: bool = False
    raw: bool = False
    max_input_bytes: int = 16 << 20
    log_level: str = "warning"


def run_serve(settings: Any, args: ServeOptions) -> None:
    """`loopwarden hooks serve`: until SIGINT or SIGTERM."""
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(message)s")
    client = GatewayClient(
        settings=settings,
        gateway_id=args.gateway_id or socket.gethostname(),
        timeout_s=args.timeout_s,
        policy=FAIL_OPEN,  # the sidecar applies each hook's own policy (Sidecar._verdict)
        privacy=not args.raw,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(
            client,
            args.listen,
            stop,
            agent_id=args.agent_id,
            policy=FAIL_CLOSED if args.fail_closed else FAIL_OPEN,
            max_input_bytes=args.max_input_bytes,
        )

    asyncio.run(main())


__all__ = ["DEFAULT_LISTEN", "HttpServer", "Reply", "ServeOptions", "Sidecar", "endpoint", "run_serve", "serve"]
