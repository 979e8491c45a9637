"""The spend stage's handling of records it cannot count (streams/worker/spend.py): each is
logged and counted as skipped, never fatal, and the records around it are still taken."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

from detectors import DetectionConfig
from detectors.spend import SpendRecord, encode_spend_record
from streams.kafka import settings as settings_mod
from streams.worker.metrics import Metrics
from streams.worker.settings import WorkerSettings
from streams.worker.spend import SpendStage
from tests.unit.test_config_spend_caps import HOUR, caps_config

CONFIG = DetectionConfig(
    caps_config(
        {"id": "hourly", "per": "agent", "windowMs": HOUR, "toolCalls": 100},
        {"id": "daily", "per": "agent", "windowMs": 24 * HOUR, "toolCalls": 1000},
    )
)


def _event(offset: int, value: bytes) -> SimpleNamespace:
    return SimpleNamespace(value=value, message=SimpleNamespace(headers=[], offset=offset))


def _record(cap: str, ts: int, window_start: int) -> bytes:
    return encode_spend_record(SpendRecord(cap=cap, key="a", window_start=window_start, ts=ts, event_id=f"r:{ts}"))


def test_records_that_cannot_be_counted_are_logged_and_skipped_not_fatal(tmp_path, caplog) -> None:
    s = settings_mod.build(
        {"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={}, kind=WorkerSettings
    )
    metrics = Metrics()
    sent: list[Any] = []

    async def send(topic: str, key: bytes, value: bytes, wait: bool = False) -> None:
        sent.append((topic, key, value))

    # no table for either cap's window length: the stage was made before the caps
    stage = SpendStage(s, lambda: CONFIG, {}, None, metrics, send)
    ts = 1_780_000_000_000
    start, day = ts - ts % HOUR, ts - ts % (24 * HOUR)
    batch = [
        _event(0, b"not json"),
        _event(1, b'{"cap": "hourly"}'),  # fields missing
        _event(2, _record("gone", ts, start)),  # a cap this config does not have
        _event(3, _record("hourly", ts, start + 1)),  # a window that is not its ts's
        _event(4, _record("daily", ts, day)),  # good, but its window length has no table
        _event(5, _record("hourly", ts, start)),  # said once per cap, counted each time
    ]
    with caplog.at_level(logging.WARNING, logger="loopwarden.spend"):
        asyncio.run(stage.take_batch(batch))
    count = metrics.registry.get_sample_value
    assert count("loopwarden_spend_skipped_total") == 6
    assert count("loopwarden_spend_records_total") == 0 and not sent
    logged = caplog.text
    assert "unreadable spend record at offset 0" in logged and "offset 1" in logged
    assert "no cap 'gone' in the config" in logged
    assert "is not the start of ts" in logged
    assert "restart the workers to count it" in logged
