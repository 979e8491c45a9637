"""Topic administration: the topics a deployment needs, with their keys and policies.

Used by `loopwarden topics create`, by every worker at start (idempotent, so a fresh
cluster needs no extra step), and by the tests' and benchmarks' setups.
"""

from __future__ import annotations

from ..kafka.settings import Settings


def topic_specs(s: Settings) -> list[tuple[str, int, dict[str, str]]]:
    """Every topic a deployment needs: (name, partitions, topic configs)."""
    # The changelog gets one record per touched run per flush; compaction (one record a
    # run) only reaches closed segments, and Kafka's default segment (1 GiB or 7 days)
    # closes too rarely, so a recovering worker would read every write ever made
    # (benchmarks.recovery; benchmarks/RESULTS.md).
    compacted = {"cleanup.policy": "compact", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
    return [
        (s.events_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.decisions_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.deadletter_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.changelog_topic, s.partitions, compacted),
        # The detection configs by id and the current one (streams/admin/config_topic.py): one
        # partition, so every reader sees a config before the `current` record naming it.
        (s.config_topic, 1, compacted),
        # Breakers and stop orders by id (streams/admin/fleet_topic.py): one partition, read
        # whole by every worker; alerts: one partition, few records, read in order.
        (s.fleet_topic, 1, compacted),
        (s.alerts_topic, 1, {"cleanup.policy": "delete"}),
        # Tool failures keyed by tool name, for the fleet's breaker stage (streams/worker/fleet.py).
        (s.failures_topic, s.partitions, {"cleanup.policy": "delete"}),
        (s.spend_topic, s.partitions, {"cleanup.policy": "delete"}),
    ]


async def create_topics(s: Settings) -> list[str]:
    """Create the topics of `topic_specs` that do not exist yet; existing ones are kept
    (a BrokerError names a broker that cannot be reached or refuses the login)."""
    from ..kafka import clients

    return await clients.create_topics(s, topic_specs(s))
