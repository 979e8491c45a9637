"""The worker's run states (streams/worker/run_store.py), with an in-memory changelog:
what is stored, when tombstones go out, what a recovering worker reads back."""

from __future__ import annotations

import asyncio
import json

import pytest

from detectors import Folded, RunState, decode_state, encode_state, fold, load_config
from detectors.state import settled
from streams.kafka.producer import OutRecord
from streams.worker.run_store import ENDED, RunStore, ended_record, read_stored

TOPIC = "t.changelog"
CONFIG = load_config(
    json.dumps({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 6}}})
)
HOUR = 3_600_000


class Changelog:
    """The sink: records in the order sent, each send already durable."""

    def __init__(self) -> None:
        self.records: list[OutRecord] = []

    async def send(self, records):
        self.records.extend(records)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def recovered(self) -> dict[bytes, bytes]:
        """What Faust's recovery would put in a new worker's store: the last value of
        each key, bytes as produced, tombstoned keys absent."""
        store: dict[bytes, bytes] = {}
        for r in self.records:
            if r.value is None:
                store.pop(r.key, None)
            else:
                store[r.key] = r.value
        return store


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(store=None, delay=6.0, idle=HOUR):
    store = {} if store is None else store
    sink, clock = Changelog(), Clock()
    runs = RunStore(
        lambda: store, TOPIC, sink, partition_of=lambda key: 3, idle_timeout_ms=idle, tombstone_delay=delay, clock=clock
    )
    return runs, store, sink, clock


def call(run, seq, ts=None, tool="read", path="/a"):
    e = {
        "type": "tool_call",
        "run_id": run,
        "seq": seq,
        "gateway_id": "gw",
        "tool_name": tool,
        "tool_call_id": f"{run}-{seq}",
        "params": {"path": path},
    }
    if ts is not None:
        e["ts"] = ts
    return e


def result(run, seq, ts=None, tool="read", path="/a", out="same"):
    e = {
        "type": "tool_result",
        "run_id": run,
        "seq": seq,
        "gateway_id": "gw",
        "tool_name": tool,
        "tool_call_id": f"{run}-{seq - 1}",
        "params": {"path": path},
        "result": out,
    }
    if ts is not None:
        e["ts"] = ts
    return e


def end(run, seq):
    return {"type": "run_end", "run_id": run, "seq": seq, "gateway_id": "gw"}


def fold_into(runs: RunStore, events: list[dict], first_offset: int = 0, partition: int = 3) -> list[str]:
    """What the worker's batch loop does with a batch: fold with the store as loader,
    stage each changed run. Returns the decisions' actions."""
    source = [(first_offset + i, e["run_id"].encode(), json.dumps(e).encode()) for i, e in enumerate(events)]
    actions = []
    for f in fold(source, CONFIG, load=lambda run, offset: runs.load(run.encode(), offset)):
        assert isinstance(f, Folded), f
        if f.event.ts is not None:
            runs.saw(partition, f.event.ts)
        if f.after is not f.before:
            ended = (f.before, f.position) if f.after is None and f.before is not None else None
            runs.stage(f.key, partition, f.after, ended)
        actions += [d.action for d in f.decisions]
    if source:
        runs.folded({partition: source[-1][0]})
    return actions


async def flush(runs: RunStore, hurry: bool = False) -> list[OutRecord]:
    before = len(runs.sink.records)
    cp = runs.checkpoint(hurry)
    fut = await runs.write(cp)
    if fut is not None:
        await fut
    runs.committed(cp)
    return runs.sink.records[before:]


def loop(run, n, start_seq=0, ts=None):
    out = []
    for i in range(n):
        out += [call(run, start_seq + 2 * i, ts), result(run, start_seq + 2 * i + 1, ts)]
    return out


