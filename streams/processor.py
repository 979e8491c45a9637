"""One batch of event messages in, decisions and dead letters out (the agent's body).

Kept apart from Faust so the batching logic reads on its own: decode, fold each run's
state once per batch, write each touched run once, publish the batch's decisions.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, NamedTuple, Protocol

from detectors import DetectionConfig, EventError, RunState, apply, decode_event, decode_state, encode_state
from detectors.errors import OversizeError
from detectors.wire import Decision

from .metrics import Metrics

log = logging.getLogger("loopwarden.worker")


class Incoming(Protocol):
    """What the fold reads of a consumed message (Faust's Message has these attributes,
    so the worker passes its messages as they are)."""

    key: bytes | None
    value: bytes
    topic: str
    partition: int
    offset: int
    timestamp: float | None  # seconds


class DeadLetter(NamedTuple):
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


class KeyMismatch(EventError):
    reason = "key_mismatch"


def dead_letter(msg: Incoming, err: EventError) -> DeadLetter:
    return DeadLetter(msg.key, msg.value, [
        ("loopwarden.error", err.reason.encode()),
        ("loopwarden.detail", str(err).encode("utf-8", "replace")[:2000]),
        ("loopwarden.source.topic", msg.topic.encode()),
        ("loopwarden.source.partition", str(msg.partition).encode()),
        ("loopwarden.source.offset", str(msg.offset).encode()),
    ])


_MISSING = object()


class BatchResult(NamedTuple):
    decisions: list[Decision]
    dead: list[DeadLetter]
    writes: dict[bytes, RunState | None]  # run key -> its new state, None: the run ended
    # Runs that ended in this batch: key -> (the state just before its run_end, the
    # offset of that run_end).
    ended: dict[bytes, tuple[RunState, int]]


def process_batch(
    messages: Iterable[Incoming],
    load: Callable[[bytes], RunState | bytes | None],
    config: DetectionConfig,
    max_event_bytes: int,
    metrics: Metrics | None = None,
) -> BatchResult:
    """Fold a batch; `load(key)` reads a run's stored state (a RunState, or the bytes a
    changelog recovery put there). Never raises for bad input."""
    states: dict[bytes, Any] = {}
    dirty: set[bytes] = set()
    decisions: list[Decision] = []
    dead: list[DeadLetter] = []
    ended: dict[bytes, tuple[RunState, int]] = {}
    for msg in messages:
        try:
            if len(msg.value) > max_event_bytes:
                raise OversizeError(f"{len(msg.value)} bytes > limit {max_event_bytes}")
            ev = decode_event(msg.value)
            key = ev.run_id.encode()
            if msg.key is not None and msg.key != key:
                raise KeyMismatch(f"message key {msg.key[:200]!r} is not the event's run_id {ev.run_id[:200]!r}")
            state = states.get(key, _MISSING)
            if state is _MISSING:
                state = _load_state(load, key, msg.offset)
            new, ds = apply(state, ev, config)
        except EventError as exc:
            dead.append(dead_letter(msg, exc))
            if metrics:
                metrics.dead_letters.labels(exc.reason).inc()
            continue
        if new is not state:
            states[key] = new
            dirty.add(key)
            if new is None and state is not None:
                ended[key] = (state, msg.offset)
            elif new is not None:
                ended.pop(key, None)
        decisions.extend(ds)
    return BatchResult(decisions, dead, {k: states[k] for k in dirty}, ended)


# A changelog record of a run that has ended: this prefix (a byte msgpack never starts
# with), the offset of its run_end (8 bytes, big-endian), then the run's state just before
# the run_end. A restarted worker replaying the run's last events (at offsets up to the
# run_end) judges them on that state, as the first time; any later event of the same
# run_id starts a new run. The pipeline deletes the record once the run_end is committed.
ENDED = b"\xc1"


def ended_record(state: RunState, run_end_offset: int) -> bytes:
    return ENDED + run_end_offset.to_bytes(8, "big", signed=True) + encode_state(state)


def _load_state(load: Callable[[bytes], RunState | bytes | None], key: bytes, offset: int) -> RunState | None:
    raw = load(key)
    if raw is None or isinstance(raw, RunState):
        return raw
    try:
        if raw[:1] == ENDED:
            if offset > int.from_bytes(raw[1:9], "big", signed=True):
                return None
            return decode_state(raw[9:])
        return decode_state(raw)
    except Exception as exc:  # a corrupt or too-new record must not stop the worker
        log.error("dropping unreadable state of run %r: %s", key, exc)
        return None


def observe(metrics: Metrics, batch: list[Incoming], result: BatchResult) -> None:
    """Metrics once per batch (per-event calls into prometheus_client add up)."""
    now = time.time()
    metrics.batch.observe(len(batch))
    metrics.events.inc(len(batch) - len(result.dead))
    oldest = min((m.timestamp for m in batch if m.timestamp), default=None)
    if oldest is not None:
        metrics.latency.observe(max(0.0, now - oldest))
    counts: dict[tuple[str, str], int] = {}
    for d in result.decisions:
        k = (d.action, d.detector or "none")
        counts[k] = counts.get(k, 0) + 1
    for (action, detector), n in counts.items():
        metrics.decisions.labels(action, detector).inc(n)


__all__ = ["BatchResult", "DeadLetter", "Incoming", "KeyMismatch", "observe", "process_batch"]
