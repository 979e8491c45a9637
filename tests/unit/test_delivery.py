"""The delivery watch (streams/kafka/delivery.py): which partitions are read again, from
where, and when nothing is touched. A consumer in memory stands in for Faust's; the
real one is exercised by tests/integration/test_worker_exits.py."""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

import pytest

from streams.kafka.delivery import DeliveryWatch, Holes, Partition, to_rewind

TOPIC = "p.events"


class TP(NamedTuple):
    topic: str
    partition: int


@pytest.mark.parametrize(
    "state, rewind",
    [
        (Partition(position=140, expected=0, quiet_s=5.0), {0: 0}),  # nothing of it arrived
        (Partition(position=140, expected=100, quiet_s=6.0), {0: 100}),  # the rest of it did not
        (Partition(position=140, expected=0, quiet_s=4.9), {}),  # not quiet long enough
        (Partition(position=140, expected=140, quiet_s=60.0), {}),  # all of it was folded
        (Partition(position=100, expected=140, quiet_s=60.0), {}),  # behind what was folded: a seek under way
        (Partition(position=None, expected=0, quiet_s=60.0), {}),  # no position yet
        (Partition(position=140, expected=None, quiet_s=60.0), {}),  # the broker did not say where to start
    ],
)
def test_a_partition_is_read_again_only_when_quiet_and_behind_its_position(state, rewind):
    assert to_rewind({0: state}, after_s=5.0) == rewind


class _Consumer:
    """What the watch uses of Faust's consumer, in memory."""

    def __init__(self, positions: dict[int, int], committed: dict[int, int | None], first: int = 0) -> None:
        self.positions = positions
        self.committed = committed  # the group's, as the broker holds them (GroupStarts asks it)
        self.first = first
        self._paused_partitions: set[TP] = set()
        self.seeks: list[tuple[int, int]] = []

    def assignment(self) -> set[TP]:
        return {TP(TOPIC, p) for p in self.positions} | {TP("p.worker-runs-changelog", 0)}

    async def position(self, tp: TP) -> int:
        return self.positions[tp.partition]

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp.partition, offset))
        self.positions[tp.partition] = offset


class _App:
    def __init__(self, consumer: _Consumer) -> None:
        self.consumer = consumer


def _watch(consumer: _Consumer, folded: dict[int, tuple[int, float]], idle: bool = True) -> DeliveryWatch:
    reread: list[int] = []

    async def group_start(tp: TP) -> int | None:  # GroupStarts.start_of: committed, else the first offset
        committed = consumer.committed.get(tp.partition)
        return consumer.first if committed is None else committed

    w = DeliveryWatch(
        _App(consumer), TOPIC, lambda: folded, lambda: idle, group_start, on_reread=reread.append, after_s=5.0
    )
    w.reread = reread  # type: ignore[attr-defined]
    return w


def _assigned_long_ago(w: DeliveryWatch, *partitions: int) -> None:
    w.assigned(list(partitions))
    for p in partitions:
        w.assigned_at[p] -= 10.0


def test_a_partition_of_which_nothing_arrived_is_read_from_its_committed_offset_or_its_start():
    c = _Consumer(positions={0: 140, 1: 120}, committed={0: 40, 1: None}, first=7)
    w = _watch(c, folded={})
    _assigned_long_ago(w, 0, 1)
    assert asyncio.run(w.check()) == {0: 40, 1: 7}
    assert sorted(c.seeks) == [(0, 40), (1, 7)] and sorted(w.reread) == [0, 1]
    # Read again: quiet from now on, so not sought again at the next check.
    assert asyncio.run(w.check()) == {}


def test_a_reread_that_brought_nothing_is_not_repeated_until_the_partition_moves():
    # Offsets that hold no event (a transaction's markers): reading them again brings
    # nothing, and the position stays past the progress.
    assert to_rewind({0: Partition(101, 100, 60.0)}, 5.0, tried={0: (100, 101)}) == {}
    assert to_rewind({0: Partition(105, 100, 60.0)}, 5.0, tried={0: (100, 101)}) == {0: 100}  # more came
    assert to_rewind({0: Partition(105, 103, 60.0)}, 5.0, tried={0: (100, 105)}) == {0: 103}  # some folded

    c = _Consumer(positions={0: 101}, committed={0: 100})
    w = _watch(c, folded={})
    _assigned_long_ago(w, 0)
    assert asyncio.run(w.check()) == {0: 100}
    c.positions[0] = 101  # the reread found no event: the position is where it was
    w.assigned_at[0] -= 10.0
    assert asyncio.run(w.check()) == {}
    assert c.seeks == [(0, 100)]


