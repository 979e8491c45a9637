"""`loopwarden alerts`: follow the alerts topic and post each alert to a webhook.

Workers write alerts (breakers opened and closed, runs aborted, budget warnings; spend
caps at 80 and 95 percent and reached, spend anomalies) and `loopwarden stop` writes one
per stop order and per spend cap lifted; the alerts topic has one partition, so they
are read in order. This follower posts them one at a time, at least once: an alert's
offset is committed (in the consumer group `--group`) only after the webhook answered
2xx, and an error or a timeout is retried with a growing pause (0.5 s, doubling, at most
`max_backoff_s`) until it goes through or the follower is stopped. A restarted follower
starts after the last committed alert, so an alert is posted twice only when the
follower stopped between a 2xx and its commit. It never talks to a worker: a slow or
dead webhook delays alerts, never decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from ..kafka import clients
from ..kafka.errors import SettingsError
from ..kafka.settings import Settings

log = logging.getLogger("loopwarden.alerts")

_ICON = {
    "breaker_opened": ":rotating_light:",
    "breaker_closed": ":white_check_mark:",
    "stop_order": ":octagonal_sign:",
    "run_aborted": ":no_entry:",
    "budget_warning": ":warning:",
    "spend_cap_warning": ":money_with_wings:",
    "spend_cap_reached": ":double_vertical_bar:",
    "spend_cap_lifted": ":arrow_forward:",
    "spend_anomaly": ":chart_with_upwards_trend:",
}


@dataclass(frozen=True)
class AlertsOptions:
    webhook: str | None = None  # None: print each alert as a JSON line on stdout
    format: str = "json"  # json: the alert as it is; slack: {"text": ...}
    group: str | None = None  # the consumer group (default: <prefix>alerts-follower)
    from_beginning: bool = False  # a new group starts at the topic's start, not its end
    timeout_s: float = 5.0  # one POST
    max_backoff_s: float = 30.0
    count: int | None = None  # stop after this many alerts (tests, one-shot scripts)


def body(alert: dict[str, Any], fmt: str) -> bytes:
    """What is posted for an alert."""
    if fmt == "slack":
        return json.dumps({"text": slack_text(alert)}).encode()
    return json.dumps(alert).encode()


def slack_text(alert: dict[str, Any]) -> str:
    """An alert as one Slack message: its icon, its kind, then what it says. A spend cap's
    alert is said from its fields (amounts in their units, times in UTC, how to lift a
    cap reached); any other, or one whose fields are not as written, as subject: summary."""
    kind = str(alert.get("kind"))
    head = f"{_ICON.get(kind, ':bell:')} *{kind}*"
    try:
        said = _spend_text(kind, alert)
    except (KeyError, TypeError, ValueError):
        said = None
    return f"{head} {said}" if said is not None else f"{head} {alert.get('subject')}: {alert.get('summary')}"


def _spend_text(kind: str, a: dict[str, Any]) -> str | None:
    """What a spend cap's alert says, from its fields (None: not one)."""
    from detectors.policy import utc_text

    from .spend import amount, used_text

    if kind == "spend_anomaly":
        unit, norm = str(a["unit"]), float(a["median"])
        return (
            f"agent {a['agent_id'] or '(none)'} spent {amount(unit, int(a['used']))} in this window, above "
            f"{float(a['factor']):g} times the median of its previous {a['windows']} windows "
            f"({amount(unit, round(norm)) if unit == 'cost' else f'{norm:g} {unit}'})"
        )
    if kind not in ("spend_cap_warning", "spend_cap_reached", "spend_cap_lifted"):
        return None
    who = f"{a['cap']} for {a['key'] or 'all'}"
    used = used_text(str(a["unit"]), int(a["used"]), int(a["ceiling"]))
    if kind == "spend_cap_warning":
        return f"spend cap {who}: {a['percent']}% of its {a['unit']} ceiling used ({used}) in this window"
    if kind == "spend_cap_reached":
        return (
            f"spend cap {who} reached ({used}): its calls are paused until {utc_text(int(a['until_ts']))}, the "
            f"window's end. Lift it: `loopwarden stop --lift {a['subject']}`"
        )
    by = f" by {a['issued_by']}" if a.get("issued_by") else ""
    ends = utc_text(int(a["window_end"]))
    return f"spend cap {who} lifted{by}: its calls run again ({used} in the window ending {ends})"


