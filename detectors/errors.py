"""The error tree of loopwarden. Every error it raises on purpose is one of these.

LoopwardenError
├── ConfigError          a detection config file that cannot be used at all
├── EventError           one event that cannot be applied (routed to the dead-letter topic)
│   ├── DecodeError      not JSON, not an object, a missing field or a wrong type
│   ├── OversizeError    larger than the configured size limit
│   └── StaleSeqError    a stale tool_call whose decision is not remembered
└── (streams/) SettingsError, BrokerError: the shell's own, see streams/errors.py
"""

from __future__ import annotations


class LoopwardenError(Exception):
    """Root of every error loopwarden raises on purpose."""


class ConfigError(LoopwardenError):
    """The detection config cannot be read or is not an object."""


class EventError(LoopwardenError):
    """One event cannot be applied; `reason` is the short machine-readable kind."""

    reason = "invalid_event"


class DecodeError(EventError):
    reason = "decode_error"


class OversizeError(EventError):
    reason = "oversize"


class StaleSeqError(EventError):
    reason = "stale_seq"
