"""Deprecated: the gateway client is `streams.gateway.client` now (`from streams.gateway
import GatewayClient`). This module hands its names on, for one release."""

import warnings

from streams.gateway.client import (
    FAIL_CLOSED,
    FAIL_OPEN,
    MAX_REQUEST_SIZE,
    EventTooLarge,
    GatewayClient,
    partition_for,
)

warnings.warn(
    "streams.client is deprecated: import from streams.gateway.client instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["FAIL_CLOSED", "FAIL_OPEN", "MAX_REQUEST_SIZE", "EventTooLarge", "GatewayClient", "partition_for"]
