"""The worker's part of the fleet (semantics.md section 9): what it receives, what it
sends, and the tool breaker's stage.

- Received: the fleet topic (stop orders and breakers), read whole before the first
  batch and then followed (`streams/admin/fleet_topic.py`); its `FleetView` is what the
  batch loop's fold judges calls against. The view changes between batches only (the
  follower runs on the same event loop, and a batch is folded with no await in it).
- Sent, from each batch (`outputs`): every failure of a tool (the same rule the offline
  fold uses, `detectors.ingest.failure_of`) to the failures topic, keyed by tool name,
  while the breaker is on; and alerts for the runs aborted and the budget warnings.
- The breaker's stage: a Faust agent over the failures topic. Keyed by tool, each tool's
  failures reach one worker, in order; its window lives in a Faust table (`breakers`,
  keyed by tool, changelogged), so a worker taking the partition over carries on with
  it. A failure that opens a breaker publishes it to the fleet topic (compacted, keyed
  by the breaker's id, which is deterministic, so a replayed failure publishes the same
  record again) with a `breaker_opened` alert; `breaker_closed` follows at its end.

Faust's hopping and tumbling windows cut time into fixed buckets; the rule counts
distinct runs over a window that slides with each failure, and restarts its count at
the end of a tool's last breaker, which buckets cannot express. So the table holds the
exact rule's state (`detectors.fleet.ToolWindow`), not Faust windows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
from mode import Service

from detectors import DetectionConfig
from detectors.fleet import Breaker, ToolBreakerFold, encode_fleet_record, export_tool, import_tool
from detectors.ingest import Folded, failure_of
from detectors.policy import FLEET_SPEND_CAP, RUN_BUDGET
from detectors.wire import Decision, ToolResult

from ..admin.fleet_topic import FleetFollower, FleetLedger
from ..kafka import faust_compat
from ..kafka.producer import OutRecord
from ..kafka.settings import Settings

log = logging.getLogger("loopwarden.fleet")


class Failure(msgspec.Struct, frozen=True, array_like=True):
    """A record of the failures topic (keyed by tool name)."""

    tool: str
    outcome: str
    ts: int
    run_id: str
    gateway_id: str


_encode = msgspec.json.Encoder().encode
_decode_failure = msgspec.json.Decoder(Failure).decode


def alert(kind: str, ts: int | None, subject: str, summary: str, **fields: Any) -> bytes:
    """An alert record (wire-format.md, "Fleet signals and alerts")."""
    return _encode({"kind": kind, "ts": ts, "subject": subject, "summary": summary, **fields})


def _decision_alert(d: Decision, first_abort: bool) -> bytes | None:
    action = d.shadow_action or d.action
    if d.detector == FLEET_SPEND_CAP:  # a pause ends no run (its cap's alerts are the spend stage's)
        return None
    if action == "abort" and first_abort:
        kind = "run_aborted"
    elif action == "warn" and d.detector == RUN_BUDGET:
        kind = "budget_warning"
    else:
        return None
    fields = {
        "run_id": d.run_id,
        "gateway_id": d.gateway_id,
        "agent_id": d.agent_id,
        "detector": d.detector,
        "enforced": d.enforced,
        "event_id": d.event_id,
        "fleet_signal": d.fleet_signal,
    }
    return alert(kind, d.ts, d.run_id, d.message or f"{action} by {d.detector}", **fields)


def may_alert(d: Decision) -> bool:
    """Whether a decision can be the subject of an alert: anything but a plain allow."""
    return d.action != "allow" or d.shadow_action is not None


def outputs(f: Folded, settings: Settings, breaker_on: bool, out: list[OutRecord]) -> None:
    """The fleet's records from one folded event, appended to `out`: its failure (to the
    failures topic, while the breaker is on) and its alerts."""
    ev = f.event
    if breaker_on and type(ev) is ToolResult and f.after is not f.before:
        fail = failure_of(ev)
        if fail is not None:
            out.append(OutRecord(settings.failures_topic, fail[0].encode(), _encode(Failure(*fail))))
    if f.decisions:
        was_aborted = f.before is not None and f.before.aborted
        for d in f.decisions:
            if not may_alert(d):
                continue
            rec = _decision_alert(d, not was_aborted)
            if rec is not None:
                out.append(OutRecord(settings.alerts_topic, d.run_id.encode(), rec, [], 0))


def install(app: Any, settings: Settings, ledger: FleetLedger, config_of: Any, metrics: Any, breaker: bool) -> None:
    """Add the fleet's services to the worker app: the fleet topic's follower (into
    `ledger.view`) and, if `breaker`, the breaker stage. `config_of()` is the config in
    use.

    `breaker` is false for a worker whose config is fixed (`--config`) and has no tool
    breaker: it sends no failures, and its stage would judge none, so the failures topic
    is not consumed at all. Its partitions are not then in every fetch the worker's
    consumer makes, which at a high rate returns about one event a fetch
    (benchmarks.kafka). A worker following the config topic keeps the stage, as a later
    config may turn the breaker on."""
    follower = FleetFollower(settings, ledger)

    @app.service
    class _FollowFleet(Service):  # stop orders reach the fold within about a second
        async def on_start(self) -> None:
            await follower.start()
            self._counted()  # what was read before the app started
            log.warning("following %s from offset %d", settings.fleet_topic, ledger.next_offset)

        async def on_stop(self) -> None:
            await follower.stop()

        def _counted(self) -> None:
            metrics.fleet_records.set(len(ledger.records))
            metrics.fleet_taken.set(ledger.taken)
            metrics.fleet_skipped.set(ledger.skipped)

        @Service.task
        async def _follow(self) -> None:
            while not self.should_stop:
                try:
                    if await follower.poll(0.5):
                        self._counted()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # what was received stays in force; try again
                    log.warning("cannot read %s: %r", settings.fleet_topic, exc)
                    await self.sleep(1.0)

    if breaker:
        _install_breaker(app, settings, config_of, metrics)


def _install_breaker(app: Any, settings: Settings, config_of: Any, metrics: Any) -> None:
    """The breaker's stage: an agent over the failures topic, its windows table, and the
    timer that announces breakers closing."""
    raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    failures = app.topic(settings.failures_topic, partitions=settings.partitions, **raw)
    windows = app.Table("breakers", default=None, key_type=bytes, value_type=bytes, partitions=settings.partitions)
    opened: dict[str, Breaker] = {}  # breakers this worker opened and has not seen close yet

    @app.agent(failures, concurrency=1)
    async def breaker_stage(stream: Any) -> None:
        async for event in stream.events():
            cfg: DetectionConfig = config_of()
            if cfg.tool_breaker is None or event.key is None or event.value is None:
                continue
            try:
                fail = _decode_failure(event.value)
            except msgspec.DecodeError as exc:
                log.warning("skipping an unreadable failure record at offset %d: %s", event.message.offset, exc)
                continue
            rule = ToolBreakerFold(cfg.tool_breaker, recheck_late=True)  # failures come in the order folded
            state = windows.get(event.key)
            if state is not None:
                try:
                    import_tool(rule, fail.tool, state)
                except (msgspec.DecodeError, TypeError, ValueError) as exc:  # never stop the stage
                    log.warning("starting the window of %r afresh: its stored state is unreadable: %s", fail.tool, exc)
                    rule = ToolBreakerFold(cfg.tool_breaker, recheck_late=True)
            b = rule.observe(fail.tool, fail.outcome, fail.ts, fail.run_id, fail.gateway_id)
            await _store(app, windows, event.key, export_tool(rule, fail.tool))
            if b is not None:
                await _publish_breaker(app, settings, b)
                opened[b.id] = b
                metrics.breakers_opened.inc()

    @app.timer(interval=1.0)
    async def close_breakers() -> None:
        now_ms = int(time.time() * 1000)  # live, a breaker's end in event time is about now
        for bid, b in list(opened.items()):
            if b.until_ts <= now_ms:
                del opened[bid]
                summary = f"breaker on {b.tool_name} closed after its cool-down"
                rec = alert("breaker_closed", b.until_ts, b.id, summary, tool_name=b.tool_name, outcome=b.outcome)
                await app.producer.send(
                    settings.alerts_topic, b.id.encode(), rec, partition=0, headers=None, timestamp=None
                )


async def _publish_breaker(app: Any, settings: Settings, b: Breaker) -> None:
    summary = (
        f"breaker opened on {b.tool_name}: {b.runs} runs on {b.gateways} gateways failed the same way "
        f"within {b.window_ms // 1000} s; its calls are blocked until {b.until_ts}"
    )
    fields = {"tool_name": b.tool_name, "outcome": b.outcome, "runs": b.runs, "gateways": b.gateways}
    fields |= {"from_ts": b.from_ts, "until_ts": b.until_ts}
    rec = alert("breaker_opened", b.from_ts, b.id, summary, **fields)
    key = b.id.encode()
    await app.producer.send_and_wait(
        settings.fleet_topic, key, encode_fleet_record(b), partition=0, headers=None, timestamp=None
    )
    await app.producer.send(settings.alerts_topic, key, rec, partition=0, headers=None, timestamp=None)
    log.warning("%s", summary)


async def _store(app: Any, windows: Any, key: bytes, value: bytes, tries: int = 60) -> None:
    """`windows[key] = value`, waiting out a changelog topic that the consumer's metadata
    does not know yet (a worker just started on new topics, on a loaded broker): Faust
    refuses the write until it does. The metadata is read again twice a second, for up
    to `tries` times; then the refusal is raised (the agent is restarted)."""
    from faust.exceptions import PartitionsMismatch

    for attempt in range(tries):
        try:
            windows[key] = value
            return
        except PartitionsMismatch as exc:
            if attempt == tries - 1:
                raise
            if attempt == 0:
                log.warning("the breakers table cannot be written yet (%s); reading the metadata again", exc)
            await faust_compat.refresh_metadata(app.consumer)
            await asyncio.sleep(0.5)