def test_a_partition_that_folded_part_of_its_events_is_read_from_the_next_one():
    long_ago = time.monotonic() - 10.0
    c = _Consumer(positions={0: 140, 1: 90}, committed={0: 0, 1: 0})
    w = _watch(c, folded={0: (99, long_ago), 1: (89, long_ago)})
    _assigned_long_ago(w, 0, 1)
    assert asyncio.run(w.check()) == {0: 100}  # partition 1 folded everything it fetched
    assert c.seeks == [(0, 100)]


def test_nothing_is_sought_while_events_are_on_their_way_or_recently_folded_or_paused():
    c = _Consumer(positions={0: 140}, committed={0: 0})
    busy = _watch(c, folded={}, idle=False)
    _assigned_long_ago(busy, 0)
    assert asyncio.run(busy.check()) == {}

    recent = _watch(c, folded={0: (10, time.monotonic() - 1.0)})
    _assigned_long_ago(recent, 0)
    assert asyncio.run(recent.check()) == {}

    fresh = _watch(c, folded={})
    fresh.assigned([0])  # just assigned: Faust may still be seeking it
    assert asyncio.run(fresh.check()) == {}

    c._paused_partitions = {TP(TOPIC, 0)}  # Faust recovers the table meanwhile
    paused = _watch(c, folded={})
    _assigned_long_ago(paused, 0)
    assert asyncio.run(paused.check()) == {}
    assert c.seeks == []


def test_a_partition_first_seen_by_the_check_counts_as_assigned_then():
    # No assignment signal seen (a worker started mid-rebalance): quiet only from the
    # first check on, never sought at once.
    c = _Consumer(positions={0: 140}, committed={0: None})
    w = _watch(c, folded={})
    assert asyncio.run(w.check()) == {}
    w.assigned_at[0] -= 10.0
    assert asyncio.run(w.check()) == {0: 0}


def test_a_failing_check_never_ends_the_watch():
    class NotStarted(_Consumer):
        calls = 0

        def assignment(self):
            NotStarted.calls += 1
            raise RuntimeError("Consumer thread not yet started")  # as Faust's before it starts

    c = NotStarted(positions={0: 1}, committed={})
    w = _watch(c, folded={})
    stop = iter([False, False, False, True])
    asyncio.run(w.run(0.0, lambda: next(stop)))
    assert NotStarted.calls == 3


def _walk(holes: Holes, partition: int, offsets: list[int]) -> list[int | None]:
    """What `check` says of each offset: None (pass it on), or the first offset of the
    hole before it."""
    return [holes.check(partition, o) for o in offsets]


def test_events_in_order_pass_and_a_hole_names_its_first_missing_offset():
    h = Holes()
    assert _walk(h, 3, [40, 41, 42]) == [None] * 3  # the first since the assignment, then in order
    assert _walk(h, 3, [45]) == [43] and h.found == 1  # 43 and 44 are read from the broker first
    assert _walk(h, 3, [46, 47]) == [None, None]
    assert _walk(h, 3, [50]) == [48] and h.found == 2


def test_each_partition_has_its_own_next_offset():
    h = Holes()
    _walk(h, 0, [10])
    _walk(h, 1, [5])
    assert _walk(h, 0, [12]) == [11]
    assert _walk(h, 1, [6, 7]) == [None, None]
    assert _walk(h, 0, [13]) == [None]


def test_events_read_again_pass_and_do_not_move_the_next_offset_back():
    h = Holes()
    _walk(h, 4, [100, 101, 102])
    # the delivery watch (or Faust) read them again: answered again, no hole among them
    assert _walk(h, 4, [98, 99, 100, 101, 102, 103]) == [None] * 6
    assert _walk(h, 4, [99, 105]) == [None, 104]


def test_revoked_partitions_start_afresh_and_a_known_start_finds_a_hole_before_the_first_event():
    h = Holes()
    _walk(h, 6, [100, 101])
    h.forget([6])  # revoked (or assigned again): Faust starts it from the committed offset
    assert _walk(h, 6, [90, 91]) == [None, None]
    h.forget([6])
    h.begin(6, 0)  # never committed: the partition starts at its first offset
    assert _walk(h, 6, [3, 4]) == [0, None]
    h.forget([6])
    h.begin(6, 20)  # committed at 20
    assert _walk(h, 6, [20, 21]) == [None, None]
    h.forget([6])
    h.begin(6, None)  # the broker did not say: the first event is taken as it comes
    assert _walk(h, 6, [30, 31]) == [None, None]
