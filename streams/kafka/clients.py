"""Every aiokafka client of the shell is made here, from the settings, and its errors are
translated here, once:

- the settings' connection arguments are checked (SASL needs credentials, the TLS files
  must load): a `SettingsError` names what is wrong;
- aiokafka's own check of the protocol and the SASL mechanism (a `ValueError` from the
  constructor) becomes a `SettingsError` too;
- a failed start (`start`, `opened`) or a failed call (`translate`) becomes a
  `BrokerError` that names the cause (unreachable, refused login, untrusted certificate),
  not aiokafka's "Unable to bootstrap".

`consumer` (in a group, or none), `reader` (no group: nothing committed, it reads what it
is told), `producer` and `admin` make them; `opened` starts one and stops it at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from .errors import BrokerError, SettingsError, broker_error, connect_errors
from .settings import Settings

C = TypeVar("C")


def client_kwargs(s: Settings) -> dict[str, Any]:
    """The settings' connection arguments, or a SettingsError that names what is wrong."""
    if "SASL" in s.security_protocol and (s.sasl_username is None or s.sasl_password is None):
        raise SettingsError(
            f"security protocol {s.security_protocol} needs --sasl-username and --sasl-password "
            "(sasl_username and sasl_password in code)"
        )
    try:
        return s.kafka_kwargs()
    except OSError as exc:  # ssl.SSLError too: an unreadable or malformed --ssl-cafile
        raise SettingsError(f"cannot load the TLS files (--ssl-cafile {s.ssl_cafile}): {exc}") from None


def _make(cls: Callable[..., C], s: Settings, kwargs: dict[str, Any]) -> C:
    try:
        return cls(**client_kwargs(s), **kwargs)
    except ValueError as exc:  # aiokafka's check of the protocol and SASL mechanism
        raise SettingsError(f"cannot connect with these settings: {exc}") from None


def consumer(s: Settings, **kwargs: Any) -> Any:
    """An AIOKafkaConsumer with the settings' connection (a group when `group_id` is given)."""
    from aiokafka import AIOKafkaConsumer

    return _make(AIOKafkaConsumer, s, kwargs)


def reader(s: Settings, **kwargs: Any) -> Any:
    """A consumer with no group: nothing is committed, it reads what it is told
    (`streams.kafka.ranges` tells it where to start and where to stop)."""
    kwargs = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest", **kwargs}
    return consumer(s, **kwargs)


def producer(s: Settings, **kwargs: Any) -> Any:
    """An AIOKafkaProducer with the settings' connection."""
    from aiokafka import AIOKafkaProducer

    return _make(AIOKafkaProducer, s, kwargs)


def admin(s: Settings, **kwargs: Any) -> Any:
    """An AIOKafkaAdminClient with the settings' connection."""
    from aiokafka.admin import AIOKafkaAdminClient

    return _make(AIOKafkaAdminClient, s, kwargs)


async def close(client: Any) -> None:
    """Stop a consumer or producer, close an admin client."""
    await (client.close() if hasattr(client, "close") and not hasattr(client, "stop") else client.stop())


async def start(client: Any, s: Settings) -> None:
    """Start an aiokafka client (consumer, producer or admin); on failure close it and
    raise the BrokerError that names the cause (unreachable, refused login, untrusted
    certificate): aiokafka logs why each connection attempt failed and raises only
    "Unable to bootstrap", so what it logged meanwhile is collected to name it."""
    from aiokafka.errors import KafkaError

    with connect_errors() as seen:
        try:
            await client.start()
        except KafkaError as exc:
            await close(client)
            raise broker_error(exc, s, seen) from None


@contextlib.asynccontextmanager
async def opened(client: C, s: Settings) -> AsyncIterator[C]:
    """The client started (`start`), stopped at the end of the block; a KafkaError raised
    inside is translated (`translate`)."""
    from aiokafka.errors import KafkaError

    await start(client, s)
    try:
        yield client
    except KafkaError as exc:
        raise translate(exc, s) from None
    finally:
        await close(client)


def translate(exc: BaseException, s: Settings) -> BrokerError:
    """The BrokerError of a KafkaError raised by a call of a started client."""
    return broker_error(exc, s)


async def partition_count(consumer: Any, topic: str, tries: int = 50) -> int | None:
    """How many partitions `topic` has, as a consumer's metadata says (asked again a few
    times: a topic created a moment ago may not be listed yet); None: no such topic."""
    import asyncio

    for _ in range(tries):
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return len(parts)
        await consumer._client.force_metadata_update()  # aiokafka has no public call for it
        await asyncio.sleep(0.1)
    return None


async def create_topics(s: Settings, specs: list[tuple[str, int, dict[str, str]]]) -> list[str]:
    """Create the topics of `specs` (name, partitions, topic configs) that do not exist
    yet, with the settings' replication; existing ones are kept. The names created.

    A broker that cannot be reached, refuses the login or presents a certificate the CA
    does not vouch for is a BrokerError that says which (see errors.broker_error)."""
    from aiokafka.admin import NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    client = admin(s)
    created = []
    async with opened(client, s):
        existing = set(await client.list_topics())
        todo = [NewTopic(n, p, s.replication, topic_configs=c) for n, p, c in specs if n not in existing]
        if todo:
            with contextlib.suppress(TopicAlreadyExistsError):
                await client.create_topics(todo)
            created = [t.name for t in todo]
    return created
