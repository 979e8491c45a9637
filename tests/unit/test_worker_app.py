"""What the worker app consumes, by its config (no broker: the app is only built)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from detectors import DetectionConfig
from streams.admin.config_topic import ConfigHistory
from streams.kafka import faust_compat
from streams.kafka import settings as settings_mod
from streams.kafka.loop_clients import LoopClients
from streams.worker.app import create_app
from streams.worker.settings import WorkerSettings

BREAKER = {"loopwarden": {"fleet": {"toolBreaker": {"enabled": True}}}}


def _batch_loop(tmp_path: Path) -> tuple[WorkerSettings, Any]:
    """A worker's settings and its batch loop (the app built, no broker)."""
    s = settings_mod.build(
        {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={}, kind=WorkerSettings
    )
    return s, create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id)).batches  # type: ignore[attr-defined]


def test_the_events_consumer_fetches_as_much_per_partition_as_the_settings_say(tmp_path):
    """Faust's default (1 MiB a partition) held a worker's throughput down: the worker's
    own default, or the flag's value, reaches the consumer Faust builds."""
    for flags, want in (({}, 4 << 20), ({"fetch_bytes_per_partition": 16 << 20}, 16 << 20)):
        s = settings_mod.build(
            {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path), **flags},
            env={},
            kind=WorkerSettings,
        )
        app = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id))
        assert app.conf.consumer_max_fetch_size == want  # (Faust's max_partition_fetch_bytes)


def test_the_events_consumer_runs_in_the_apps_loop_unless_told_to_run_in_a_thread(tmp_path):
    """By default Faust's aiokafka consumer is a service of the app's own loop (no thread
    of its own, calls awaited in place); `consumer="thread"` (LOOPWARDEN_CONSUMER) keeps
    Faust's consumer thread with its own loop."""
    seen = {}
    for env in ({}, {"LOOPWARDEN_CONSUMER": "thread"}, {"LOOPWARDEN_CONSUMER": "inline"}):
        s = settings_mod.build(
            {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env=env, kind=WorkerSettings
        )
        app = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id))
        thread = app.consumer._thread  # type: ignore[attr-defined]  # Faust's consumer "thread" service
        seen[s.consumer] = (type(thread).__name__, thread.thread_loop is thread.parent_loop)
    assert seen == {
        "inline": ("_InlineConsumerThread", True),
        "thread": ("AIOKafkaConsumerThread", False),
    }


def test_an_inline_consumer_answers_a_call_in_place_and_starts_and_stops_no_thread():
    """The inline consumer's calls (each fetch, each commit) are awaited where they are
    made, in the calling task, and its start and stop run in the loop: no thread appears."""

    async def main() -> tuple[Any, ...]:
        s = settings_mod.build({"bootstrap": "127.0.0.1:1", "topic_prefix": "t."}, env={}, kind=WorkerSettings)
        app = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id))
        thread = app.consumer._thread  # type: ignore[attr-defined]
        assert isinstance(thread, faust_compat._InlineConsumerThread)

        async def where(x: int) -> tuple[Any, int]:
            return asyncio.current_task(), x + 1

        task, got = await thread.call_thread(where, 41)
        before = threading.active_count()
        started: list[bool] = []

        async def no_consumer() -> None:  # (aiokafka's start would dial the broker)
            started.append(True)

        thread.on_start = no_consumer
        await thread.start()
        during = threading.active_count()
        await thread.stop()
        return task is asyncio.current_task(), got, before, during, started, thread.should_stop

    in_place, got, before, during, started, stopped = asyncio.run(main())
    assert (in_place, got, started, stopped) == (True, 42, [True], True)
    assert during == before


def _call_event(seq: int) -> SimpleNamespace:
    """A tool call of run "r" on partition 0, at offset `seq`, as the stream passes it on."""
    value = {"type": "tool_call", "run_id": "r", "seq": seq, "gateway_id": "gw", "tool_name": "read"}
    value.update(tool_call_id=f"c{seq}", params={"p": seq}, ts=1_000 + seq)
    data = json.dumps(value).encode()
    msg = SimpleNamespace(topic="t.events", partition=0, offset=seq, key=b"r", value=data, timestamp=1.0 + seq)
    return SimpleNamespace(message=msg)


def _consumed(config: DetectionConfig | None, tmp_path: Path) -> tuple[set[str], set[str]]:
    s = settings_mod.build(
        {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={}, kind=WorkerSettings
    )
    if config is None:  # following the config topic, none on it yet
        app = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id), history=ConfigHistory())
    else:
        app = create_app(s, config, LoopClients.of(s, s.app_id))
    topics = {t for agent in app.agents.values() for t in agent.channel.topics}
    return topics, set(app.tables.keys())


@pytest.mark.parametrize(
    ("config", "failures"),
    [
        (DetectionConfig({}), False),  # fixed, no breaker: it sends no failures and judges none
        (DetectionConfig(BREAKER), True),
        (None, True),  # following the config topic: a later config may turn the breaker on
    ],
    ids=["fixed-without-breaker", "fixed-with-breaker", "following-the-config-topic"],
)
def test_the_failures_topic_is_consumed_only_where_a_breaker_can_judge_it(
    config: DetectionConfig | None, failures: bool, tmp_path: Path
) -> None:
    topics, tables = _consumed(config, tmp_path)
    assert "t.events" in topics
    assert ("t.failures" in topics) is failures
    assert ("breakers" in tables) is failures


