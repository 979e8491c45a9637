"""The Kafka clients a worker's batch loop works with, made in one place before the
worker's app is built (streams/worker/app.py: run_worker), so that the app is wired on
top of them. None of them connects before it is started."""

from __future__ import annotations

from dataclasses import dataclass

from .delivery import GroupStarts
from .producer import BatchProducer
from .settings import Settings


@dataclass(frozen=True)
class LoopClients:
    publisher: BatchProducer  # decisions and dead letters
    states: BatchProducer  # changelog records: a connection of their own
    starts: GroupStarts  # where the group starts a partition (Faust's group)

    @classmethod
    def of(cls, settings: Settings, group_id: str) -> LoopClients:
        return cls(BatchProducer(settings), BatchProducer(settings), GroupStarts(settings, group_id))
