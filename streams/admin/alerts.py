"""`loopwarden alerts`: follow the alerts topic and post each alert to a webhook.

Workers write alerts (breakers opened and closed, runs aborted, budget warnings) and
`loopwarden stop` writes one per stop order; the alerts topic has one partition, so they
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
        icon = _ICON.get(str(alert.get("kind")), ":bell:")
        return json.dumps(
            {"text": f"{icon} *{alert.get('kind')}* {alert.get('subject')}: {alert.get('summary')}"}
        ).encode()
    return json.dumps(alert).encode()


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
