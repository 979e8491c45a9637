"""The Faust app, built by `create_app(settings)`; nothing happens at import time."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from typing import Any

import faust
from aiokafka.partitioner import murmur2
from faust.types import TP
from faust.web import Request, Response, View
from mode import Service
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from detectors import DetectionConfig
from detectors.config import document_id

from ..admin.config_topic import ConfigHistory
from ..admin.fleet_topic import FleetLedger
from ..kafka import clients as kafka_clients
from ..kafka import compacted, faust_compat
from ..kafka.delivery import fill_hole
from ..kafka.loop_clients import LoopClients
from ..kafka.settings import read_detection_config
from . import config_follow, rebalance, watchdog
from . import fleet as fleet_stage
from . import spend as spend_stage
from .batches import BatchLoop
from .health import Health
from .metrics import Metrics
from .parts import build_parts
from .settings import WorkerSettings

log = logging.getLogger("loopwarden.worker")


def _credentials(s: WorkerSettings) -> faust.SASLCredentials | faust.SSLCredentials | None:
    """Faust's broker credentials: SASL (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; over TLS
    for SASL_SSL), TLS alone (SSL), or none. Faust hands them to every aiokafka client it
    makes (consumer, producers, the admin calls that create the changelog topic)."""
    from faust.types.auth import SASLMechanism

    from ..kafka.errors import SettingsError

    if "SASL" in s.security_protocol:
        names = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        if s.sasl_mechanism not in names:  # GSSAPI and OAUTHBEARER need other credentials
            raise SettingsError(f"sasl_mechanism {s.sasl_mechanism!r} is not one of {', '.join(names)}")
        if s.sasl_username is None or s.sasl_password is None:
            raise SettingsError(f"security protocol {s.security_protocol} needs --sasl-username and --sasl-password")
        # SASLCredentials means SASL_SSL when it has an SSL context, SASL_PLAINTEXT without;
        # the settings give one exactly for SASL_SSL.
        return faust.SASLCredentials(
            username=s.sasl_username,
            password=s.sasl_password,
            ssl_context=s.ssl_context(),
            mechanism=SASLMechanism(s.sasl_mechanism),
        )
    ctx = s.ssl_context()
    return faust.SSLCredentials(ctx) if ctx is not None else None


def create_app(
    settings: WorkerSettings,
    config: DetectionConfig,
    clients: LoopClients,
    config_id: str | None = None,
    history: ConfigHistory | None = None,
    fleet: FleetLedger | None = None,
) -> faust.App:
    """The worker app: one agent over the events topic, the batch loop that folds its
    events with the parts built here (parts.py) over the Kafka `clients`, and the pieces
    around them (health.py, config_follow.py, rebalance.py, fleet.py, spend.py).

    It starts under `config` (named `config_id`; None: the built-in defaults or a file).
    With a `history` the worker follows the config topic (streams/admin/config_topic.py):
    that is what run_worker read of it before building the app, and the worker switches
    to each new current config between two batches. `fleet`: the fleet topic as read."""
    following = history is not None
    metrics = Metrics()
    app = _faust_app(settings)
    # The run states: a dict of the worker's own, which the batch loop's RunStore writes to
    # the changelog and reads back when it takes a partition over (run_store.py,
    # recovery.py). No Faust table: Faust's recovery is not on the path.
    runs: dict[bytes, Any] = {}
    parts = build_parts(
        settings,
        config,
        metrics,
        lambda: runs,
        partition_of=lambda key: (murmur2(key) & 0x7FFFFFFF) % settings.partitions,
        tombstone_delay=2 * app.conf.broker_commit_interval + settings.flush_interval_ms / 1000.0,
        clients=clients,
    )
    ledger = fleet if fleet is not None else FleetLedger()  # stop orders, breakers, spend caps received
    batches = BatchLoop(
        settings,
        parts,
        config,
        config_id,
        ledger.view,
        metrics,
        lag=lambda: sum(_lags(app, settings, batches).values()),
        hurry=lambda: app.should_stop or app.rebalancing,
        on_error=lambda exc: _crash(app, settings, exc),
    )
    # run_worker reads its failure; faust.App takes the attribute but does not declare it
    app.batches = batches  # type: ignore[attr-defined]
    inbox: list[Any] = []  # the agent's channel, once its stream has started
    if history is not None:
        switch = config_follow.ConfigSwitch(settings, history, batches, metrics.config_in_use(config_id))
        config_follow.install(app, switch)
    else:
        metrics.config_in_use(config_id)
    breaker = following or config.tool_breaker is not None  # see fleet_stage.install
    fleet_stage.install(app, settings, ledger, lambda: batches.config, metrics, breaker)
    if config.spend_caps or config.spend_anomaly is not None:  # else the worker reads no spend topic
        spend_stage.install(app, settings, lambda: batches.config, metrics)
    rebalance.install(app, settings, batches, metrics, inbox)
    Health(app, batches, settings.events_topic, following).install(app)
    _install_loop(app, settings, runs, batches, metrics, inbox)
    return app


def run_worker(settings: WorkerSettings) -> None:
    """Run one worker until SIGTERM/SIGINT (no spinner, plain log lines).

    Kafka first, the app on top: the topics are made (idempotent: a fresh cluster needs
    no extra step), the config topic (unless --config) and the fleet topic are read to
    their ends, so the first event folded is decided under the current config and
    against every stop order in force, and the batch loop's clients are made."""
    from ..admin.topics import topic_specs

    history, ledger = ConfigHistory(), FleetLedger()
    specs = topic_specs(settings)
    created = asyncio.run(kafka_clients.create_topics(settings, specs))
    if not settings.config:
        asyncio.run(compacted.read_whole(settings, settings.config_topic, history))
    asyncio.run(compacted.read_whole(settings, settings.fleet_topic, ledger))
    clients = LoopClients.of(settings, settings.app_id)
    config_id: str | None = None
    if settings.config:
        config = read_detection_config(settings.config)
        config_id = document_id(config.document)
    else:  # the current config on the topic; the built-in defaults while there is none
        config, config_id = history.current_config() or DetectionConfig({}), history.current
    tables = spend_stage.table_specs(settings, config)  # the spend stage's, for its caps and anomaly watch
    created += asyncio.run(kafka_clients.create_topics(settings, tables)) if tables else []
    app = create_app(settings, config, clients, config_id, None if settings.config else history, ledger)
    if created:
        log.warning("created topics %s", ", ".join(created))

    # Every stop is bounded: a SIGTERM or SIGINT, or any other way out, arms the deadline,
    # so the process ends within stop_timeout_s (exit 143 or 130 if the graceful stop did
    # not finish, 1 after a crash).
    def on_stop_begins(code: int, why: str) -> None:
        watchdog.arm(settings.stop_timeout_s, code, why)

    worker = faust_compat.Worker(app, loglevel=settings.log_level, quiet=True, redirect_stdouts=False)
    worker.on_stop_begins = on_stop_begins
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if app.batches.failed is not None and not exc.code:  # type: ignore[attr-defined]  # set by create_app
            raise SystemExit(1) from None  # stopped because output could not be published
        raise


