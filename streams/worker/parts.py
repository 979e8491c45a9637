"""What the batch loop works with, built once by `create_app` and handed to it whole."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from detectors import DetectionConfig

from ..kafka.delivery import GroupStarts, Holes
from ..kafka.loop_clients import LoopClients
from ..kafka.producer import BatchProducer
from .metrics import Metrics
from .recovery import Gate, Recovery
from .run_store import RunStore
from .settings import WorkerSettings
from .tracing import Tracer
from .tracing import from_env as tracer_from_env

log = logging.getLogger("loopwarden.worker")


@dataclass(frozen=True)
class LoopParts:
    publisher: BatchProducer  # decisions and dead letters
    states: BatchProducer  # changelog records: a connection of their own
    runs: RunStore  # the run states, staged and written to the changelog
    recovery: Recovery  # loads partitions' states
    gate: Gate  # holds the events of partitions not loaded yet
    holes: Holes  # events lost on their way to the agent (the agent checks each)
    starts: GroupStarts  # where the group starts a partition (Faust's group)
    trace: Tracer | None  # per-batch timings (tracing.py), off by default

    async def start(self) -> None:
        await self.publisher.start()
        await self.states.start()

    async def close(self) -> None:
        """Stop what started; a producer that cannot reach its broker is given up on."""
        for producer in (self.publisher, self.states):
            try:  # it would wait for the broker forever
                await asyncio.wait_for(producer.stop(), 5.0)
            except Exception as exc:
                log.warning("a producer did not stop cleanly: %r", exc)
        await self.recovery.stop()
        await self.starts.close()
        if self.trace is not None:
            self.trace.close()


def build_parts(
    settings: WorkerSettings,
    config: DetectionConfig,
    metrics: Metrics,
    store: Callable[[], Any],
    partition_of: Callable[[bytes], int | None],
    tombstone_delay: float,
    clients: LoopClients,
) -> LoopParts:
    """The batch loop's parts over the run states in `store()`, for `config`'s idle
    timeout, talking to Kafka through `clients`."""
    runs = RunStore(
        store, settings.changelog_topic, clients.states, partition_of, config.idle_timeout_ms, tombstone_delay
    )
    recovery = Recovery(settings, runs, metrics)
    return LoopParts(
        publisher=clients.publisher,
        states=clients.states,
        runs=runs,
        recovery=recovery,
        gate=Gate(recovery),
        holes=Holes(),
        starts=clients.starts,
        trace=tracer_from_env(),
    )