def test_a_flush_writes_each_touched_run_once_to_its_events_partition():
    async def main():
        runs, store, sink, _ = make()
        fold_into(runs, loop("r1", 5) + loop("r2", 2), partition=5)
        assert isinstance(store[b"r1"], RunState)  # the store holds the fold's objects at once
        recs = await flush(runs)
        assert sorted(r.key for r in recs) == [b"r1", b"r2"]  # 14 events, one record a run
        assert {r.partition for r in recs} == {5} and {r.topic for r in recs} == {TOPIC}
        assert {r.key: decode_state(r.value) for r in recs} == {k: settled(v) for k, v in store.items()}
        assert await flush(runs) == []  # nothing staged since

    asyncio.run(main())


def test_load_reads_what_recovery_puts_in_the_store():
    runs, store, _, _ = make()
    fold_into(runs, loop("r1", 3))
    state = store[b"r1"]
    runs2, _, _, _ = make({b"r1": encode_state(state)})  # recovery stores the record's bytes
    assert runs2.load(b"r1", 99) == settled(state)
    assert runs2.load(b"missing", 0) is None


def test_an_unreadable_record_is_dropped_not_raised():
    runs, _, _, _ = make({b"bad": b"\x93not msgpack at all", b"ended-bad": ENDED + b"\x00" * 8 + b"\xff"})
    assert runs.load(b"bad", 0) is None
    assert runs.load(b"ended-bad", 0) is None


def test_an_ended_run_is_its_state_up_to_its_run_end_and_nothing_after():
    state = RunState(last_seq=7)
    raw = ended_record(state, 120)
    assert read_stored(raw, 119) == state and read_stored(raw, 120) == state
    assert read_stored(raw, 121) is None


def test_an_ended_run_is_tombstoned_only_after_the_delay():
    async def main():
        runs, store, sink, clock = make(delay=6.0)
        fold_into(runs, loop("r1", 3) + [end("r1", 6)], first_offset=100)
        stored = store[b"r1"]  # ended: in the table as its ended record
        assert read_stored(stored, 106) is not None and read_stored(stored, 107) is None
        recs = await flush(runs)
        assert len(recs) == 1 and recs[0].value[:1] == ENDED  # ... but stored as ended, with its run_end offset
        assert read_stored(recs[0].value, 106) is not None and read_stored(recs[0].value, 107) is None
        clock.now += 5.9
        assert not runs.tombstones_due(False) and await flush(runs) == []
        clock.now += 0.2
        assert runs.tombstones_due(False)
        assert [(r.key, r.value, r.partition) for r in await flush(runs)] == [(b"r1", None, 3)]
        assert b"r1" not in store  # gone from the table with its tombstone
        assert not runs.tombstones_due(True)  # sent once

    asyncio.run(main())


def test_hurry_and_close_send_every_tombstone_at_once():
    async def main():
        runs, _, sink, _ = make(delay=600.0)
        fold_into(runs, loop("a", 1) + [end("a", 2)] + loop("b", 1) + [end("b", 2)])
        await flush(runs)
        assert runs.tombstones_due(True) and not runs.tombstones_due(False)
        fold_into(runs, loop("c", 1) + [end("c", 2)])
        await flush(runs)  # c's ended record
        before = len(sink.records)
        await runs.close()
        assert sorted((r.key, r.value) for r in sink.records[before:]) == [(b"a", None), (b"b", None), (b"c", None)]

    asyncio.run(main())


def test_a_new_run_under_an_ended_run_id_cancels_its_tombstone():
    async def main():
        runs, store, _, clock = make(delay=6.0)
        fold_into(runs, loop("r1", 2) + [end("r1", 4)], first_offset=0)
        await flush(runs)
        fold_into(runs, [call("r1", 0)], first_offset=10)  # after the run_end's offset: a new run
        clock.now += 60
        recs = await flush(runs)
        assert [(r.key, r.value is not None) for r in recs] == [(b"r1", True)]
        assert decode_state(recs[0].value).last_seq == 0 and store[b"r1"].last_seq == 0

    asyncio.run(main())


