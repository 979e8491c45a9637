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
        counter, gauge = self._counter, self._gauge
        self.events = counter("loopwarden_events", "Events applied (dead letters not included)")
        self.decisions = counter(
            "loopwarden_decisions", "Decisions published, by action and detector", "action", "detector"
        )
        self._decision_children: dict[tuple[str, str], Any] = {}  # observe_batch's labelled counters
        self.dead_letters = counter(
            "loopwarden_dead_letters", "Events sent to the dead-letter topic, by reason", "reason"
        )
        self.latency = Histogram(
            "loopwarden_processing_seconds",
            "Per batch: from its oldest event's Kafka timestamp to its decisions being handed to the producer",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=self.registry,
        )
        self.batch = Histogram(
            "loopwarden_batch_events",
            "Events per processed batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=self.registry,
        )
        self.lag = gauge(
            "loopwarden_consumer_lag",
            "Events not yet folded, by partition (once one was folded since assignment)",
            "partition",
        )
        self.evicted = counter(
            "loopwarden_runs_evicted",
            "Runs dropped from the table for being idle past twice runIdleTimeoutMs (event time)",
        )
        self.runs = gauge("loopwarden_active_runs", "Runs with state in this worker's table")
        self._delivery()
        self._run_states()
        self._fleet()

    def _delivery(self) -> None:
        """Events lost between Faust's consumer and the agent (kafka/delivery.py)."""
        counter = self._counter
        self.rereads = counter(
            "loopwarden_partitions_reread",
            "Times an events partition was read again: events were fetched but never reached the agent",
            "partition",
        )
        self.holes = counter(
            "loopwarden_offset_holes",
            "Times events reached the agent past a hole (events lost on the way), read from the broker",
            "partition",
        )
        self.holes_unfilled = counter(
            "loopwarden_offset_holes_unfilled",
            "Holes whose events could not be read from the broker: those events went unanswered",
            "partition",
        )

    def _run_states(self) -> None:
        """Run states: the changelog and the partitions taken over."""
        counter = self._counter
        self.flushes = counter("loopwarden_state_flushes", "Writes of the touched run states to the changelog")
        self.flushed_states = counter("loopwarden_state_records", "Run-state records written to the changelog")
        self.partitions_loaded = counter(
            "loopwarden_partitions_loaded", "Events partitions whose run states were read from the changelog"
        )
        self.partitions_kept = counter(
            "loopwarden_partitions_kept",
            "Events partitions kept across a rebalance with their run states in memory (not read again)",
        )
        self.states_loaded = counter(
            "loopwarden_states_loaded", "Run states read from the changelog when taking partitions over"
        )

    def _fleet(self) -> None:
        """The fleet (semantics.md sections 9 and 11)."""
        counter, gauge = self._counter, self._gauge
        self.fleet_records = gauge("loopwarden_fleet_signals", "Stop orders and breakers received from the fleet topic")
        self.fleet_taken = gauge(
            "loopwarden_fleet_records_read", "Records taken in from the fleet topic (a lift counts)"
        )
        self.fleet_skipped = gauge("loopwarden_fleet_records_skipped", "Unreadable records of the fleet topic, skipped")
        self.breakers_opened = counter("loopwarden_breakers_opened", "Tool breakers this worker's fleet stage opened")
        self.spend_forwarded = counter("loopwarden_spend_forwarded", "Records forwarded to the spend topic")
        self.spend_records = counter("loopwarden_spend_records", "Spend records this worker's spend stage counted")
        self.spend_duplicates = counter(
            "loopwarden_spend_duplicates", "Spend records counted before (forwarded again after a restart), not counted"
        )
        self.spend_skipped = counter("loopwarden_spend_skipped", "Spend records not counted: unreadable, or no cap")
        self.spend_caps_reached = counter("loopwarden_spend_caps_reached", "Spend caps this worker's stage reached")
        self.spend_anomalies = counter("loopwarden_spend_anomalies", "Spend anomalies this worker's stage reported")
        self.spend_keys = self._gauge(
            "loopwarden_spend_keys", "Windows (cap, key, window) the spend stage holds in its tables on this worker"
        )

    def _counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(name, doc, list(labels), registry=self.registry)

    def _gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(name, doc, list(labels), registry=self.registry)

    def observe_batch(self, msgs: list[Any], folded: int, counts: dict[tuple[str, str], int]) -> None:
        """A batch's figures, once per batch (per-event calls into prometheus_client add up):
        its size, the events applied, the latency from its oldest event's Kafka timestamp,
        and its decisions by (action, detector)."""
        self.batch.observe(len(msgs))
        self.events.inc(folded)
        oldest = min((x.timestamp for x in msgs if x.timestamp), default=None)
        if oldest is not None:
            self.latency.observe(max(0.0, time.time() - oldest))
        children = self._decision_children
        for key, n in counts.items():
            child = children.get(key)
            if child is None:  # labels() costs microseconds: once per (action, detector)
                child = children[key] = self.decisions.labels(*key)
            child.inc(n)

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
