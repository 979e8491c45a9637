"""The Faust app, built by `create_app(settings)`; nothing happens at import time."""

from __future__ import annotations

import logging
from pathlib import Path

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from detectors import DetectionConfig, load_config
from detectors.wire import encode

from .errors import SettingsError
from .metrics import Metrics
from .processor import Incoming, observe, process_batch
from .settings import Settings

log = logging.getLogger("loopwarden.worker")


def read_detection_config(path: str | None) -> DetectionConfig:
    if not path:
        return DetectionConfig({})
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read detection config {path}: {exc.strerror}") from None
    config = load_config(text, source=path)
    for w in config.warnings:
        log.warning("%s: %s", path, w)
    return config


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
        producer_linger=settings.producer_linger_ms / 1000.0,
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
    decisions = app.topic(settings.decisions_topic, key_type=bytes, value_type=bytes, key_serializer="raw",
                          value_serializer="raw", partitions=settings.partitions)
    deadletter = app.topic(settings.deadletter_topic, key_type=bytes, value_type=bytes, key_serializer="raw",
                           value_serializer="raw", partitions=settings.partitions)
    # Keyed by run_id bytes, the events' key. A batch mixes partitions, so the changelog
    # partition comes from the producer's partitioner (murmur2 of the key, as for events),
    # not from Faust's "current event", which in a batch is only the last one.
    # bytes keys and values make Faust pick its "raw" codec for writes and for recovery.
    runs = app.Table("runs", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions,
                     use_partitioner=True)
    progress: dict[int, int] = {}

    @app.agent(events, concurrency=1)
    async def judge(stream):
        within = settings.batch_within_ms / 1000.0
        async for batch in stream.take_events(settings.batch_max, within):
            msgs = [
                Incoming(e.message.key, e.message.value, e.message.topic, e.message.partition, e.message.offset,
                         e.message.timestamp)
                for e in batch
            ]
            result = process_batch(msgs, runs.get, config, settings.max_event_bytes, metrics)
            for key, value in result.writes.items():
                if value is None:
                    runs.pop(key, None)
                else:
                    runs[key] = value
            for d in result.decisions:
                await decisions.send(key=d.gateway_id.encode(), value=encode(d))
            for dl in result.dead:
                await deadletter.send(key=dl.key, value=dl.value, headers=dl.headers)
            for m in msgs:
                progress[m.partition] = m.offset
            observe(metrics, msgs, result.decisions)

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

    app.loopwarden_metrics = metrics  # type: ignore[attr-defined]
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