def _crash(app: faust.App, settings: WorkerSettings, exc: BaseException) -> None:
    """The batch loop could not publish its output: the worker stops as on SIGTERM, and
    exits non-zero (run_worker). Not through `app.crash`: with no supervisor, mode marks
    every service crashed, the consumer thread too, whose method queue then serves no
    call; the stop's final offset commit (Consumer.wait_empty -> commit -> call_thread)
    then waits forever, and SIGTERM only asks for the stop already under way. Whatever
    happens next, the process ends within the bound. The stop must not wait for the
    failed batch loop to acknowledge what it holds (Faust's wait_empty would, forever):
    those events stay unacknowledged, and the partitions' next owner folds them."""
    watchdog.arm(settings.stop_timeout_s, 1, f"crashed: {exc!r}")
    app.conf.stream_wait_empty = False
    os.kill(os.getpid(), signal.SIGTERM)


RAW: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}


def _faust_app(settings: WorkerSettings) -> faust.App:
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        broker_credentials=_credentials(settings),
        store="memory://",
        autodiscover=False,
        datadir=settings.data_dir,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        table_standby_replicas=settings.standby_replicas,
        consumer_auto_offset_reset="earliest",
        consumer_max_fetch_size=settings.fetch_bytes_per_partition,
        producer_linger=settings.producer_linger_ms / 1000.0,  # Faust's own producer (offsets, internals)
        producer_acks=-1,
        broker_session_timeout=settings.session_timeout_s,
        # Heartbeats every quarter second: the live members learn of a rebalance (a dead
        # member's session expired) within 0.25 s, and as an eager rebalance waits for the
        # last member to rejoin, every member's pause shrinks with it (benchmarks.failover,
        # the survivors' longest pause).
        broker_heartbeat_interval=min(0.25, settings.session_timeout_s / 3),
        web_enabled=True,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_in_thread=False,
    )
    if settings.consumer == "inline":
        faust_compat.consume_inline(app)
    return app


