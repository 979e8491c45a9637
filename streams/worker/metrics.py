"""Prometheus metrics of one worker, in a registry of its own (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter("loopwarden_events", "Events applied (dead letters not included)", registry=r)
        self.decisions = Counter(
            "loopwarden_decisions", "Decisions published, by action and detector", ["action", "detector"], registry=r
        )
        self.dead_letters = Counter(
            "loopwarden_dead_letters", "Events sent to the dead-letter topic, by reason", ["reason"], registry=r
        )
        self.latency = Histogram(
            "loopwarden_processing_seconds",
            "Per batch: from its oldest event's Kafka timestamp to its decisions being handed to the producer",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=r,
        )
        self.batch = Histogram(
            "loopwarden_batch_events",
            "Events per processed batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=r,
        )
        self.lag = Gauge(
            "loopwarden_consumer_lag",
            "Events not yet folded, by partition (once one was folded since assignment)",
            ["partition"],
            registry=r,
        )
        self.evicted = Counter(
            "loopwarden_runs_evicted",
            "Runs dropped from the table for being idle past twice runIdleTimeoutMs (event time)",
            registry=r,
        )
        self.runs = Gauge("loopwarden_active_runs", "Runs with state in this worker's table", registry=r)
        self.rereads = Counter(
            "loopwarden_partitions_reread",
            "Times an events partition was read again: events were fetched but never reached the agent (delivery.py)",
            ["partition"],
            registry=r,
        )
        self.flushes = Counter(
            "loopwarden_state_flushes", "Writes of the touched run states to the changelog", registry=r
        )
        self.flushed_states = Counter(
            "loopwarden_state_records", "Run-state records written to the changelog", registry=r
        )
        self.fleet_records = Gauge(
            "loopwarden_fleet_signals", "Stop orders and breakers received from the fleet topic", registry=r
        )
        self.fleet_taken = Gauge(
            "loopwarden_fleet_records_read", "Records taken in from the fleet topic (a lift counts)", registry=r
        )
        self.fleet_skipped = Gauge(
            "loopwarden_fleet_records_skipped", "Unreadable records of the fleet topic, skipped", registry=r
        )
        self.breakers_opened = Counter(
            "loopwarden_breakers_opened", "Tool breakers this worker's fleet stage opened", registry=r
        )
