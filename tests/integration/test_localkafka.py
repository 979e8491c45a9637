"""`kafka start` on a folder that holds a broker restarts it with its data on the same
address; `--fresh` starts over. Real brokers, each stopped by the test."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from streams.kafka import clients
from streams.kafka.errors import BrokerError
from streams.tools import localkafka
from streams.tools.launch import command
from tests.integration.harness import ROOT, produce, read_all, topic_settings

pytestmark = pytest.mark.integration
HEAP = "256m"


async def topics(bootstrap: str) -> set[str]:
    s = topic_settings(bootstrap)
    async with clients.opened(clients.admin(s), s) as admin:
        return set(await admin.list_topics())


def kafka_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(command("kafka", *args), capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_start_again_keeps_the_data_and_the_address_and_fresh_starts_over(tmp_path):
    d = tmp_path / "kafka"
    records = [(b"k%d" % i, b"v%d" % i) for i in range(5)]
    first = localkafka.start(d, heap=HEAP)
    try:
        produce(first.bootstrap, "kept", records)
    finally:
        localkafka.stop(first)
    assert localkafka.running(d) is None

    again = localkafka.start(d, heap=HEAP)  # the default: the broker already there
    try:
        assert again.bootstrap == first.bootstrap and again.pid != first.pid
        got = read_all(again.bootstrap, "kept")  # produced and acknowledged before the restart
        assert sorted((m.key, m.value) for m in got) == records
        assert localkafka.start(d, heap=HEAP) == again  # running already: left as it is
        with pytest.raises(BrokerError, match="is running"):
            localkafka.start(d, fresh=True)
    finally:
        localkafka.stop(again)

    # The command line, as a user runs it: --fresh formats a new broker, stop ends it.
    p = kafka_cli("start", "--dir", str(d), "--fresh", "--heap", HEAP)
    fresh = localkafka.running(d)
    try:
        assert p.returncode == 0, p.stderr
        assert fresh is not None and p.stdout.strip() == fresh.bootstrap
        assert "kept" not in asyncio.run(topics(fresh.bootstrap))
        s = kafka_cli("stop", "--dir", str(d))
        assert s.returncode == 0 and s.stdout.strip() == "stopped", s.stderr
        assert localkafka.running(d) is None
    finally:
        if fresh is not None:
            localkafka.stop(fresh)
    s = kafka_cli("stop", "--dir", str(d))
    assert s.returncode == 0 and "no broker running" in s.stderr
