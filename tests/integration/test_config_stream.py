"""Config as a stream on a real broker: `loopwarden config publish` / `show`, a worker
started without --config that decides under the published config and follows the topic
without a restart, and a --config worker that does not follow."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from detectors import load_config
from detectors.ingest import Folded, fold
from streams.admin.config_topic import CURRENT, SOURCE_HEADER, config_id, read_configs
from streams.tools.launch import command
from tests.integration.harness import (
    ROOT,
    WorkerProcess,
    audit,
    decisions_by_partition,
    event_records,
    new_prefix,
    produce,
    read_all,
    setup_topics,
    topic_settings,
    wait_until,
)

pytestmark = pytest.mark.integration


def cli(args: list[str], bootstrap: str, prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command("config", *args, "--bootstrap", bootstrap, "--topic-prefix", prefix),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def config_text(warning: int, critical: int) -> bytes:
    return json.dumps(
        {"tools": {"loopDetection": {"enabled": True, "warningThreshold": warning, "criticalThreshold": critical}}}
    ).encode()


def call(run: str, seq: int, tool: str = "read") -> dict:
    return {
        "type": "tool_call",
        "run_id": run,
        "seq": seq,
        "gateway_id": "gw-1",
        "tool_name": tool,
        "params": {"path": "a.txt"},
        "ts": 1_700_000_000_000 + seq,
    }


def decided(w: WorkerProcess, want: int) -> list[dict]:
    """The worker's decisions, once it has published those of the `want` calls produced
    so far (read to the end offsets then: a decision too many would be there too)."""
    w.wait_published(want)
    msgs = read_all(w.topics.bootstrap, w.topics.decisions_topic)
    got = [d for part in decisions_by_partition(msgs).values() for d in part]
    assert len(got) == want, f"{len(got)} decisions, expected {want}"
    return sorted(got, key=lambda d: (d["run_id"], d["seq"]))


def wait_for_config(w: WorkerProcess, cid: str | None, timeout: float = 20.0) -> dict:
    def named() -> dict | None:
        h = w.health() or {}
        return h if h.get("config") == cid and h.get("status") == "ok" else None

    return wait_until(named, timeout, lambda: f"/health to name config {cid}: {w.health()}\n{w.tail()}", every=0.2)


def test_publish_and_show_round_trip(bootstrap, tmp_path):
    prefix = new_prefix()
    none = cli(["show"], bootstrap, prefix)
    assert none.returncode == 1 and none.stderr.startswith("Error: no config has been published"), none.stderr

    # A JSON5 file with an unusable field: published, with the warning printed as replay prints it.
    j5 = tmp_path / "fleet.json5"
    j5_text = (
        b"// the fleet's config\n{tools: {loopDetection: {enabled: true, warningThreshold: 0, historySize: 12,},},}\n"
    )
    j5.write_bytes(j5_text)
    pub = cli(["publish", str(j5)], bootstrap, prefix)
    assert pub.returncode == 0, pub.stderr
    cid = pub.stdout.strip()
    assert cid == config_id(j5_text)
    assert pub.stderr == (
        f"warning: {j5}: tools.loopDetection.warningThreshold: 0 is not a positive integer; using the default 10\n"
    )

    shown = cli(["show"], bootstrap, prefix)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"config: {cid}\nsource: {j5}\n\n{j5_text.decode()}"
    as_json = json.loads(cli(["show", "--json"], bootstrap, prefix).stdout)
    assert as_json == {"config": cid, "source": str(j5), "text": j5_text.decode()}

    # Another config becomes current; the first one, republished as JSON, is the same id again.
    other = tmp_path / "other.json"
    other.write_bytes(config_text(4, 8))
    oid = cli(["publish", str(other)], bootstrap, prefix).stdout.strip()
    assert oid != cid and json.loads(cli(["show", "--json"], bootstrap, prefix).stdout)["config"] == oid
    as_plain_json = tmp_path / "fleet.json"
    as_plain_json.write_text(
        json.dumps({"tools": {"loopDetection": {"historySize": 12, "warningThreshold": 0, "enabled": True}}})
    )
    again = cli(["publish", str(as_plain_json)], bootstrap, prefix)
    assert again.returncode == 0 and again.stdout.strip() == cid and "warningThreshold: 0" in again.stderr
    now = json.loads(cli(["show", "--json"], bootstrap, prefix).stdout)
    assert now["config"] == cid and now["source"] == str(as_plain_json)

    # The records as they are on the topic: each config under its id with its text and
    # source, each followed by the `current` record naming it.
    s = topic_settings(bootstrap, prefix)
    msgs = sorted(read_all(bootstrap, s.config_topic), key=lambda m: m.offset)  # each command returned once published
    assert [m.key for m in msgs] == [cid.encode(), CURRENT, oid.encode(), CURRENT, cid.encode(), CURRENT]
    assert msgs[0].value == j5_text and dict(msgs[0].headers)[SOURCE_HEADER] == str(j5).encode()
    assert [json.loads(m.value) for m in msgs[1::2]] == [{"config": cid}, {"config": oid}, {"config": cid}]
    assert {m.partition for m in msgs} == {0}
    history = asyncio.run(read_configs(s))
    assert history.current == cid and set(history.configs) == {cid, oid}
    assert history.configs[oid][1].for_agent(None).warning == 4

    # Not JSON5: an error, nothing published.
    bad = tmp_path / "bad.json5"
    bad.write_text("{tools: ")
    refused = cli(["publish", str(bad)], bootstrap, prefix)
    assert refused.returncode == 1 and refused.stderr.startswith(f"Error: {bad}: not valid JSON") and not refused.stdout
    assert json.loads(cli(["show", "--json"], bootstrap, prefix).stdout)["config"] == cid
    missing = cli(["publish", str(tmp_path / "nope.json")], bootstrap, prefix)
    assert missing.returncode == 1 and "cannot read config" in missing.stderr


def test_a_worker_without_config_decides_under_the_topic_and_follows_it(bootstrap, tmp_path, start_worker):
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, partitions=2)
    first, second = config_text(5, 9), config_text(3, 7)
    path = tmp_path / "first.json"
    path.write_bytes(first)
    aid = cli(["publish", str(path)], bootstrap, prefix).stdout.strip()
    assert aid == config_id(first)

    w = start_worker(prefix, None, partitions=2, name="f")  # no --config: it follows the topic
    h = wait_for_config(w, aid)
    assert h["config_follows"] is True

    # Under the first config (warn at 5): four calls of one run, none warned.
    before = [call("r1", i) for i in range(4)]
    produce(bootstrap, s.events_topic, event_records(before))
    got = decided(w, 4)
    cfg_a, cfg_b = load_config(first), load_config(second)
    assert [d["action"] for d in got] == ["allow"] * 4
    assert {d["config_hash"] for d in got} == {cfg_a.for_agent(None).config_hash}

    # A new config, published while the worker runs: it switches without a restart.
    path2 = tmp_path / "second.json"
    path2.write_bytes(second)
    bid = cli(["publish", str(path2)], bootstrap, prefix).stdout.strip()
    wait_for_config(w, bid)
    assert w.starts == 1 and w.alive()
    assert f'loopwarden_config{{config="{bid}"}} 1.0' in w.metrics()
    assert f"config switched: {aid} -> {bid}" in w.tail(20000)

    # Later events: the run under way keeps its state, a new run starts fresh, both judged
    # with the new thresholds (warn at 3).
    after = [call("r1", 4), call("r1", 5), *(call("r2", i) for i in range(4))]
    produce(bootstrap, s.events_topic, event_records(after))
    got = decided(w, 10)
    late = [d for d in got if (d["run_id"], d["seq"]) in {(e["run_id"], e["seq"]) for e in after}]
    assert {d["config_hash"] for d in late} == {cfg_b.for_agent(None).config_hash}
    r2 = [d for d in late if d["run_id"] == "r2"]
    assert [d["action"] for d in r2] == ["allow", "allow", "allow", "warn"] and r2[-1]["count"] == 3

    # The run under way kept its history: its fifth call counts the four made before the
    # switch (under the first config, a count of 4 is below the warning threshold of 5),
    # and its sixth is the same warning again, suppressed by the run's warning memory.
    r1 = [d for d in got if d["run_id"] == "r1"]
    assert [(d["action"], d["level"], d["count"]) for d in r1[4:]] == [("warn", "warning", 4), ("allow", "warning", 5)]

    # Exactly what the offline fold gives with the config switched between the two batches.
    switched = {(e["run_id"], e["seq"]) for e in after}
    source = [(None, e["run_id"].encode(), json.dumps(e).encode()) for e in before + after]
    folded = fold(source, cfg_a, config_for=lambda ev: cfg_b if (ev.run_id, ev.seq) in switched else cfg_a)
    expected = [json.loads(raw) for f in folded if type(f) is Folded for raw in f.encoded]
    assert got == sorted(expected, key=lambda d: (d["run_id"], d["seq"]))

    # An audit without --config reproduces the decisions made under both configs: each
    # event is replayed under the config its recorded decision names (found on the topic).
    code, audited = audit(bootstrap, prefix, "--partitions", "2")
    assert code == 0, audited
    assert audited["matched"] == audited["decisions_recorded"] == 10 and audited["unknown_configs"] == {}
    assert (audited["mismatched"], audited["missing"], audited["unexpected"], audited["conflicting"]) == (0, 0, 0, 0)


def test_a_worker_with_config_does_not_follow(bootstrap, tmp_path, start_worker):
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix, partitions=2)
    low = tmp_path / "low.json"
    low.write_bytes(config_text(2, 4))
    assert cli(["publish", str(low)], bootstrap, prefix).returncode == 0
    pinned_doc = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 6, "criticalThreshold": 9}}}
    w = start_worker(prefix, pinned_doc, partitions=2, name="pinned")
    pinned_text = (tmp_path / "config-pinned.json").read_bytes()
    h = w.health()
    assert h["config"] == config_id(pinned_text) and h["config_follows"] is False

    lower = tmp_path / "lower.json"
    lower.write_bytes(config_text(1, 3))
    assert cli(["publish", str(lower)], bootstrap, prefix).returncode == 0
    # A wall-clock wait on purpose: what is checked is that nothing happens (a following
    # worker switches within about a second), and a non-event cannot be polled for.
    time.sleep(3)
    assert w.health()["config"] == config_id(pinned_text)
    produce(bootstrap, s.events_topic, event_records([call("r1", i) for i in range(5)]))
    got = decided(w, 5)
    assert [d["action"] for d in got] == ["allow"] * 5  # warned from 2 or 1 under the published ones
    assert {d["config_hash"] for d in got} == {load_config(pinned_text).for_agent(None).config_hash}
    assert "config switched" not in w.tail(20000)


def test_a_following_worker_with_nothing_published_uses_the_defaults_until_a_config_is(
    bootstrap, tmp_path, start_worker
):
    from detectors import DetectionConfig

    prefix = new_prefix()  # no topics yet: the worker reads a config topic that does not exist, then makes it
    w = start_worker(prefix, None, partitions=2, name="bare")
    h = wait_for_config(w, None)
    assert h["config_follows"] is True and 'loopwarden_config{config="defaults"} 1.0' in w.metrics()
    s = topic_settings(bootstrap, prefix, partitions=2)
    produce(bootstrap, s.events_topic, event_records([call("r1", 0)]))
    (d,) = decided(w, 1)
    assert d["config_hash"] == DetectionConfig({}).for_agent(None).config_hash

    path = tmp_path / "now.json"
    path.write_bytes(config_text(2, 4))
    cid = cli(["publish", str(path)], bootstrap, prefix).stdout.strip()
    wait_for_config(w, cid)
    assert f"config switched: defaults -> {cid}" in w.tail(20000)
    produce(bootstrap, s.events_topic, event_records([call("r1", i) for i in (1, 2)]))
    got = decided(w, 3)
    assert [(d["action"], d["count"]) for d in got[1:]] == [("allow", None), ("warn", 2)]
    assert {d["config_hash"] for d in got[1:]} == {load_config(config_text(2, 4)).for_agent(None).config_hash}
