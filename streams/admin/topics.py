"""Topic administration: the topics a deployment needs, with their keys and policies.

Used by `loopwarden topics create`, by every worker at start (idempotent, so a fresh
cluster needs no extra step), and by the tests' and benchmarks' setups.
"""

from __future__ import annotations

from ..gateway.settings import Settings


async def create_topics(s: Settings) -> list[str]:
    """Create the events, decisions, dead-letter, changelog and config topics; existing ones are kept.

    A broker that cannot be reached, refuses the login or presents a certificate the CA
    does not vouch for is a BrokerError that says which (see errors.broker_error)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    from ..gateway import connection
    from ..gateway.errors import SettingsError, broker_error

    # The changelog gets one record per touched run per flush; compaction (one record a
    # run) only reaches closed segments, and Kafka's default segment (1 GiB or 7 days)
    # closes too rarely, so a recovering worker would read every write ever made
    # (benchmarks/recovery.py: 500,938 records for 100,000 runs, about 4,400 a second).
    compacted = {"cleanup.policy": "compact", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
    specs = [
        (s.events_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.decisions_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.deadletter_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.changelog_topic, s.partitions, compacted),
        # The detection configs by id and the current one (streams/admin/config_topic.py): one
        # partition, so every reader sees a config before the `current` record naming it.
        (s.config_topic, 1, compacted),
    ]
    kw = connection.client_kwargs(s)
    try:
        admin = AIOKafkaAdminClient(**kw)
    except ValueError as exc:  # aiokafka's check of the protocol and SASL mechanism
        raise SettingsError(f"cannot connect with these settings: {exc}") from None
    await connection.start(admin, s)
    created = []
    try:
        existing = set(await admin.list_topics())
        todo = [NewTopic(n, p, s.replication, topic_configs=c) for n, p, c in specs if n not in existing]
        if todo:
            try:
                await admin.create_topics(todo)
            except TopicAlreadyExistsError:
                pass
            created = [t.name for t in todo]
    except KafkaError as exc:
        raise broker_error(exc, s) from None
    finally:
        await admin.close()
    return created
