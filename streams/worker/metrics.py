"""Prometheus metrics of one worker, in a registry of its own (no global state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """The worker's metrics; `config_in_use(id)` sets the config gauge and returns the
    callable that moves it to another id."""

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
        self.holes = Counter(
            "loopwarden_offset_holes",
            "Times events reached the agent past a hole (events lost on the way), read from the broker (delivery.py)",
            ["partition"],
            registry=r,
        )
        self.holes_unfilled = Counter(
            "loopwarden_offset_holes_unfilled",
            "Holes whose events could not be read from the broker: those events went unanswered (delivery.py)",
            ["partition"],
            registry=r,
        )
        self.flushes = Counter(
            "loopwarden_state_flushes", "Writes of the touched run states to the changelog", registry=r
        )
        self.flushed_states = Counter(
            "loopwarden_state_records", "Run-state records written to the changelog", registry=r
        )
        self.partitions_loaded = Counter(
            "loopwarden_partitions_loaded",
            "Events partitions whose run states were read from the changelog",
            registry=r,
        )
        self.partitions_kept = Counter(
            "loopwarden_partitions_kept",
            "Events partitions kept across a rebalance with their run states in memory (not read again)",
            registry=r,
        )
        self.states_loaded = Counter(
            "loopwarden_states_loaded", "Run states read from the changelog when taking partitions over", registry=r
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

    def observe_batch(self, msgs: list[Any], folded: int, counts: dict[tuple[str, str], int]) -> None:
        """A batch's figures, once per batch (per-event calls into prometheus_client add up):
        its size, the events applied, the latency from its oldest event's Kafka timestamp,
        and its decisions by (action, detector)."""
        self.batch.observe(len(msgs))
        self.events.inc(folded)
        oldest = min((x.timestamp for x in msgs if x.timestamp), default=None)
        if oldest is not None:
            self.latency.observe(max(0.0, time.time() - oldest))
        for (action, detector), n in counts.items():
            self.decisions.labels(action, detector).inc(n)

    def config_in_use(self, config_id: str | None) -> Callable[[str | None], None]:
        """The config in use, by id ("defaults": the built-in defaults), for dashboards and
        audits: set now; the returned callable moves it when the worker switches."""
        gauge = Gauge(
            "loopwarden_config",
            "1 for the config this worker decides under, labelled by its id",
            ["config"],
            registry=self.registry,
        )

        def switch(cid: str | None) -> None:
            gauge.clear()
            gauge.labels(cid or "defaults").set(1)

        switch(config_id)
        return switch
