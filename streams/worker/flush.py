"""The batch loop's checkpoints: run states go to the changelog at most once per flush
interval, not once per batch (under load: one record per touched run per interval), and
input is acknowledged only once everything that depends on it is durable (its
decisions, dead letters and the states that include it), so a committed offset never
runs ahead of the stored state. A restarted worker replays the input after the committed
offset, and the engine answers an event it has already seen exactly as it did the first
time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from .metrics import Metrics
from .run_store import RunStore
from .tracing import Tracer

# A flush acknowledges the events it covers this many at a time, the fold loop going on
# in between: acknowledging through Faust costs microseconds an event, so a large flush
# in one go held the loop for milliseconds (benchmarks.latency_stages).
ACK_SLICE = 256


class Flusher:
    """What was folded and sent since the last flush, and the flush itself."""

    def __init__(
        self, runs: RunStore, metrics: Metrics, trace: Tracer | None, interval_s: float, hurry: Callable[[], bool]
    ) -> None:
        self.runs = runs
        self.metrics = metrics
        self.trace = trace
        self.interval = interval_s
        self.hurry = hurry  # true while the app stops or rebalances: flush now
        self.unacked: list[Any] = []  # events folded since the last flush
        self.sent: list[asyncio.Future[Any]] = []  # deliveries queued since the last flush
        self._flushing = asyncio.Lock()  # one flush at a time: state records stay in order
        self._last = time.monotonic()

    def in_flight(self) -> asyncio.Future[Any] | None:
        """The newest delivery queued, if it is not done."""
        return self.sent[-1] if self.sent and not self.sent[-1].done() else None

    def due(self) -> bool:
        """Once per interval; at once while the app stops or rebalances, since both wait
        for every event to be acknowledged. Tombstones only once due: see `flush`."""
        if self.runs.pending() or self.unacked:
            return self.hurry() or time.monotonic() - self._last >= self.interval
        return self.runs.tombstones_due(False)  # only tombstones left

    async def flush(self, final: bool = False) -> None:
        """Store the staged run states, then acknowledge the events they include.

        Runs beside the fold loop: the checkpoint is taken in one step, and the
        changelog has a producer (a connection) of its own, so a large flush never
        holds up the decisions queued behind it."""
        async with self._flushing:
            t0 = time.time()
            events, deliveries = self.unacked, self.sent
            self.unacked, self.sent = [], []
            self._last = time.monotonic()
            # The tombstones of ended runs go out early only in the final flush. A rebalance
            # does not wait for them: Faust may commit offsets short of a run_end that was
            # folded, the partition is then read again from there (by this worker or the
            # next owner), and a run whose ended record a tombstone already removed would
            # answer its replayed calls as a new run (benchmarks.failover --rolling).
            cp = self.runs.checkpoint(final)
            t1 = time.time()
            written = await self.runs.write(cp)
            t2 = time.time()
            if written is not None:
                deliveries = [*deliveries, written]
            # Every delivery awaited, even after one failed: none is left unretrieved.
            results = await asyncio.gather(*deliveries, return_exceptions=True)
            failed = next((r for r in results if isinstance(r, BaseException)), None)
            if failed is not None:
                raise failed
            t3 = time.time()
            for i, e in enumerate(events):
                e.ack()
                if i % ACK_SLICE == ACK_SLICE - 1:
                    await asyncio.sleep(0)  # the fold loop goes on in between
            self.runs.committed(cp)
            if self.trace is not None:
                self.trace.flush(t0, t1, t2, t3, len(cp.staged), len(events))
            if final:
                await self.runs.close()
            self.metrics.flushes.inc()
            self.metrics.flushed_states.inc(len(cp.staged) + len(cp.tombstones))
