"""loopwarden's functional core: pure, deterministic loop detection (no I/O, no clock)."""

from .canonical import canon, canon_exact, digest
from .config import DetectionConfig, Resolved, load_config
from .engine import Rejected, apply, replay, replay_iter
from .errors import ConfigError, DecodeError, EventError, LoopwardenError, OversizeError, StaleSeqError
from .fingerprint import fingerprint
from .state import RunState, decode_state, encode_state
from .wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult, decode_event, encode

__all__ = [
    "CompactionRetry", "ConfigError", "Decision", "DecodeError", "DetectionConfig", "Event", "EventError",
    "LoopwardenError", "OversizeError", "Rejected", "Resolved", "RunEnd", "RunState", "StaleSeqError",
    "ToolCall", "ToolResult", "apply", "canon", "canon_exact", "decode_event", "decode_state", "digest",
    "encode", "encode_state", "fingerprint", "load_config", "replay", "replay_iter",
]
