"""Health and readiness: one answer, `status()`, and the `/health` page that serves it.

`ok` (200) only when the worker is deciding: not crashed, not stopping, its broker
answering, every assigned partition's run states loaded (recovery.py), events that
wait in Kafka being folded, and partitions assigned with no rebalance under way.
Anything else is 503 with the first that applies: `crashed`, `stopping`,
`broker_unreachable`, `recovering` (with the partitions and the records left to read),
`not_consuming`, `rebalancing`.
"""

from __future__ import annotations

import time
from typing import Any

from ..kafka import faust_compat
from . import watchdog
from .batches import BatchLoop


class Health:
    def __init__(self, app: Any, batches: BatchLoop, events_topic: str, config_follows: bool) -> None:
        self.app = app
        self.batches = batches
        self.events_topic = events_topic
        self.config_follows = config_follows
        self.broker_ok = True  # the last probe of the broker (every 2 s) got an answer

    async def probe(self) -> None:
        """A metadata request over the decisions producer's connections: during a broker
        outage the consumer only logs its errors, and /health must say so."""
        ok = await self.batches.publisher.probe()
        if ok is not None:
            self.broker_ok = ok

    def status(self) -> str:
        app, batches = self.app, self.batches
        if batches.failed is not None or faust_compat.crashed(app):
            return "crashed"
        if app.should_stop or watchdog.armed():
            return "stopping"
        if not self.broker_ok:
            return "broker_unreachable"
        if batches.parts.recovery.recovering():
            return "recovering"
        try:
            if self.stalled():
                return "not_consuming"
            if app.rebalancing or not app.consumer.assignment():
                return "rebalancing"
        except Exception:  # Faust's consumer is not started yet: no assignment either
            return "rebalancing"
        return "ok"

    def stalled(self, after: float = 30.0) -> bool:
        """Events are waiting in Kafka but none was folded for `after` seconds."""
        return self.batches.lag() > 0 and time.monotonic() - self.batches.last_fold > after

    def report(self) -> dict[str, Any]:
        """What /health answers: the status, the events partitions owned and held paused,
        and the config in use."""
        consumer = self.app.consumer
        try:
            assigned = sorted(tp.partition for tp in consumer.assignment() if tp.topic == self.events_topic)
        except Exception:  # the consumer is not started yet
            assigned = []
        try:  # what the consumer holds back (Faust pauses partitions while it recovers tables)
            held = faust_compat.paused_partitions(consumer)
            paused = sorted(tp.partition for tp in held if tp.topic == self.events_topic)
            flowing = self.app.flow_control.is_active()
        except Exception:
            paused, flowing = [], None
        return {
            "status": self.status(),
            "app": self.app.conf.id,
            "partitions": assigned,
            "paused": paused,
            "flow_control": flowing,
            "config": self.batches.config_id,
            "config_follows": self.config_follows,
            "recovering": sorted(self.batches.parts.recovery.loading),
            "records_left": self.batches.parts.recovery.records_left,
        }

    def install(self, app: Any) -> None:
        """Serve /health on the app's web server."""

        @app.page("/health")
        async def health(web: Any, request: Any) -> Any:
            body = self.report()
            return web.json(body, status=200 if body["status"] == "ok" else 503)

        @app.timer(interval=2.0)
        async def probe_broker() -> None:
            await self.probe()
