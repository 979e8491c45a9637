"""The gateway library: what an agent gateway needs to have each tool call judged by
loopwarden before it runs, and nothing of the worker (a plain `pip install loopwarden`:
msgspec, aiokafka and json5).

    from streams.gateway import GatewayClient

    async with GatewayClient("127.0.0.1:9092", gateway_id="gw-1") as guard:
        d = await guard.check(run_id, "read", {"path": "README.md"})

    client.py       GatewayClient: a call checked before it runs, its result, the run's end
    adapters/       the same guard inside agent frameworks (LangChain, the OpenAI Agents SDK)
    settings.py     process settings, a gateway's and a worker's: defaults < LOOPWARDEN_* < flags
    connection.py   an aiokafka client connected with those settings
    partitioner.py  the partition Kafka's default partitioner picks for a key
    errors.py       the shell's errors (SettingsError, BrokerError, ...)

The worker, the commands and fleet administration (`streams.admin`) build on these
modules; none of them is imported here (tests/unit/test_layout.py checks it). The client
and the adapters' helpers are loaded on first use of their names, so a command that
needs only the settings or the errors loads no Kafka client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kafka.errors import BrokerError, SettingsError
from ..kafka.settings import Settings

if TYPE_CHECKING:
    from .adapters import RunStopped
    from .client import FAIL_CLOSED, FAIL_OPEN, EventTooLarge, GatewayClient

_LAZY = {
    "FAIL_CLOSED": "client",
    "FAIL_OPEN": "client",
    "EventTooLarge": "client",
    "GatewayClient": "client",
    "RunStopped": "adapters",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "FAIL_CLOSED",
    "FAIL_OPEN",
    "BrokerError",
    "EventTooLarge",
    "GatewayClient",
    "RunStopped",
    "Settings",
    "SettingsError",
]
