"""`loopwarden topics create` makes every topic with their cleanup policies, once."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.tools.launch import command
from tests.integration.harness import ROOT, new_prefix

pytestmark = pytest.mark.integration


async def describe(bootstrap: str, names: list[str]) -> dict[str, tuple[int, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        meta = await admin.describe_topics(names)
        parts = {t["topic"]: len(t["partitions"]) for t in meta}
        resp = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
        policy = {}
        for r in resp:
            for res in r.resources:
                name, entries = res[3], res[4]
                conf = {e[0]: e[1] for e in entries}
                policy[name] = conf["cleanup.policy"]
                if conf["cleanup.policy"] == "compact":  # segments that close, so compaction happens
                    assert int(conf["segment.ms"]) <= 600_000, conf["segment.ms"]
        return {n: (parts[n], policy[n]) for n in names}
    finally:
        await admin.close()


def test_topics_create_is_idempotent_and_sets_cleanup_policies(bootstrap):
    prefix = new_prefix()
    cmd = command("topics", "create", "--bootstrap", bootstrap, "--topic-prefix", prefix, "--partitions", "3", "--json")
    first = json.loads(subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True, timeout=60).stdout)
    again = json.loads(subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True, timeout=60).stdout)
    assert sorted(first["created"]) == sorted(first["topics"]) and again["created"] == []
    got = asyncio.run(describe(bootstrap, first["topics"]))
    assert got == {
        f"{prefix}events": (3, "delete"),
        f"{prefix}decisions": (3, "delete"),
        f"{prefix}deadletter": (3, "delete"),
        f"{prefix}worker-runs-changelog": (3, "compact"),
        f"{prefix}config": (1, "compact"),
        f"{prefix}fleet": (1, "compact"),
        f"{prefix}alerts": (1, "delete"),
        f"{prefix}failures": (3, "delete"),
        f"{prefix}spend": (3, "delete"),
    }