def test_a_recovering_worker_answers_replayed_events_as_the_first_time():
    # The first worker folds a loop to its block and the run's end; it stores its
    # states, then "crashes" before its input is committed, so its successor replays
    # the last events on the recovered store: the same decisions, the run ended again.
    async def main():
        events = loop("r1", 12) + [end("r1", 24)] + loop("r2", 12)
        runs, _, sink, _ = make()
        first = fold_into(runs, events)
        await flush(runs)
        assert "warn" in first and "block" in first
        runs2, _, _, _ = make(sink.recovered())
        replayed_from = 10
        again = fold_into(runs2, events[replayed_from:], first_offset=replayed_from)
        calls_before = sum(1 for e in events[:replayed_from] if e["type"] == "tool_call")
        assert again == first[calls_before:]

    asyncio.run(main())


def test_idle_runs_are_evicted_past_twice_the_timeout_in_event_time():
    async def main():
        runs, store, sink, _ = make(idle=HOUR)
        fold_into(runs, loop("old", 1, ts=0) + loop("recent", 1, ts=HOUR))
        await flush(runs)
        fold_into(runs, [call("other", 0, ts=2 * HOUR + 1)])  # the partition's newest ts
        # "other" is staged (touched since the last flush): never evicted in that state.
        assert await runs.evict_idle(chunk=1) == 1
        assert b"old" not in store and b"recent" in store and b"other" in store
        recs = await flush(runs)
        assert (b"old", None) in [(r.key, r.value) for r in recs]
        assert runs.evicted == 1
        assert await runs.evict_idle() == 0

    asyncio.run(main())


@pytest.mark.parametrize("hurry", [False, True])
def test_nothing_staged_and_no_tombstone_due_writes_nothing(hurry):
    async def main():
        runs, _, sink, _ = make()
        assert not runs.pending()
        assert await flush(runs, hurry) == [] and sink.records == []

    asyncio.run(main())


def test_events_delivered_again_to_the_same_worker_after_their_run_ended_are_answered_as_the_first_time():
    # Faust seeks a partition back to its committed offset after a recovery or a
    # rebalance, so the same worker can be handed a run's last events again, its run_end
    # included, after it folded them; with no commit in between they are replayed on the
    # worker's own store, not a recovered one.
    async def main():
        events = [call("r1", i) for i in range(8)] + [end("r1", 8)]
        runs, store, _, _ = make(delay=6.0)
        first = fold_into(runs, events)
        await flush(runs)
        assert "warn" in first
        assert fold_into(runs, events[4:], first_offset=4) == first[4:]
        assert fold_into(runs, [call("r1", 0, path="/b")], first_offset=9) == ["allow"]  # after the run_end: a new run
        assert store[b"r1"].last_seq == 0

    asyncio.run(main())


def test_an_ended_run_read_back_from_the_changelog_is_tombstoned_once_the_worker_is_past_its_run_end():
    # A worker stopped after writing an ended record and after its run_end was
    # committed, but before the tombstone: its successor reads the record back and
    # replays nothing of the run. Once it has folded past the run_end, the record gets
    # its tombstone (else it would stay in the table and the changelog for good).
    async def main():
        first_runs, _, first_sink, _ = make()
        fold_into(first_runs, [call("r1", i) for i in range(8)] + [end("r1", 8)], first_offset=100)
        await flush(first_runs)
        runs, store, sink, clock = make(first_sink.recovered(), delay=6.0)
        assert store[b"r1"][:1] == ENDED
        await runs.evict_idle()
        assert not runs.tombstones_due(True)  # nothing folded here yet
        runs.folded({3: 108, 4: 500})
        await runs.evict_idle()
        assert not runs.tombstones_due(True)  # at its run_end (offset 108), not past it
        fold_into(runs, loop("r2", 1), first_offset=109)  # another run, on the same partition
        await runs.evict_idle()
        assert runs.tombstones_due(True) and not runs.tombstones_due(False)  # scheduled, not due yet
        clock.now += 6.0
        recs = await flush(runs)
        assert sorted((r.key, r.value is None) for r in recs) == [(b"r1", True), (b"r2", False)]
        assert b"r1" not in store and b"r2" in store

    asyncio.run(main())
