"""Admitting one message and folding it: the checks and the step every reader shares.

The worker (a Kafka batch), `loopwarden replay` (a file) and the coming topic audit
read events through `admit` and fold them through `step`, so a message is refused for
the same reason, or decided the same way, wherever it is read. Nothing here raises
anything but an EventError for bad input, whatever the bytes.
"""

from __future__ import annotations

from .config import DetectionConfig
from .engine import apply
from .errors import DecodeError, EventError, OversizeError
from .state import RunState
from .wire import Decision, Event, decode_event, encode


class MissingKey(EventError):
    reason = "missing_key"


class KeyMismatch(EventError):
    reason = "key_mismatch"


class InternalError(EventError):
    """An event the core could not fold for a reason of its own (a bug): it is set aside
    like any bad event, never allowed to stop the reader."""

    reason = "internal_error"


def admit(value: bytes | None, key: bytes | None, max_event_bytes: int, keyed: bool = True) -> Event:
    """The event in one message, after the checks of wire-format.md ("Bad input"), in
    one order: a value at all, its size, its decoding (with the shared limits), its key.

    `keyed` is false for sources without keys (a file); a Kafka message without a key
    landed on a partition chosen at random, so its run could be split across workers."""
    if value is None:
        raise DecodeError("the message has no value (a tombstone on the events topic)")
    if len(value) > max_event_bytes:
        raise OversizeError(f"{len(value)} bytes > limit {max_event_bytes}")
    if not value.strip():
        raise DecodeError("an empty message: no JSON value")
    try:
        ev = decode_event(value)
    except EventError:
        raise
    except Exception as exc:  # decode_event names what it knows; anything else is ours
        raise InternalError(f"decoding failed: {type(exc).__name__}: {exc}") from None
    if keyed:
        if key is None:
            raise MissingKey("the message has no key; events must be keyed by their run_id")
        if key != ev.run_id.encode():
            raise KeyMismatch(f"message key {key[:200]!r} is not the event's run_id {ev.run_id[:200]!r}")
    return ev


def step(state: RunState | None, ev: Event, config: DetectionConfig
         ) -> tuple[RunState | None, tuple[Decision, ...], list[bytes]]:
    """`apply`, and each decision encoded for the wire: (new state, decisions, their JSON).

    A decision that cannot be encoded fails its event here, before the caller stores
    the new state, so the run's state stays as it was."""
    try:
        new, decisions = apply(state, ev, config)
        return new, decisions, [encode(d) for d in decisions]
    except EventError:
        raise
    except Exception as exc:
        raise InternalError(f"{type(exc).__name__}: {exc}") from None