def post(url: str, data: bytes, timeout: float) -> int:
    """POST `data` as JSON; the HTTP status (an error status too), or raise OSError for a
    connection that failed or timed out."""
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def deliver(
    send: Callable[[], int], max_backoff_s: float, say: Callable[[str], None], stopping: asyncio.Event
) -> bool:
    """Call `send` (in a thread) until it returns 2xx, pausing 0.5 s, 1 s, 2 s... between
    tries; False if `stopping` was set first."""
    pause = 0.5
    tries = 0
    while not stopping.is_set():
        tries += 1
        try:
            status = await asyncio.to_thread(send)
            if 200 <= status < 300:
                return True
            why = f"HTTP {status}"
        except OSError as exc:  # refused, reset, timed out
            why = f"{type(exc).__name__}: {exc}"
        say(f"try {tries} failed ({why}); again in {pause:g} s")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), pause)
        pause = min(pause * 2, max_backoff_s)
    return False


async def follow(settings: Settings, opts: AlertsOptions, stopping: asyncio.Event, out: TextIO = sys.stdout) -> int:
    """Follow the alerts topic until `stopping` is set (or `opts.count` alerts are done);
    the number of alerts delivered."""
    from aiokafka import TopicPartition
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    if opts.format not in ("json", "slack"):
        raise SettingsError(f"--format {opts.format!r}: json or slack")
    group = opts.group or f"{settings.topic_prefix}alerts-follower"
    consumer = clients.consumer(
        settings,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if opts.from_beginning else "latest",
    )
    await clients.start(consumer, settings)
    tp = TopicPartition(settings.alerts_topic, 0)
    done = 0
    try:
        consumer.assign([tp])
        committed = await consumer.committed(tp)
        if committed is not None:
            consumer.seek(tp, committed)
        elif opts.from_beginning:
            await consumer.seek_to_beginning(tp)
        else:
            await consumer.seek_to_end(tp)
        while not stopping.is_set() and (opts.count is None or done < opts.count):
            got = await consumer.getmany(tp, timeout_ms=500, max_records=1)
            for m in got.get(tp, []):
                try:
                    alert = json.loads(m.value) if m.value is not None else None
                    if not isinstance(alert, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    log.warning("skipping an unreadable alert at offset %d: %s", m.offset, exc)
                    await consumer.commit({tp: OffsetAndMetadata(m.offset + 1, "")})
                    continue
                if opts.webhook is None:
                    out.write(json.dumps(alert) + "\n")
                    out.flush()
                elif not await _deliver_one(opts, alert, m.offset, stopping):
                    return done  # stopped: not committed, posted again by the next follower
                await consumer.commit({tp: OffsetAndMetadata(m.offset + 1, "")})
                done += 1
    except KafkaError as exc:
        raise clients.translate(exc, settings) from None
    finally:
        await consumer.stop()
    return done


async def _deliver_one(opts: AlertsOptions, alert: dict[str, Any], offset: int, stopping: asyncio.Event) -> bool:
    url, data, timeout = opts.webhook, body(alert, opts.format), opts.timeout_s
    assert url is not None

    def say(msg: str) -> None:
        print(f"alert at offset {offset}: {msg}", file=sys.stderr)

    return await deliver(lambda: post(url, data, timeout), opts.max_backoff_s, say, stopping)


def run(settings: Settings, opts: AlertsOptions) -> int:
    """`loopwarden alerts`: follow until SIGINT/SIGTERM; the alerts delivered."""
    import signal

    async def main() -> int:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        return await follow(settings, opts, stopping)

    return asyncio.run(main())