def _lags(app: faust.App, settings: WorkerSettings, batches: BatchLoop) -> dict[int, int]:
    """Events not folded yet, per assigned partition of the events topic. Only for
    partitions folded from since they were assigned: before that the position is not
    known (the committed offset may be anywhere below the highwater)."""
    consumer, out, topic = app.consumer, {}, settings.events_topic
    # The partitions folded from since their assignment are in `progress` (a revoked one
    # leaves it: rebalance.py); asked of each, not of Faust's assignment, which builds a
    # new set of every partition on each call (the fold loop asks before every batch).
    for p, done in list(batches.progress.items()):
        try:
            high = consumer.highwater(TP(topic, p))
        except Exception:  # not fetched yet, or no longer assigned
            continue
        out[p] = max(0, (high or 0) - done - 1)
    return out


def _install_loop(
    app: faust.App,
    settings: WorkerSettings,
    runs: Any,
    batches: BatchLoop,
    metrics: Metrics,
    inbox: list[Any],
) -> None:
    """The agent and the batch loop as a service (and the chores)."""
    events = app.topic(settings.events_topic, partitions=settings.partitions, **RAW)
    faust_compat.deliver_inline(app.consumer)  # no task per message fetched

    @app.service
    class _Batches(Service):  # started and stopped with the worker
        async def on_start(self) -> None:
            await batches.start()

        async def on_stop(self) -> None:
            await batches.stop()

    @app.agent(events, concurrency=1)
    async def fold_events(stream: Any) -> None:
        # The agent passes its events on; the batch loop folds them in batches, publishes
        # the output and acknowledges each event by hand once that output is durable.
        stream.enable_acks = False
        inbox.append(stream.channel)
        holes, check, starts, put = batches.parts.holes, batches.parts.holes.check, batches.parts.starts, batches.put
        async for event in stream.events():
            m = event.message
            if m.partition not in holes.next:  # its first event since the assignment: from where?
                start = faust_compat.start_offset(app.consumer, m.tp)
                if start is None:
                    batches.receiving = True
                    start = await starts.start_of(m.tp)
                holes.begin(m.partition, start)
            hole = check(m.partition, m.offset)
            if hole is not None:
                batches.receiving = True
                for lost in await fill_hole(app.consumer, settings, m, hole, metrics):
                    await batches.add(lost)
            if batches.can_handle_now():  # a lone event: folded here, at once
                await batches.handle_now(event)
            elif put(event):  # far more than a batch waits: until the fold loop takes one
                await batches.room()
            batches.receiving = False

    _install_chores(app, settings, runs, batches, metrics)


def _install_chores(app: faust.App, settings: WorkerSettings, runs: Any, batches: BatchLoop, metrics: Metrics) -> None:
    """The worker's periodic chores: its memory settled, its lag reported, /metrics."""

    @app.task
    async def settle_memory() -> None:
        # Everything built while starting (modules, Faust's and aiokafka's objects) lives
        # as long as the worker: keep it out of the collector's full passes, which
        # otherwise pause the loop for tens of milliseconds now and then.
        gc.collect()
        gc.freeze()

    @app.timer(interval=5.0)
    async def report_lag() -> None:
        for partition, n in _lags(app, settings, batches).items():
            metrics.lag.labels(str(partition)).set(n)
        metrics.runs.set(len(runs))

    @app.page("/metrics")
    async def metrics_page(web: View, request: Request) -> Response:
        return web.bytes(generate_latest(metrics.registry), content_type=CONTENT_TYPE_LATEST.split(";")[0])
