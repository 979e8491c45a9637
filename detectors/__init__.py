"""loopwarden's functional core: pure, deterministic loop detection (no I/O, no clock)."""

from .canonical import canon, canon_exact, digest
from .config import AgentConfig, DetectionConfig, load_config
from .engine import apply
from .errors import ConfigError, DecodeError, EventError, LoopwardenError, OversizeError, StaleSeqError
from .fingerprint import fingerprint
from .ingest import Folded, SetAside, fold, replay, replay_iter
from .state import RunState, decode_state, encode_state
from .wire import CompactionRetry, Decision, Event, RunEnd, ToolCall, ToolResult, decode_event, encode

__all__ = [
    "AgentConfig",
    "CompactionRetry",
    "ConfigError",
    "Decision",
    "DecodeError",
    "DetectionConfig",
    "Event",
    "EventError",
    "Folded",
    "LoopwardenError",
    "OversizeError",
    "RunEnd",
    "RunState",
    "SetAside",
    "StaleSeqError",
    "ToolCall",
    "ToolResult",
    "apply",
    "canon",
    "canon_exact",
    "decode_event",
    "decode_state",
    "digest",
    "encode",
    "encode_state",
    "fingerprint",
    "fold",
    "load_config",
    "replay",
    "replay_iter",
]
