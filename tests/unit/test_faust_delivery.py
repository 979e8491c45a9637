"""faust_compat.deliver_inline: how the worker's Faust consumer hands a fetched message
to the agent. The consumer is Faust's own, of an app built by create_app (no broker: it
is never started); each test passes messages on as Faust's fetch loop does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from detectors import DetectionConfig
from streams.kafka import faust_compat
from streams.kafka import settings as settings_mod
from streams.kafka.loop_clients import LoopClients
from streams.worker.app import create_app
from streams.worker.settings import WorkerSettings

Handler = Callable[[Any], Coroutine[Any, Any, None]]


def _consumer(tmp_path: Path, on_message: Handler) -> Any:
    """The worker's Faust consumer, its conductor's callback replaced by `on_message`
    before deliver_inline wraps it (create_app has wrapped the conductor's already)."""
    s = settings_mod.build(
        {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={}, kind=WorkerSettings
    )
    app = create_app(s, DetectionConfig({}), LoopClients.of(s, s.app_id))
    consumer = app.consumer
    assert consumer.callback is not app.topics.on_message  # create_app wrapped it
    consumer = app.transport.create_consumer(
        callback=on_message, on_partitions_revoked=None, on_partitions_assigned=None
    )
    faust_compat.deliver_inline(consumer)
    return consumer


async def _pass_on(consumer: Any, message: Any) -> None:
    """What Faust's fetch loop (Consumer._drain_messages) does with each message."""
    await consumer.wait_first(consumer.callback(message), consumer.suspend_flow.wait())


def test_a_message_whose_handling_does_not_wait_is_delivered_in_the_fetch_loops_own_task(tmp_path: Path) -> None:
    seen: list[tuple[int, asyncio.Task[Any] | None]] = []

    async def on_message(message: Any) -> None:
        seen.append((message, asyncio.current_task()))

    async def main() -> None:
        consumer = _consumer(tmp_path, on_message)
        tasks_before = len(asyncio.all_tasks())
        for m in range(5):
            await _pass_on(consumer, m)
        assert len(asyncio.all_tasks()) == tasks_before  # nothing left behind
        me = asyncio.current_task()
        assert seen == [(m, me) for m in range(5)]  # in order, and no task made for any

    asyncio.run(main())


def test_a_message_whose_handling_waits_is_delivered_once_what_it_waits_for_is_done(tmp_path: Path) -> None:
    """As with a full buffer: the handling goes on in a task, and the fetch loop waits for
    it; a failure of what it waited for reaches the handling, as it would in a task."""
    gates: list[asyncio.Future[str]] = []
    seen: list[tuple[Any, str]] = []

    async def on_message(message: Any) -> None:
        gate = asyncio.get_running_loop().create_future()
        gates.append(gate)
        try:
            seen.append((message, await gate))
        except ValueError as exc:
            seen.append((message, f"failed: {exc}"))
        await asyncio.sleep(0)  # a bare yield on the way
        seen.append((message, "done"))

    async def main() -> None:
        consumer = _consumer(tmp_path, on_message)
        first = asyncio.ensure_future(_pass_on(consumer, "a"))
        await asyncio.sleep(0.01)
        assert not first.done() and seen == []  # the fetch loop waits for the handling
        gates[0].set_result("opened")
        await asyncio.wait_for(first, 1)
        second = asyncio.ensure_future(_pass_on(consumer, "b"))
        await asyncio.sleep(0.01)
        gates[1].set_exception(ValueError("no room"))
        await asyncio.wait_for(second, 1)
        assert seen == [("a", "opened"), ("a", "done"), ("b", "failed: no room"), ("b", "done")]

    asyncio.run(main())


def test_a_suspended_flow_interrupts_a_handling_that_waits_cancelling_what_it_waits_for(tmp_path: Path) -> None:
    """A rebalance sets the consumer's suspend_flow: the fetch loop goes on, and the
    handling is cancelled where it waits, as Faust's own task for it would be."""
    gate: asyncio.Future[None] | None = None
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        nonlocal gate
        gate = asyncio.get_running_loop().create_future()
        try:
            await gate
            seen.append("delivered")
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        consumer = _consumer(tmp_path, on_message)
        passing = asyncio.ensure_future(_pass_on(consumer, "a"))
        await asyncio.sleep(0.01)
        assert not passing.done()
        consumer.suspend_flow.set()
        await asyncio.wait_for(passing, 1)
        await asyncio.sleep(0.01)  # the cancelled task runs its last step
        assert seen == ["cancelled"]
        assert gate is not None and gate.cancelled()

    asyncio.run(main())


def test_an_error_in_handling_a_message_reaches_the_fetch_loop(tmp_path: Path) -> None:
    """Faust's fetch loop logs it and stops (a crash), with or without a wait first."""

    async def at_once(message: Any) -> None:
        raise KeyError(message)

    async def after_a_wait(message: Any) -> None:
        await asyncio.sleep(0.001)
        raise KeyError(message)

    async def main() -> None:
        for handler in (at_once, after_a_wait):
            consumer = _consumer(tmp_path, handler)
            try:
                await _pass_on(consumer, "bad")
            except KeyError as exc:
                assert exc.args == ("bad",)
            else:
                raise AssertionError(f"{handler.__name__}: the error did not reach the fetch loop")

    asyncio.run(main())


def test_a_suspended_flow_interrupts_a_handling_that_polls_with_bare_yields(tmp_path: Path) -> None:
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        try:
            for _ in range(10_000):  # bounded: a handling never cancelled ends after all
                await asyncio.sleep(0)  # yields None to the loop, no future
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("polled on")

    async def main() -> None:
        consumer = _consumer(tmp_path, on_message)
        passing = asyncio.ensure_future(_pass_on(consumer, "a"))
        await asyncio.sleep(0.01)
        consumer.suspend_flow.set()
        await asyncio.wait_for(passing, 1)
        for _ in range(5):
            await asyncio.sleep(0)
        assert seen == ["cancelled"]

    asyncio.run(main())


def test_what_the_callback_returns_can_also_be_awaited_directly(tmp_path: Path) -> None:
    """Should a later Faust await the callback's result itself, not through wait_first:
    both what it returns for a message delivered at once and for one that waits."""
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        if message == "waits":
            await asyncio.sleep(0.001)
        seen.append(message)

    async def main() -> None:
        consumer = _consumer(tmp_path, on_message)
        await consumer.callback("at once")
        await consumer.callback("waits")
        assert seen == ["at once", "waits"]

    asyncio.run(main())


class _Odd:
    """An awaitable that yields something other than a future (asyncio refuses it)."""

    def __await__(self) -> Any:
        yield 42


def test_a_handling_that_yields_something_other_than_a_future_is_told_so(tmp_path: Path) -> None:
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        await asyncio.sleep(0.001)  # waits first: the rest runs through deliver_inline's driver
        try:
            await _Odd()
        except RuntimeError as exc:
            seen.append(str(exc))

    async def main() -> None:
        consumer = _consumer(tmp_path, on_message)
        await asyncio.wait_for(_pass_on(consumer, "a"), 1)
        assert len(seen) == 1 and "not a future" in seen[0]

    asyncio.run(main())
