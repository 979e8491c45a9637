"""Every use of a private Faust attribute, in one place (written for faust-streaming 0.15.3).

Faust has no public way to ask these things; each function says what it reads and why
the worker needs it. An upgrade of faust-streaming checks this module first: if a name
moved, the worker's health, its lost-fetch watch and its stop are what would break.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode import Service
from mode.services import WaitResults
from mode.utils.futures import maybe_async


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


@contextlib.contextmanager
def writing_as() -> Iterator[Callable[[Any], None]]:
    """Table writes of a stream that takes its events in batches (`take_events`, where
    Faust sets no current event): a table write takes its changelog partition from the
    current event (`faust.streams.current_event()`, a context variable), so `set(event)`
    makes `event` the current one in the calling task before each write; the variable is
    as before at the end. The stream's own `current_event` attribute is left alone: its
    background reader sets it for the next event while the batch is handled."""
    from faust.streams import _current_event

    token = _current_event.set(None)

    def set_current(event: Any) -> None:
        _current_event.set(weakref.ref(event))

    try:
        yield set_current
    finally:
        _current_event.reset(token)


def table_writes_unthrottled(app: Any, most: int = 50_000) -> None:
    """Faust queues a table's changelog writes in its producer's buffer
    (`ProducerBuffer`, sent in the background) and, once it holds over `max_messages`
    (100), stops delivering messages to every agent until it has waited for 100 sends
    one by one (`wait_until_ebb`, a `wait_for` each): a stage writing thousands of
    windows a second spent more there than in its own work. Here the buffer holds up to
    `most` writes before that brake; they are still sent in order, in the background."""
    app.producer.buffer.max_messages = most


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


def deliver_inline(consumer: Any) -> None:
    """Hand each fetched message to the agent without a task per message.

    Faust's fetch loop (`Consumer._drain_messages`) passes every message on as
    `await self.wait_first(self.callback(message), self.suspend_flow.wait())`: mode's
    `wait_first` makes a task of the callback and of three waits (the flow suspended,
    the service stopped, crashed), waits for the first to finish and cancels the rest.
    That is four tasks and three cancellations per message, a large share of the
    worker's CPU per event (benchmarks.kafka's worker throughput; benchmarks/RESULTS.md).

    Here `consumer.callback` runs the conductor's coroutine at once, up to its first
    suspension. Almost always it finishes there (the agent's buffer has room, the flow
    is not suspended) and the message is delivered with no task made; `wait_first`
    is then told so by a marker and returns at once. When the coroutine suspends (a
    full buffer, a rebalance holding the flow), the rest of it runs as a task under
    Faust's own `wait_first`, so a suspended flow, a stop or a crash interrupts it as
    before. The messages are still passed on one at a time, in the order fetched.

    Reads and replaces two attributes of Faust's consumer: `callback` (the conductor's
    `on_message`, which only the fetch loop calls) and `wait_first` (mode's, which the
    fetch loop calls per message; any other call goes to the original)."""
    on_message = consumer.callback
    original_wait_first = consumer.wait_first
    delivered = _Delivered()

    def callback(message: Any) -> Any:
        coro = on_message(message)
        try:
            pending = coro.send(None)
        except StopIteration:
            return delivered
        return _run_on(coro, pending)

    async def wait_first(*coros: Any, timeout: Any = None) -> Any:
        if coros and coros[0] is delivered:
            for other in coros[1:]:
                if inspect.iscoroutine(other):
                    other.close()  # made for the call, never started
            return WaitResults([delivered], [None], False)
        return await original_wait_first(*coros, timeout=timeout)

    consumer.callback = callback
    consumer.wait_first = wait_first


class _Delivered:
    """The marker `deliver_inline`'s callback returns for a message already delivered.
    Awaiting it finishes at once, so a caller that awaits the callback's result itself
    (not through `wait_first`) still works."""

    __slots__ = ()

    def __await__(self) -> Iterator[Any]:
        return iter(())


async def _run_on(coro: Any, pending: Any) -> Any:
    """Drive `coro` on from where it suspended, yielding `pending` (a future it awaits, or
    None for a bare yield), as an asyncio task would have. The future's outcome reaches
    `coro` when it resumes. A cancellation of this task reaches `coro` where it waits:
    through the future (the task's cancellation cancels what it awaits), or thrown in
    when there is none or it was already done. Anything else yielded is answered with a
    RuntimeError thrown in, as a task answers it."""
    while True:
        error: BaseException | None = None
        if pending is not None and getattr(pending, "_asyncio_future_blocking", None) is None:
            error = RuntimeError(f"a coroutine handling a message yielded {pending!r}, not a future")
        else:
            try:
                if pending is None:
                    await asyncio.sleep(0)
                else:
                    pending._asyncio_future_blocking = False  # as a task does with what it is handed
                    await pending
            except asyncio.CancelledError as exc:
                if pending is None or not pending.cancelled():
                    error = exc  # this task was cancelled: `coro` is, where it waits
            except BaseException:
                pass  # the future failed: `coro` reads the error from it when it resumes
        try:
            pending = coro.send(None) if error is None else coro.throw(error)
        except StopIteration as done:
            return done.value


def consume_inline(app: faust.App) -> None:
    """Run the app's aiokafka consumer in the app's own event loop (before its consumer
    is first made).

    Faust runs it in a thread of its own with a second event loop (`ConsumerThread`, a
    mode `ServiceThread`), and every call into it crosses between the threads through a
    method queue: each fetch of the agent's (`getmany`), each commit, a wake-up of the
    other loop through its self-pipe, and the GIL handed over, both ways. Here the same
    consumer (`AIOKafkaConsumerThread`, its calls unchanged) is a service of the app's
    loop, and a call is an await (benchmarks.kafka with `--variant
    thread=,LOOPWARDEN_CONSUMER=thread` measures both side by side; benchmarks/RESULTS.md).

    Replaces the transport's `Consumer` class (read when the app makes its consumer) by
    one whose `_new_consumer_thread` makes an `_InlineConsumerThread`."""
    app.transport.Consumer = _InlineConsumer  # type: ignore[misc]


class _InlineConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer "thread" started, called and stopped in the app's loop.

    mode's `ServiceThread` starts a thread that runs the service's start, then
    `on_thread_started`, and at the stop `_shutdown_thread`; here they run in the loop
    itself, in that order. The rebalance callbacks go straight to Faust's consumer
    (Faust posts them to a method queue of the app's loop and waits for them there)."""

    def __init__(self, consumer: Any, *, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        super().__init__(consumer, loop=loop, thread_loop=loop, **kwargs)

    async def start(self) -> None:
        await Service.start(self)  # on_start: the aiokafka consumer is made and started
        await self.on_thread_started()

    async def stop(self) -> None:
        if not self._started.is_set() or self._stopped.is_set():
            return
        self._stopped.set()
        await self.on_stop()
        await self.on_thread_stop()  # the method queue, then the aiokafka consumer
        await self._default_stop_children()
        self._shutdown.set()
        await self._default_stop_futures()
        await self._default_stop_exit_stacks()
        await self.on_shutdown()

    async def call_thread(self, fun: Any, *args: Any, **kwargs: Any) -> Any:
        return await maybe_async(fun(*args, **kwargs))

    async def cast_thread(self, fun: Any, *args: Any, **kwargs: Any) -> None:
        await maybe_async(fun(*args, **kwargs))

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.consumer.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any, generation_id: int = 0) -> None:
        await self.consumer.on_partitions_assigned(assigned, generation_id)


class _InlineConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _InlineConsumerThread(self, loop=self.loop, beacon=self.beacon)
