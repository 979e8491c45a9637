"""Errors of the shell; the root and the core's subtree live in detectors/errors.py.

    LoopwardenError
    ├── SettingsError   a setting (flag, LOOPWARDEN_* variable) with an unusable value
    └── BrokerError     the local Kafka broker cannot be fetched, started or reached
"""

from __future__ import annotations

from detectors.errors import LoopwardenError


class SettingsError(LoopwardenError):
    """A setting has a value that cannot be used."""


class BrokerError(LoopwardenError):
    """The local broker could not be fetched, started or reached."""
