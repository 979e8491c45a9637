"""Connecting an aiokafka client with the settings: one place that checks the
credentials, loads the TLS files and names why a start failed (errors.broker_error)."""

from __future__ import annotations

from typing import Any

from .errors import SettingsError, broker_error, connect_errors
from .settings import Settings


def client_kwargs(s: Settings) -> dict[str, Any]:
    """The settings' connection arguments, or a SettingsError that names what is wrong."""
    if "SASL" in s.security_protocol and (s.sasl_username is None or s.sasl_password is None):
        raise SettingsError(f"security protocol {s.security_protocol} needs --sasl-username and --sasl-password")
    try:
        return s.kafka_kwargs()
    except OSError as exc:  # ssl.SSLError too: an unreadable or malformed --ssl-cafile
        raise SettingsError(f"cannot load the TLS files (--ssl-cafile {s.ssl_cafile}): {exc}") from None


async def start(client: Any, s: Settings) -> None:
    """Start an aiokafka client (consumer, producer or admin); on failure close it and
    raise the BrokerError that names the cause (unreachable, refused login, untrusted
    certificate)."""
    from aiokafka.errors import KafkaError

    with connect_errors() as seen:
        try:
            await client.start()
        except KafkaError as exc:
            await (client.close() if hasattr(client, "close") and not hasattr(client, "stop") else client.stop())
            raise broker_error(exc, s, seen) from None


def reader(s: Settings, **kwargs: Any) -> Any:
    """A consumer with no group: nothing is committed, it reads what it is told to."""
    from aiokafka import AIOKafkaConsumer

    try:
        return AIOKafkaConsumer(
            **client_kwargs(s), group_id=None, enable_auto_commit=False, auto_offset_reset="earliest", **kwargs
        )
    except ValueError as exc:  # aiokafka's check of the protocol and SASL mechanism
        raise SettingsError(f"cannot connect with these settings: {exc}") from None


async def seek_to_start(consumer: Any, tps: list[Any]) -> None:
    """Put assigned partitions at their first offset, whatever the consumer's
    `auto_offset_reset`. aiokafka's `seek_to_beginning` only asks for a reset: one to the
    default strategy that `assign` already sent is answered after it and wins, and a
    consumer whose default is "latest" then starts at the end and reads nothing. A
    `seek` to the offsets the broker names cannot be overtaken that way."""
    for tp, offset in (await consumer.beginning_offsets(tps)).items():
        consumer.seek(tp, offset)
