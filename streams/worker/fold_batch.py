"""One batch of event messages in, decisions and dead letters out (the agent's body).

Kept apart from Faust so the batching logic reads on its own: decode, fold each run's
state once per batch, write each touched run once, publish the batch's decisions.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, NamedTuple, Protocol

from detectors import DetectionConfig, EventError, RunState, decode_state, encode_state
from detectors.ingest import KeyMismatch, MissingKey, SetAside, fold
from detectors.wire import Decision

from .metrics import Metrics

log = logging.getLogger("loopwarden.worker")


class Incoming(Protocol):
    """What the fold reads of a consumed message (Faust's Message has these attributes,
    so the worker passes its messages as they are)."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: float | None  # seconds


class DeadLetter(NamedTuple):
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


# A dead letter must fit the dead-letter topic (the broker's default limit is about 1 MiB
# per record, and an event the broker accepted compressed can be larger): past these
# sizes the value and the key are cut, and their original sizes named in headers.
DEAD_LETTER_MAX_VALUE = 900_000
DEAD_LETTER_MAX_KEY = 4096


def dead_letter(msg: Incoming, err: EventError) -> DeadLetter:
    key, value = msg.key, msg.value if msg.value is not None else b""
    headers = [
        ("loopwarden.error", err.reason.encode()),
        ("loopwarden.detail", str(err).encode("utf-8", "backslashreplace")[:2000]),
        ("loopwarden.source.topic", msg.topic.encode()),
        ("loopwarden.source.partition", str(msg.partition).encode()),
        ("loopwarden.source.offset", str(msg.offset).encode()),
    ]
    if len(value) > DEAD_LETTER_MAX_VALUE:
        headers.append(("loopwarden.original.value_bytes", str(len(value)).encode()))
        value = value[:DEAD_LETTER_MAX_VALUE]
    if key is not None and len(key) > DEAD_LETTER_MAX_KEY:
        headers.append(("loopwarden.original.key_bytes", str(len(key)).encode()))
        key = key[:DEAD_LETTER_MAX_KEY]
    return DeadLetter(key, value, headers)


class BatchResult(NamedTuple):
    decisions: list[Decision]
    encoded: list[bytes]  # each decision's JSON, in the same order
    dead: list[DeadLetter]
    writes: dict[bytes, RunState | None]  # run key -> its new state, None: the run ended
    where: dict[bytes, int]  # run key (of writes) -> its partition (the changelog's, too)
    newest_ts: dict[int, int]  # partition -> the newest event `ts` folded from it
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
    changelog recovery put there). Never raises for bad input: whatever a message holds,
    it yields decisions or one dead letter (detectors.ingest)."""
    writes: dict[bytes, RunState | None] = {}
    decisions: list[Decision] = []
    encoded: list[bytes] = []
    dead: list[DeadLetter] = []
    ended: dict[bytes, tuple[RunState, int]] = {}
    where: dict[bytes, int] = {}
    newest: dict[int, int] = {}

    def stored(run: str, msg: Incoming) -> RunState | None:
        return _load_state(load, run.encode(), msg.offset)

    source = ((m, m.key, m.value) for m in messages)
    for out in fold(source, config, max_event_bytes=max_event_bytes, load=stored):
        msg = out.position
        if type(out) is SetAside:
            exc = out.error
            if exc.reason == "internal_error":
                log.error("event at %s[%d]@%d set aside: %s", msg.topic, msg.partition, msg.offset, exc)
            dead.append(dead_letter(msg, exc))
            if metrics:
                metrics.dead_letters.labels(exc.reason).inc()
            continue
        ts = out.event.ts
        if ts is not None and ts > newest.get(msg.partition, ts - 1):
            newest[msg.partition] = ts
        new, state, key = out.after, out.before, out.key
        if new is not state:
            writes[key] = new
            where[key] = msg.partition
            if new is None and state is not None:
                ended[key] = (state, msg.offset)
            elif new is not None:
                ended.pop(key, None)
        decisions.extend(out.decisions)
        encoded.extend(out.encoded)
    return BatchResult(decisions, encoded, dead, writes, where, newest, ended)


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


__all__ = ["BatchResult", "DeadLetter", "Incoming", "KeyMismatch", "MissingKey", "observe", "process_batch"]
