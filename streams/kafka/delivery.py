"""Events the consumer fetched but never delivered to the agent: found, and read again.

faust-streaming can lose fetched records between its consumer and the agent's stream.
Seen here about once in 60 quick worker restarts on a busy machine, right after the
first assignment (faust-streaming issue 629 describes the same stall): the consumer's
fetch position for an events partition reached the partition's end, no event of it
reached the agent (its channel was empty, the batch loop had folded nothing), and
nothing more was fetched from it. Faust reads a partition again only after a rebalance,
from the group's committed offset, so those events stayed unanswered, and the worker
said it was healthy, until it was restarted.

`DeliveryWatch` finds such a partition and seeks it back. About once a second it looks
at every assigned events partition; one is read again from the next offset the batch
loop expects when all of these hold:

- nothing of it was folded for `after_s` seconds (since its assignment, if never);
- no event is on its way anywhere: none in the agent's channel, none waiting in the
  batch loop, no batch being folded;
- the app is not rebalancing or stopping, and Faust does not hold the partition
  paused (it does while it recovers the table);
- the consumer's position is past the next offset expected: one past the last event
  folded from the partition, or, when none was folded since its assignment, the group's
  committed offset (the partition's first offset when nothing was ever committed).

The seek is Faust's own (it also moves the fetcher's record of what it has read), so
the events are fetched and folded again. An event folded twice is answered the same
both times, as after a crash. Other partitions keep flowing meanwhile. A reread that
brings nothing (the offsets held no event: a transactional producer's markers take
offsets too) is not repeated until the partition's position or progress moves.

Only a loss at the end of what was fetched is found this way. Records lost before
others that did arrive leave a hole in the offsets the agent sees: `Holes` finds those,
and the agent reads them from the broker itself (`read_hole`) before it passes on the
event that showed the hole.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

from . import clients, faust_compat, ranges

log = logging.getLogger("loopwarden.worker")


class Partition(NamedTuple):
    """What the watch knows of one assigned events partition."""

    position: int | None  # the consumer's fetch position (None: not known yet)
    expected: int | None  # the next offset the batch loop should get (None: not known)
    quiet_s: float  # seconds since it last folded an event of it (or since its assignment)


def to_rewind(
    partitions: Mapping[int, Partition], after_s: float, tried: Mapping[int, tuple[int, int]] | None = None
) -> dict[int, int]:
    """The partitions to read again, each with the offset to read from: those quiet for
    `after_s` seconds whose position is past the next offset expected. `tried` holds the
    (expected, position) of each partition's last reread: one that found nothing to fold
    (offsets held by no event, as a transaction's markers are) is not tried again."""
    tried = tried or {}
    return {
        p: s.expected
        for p, s in partitions.items()
        if s.quiet_s >= after_s
        and s.position is not None
        and s.expected is not None
        and s.position > s.expected
        and tried.get(p) != (s.expected, s.position)
    }


class DeliveryWatch:
    """The check above, over a Faust app and the batch loop that folds its events.

    `folded()` gives, per partition, the last offset folded and when (monotonic time);
    `idle()` is true when no event is on its way (channel, batch loop) and the app is not
    rebalancing or stopping. The Faust calls (positions, committed offsets, the seek)
    are made only for partitions that have been quiet for `after_s` seconds."""

    def __init__(
        self,
        app: Any,
        topic: str,
        folded: Callable[[], Mapping[int, tuple[int, float]]],
        idle: Callable[[], bool],
        group_start: Callable[[Any], Awaitable[int | None]],
        on_reread: Callable[[int], None] = lambda partition: None,
        after_s: float = 5.0,
        timeout_s: float = 5.0,
    ) -> None:
        self.app = app
        self.topic = topic
        self.folded = folded
        self.idle = idle
        self.group_start = group_start  # GroupStarts.start_of: the agent's hole check asks the same
        self.on_reread = on_reread
        self.after_s = after_s
        self.timeout_s = timeout_s
        self.assigned_at: dict[int, float] = {}  # partition -> when it was assigned (monotonic)
        self.tried: dict[int, tuple[int, int]] = {}  # partition -> (expected, position) of its last reread
        self.starts: dict[int, int] = {}  # partition -> where the group starts it (asked once per assignment)

    def assigned(self, partitions: list[int]) -> None:
        now = time.monotonic()
        for p in partitions:
            self.assigned_at[p] = now
            self.tried.pop(p, None)
            self.starts.pop(p, None)

    def revoked(self, partitions: list[int]) -> None:
        for p in partitions:
            self.assigned_at.pop(p, None)
            self.tried.pop(p, None)
            self.starts.pop(p, None)

    async def run(self, interval_s: float = 1.0, stopping: Callable[[], bool] = lambda: False) -> None:
        """`check` every `interval_s` seconds until `stopping()`. A check that fails (the
        consumer not started yet, a broker that does not answer) is tried again at the
        next one: it must never stop the worker."""
        while not stopping():
            await asyncio.sleep(interval_s)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("delivery check: %r", exc)

    async def check(self) -> dict[int, int]:
        """Seek back every partition whose events were lost; the seeks made."""
        if not self.idle():
            return {}
        consumer = self.app.consumer
        now = time.monotonic()
        folded = self.folded()
        paused = {tp.partition for tp in faust_compat.paused_partitions(consumer) if tp.topic == self.topic}
        quiet: dict[int, tuple[Any, float]] = {}
        for tp in consumer.assignment():
            p = tp.partition
            if tp.topic != self.topic or p in paused:
                continue
            last = self.assigned_at.setdefault(p, now)
            done = folded.get(p)
            if done is not None:
                last = max(last, done[1])
            if now - last >= self.after_s:
                quiet[p] = (tp, now - last)
        if not quiet:
            return {}
        seen: dict[int, Partition] = {}
        for p, (tp, quiet_s) in quiet.items():
            position = await self._call(consumer.position(tp))
            done = folded.get(p)
            expected = done[0] + 1 if done is not None else await self._start_of(p, tp)
            seen[p] = Partition(position, expected, quiet_s)
        rewind = to_rewind(seen, self.after_s, self.tried)
        if not self.idle():  # an event arrived while the offsets were looked up
            return {}
        for p, offset in rewind.items():
            tp = quiet[p][0]
            position = int(seen[p].position or 0)  # to_rewind keeps only partitions with one
            log.warning(
                "%s[%d]: offsets %d to %d were fetched but never reached the agent (nothing for %.0fs); "
                "reading them again",
                self.topic,
                p,
                offset,
                position - 1,
                seen[p].quiet_s,
            )
            await consumer.seek(tp, offset)
            self.tried[p] = (offset, position)
            self.assigned_at[p] = time.monotonic()  # quiet again from now, if still nothing comes
            self.on_reread(p)
        return rewind

    async def _start_of(self, p: int, tp: Any) -> int | None:
        """The group's committed offset of `tp`, or its first offset when none was
        committed: where Faust started it. Asked of the broker once per assignment (the
        group commits only what the batch loop folded, and then the progress is known)."""
        if p in self.starts:
            return self.starts[p]
        start: int | None = await self._call(self.group_start(tp))
        if start is not None:
            self.starts[p] = int(start)
        return start

    async def _call(self, aw: Awaitable[Any]) -> Any:
        try:
            return await asyncio.wait_for(aw, self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broker that does not answer: look again next time
            log.info("delivery check: %r", exc)
            return None


class Holes:
    """Events lost in the middle of what reached the agent, found, and read by hand.

    Within one assignment the agent gets a partition's events in offset order, one after
    another: the events topic is not compacted and its producers write no transaction
    markers. An event whose offset is past the next one expected means events before
    it were lost on the way (faust-streaming 0.15.3 loses fetched records around
    rebalances; see the top of this module). Faust would not notice: it commits the first
    run of acknowledged offsets that starts at most one past its committed offset, so
    the events after one lost record are committed over it, and the lost one is never
    answered (`benchmarks.failover --rolling` lost one call per rolling restart so).

    `check(partition, offset)` gives the first offset of the hole before the event, or
    None. The agent then reads the hole from the broker itself (`read_hole`) and passes
    those events on first, in order, each acknowledged like any other: commits stay
    contiguous. A seek back through Faust does not do: the records Faust had fetched
    past the hole still come after the seek and move its read offset past the hole
    again, so it drops what the seek fetches, and it counts the offsets it skipped as
    done (its `_add_gap`).
    """

    def __init__(self) -> None:
        self.next: dict[int, int] = {}  # partition -> the next offset expected
        self.found = 0

    def forget(self, partitions: Iterable[int]) -> None:
        """The partitions were revoked or assigned: their next events start afresh."""
        for p in partitions:
            self.next.pop(p, None)

    def begin(self, partition: int, start: int | None) -> None:
        """Where the partition's events start in this assignment: the group's committed
        offset as Faust knows it (faust_compat.start_offset), else as the broker holds it
        (`GroupStarts`). Events lost before the first one that comes are then a hole like
        any other. None (not known): the first event is taken as it comes, and a loss
        before it is not found."""
        if start is not None:
            self.next[partition] = start

    def check(self, partition: int, offset: int) -> int | None:
        nxt = self.next
        expected = nxt.get(partition)
        if expected is None or offset >= expected:  # (once per event: no max() call)
            nxt[partition] = offset + 1
            if expected is None or offset == expected:
                return None  # in order
            self.found += 1
            return expected
        return None  # read again (after a seek): the next expected stays


class GroupStarts:
    """Where the group starts a partition when Faust holds no committed offset for it
    (faust_compat.start_offset gives None): the group's committed offset as the broker
    holds it, or the partition's first offset when the group never committed one (Faust
    then starts there: its offset reset is "earliest"). Asked of the broker with clients
    of the worker's own, on the agent's loop, not through Faust's consumer thread (which
    held the agent's first events for seconds during rebalances). Without this, events
    lost before the first one to reach the agent of a partition never committed were
    not found (seen in CI: the three-worker breaker test missed the first calls of a run).

    A call that fails or takes over `timeout_s` gives None: the first event is then
    taken as it comes, as before. The clients start on first use; `close()` stops them."""

    def __init__(self, settings: Any, group_id: str, timeout_s: float = 3.0) -> None:
        self.settings = settings
        self.group_id = group_id
        self.timeout_s = timeout_s
        self.admin: Any = None
        self.reader: Any = None

    async def start_of(self, tp: Any) -> int | None:
        try:
            return await asyncio.wait_for(self._ask(tp), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broker that does not answer: the first event is taken as it comes
            log.info("%s[%d]: where the group starts it is not known: %r", tp.topic, tp.partition, exc)
            return None

    async def _ask(self, tp: Any) -> int:
        if self.admin is None:
            admin = clients.admin(self.settings)
            await clients.start(admin, self.settings)
            self.admin = admin
        committed = (await self.admin.list_consumer_group_offsets(self.group_id, partitions=[tp])).get(tp)
        if committed is not None and committed.offset >= 0:
            return int(committed.offset)
        if self.reader is None:
            reader = clients.reader(self.settings)
            await clients.start(reader, self.settings)
            self.reader = reader
        return int((await self.reader.beginning_offsets([tp]))[tp])

    async def close(self) -> None:
        admin, reader, self.admin, self.reader = self.admin, self.reader, None, None
        for client, stop in ((admin, "close"), (reader, "stop")):
            if client is not None:
                try:
                    await asyncio.wait_for(getattr(client, stop)(), 5.0)
                except Exception as exc:
                    log.info("a client did not stop cleanly: %r", exc)


async def read_hole(
    settings: Any, topic: str, partition: int, start: int, end: int, timeout: float = 15.0
) -> list[Any]:
    """The records of `topic`'s partition from offset `start` up to `end` (excluded),
    read with a consumer of no group. Offsets that hold no record (a transaction's
    markers) are simply not there. A BrokerError when the read does not reach `end`."""
    out: list[Any] = []
    r = await ranges.open_range(settings, max_poll_records=10_000)
    try:
        await r.add(topic, {partition: start}, partitions=[partition], until={partition: end})
        await r.drain(timeout, out.extend)
    finally:
        await r.close()
    return out


class Refetched:
    """An event read by hand (`read_hole`), as the batch loop takes Faust's: its message,
    and `ack()`, which marks its offset done in Faust's consumer as Faust's own do."""

    __slots__ = ("consumer", "message")

    def __init__(self, consumer: Any, tp: Any, record: Any) -> None:
        self.consumer = consumer
        self.message = faust_compat.to_message(consumer, tp, record)

    def ack(self) -> bool:
        return bool(self.message.ack(self.consumer))


async def fill_hole(consumer: Any, settings: Any, m: Any, start: int, metrics: Any) -> list[Refetched]:
    """The events of the hole before message `m` (Holes.check gave `start`), read from
    the broker, to be passed on before `m`. A read that fails is logged and counted: the
    events are then lost as they would have been, and the worker goes on."""
    metrics.holes.labels(str(m.partition)).inc()
    where = f"{m.topic}[{m.partition}]: offsets {start} to {m.offset - 1}"
    log.warning("%s never reached the agent (offset %d did); reading them from the broker", where, m.offset)
    try:
        records = await read_hole(settings, m.topic, m.partition, start, m.offset)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        metrics.holes_unfilled.labels(str(m.partition)).inc()
        log.error("%s could not be read: %r", where, exc)
        return []
    return [Refetched(consumer, m.tp, r) for r in records]
