"""The gateway side: one `await client.check(...)` before each tool call.

    async with GatewayClient("127.0.0.1:9092", gateway_id="gw-1") as client:
        d = await client.check(run_id, "read", {"path": "a"})
        if d.action == "block": ...
        await client.result(run_id, "read", {"path": "a"}, result={...})

Events are produced with an idempotent producer (acks=all), keyed by run_id; the client
reads only its own partition of the decisions topic (its gateway_id's, under Kafka's
default partitioner) and resolves one future per (run_id, seq). Privacy mode (the
default) hashes params and results here; a failed tool's result then carries
`failed: true`, which the hashes alone do not say (section 9's breaker counts failures).

Sequence numbers: `seq = max(previous seq + 1, the wall clock in µs)`, one counter for
the whole client. The worker needs seq only to increase within a run; a gateway that
restarts mid-run so continues above what it sent before (assuming its clock did not step
back by more than it was down: else its first events of a run are stale duplicates,
dead-lettered and answered by the timeout policy). The clock in µs reaches 2^53 - 1 in
the year 2255.

Usage and aborts (semantics.md section 8). `usage(...)` does not wait for a decision:
one comes only when a budget is spent, and the worker folds the usage event before the
run's next event, so the next `check` gets the abort anyway. Every abort received for a
run is remembered in `aborted[run_id]` until `end_run`, and the run's next `check`
returns it at once, sending nothing. A spend cap's pause (`fleet_spend_cap`, section 11)
is not remembered: the call is not run, and the run's next call is judged again.

Shadow mode (section 10): a decision with `enforced: false` says `allow` (the would-be
action in `shadow_action`); it is handed on so, never remembered as an abort, logged at
debug level; a run known to be in shadow is not blocked by the fail-closed policy either.

Errors name their cause: `EventTooLarge` before anything is produced, `BrokerError` for
a broker that cannot be reached, refuses the login or presents a certificate the CA does
not vouch for (made and translated in streams/kafka/clients.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import replace
from typing import Any, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from msgspec import UNSET

from detectors.errors import LoopwardenError
from detectors.fingerprint import fingerprint
from detectors.policy import FLEET_SPEND_CAP
from detectors.wire import (
    MAX_COST_USD,
    MAX_SAFE_INTEGER,
    CompactionRetry,
    Decision,
    RunEnd,
    ToolCall,
    ToolResult,
    Usage,
    decode_decision,
    decode_value,
    encode,
)

from ..kafka import clients
from ..kafka.partitioner import partition_for as partition_bytes
from ..kafka.settings import Settings, build

FAIL_OPEN = "fail-open"
FAIL_CLOSED = "fail-closed"
MAX_REQUEST_SIZE = 1 << 20  # the producer's max_request_size (aiokafka's and Kafka's default)
_REMEMBERED_RUNS = 100_000  # runs whose abort or shadow mode the client keeps (those never ended)
_V = TypeVar("_V")

log = logging.getLogger("loopwarden.gateway")


class EventTooLarge(LoopwardenError):
    """An event too large to publish: larger than the worker's max event size (it would be
    dead-lettered as oversize) or than one produce request may carry. Raised before
    anything is produced; `run_id`, `tool_name`, `size` and `limit` (bytes) say which."""

    def __init__(self, message: str, *, run_id: str, tool_name: str | None, size: int, limit: int) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.tool_name = tool_name
        self.size = size
        self.limit = limit


def _now_us() -> int:
    """The wall clock in microseconds since the epoch (a seam for tests)."""
    return time.time_ns() // 1000


def partition_for(gateway_id: str, partitions: int) -> int:
    """The decisions partition of a gateway (Kafka's default partitioner on its id)."""
    return partition_bytes(gateway_id.encode(), partitions)


class GatewayClient:
    """An async context manager; see the module docstring."""

    def __init__(
        self,
        bootstrap: str | None = None,
        gateway_id: str = "gateway",
        *,
        settings: Settings | None = None,
        timeout_s: float = 2.0,
        policy: str = FAIL_OPEN,
        privacy: bool = True,
        agent_id: str | None = None,
        max_request_size: int = MAX_REQUEST_SIZE,
    ) -> None:
        if policy not in (FAIL_OPEN, FAIL_CLOSED):
            raise LoopwardenError(f"policy must be {FAIL_OPEN!r} or {FAIL_CLOSED!r}, got {policy!r}")
        if not gateway_id:
            raise LoopwardenError("gateway_id must not be empty")
        if max_request_size < 1:
            raise LoopwardenError(f"max_request_size must be positive, got {max_request_size}")
        self.settings = settings or build({"bootstrap": bootstrap})
        if bootstrap and settings:
            self.settings = replace(settings, bootstrap=bootstrap)
        self.gateway_id = gateway_id
        self.timeout_s = timeout_s
        self.policy = policy
        self.privacy = privacy
        self.agent_id = agent_id
        self.max_request_size = max_request_size
        self._last_seq = -1  # the last seq issued, for any run (see the module docstring)
        self._waiting: dict[tuple[str, int], asyncio.Future[Decision]] = {}
        self._seen: dict[str, None] = {}
        self.aborted: dict[str, Decision] = {}  # run_id -> the abort received for it (see the module docstring)
        self._shadow: dict[str, None] = {}  # runs a decision said are in shadow mode or held out
        self.degraded = 0
        self.duplicates = 0
        self.received = 0  # own decisions read
        self.foreign = 0  # other gateways' decisions on the same partition, skipped
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GatewayClient:
        try:
            self._producer, self._consumer, self.partition = await connect(
                self.settings, self.gateway_id, self.max_request_size
            )
        except BaseException:
            await self.__aexit__()
            raise
        self._reader = asyncio.create_task(self._read(), name=f"loopwarden-decisions-{self.gateway_id}")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._reader:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()
        if self._consumer:
            await self._consumer.stop()
            self._consumer = None
        if self._producer:
            await self._producer.stop()
            self._producer = None

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=1000)
            for msgs in batches.values():
                for m in msgs:
                    self._deliver(m.value)

    def _deliver(self, value: bytes) -> None:
        try:
            d = decode_decision(value)
        except Exception:
            return
        if d.gateway_id != self.gateway_id:
            self.foreign += 1  # another gateway sharing this partition
            return
        self.received += 1
        if d.event_id in self._seen:
            self.duplicates += 1
            return
        self._seen[d.event_id] = None
        if len(self._seen) > 100_000:
            del self._seen[next(iter(self._seen))]
        d = as_executed(d)
        if not d.enforced:
            _remember(self._shadow, d.run_id, None)
            log_shadow(d)
        elif d.action == "abort" and d.detector != FLEET_SPEND_CAP:  # a pause is no end of the run (section 11)
            _remember(self.aborted, d.run_id, d)
        fut = self._waiting.pop((d.run_id, d.seq), None)
        if fut is not None and not fut.done():
            fut.set_result(d)

    def _next_seq(self) -> int:
        """The seq of a new event, whatever its run: above every seq this client issued
        and not below the clock in µs (see the module docstring)."""
        seq = max(self._last_seq + 1, _now_us())
        if seq > MAX_SAFE_INTEGER:
            raise LoopwardenError(f"seq {seq} would exceed 2^53 - 1 (is the clock set to after the year 2255?)")
        self._last_seq = seq
        return seq

    def _head(self, run_id: str, agent_id: str | None = None) -> dict[str, Any]:
        """The fields every event has, for a new event of the run (its seq issued now)."""
        return {
            "run_id": run_id,
            "seq": self._next_seq(),
            "gateway_id": self.gateway_id,
            "agent_id": agent_id or self.agent_id,
            "ts": int(time.time() * 1000),
        }

    def _encode(self, ev: Any) -> tuple[bytes, bytes]:
        """The event's key and value as they will be produced (see `encode_event`)."""
        return encode_event(ev, self.privacy, self.max_request_size, self.settings.max_event_bytes)

    async def _send(self, key: bytes, value: bytes) -> None:
        assert self._producer is not None, "use GatewayClient as `async with`"
        await self._producer.send(self.settings.events_topic, key=key, value=value)

    async def check(
        self,
        run_id: str,
        tool_name: str,
        params: Any = UNSET,
        tool_call_id: str | None = None,
        agent_id: str | None = None,
    ) -> Decision:
        """Publish a tool_call and wait for its decision (or apply the timeout policy).
        A run this client received an abort for is answered with that abort at once,
        nothing published (see the module docstring). Raises EventTooLarge, before
        sending, for params too large to send."""
        aborted = self.aborted.get(run_id)
        if aborted is not None:
            return aborted
        ev = ToolCall(
            **self._head(run_id, agent_id),
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            params=_wire(params),
        )
        key, value = self._encode(ev)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[(run_id, ev.seq)] = fut
        try:
            await self._send(key, value)
            return await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            self.degraded += 1
            return self._fallback(ev)
        finally:
            self._waiting.pop((run_id, ev.seq), None)

    def _fallback(self, ev: ToolCall) -> Decision:
        return fallback_decision(ev, self.policy, self.timeout_s, shadow=ev.run_id in self._shadow)

    async def result(
        self,
        run_id: str,
        tool_name: str,
        params: Any = UNSET,
        *,
        result: Any = UNSET,
        error: Any = UNSET,
        tool_call_id: str | None = None,
        agent_id: str | None = None,
    ) -> None:
        """Publish a tool's outcome: `result`, or `error` when the tool failed (privacy mode
        then sends `failed: true` beside the hashes). A result that aborts the run shows
        in `aborted[run_id]`. Raises EventTooLarge, before sending, for a result too
        large to send."""
        ev = ToolResult(
            **self._head(run_id, agent_id),
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            params=_wire(params),
            result=_wire(result),
            error=_wire(error),
            failed=True if self.privacy and error is not UNSET else UNSET,
        )
        await self._send(*self._encode(ev))

    async def usage(
        self,
        run_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        model: str | None = None,
        agent_id: str | None = None,
    ) -> Decision | None:
        """Publish what one model call of the run used; return the abort this client
        already received for the run, or None. It does not wait for the usage event's own
        decision (see the module docstring): that abort, when it comes, is remembered and
        returned by the next `check` or `usage` of the run. Raises LoopwardenError,
        before sending, for amounts the worker would dead-letter (negative, fractional or
        too large token counts, a negative, non-finite or too large cost, a wrong type)."""
        tokens_in, tokens_out, cost, model = usage_amounts(input_tokens, output_tokens, cost_usd, model)
        ev = Usage(
            **self._head(run_id, agent_id),
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost_usd=cost,
            model=model,
        )
        await self._send(*self._encode(ev))
        return self.aborted.get(run_id)

    async def compaction_retry(self, run_id: str) -> None:
        await self._send(*self._encode(CompactionRetry(**self._head(run_id))))

    async def end_run(self, run_id: str, agent_id: str | None = None) -> None:
        await self._send(*self._encode(RunEnd(**self._head(run_id, agent_id))))
        self.aborted.pop(run_id, None)
        self._shadow.pop(run_id, None)


