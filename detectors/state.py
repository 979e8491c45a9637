"""The state of one run, and its versioned binary encoding (what a Faust table stores).

Everything here is bounded by the config: `history` by historySize, `warned` by
MAX_WARNING_KEYS, `answers` by REMEMBERED_DECISIONS, the guard window by windowSize.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct


STATE_VERSION = 1
MAX_WARNING_KEYS = 256
REMEMBERED_DECISIONS = 64


class Record(Struct, frozen=True, array_like=True):
    """One history entry: a call, and its outcome once the result arrived."""

    tool_name: str
    args_hash: str
    tool_call_id: str | None = None
    result_hash: str | None = None
    unknown_tool_name: str | None = None


class GuardEntry(Struct, frozen=True, array_like=True):
    tool_name: str
    args_hash: str
    result_hash: str


class Answer(Struct, frozen=True, array_like=True):
    """A remembered tool-call decision, compact: no run_id, event_id or message, which
    are rebuilt from the run and the decision's own facts when a duplicate asks again."""

    seq: int
    gateway_id: str
    agent_id: str | None
    tool_call_id: str | None
    tool_name: str
    ts: int | None
    action: str
    level: str
    detector: str | None
    count: int | None
    warning_key: str | None
    paired_tool_name: str | None
    args_hash: str | None
    config_hash: str


class RunState(Struct, frozen=True, kw_only=True):
    """A run's rolling state."""

    version: int = STATE_VERSION
    last_seq: int = -1
    history: tuple[Record, ...] = ()
    warned: dict[str, int] = {}
    guard_left: int = 0
    guard_window: tuple[GuardEntry, ...] = ()
    aborted: bool = False
    answers: tuple[Answer, ...] = ()


EMPTY = RunState()

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(RunState)


def encode_state(state: RunState) -> bytes:
    return _encoder.encode(state)


def decode_state(data: bytes) -> RunState:
    """Decode a stored state; a newer format than this code knows is refused loudly."""
    state = _decoder.decode(data)
    if state.version > STATE_VERSION:
        raise ValueError(f"run state version {state.version} is newer than this worker ({STATE_VERSION})")
    return state
