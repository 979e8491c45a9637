"""The state of one run, and its versioned binary encoding (what a Faust table stores).

The state types are not tracked by the cycle collector (`gc=False`): they hold only
strings, numbers and tuples or dicts of those, so they can never be part of a cycle,
and a worker holding many thousands of runs would otherwise have its full collections
walk all of them.

Everything here is bounded by the config: `history` (and its keys) by historySize, `warned` by
MAX_WARNING_KEYS, `answers` by REMEMBERED_DECISIONS (and `recent_answers` by ANSWER_CHUNK),
the guard window by windowSize.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

STATE_VERSION = 1
MAX_WARNING_KEYS = 256
REMEMBERED_DECISIONS = 64
ANSWER_CHUNK = 16  # answers are added to `recent_answers`, and moved to `answers` this many at a time


class HistoryEntry(Struct, frozen=True, array_like=True, gc=False):
    """One history entry: a call, and its outcome once the result arrived. `failed`: the
    result that gave it its outcome was a failure (semantics.md section 12); trailing, so
    entries stored before it was kept decode as not failed."""

    tool_name: str
    args_hash: str
    tool_call_id: str | None = None
    result_hash: str | None = None
    unknown_tool_name: str | None = None
    failed: bool = False


class GuardEntry(Struct, frozen=True, array_like=True, gc=False):
    tool_name: str
    args_hash: str
    result_hash: str


class Answer(Struct, frozen=True, array_like=True, gc=False):
    """A remembered tool-call verdict. A duplicate is the same event delivered again, so
    everything else in its decision (ids, tool, args_hash, config_hash, message) is
    rebuilt from the duplicate itself; this keeps a run's state, and so every changelog
    record, small."""

    seq: int
    action: str
    level: str
    detector: str | None = None
    count: int | None = None
    warning_key: str | None = None
    paired_tool_name: str | None = None
    # Sections 8 to 10 (trailing, so answers stored before them still decode):
    message: str | None = None  # a message that cannot be rebuilt from the fields above (budgets, fleet)
    fleet_signal: str | None = None
    shadow_action: str | None = None  # not None: the decision was not enforced (its action is allow)


class RunState(Struct, frozen=True, kw_only=True, gc=False):
    """A run's rolling state."""

    version: int = STATE_VERSION
    last_seq: int = -1
    history: tuple[HistoryEntry, ...] = ()
    warned: dict[str, int] = {}
    guard_left: int = 0
    guard_window: tuple[GuardEntry, ...] = ()
    aborted: bool = False
    answers: tuple[Answer, ...] = ()
    last_ts: int | None = None  # `ts` of the last applied event that had one (semantics.md section 7)
    history_keys: str = ""
    """`history_key` of each history entry, in order: a call whose key is not in it is
    new to the history, which most calls are, so the detectors' scan of the history is
    skipped for them (the entries lie all over memory; this is one short string). A
    state without it (written before it was kept) has it rebuilt by `keys_of`."""
    recent_answers: tuple[Answer, ...] = ()
    """The newest answers, fewer than ANSWER_CHUNK, not yet moved to `answers`: the
    remembered answers are the last REMEMBERED_DECISIONS of `answers + recent_answers`
    (`remembered`). A call adds its answer to this short tuple instead of copying all 64
    (whose entries lie all over memory). Always empty in a stored state (`encode_state`
    moves them first), so a reader that does not know this field, an older worker, finds
    every remembered answer in `answers`."""
    # Run budgets (semantics.md section 8): what the run used, and the marks warned.
    tokens: int = 0
    cost_micros: int = 0
    calls: int = 0  # tool_call events applied, duplicates not counted
    budget_marks: tuple[int, int, int] = (0, 0, 0)
    """The highest mark (0, 80 or 95 percent) warned of tokens, cost and calls."""
    abort_by: str | None = None
    """The detector of the run's first abort; None in an aborted run stored before it was
    kept means the post-compaction guard (the only one that could abort then)."""


def remembered(state: RunState) -> tuple[Answer, ...]:
    """The run's remembered answers, oldest first."""
    if not state.recent_answers:
        return state.answers
    return (state.answers + state.recent_answers)[-REMEMBERED_DECISIONS:]


KEY_CHARS = 4


def history_key(args_hash: str) -> str:
    """The last KEY_CHARS characters of an args_hash (a digest's last hex digits)."""
    return args_hash[-KEY_CHARS:].rjust(KEY_CHARS, "\0")


def keys_of(state: RunState) -> str:
    """`state.history_keys`, rebuilt when it does not match the history."""
    keys = state.history_keys
    if len(keys) != KEY_CHARS * len(state.history):
        keys = "".join([history_key(r.args_hash) for r in state.history])
    return keys


EMPTY = RunState()

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(RunState)


def settled(state: RunState) -> RunState:
    """The same state with its recent answers moved into `answers`: what is stored."""
    if not state.recent_answers:
        return state
    return msgspec.structs.replace(state, answers=remembered(state), recent_answers=())


def encode_state(state: RunState) -> bytes:
    return _encoder.encode(settled(state))


def decode_state(data: bytes) -> RunState:
    """Decode a stored state; a newer format than this code knows is refused loudly."""
    state = _decoder.decode(data)
    if state.version > STATE_VERSION:
        raise ValueError(f"run state version {state.version} is newer than this worker ({STATE_VERSION})")
    return state