async def connect(s: Settings, gateway_id: str, max_request_size: int) -> tuple[Any, Any, int]:
    """A started producer of events and a started consumer of the gateway's own partition
    of the decisions topic, at its end: (producer, consumer, partition). Failures are
    SettingsError or BrokerError naming the cause; whatever was started is stopped."""
    producer = clients.producer(s, acks="all", enable_idempotence=True, linger_ms=0, max_request_size=max_request_size)
    consumer = clients.consumer(s, enable_auto_commit=False, auto_offset_reset="latest", fetch_max_wait_ms=100)
    await clients.start(producer, s)
    try:
        await clients.start(consumer, s)
    except BaseException:
        await producer.stop()
        raise
    try:
        n = await clients.partition_count(consumer, s.decisions_topic)
        if n is None:
            raise LoopwardenError(f"topic {s.decisions_topic} does not exist; run `loopwarden topics create` first")
        tp = TopicPartition(s.decisions_topic, partition_for(gateway_id, n))
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)  # resolve now: nothing sent after this is missed
    except KafkaError as exc:
        await consumer.stop()
        await producer.stop()
        raise clients.translate(exc, s) from None
    except BaseException:
        await consumer.stop()
        await producer.stop()
        raise
    return producer, consumer, tp.partition


def encode_event(ev: Any, privacy: bool, max_request_size: int, max_event_bytes: int) -> tuple[bytes, bytes]:
    """An event's key and value as a client produces them (privacy mode: its hashes).
    Raises EventTooLarge when the value is larger than the worker's max event size or the
    record larger than one produce request may be, before anything is sent."""
    if privacy:
        ev = fingerprint(ev)
    key = ev.run_id.encode()
    value = encode(ev)
    size = len(value)
    record = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, [])  # what aiokafka checks
    fits = max_request_size - (record - size)  # the largest value a request can take with this key
    if size <= max_event_bytes and size <= fits:
        return key, value
    if size > max_event_bytes:
        limit, why = (
            max_event_bytes,
            "the worker's max event size (max_event_bytes), above which it dead-letters events",
        )
    else:
        limit = fits
        why = (
            f"what one produce request (max_request_size {max_request_size} bytes) can "
            "carry beside the key and record headers"
        )
    tool = getattr(ev, "tool_name", None)
    what = f"{ev.__struct_config__.tag} event of run {ev.run_id!r}" + (f" for tool {tool!r}" if tool else "")
    hint = (
        "; turn privacy mode on (privacy=True) to send hashes instead of the raw params and results"
        if not privacy
        else "; its ids are too long even in privacy mode"
    )
    raise EventTooLarge(
        f"{what} is {size} bytes encoded, over the limit of {limit} bytes: {why}; nothing was sent{hint}",
        run_id=ev.run_id,
        tool_name=tool,
        size=size,
        limit=limit,
    )


