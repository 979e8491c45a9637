"""One real KRaft broker per test session: the one .ci/run started (LOOPWARDEN_TEST_BOOTSTRAP),
or a fresh local one. No broker means failure, never a skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams.tools import localkafka


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory) -> str:
    given = os.environ.get("LOOPWARDEN_TEST_BOOTSTRAP")
    if given:
        assert localkafka.answers(given, timeout=5), f"LOOPWARDEN_TEST_BOOTSTRAP={given} does not answer"
        yield given
        return
    broker = localkafka.start(Path(tmp_path_factory.mktemp("kafka")))
    try:
        yield broker.bootstrap
    finally:
        localkafka.stop(broker)


@pytest.fixture
def workers(tmp_path):
    """Worker processes started by a test; all are stopped when it ends."""
    started = []
    yield started
    for w in started:
        w.kill()
