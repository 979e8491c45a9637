"""What the worker app consumes, by its config (no broker: the app is only built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors import DetectionConfig
from streams.gateway import settings as settings_mod
from streams.worker.app import create_app

BREAKER = {"loopwarden": {"fleet": {"toolBreaker": {"enabled": True}}}}


def _consumed(config: DetectionConfig | None, tmp_path: Path) -> tuple[set[str], set[str]]:
    s = settings_mod.build({"bootstrap": "127.0.0.1:1", "topic_prefix": "t.", "data_dir": str(tmp_path)}, env={})
    app = create_app(s, config=config)
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
