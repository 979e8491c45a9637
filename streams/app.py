"""The Faust app, built by `create_app(settings)`; nothing happens at import time."""

from __future__ import annotations

import logging

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from detectors import DetectionConfig, encode_state
from detectors.wire import encode
from mode import Service

from .configfile import read_detection_config
from .metrics import Metrics
from .processor import Incoming, observe, process_batch
from .publisher import Publisher, Record
from .settings import Settings

log = logging.getLogger("loopwarden.worker")


def _credentials(s: Settings):
    if "SASL" in s.security_protocol:
        return faust.SASLCredentials(
            username=s.sasl_username, password=s.sasl_password, ssl_context=s.ssl_context(),
            mechanism=s.sasl_mechanism,
        )
    ctx = s.ssl_context()
    return faust.SSLCredentials(ctx) if ctx is not None else None


def create_app(settings: Settings, config: DetectionConfig | None = None) -> faust.App:
    """The worker app: one agent over the events topic, one table of run states."""
    config = config if config is not None else read_detection_config(settings.config)
    metrics = Metrics()
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        broker_credentials=_credentials(settings),
        store="memory://",
        autodiscover=False,
        datadir=settings.data_dir,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        producer_linger=settings.producer_linger_ms / 1000.0,  # Faust's own producer (offsets, internals)
        producer_acks=-1,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        web_enabled=True,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_in_thread=False,
    )
    events = app.topic(settings.events_topic, key_type=bytes, value_type=bytes, key_serializer="raw",
                       value_serializer="raw", partitions=settings.partitions)
    # The run states. Faust owns the table: its store, its changelog topic (compacted,
    # keyed by run_id), recovery on assignment. The store holds RunState objects written
    # by the agent, or the bytes Faust put there when it recovered a key from the
    # changelog; the agent publishes each touched run's encoded state to the changelog
    # once per batch, together with the batch's decisions (see publisher.py).
    runs = app.Table("runs", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions,
                     use_partitioner=True)
    publisher = Publisher(settings.kafka_kwargs())

    @app.service
    class _Publisher(Service):  # started and stopped with the worker
        async def on_start(self) -> None:
            await publisher.start()

        async def on_stop(self) -> None:
            await publisher.stop()

    progress: dict[int, int] = {}

    async def handle(batch) -> None:
        msgs = [
            Incoming(e.message.key, e.message.value, e.message.topic, e.message.partition, e.message.offset,
                     e.message.timestamp)
            for e in batch
        ]
        store = runs.data
        result = process_batch(msgs, store.get, config, settings.max_event_bytes, metrics)
        out = []
        changelog = runs.changelog_topic.get_topic_name()
        for key, state in result.writes.items():
            if state is None:
                store.pop(key, None)
                out.append(Record(changelog, key, None))
            else:
                store[key] = state
                out.append(Record(changelog, key, encode_state(state)))
        for d in result.decisions:
            out.append(Record(settings.decisions_topic, d.gateway_id.encode(), encode(d)))
        for dl in result.dead:
            out.append(Record(settings.deadletter_topic, dl.key, dl.value, dl.headers,
                              None if dl.key is not None else 0))
        await publisher.publish(out)
        for m in msgs:
            progress[m.partition] = m.offset
        observe(metrics, msgs, result)

    @app.agent(events, concurrency=1)
    async def judge(stream):
        # A batch is whatever has arrived while the previous one was handled (at most
        # batch_max): under load batches grow by themselves, and a lone event is handled
        # at once, with no timer to wait out. Events are acknowledged by hand, once the
        # broker has everything their batch produced, so a committed offset never runs
        # ahead of a decision or a state write.
        stream.enable_acks = False
        batch = []
        async for event in stream.events():
            batch.append(event)
            if len(batch) < settings.batch_max and not stream.channel.empty():
                continue
            try:
                await handle(batch)
            except Exception as exc:
                # Not a bad event (those are dead letters): the output could not be
                # published. Acknowledging nothing and stopping the whole worker hands its
                # partitions, from their committed offsets, to a healthy member; a restarted
                # agent would go on after the failed batch and lose it.
                log.critical("stopping the worker: a batch could not be handled: %r", exc)
                await app.crash(exc)
                raise
            for e in batch:
                await stream.ack(e)
            batch = []

    @app.timer(interval=5.0)
    async def report_lag():
        consumer = app.consumer
        for tp in consumer.assignment():
            if tp.topic != settings.events_topic:
                continue
            try:
                high = consumer.highwater(tp)
            except Exception:  # not fetched yet
                continue
            done = progress.get(tp.partition, -1) + 1
            metrics.lag.labels(str(tp.partition)).set(max(0, (high or 0) - done))
        metrics.runs.set(len(runs))

    @app.page("/metrics")
    async def metrics_page(web, request):
        return web.bytes(generate_latest(metrics.registry), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/health")
    async def health(web, request):
        ok = not app.rebalancing and bool(app.consumer.assignment())
        return web.json({"status": "ok" if ok else "rebalancing", "app": settings.app_id}, status=200 if ok else 503)

    return app


def run_worker(settings: Settings) -> None:
    """Run one worker until SIGTERM/SIGINT (no spinner, plain log lines)."""
    import asyncio

    from .commands import create_topics

    app = create_app(settings)
    created = asyncio.run(create_topics(settings))  # idempotent: a fresh cluster needs no extra step
    if created:
        log.warning("created topics %s", ", ".join(created))
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True, redirect_stdouts=False)
    worker.spinner = None
    worker.execute_from_commandline()
