"""What a worker does when its partitions move: every rebalance hook, in one place.

On revocation the batch loop forgets the progress of the events partitions it lost (a
later owner folds from the group's committed offset) and the delivery watch stops
watching them; on assignment the watch starts timing the new ones, and the run store
keeps the states of the partitions it still owns, drops the others' and loads the new
ones' from the changelog (recovery.py). The delivery watch
itself (streams/kafka/delivery.py) runs here too: it reads again events Faust fetched but lost.
"""

from __future__ import annotations

from typing import Any

from ..kafka.delivery import DeliveryWatch
from ..kafka.settings import Settings
from .batches import BatchLoop
from .metrics import Metrics


def install(app: Any, settings: Settings, batches: BatchLoop, metrics: Metrics, inbox: list[Any]) -> DeliveryWatch:
    """Connect the rebalance hooks and start the delivery watch; `inbox` holds the
    agent's channel once its stream has started (an event in it is on its way)."""
    topic = settings.events_topic

    def idle() -> bool:
        return (
            batches.idle()
            and not (app.rebalancing or app.should_stop)
            and all(channel.queue.empty() for channel in inbox)
        )

    watch = DeliveryWatch(
        app,
        topic,
        lambda: {p: (offset, batches.folded_at.get(p, 0.0)) for p, offset in batches.progress.items()},
        idle,
        batches.parts.starts.start_of,
        on_reread=lambda p: metrics.rereads.labels(str(p)).inc(),
    )

    @app.on_partitions_revoked.connect
    async def forget_positions(sender: Any, revoked: Any, **kwargs: Any) -> None:
        gone = [tp.partition for tp in revoked if tp.topic == topic]
        for p in gone:
            batches.progress.pop(p, None)
            batches.folded_at.pop(p, None)
        watch.revoked(gone)
        batches.parts.holes.forget(gone)

    @app.on_partitions_assigned.connect
    async def note_assignment(sender: Any, assigned: Any, **kwargs: Any) -> None:
        mine = [tp.partition for tp in assigned if tp.topic == topic]
        watch.assigned(mine)
        batches.parts.holes.forget(mine)  # Faust reads them from the committed offsets again
        # The whole assignment, not only what this call names: partitions kept from the
        # last one keep their states, new ones are loaded, lost ones dropped.
        batches.parts.recovery.assigned(tp.partition for tp in app.consumer.assignment() if tp.topic == topic)

    @app.task
    async def reread_lost_events() -> None:
        await watch.run(1.0, lambda: app.should_stop)

    return watch