def fallback_decision(ev: ToolCall, policy: str, timeout_s: float, shadow: bool) -> Decision:
    """The timeout policy's decision for a call no decision came for; a run known to be
    in shadow is allowed whatever the policy (its action as `shadow_action`), as the
    worker would have allowed it."""
    closed = policy == FAIL_CLOSED
    policy_action = "block" if closed else "allow"
    d = Decision(
        run_id=ev.run_id,
        seq=ev.seq,
        gateway_id=ev.gateway_id,
        agent_id=ev.agent_id,
        tool_call_id=ev.tool_call_id,
        tool_name=ev.tool_name,
        ts=ev.ts,
        event_id=f"{ev.run_id}:{ev.seq}",
        action="allow" if shadow else policy_action,
        level="none",
        detector=None,
        count=None,
        message=f"loopwarden gave no decision within {timeout_s:g}s; "
        + ("blocked (fail-closed)" if closed else "allowed (fail-open)"),
        warning_key=None,
        paired_tool_name=None,
        args_hash=None,
        config_hash="",
        enforced=not shadow,
        shadow_action=policy_action if shadow else None,
        degraded=True,
    )
    if shadow:
        log_shadow(d)
    return d


def usage_amounts(
    input_tokens: Any, output_tokens: Any, cost_usd: Any, model: Any
) -> tuple[int, int, float, str | None]:
    """A usage event's amounts as sent, checked as the worker checks them (wire-format.md,
    "Bad input"): token counts integers from 0 to 2^53 - 1 (a float with an integral
    value is taken as that integer), the cost a finite number from 0 to 10^9, the model a
    string or None. Raises LoopwardenError naming the field and why."""
    tokens = []
    for name, v in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise LoopwardenError(f"{name} must be a whole number of tokens, got {v!r}")
        if not 0 <= v <= MAX_SAFE_INTEGER:
            raise LoopwardenError(f"{name} must be from 0 to 2^53 - 1, got {v}")
        tokens.append(v)
    if isinstance(cost_usd, bool) or not isinstance(cost_usd, (int, float)):
        raise LoopwardenError(f"cost_usd must be a number of US dollars, got {cost_usd!r}")
    if not math.isfinite(cost_usd) or not 0 <= cost_usd <= MAX_COST_USD:
        raise LoopwardenError(f"cost_usd must be a finite number from 0 to {MAX_COST_USD:g}, got {cost_usd!r}")
    if model is not None and not isinstance(model, str):
        raise LoopwardenError(f"model must be a string or None, got {model!r}")
    return tokens[0], tokens[1], float(cost_usd), model