def test_the_agent_folds_a_lone_event_itself_only_when_nothing_waits_is_handled_or_travels(tmp_path: Path) -> None:
    """BatchLoop.can_handle_now: the agent's shortcut for a lone event never overtakes an
    event passed on before it, a batch being handled, or output not yet delivered."""
    s = settings_mod.build(
        {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={}, kind=WorkerSettings
    )
    loop = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id)).batches  # type: ignore[attr-defined]

    async def check() -> None:
        assert loop.can_handle_now()
        loop.parts.recovery.held.add(0)  # partition 0's states are loaded: its events are not held
        event = SimpleNamespace(message=SimpleNamespace(partition=0, offset=7, key=b"r", value=b"{}"))
        assert loop.put(event) is False
        assert not loop.can_handle_now(), "an event passed on waits for the fold loop"
        loop._waiting.clear()
        async with loop._turn:  # the fold loop handles a batch
            assert not loop.can_handle_now()
        delivered = asyncio.get_running_loop().create_future()
        loop.flusher.sent.append(delivered)
        assert not loop.can_handle_now(), "the last batch's output is still travelling"
        delivered.set_result(None)
        assert loop.can_handle_now()
        loop.failed = RuntimeError("output could not be published")  # (what _fail records; it also stops the app)
        assert not loop.can_handle_now()

    asyncio.run(check())


def test_a_flush_acknowledges_its_events_a_slice_at_a_time_letting_the_loop_run_between(tmp_path: Path) -> None:
    """Flusher.flush: the events a flush covers are acknowledged ACK_SLICE at a time,
    the event loop running between slices (a thousand acknowledgements held it 2.7 ms),
    and every one of them before the flush returns."""
    from streams.worker.flush import ACK_SLICE

    s = settings_mod.build(
        {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={}, kind=WorkerSettings
    )
    loop = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id)).batches  # type: ignore[attr-defined]
    ticks, seen = [0], []

    async def check() -> None:
        async def other_work() -> None:  # what the loop does meanwhile (folding, fetching)
            while True:
                ticks[0] += 1
                await asyncio.sleep(0)

        n = 2 * ACK_SLICE + 10
        loop.flusher.unacked = [SimpleNamespace(ack=lambda: seen.append(ticks[0])) for _ in range(n)]
        task = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        try:
            await loop.flusher.flush()
        finally:
            task.cancel()
        assert len(seen) == n and not loop.flusher.unacked
        slices = [seen[i : i + ACK_SLICE] for i in range(0, n, ACK_SLICE)]
        assert all(len(set(part)) == 1 for part in slices)  # a slice in one go
        assert slices[0][0] < slices[1][0] < slices[2][0]  # the loop ran between slices

    asyncio.run(check())


def test_events_arriving_while_the_last_output_travels_go_out_with_the_batch_waiting_for_it(tmp_path: Path) -> None:
    """BatchLoop._handle: a batch folded while the previous batch's output travels waits
    for its delivery; the events passed on during that wait are folded then and their
    decisions go out in the same send, after the batch's, in order (left for the next
    batch, they would wait for this one's round trip too). Nothing waits when the
    previous output was delivered."""
    from detectors.wire import decode_decision

    s, loop = _batch_loop(tmp_path)
    sends: list[list] = []
    event = _call_event

    async def check() -> None:
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)

        async def send(records: list) -> asyncio.Future:
            sends.append([decode_decision(r.value).seq for r in records if r.topic == s.decisions_topic])
            return done

        loop.publisher.send = send
        loop.parts.recovery.held.add(0)  # partition 0's states are loaded: its events are not held
        travelling = asyncio.get_running_loop().create_future()
        loop.flusher.sent.append(travelling)
        first = [event(0)]
        handling = asyncio.create_task(loop._handle(first))
        await asyncio.sleep(0)
        assert not sends, "the batch waits for the previous output's delivery"
        late = [event(1), event(2)]
        for e in late:
            assert loop.put(e) is False
        travelling.set_result(None)
        await handling
        assert sends == [[0, 1, 2]], "one send: the batch's decisions, then those of the events that came meanwhile"
        assert loop.flusher.unacked == first + late and not loop._waiting
        assert loop.progress == {0: 2}
        await loop._handle([event(3)])  # the last output delivered: at once, alone
        assert sends[-1] == [3] and len(sends) == 2

    asyncio.run(check())


def test_a_delivery_queued_while_a_flush_swaps_the_lists_is_awaited_before_its_events_are_acknowledged(
    tmp_path: Path,
) -> None:
    """BatchLoop._handle: the publisher's send may wait (metadata, room in the producer)
    while a flush swaps the flusher's lists; the delivery it returns belongs with the
    events it carries, so the next flush awaits it and, when it failed, raises instead of
    acknowledging them (a worker whose output cannot be published stops; it never loses
    its decisions silently)."""
    _, loop = _batch_loop(tmp_path)

    async def check() -> None:
        room = asyncio.Event()
        delivery = asyncio.get_running_loop().create_future()

        async def send(records: list) -> asyncio.Future:
            await room.wait()
            return delivery

        async def store(records: list) -> asyncio.Future:
            stored = asyncio.get_running_loop().create_future()
            stored.set_result(None)
            return stored

        loop.publisher.send = send
        loop.flusher.runs.sink.send = store  # the run states' changelog: stored at once
        loop.parts.recovery.held.add(0)
        acked: list[int] = []
        e = _call_event(0)
        e.ack = lambda: acked.append(0)
        handling = asyncio.create_task(loop._handle([e]))
        await asyncio.sleep(0)
        await loop.flusher.flush()  # runs while the send waits for room
        room.set()
        await handling
        delivery.set_exception(RuntimeError("the output is too large to publish"))
        with pytest.raises(RuntimeError, match="too large"):
            await loop.flusher.flush()
        assert not acked, "events whose decisions were not delivered are not acknowledged"

    asyncio.run(check())
