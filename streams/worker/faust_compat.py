"""Every use of a private Faust attribute, in one place (written for faust-streaming 0.15.3).

Faust has no public way to ask these things; each function says what it reads and why
the worker needs it. An upgrade of faust-streaming checks this module first: if a name
moved, the worker's health, its lost-fetch watch and its stop are what would break.
"""

from __future__ import annotations

from typing import Any

import faust


def crashed(app: faust.App) -> bool:
    """Whether Faust marked the app crashed (`App._crashed`, an asyncio Event set by
    `App.crash`): /health must say so, and the stop's exit code depends on it."""
    return bool(app._crashed.is_set())


def paused_partitions(consumer: Any) -> set[Any]:
    """The partitions Faust holds paused (`Consumer._paused_partitions`): it pauses a
    partition's stream while it recovers tables, and a paused partition is neither
    stalled nor lost (delivery.py, /health)."""
    return set(consumer._paused_partitions)


def start_offset(consumer: Any, tp: Any) -> int | None:
    """Where Faust starts a partition it was assigned: the group's committed offset as
    Faust read it at the assignment (`Consumer._committed_offset`, filled when it seeks
    its stream partitions to their committed offsets), known without asking the broker:
    the agent must not wait on Faust's consumer thread for it. None when Faust holds
    none: never committed, or not read yet when the first event came (seen in
    `benchmarks.failover --rolling`: taking 0 then read 40,000 events again)."""
    offset = consumer._committed_offset.get(tp)
    return int(offset) if offset else None


async def refresh_metadata(consumer: Any) -> None:
    """Have the aiokafka consumer that Faust runs in its consumer thread read the
    cluster's metadata again now (`Consumer._thread`, `_ensure_consumer()._client`). A
    topic created a moment ago can be in its metadata with no partitions yet, and
    aiokafka reads it again only every few minutes; Faust's table then refuses every
    write (PartitionsMismatch, "the changelog topic has 0 partitions")."""
    thread = consumer._thread
    await thread.call_thread(thread._ensure_consumer()._client.force_metadata_update)


def to_message(consumer: Any, tp: Any, record: Any) -> Any:
    """A Faust message made of an aiokafka record (`Consumer._to_message`, as Faust makes
    the ones it delivers): acknowledging it marks its offset done in `consumer`."""
    return consumer._to_message(tp, record)


class Worker(faust.Worker):
    """Faust's worker, with a hook on each way a stop begins: Faust calls `_on_sigterm`
    and `_on_sigint` (mode's signal handlers, protected names) for the signals and
    `on_worker_shutdown` for every stop, its own crashes included. `on_stop_begins(code,
    why)` is told which: the caller arms its deadline there."""

    app: faust.App  # (Faust declares AppT) the worker runs the faust.App create_app built
    on_stop_begins: Any = None  # (exit code, reason) -> None

    def _begins(self, code: int, why: str) -> None:
        if self.on_stop_begins is not None:
            self.on_stop_begins(code, why)

    def _on_sigterm(self) -> None:
        self._begins(143, "SIGTERM")
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._begins(130, "SIGINT")
        super()._on_sigint()

    def on_worker_shutdown(self) -> None:
        dead = self.crash_reason is not None or crashed(self.app)
        self._begins(1 if dead else 143, "crashed" if dead else "stopping")
        super().on_worker_shutdown()