def as_executed(d: Decision) -> Decision:
    """A decision as a client executes it: one with `enforced: false` is an allow. Workers
    already publish it so (semantics.md section 10); one that did not is made so, its
    action kept as `shadow_action`, so no adapter ever acts on a shadow verdict."""
    if d.enforced or d.action == "allow":
        return d
    return msgspec.structs.replace(d, action="allow", shadow_action=d.shadow_action or d.action)


def log_shadow(d: Decision) -> None:
    """The one debug line of a decision not enforced: its run, tool, detector and shadow action."""
    log.debug(
        "shadow decision (executed as allow): run %r, tool %r, detector %s, shadow_action %s",
        d.run_id,
        d.tool_name,
        d.detector,
        d.shadow_action,
    )


def _remember(table: dict[str, _V], key: str, value: _V) -> None:
    """Keep `key` (most recent last), forgetting the oldest beyond _REMEMBERED_RUNS."""
    table.pop(key, None)
    table[key] = value
    if len(table) > _REMEMBERED_RUNS:
        del table[next(iter(table))]


def _wire(value: Any) -> Any:
    """A Python value as the worker will see it once it crossed the wire (floats in
    their JavaScript spelling), so privacy-mode hashes equal the worker's raw-mode ones."""
    if value is UNSET or value is None or isinstance(value, (str, bool, int)):
        return value
    return decode_value(encode(value))


__all__ = ["FAIL_CLOSED", "FAIL_OPEN", "MAX_REQUEST_SIZE", "EventTooLarge", "GatewayClient", "partition_for"]
