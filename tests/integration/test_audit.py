"""`loopwarden audit` on a real broker: a recorded fleet audits clean; a conflicting,
an unexpected and missing decisions are named; a what-if config reports exactly what
an offline replay under it changes."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from detectors import DetectionConfig, decode_event, encode, replay
from streams.tools.trace import CONFIG, generate
from tests.integration.harness import (
    Send,
    audit,
    consume,
    event_records,
    fresh_worker,
    new_prefix,
    produce,
    setup_topics,
)

pytestmark = pytest.mark.integration

LOWER = {
    "tools": {
        "loopDetection": {
            **CONFIG["tools"]["loopDetection"],
            "warningThreshold": 3,
            "criticalThreshold": 5,
            "globalCircuitBreakerThreshold": 8,
        }
    }
}


def events(n: int = 1500, seed: int = 31) -> list[dict]:
    return [json.loads(x) for x in generate(n, seed=seed, concurrent=8)]


def offline(evs: list[dict], config: dict) -> list[dict]:
    return [json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in evs], DetectionConfig(config))]


@pytest.fixture(scope="module")
def recorded(bootstrap, tmp_path_factory):
    """A fleet's events decided by a worker, every decision on the topic."""
    tmp = tmp_path_factory.mktemp("audit")
    started: list = []
    s, w = fresh_worker(bootstrap, tmp, started, CONFIG)
    evs = events()
    want = offline(evs, CONFIG)
    try:
        produce(bootstrap, s.events_topic, event_records(evs))
        got = consume(bootstrap, s.decisions_topic, len(want), timeout=90)
        assert len(got) == len(want)
    finally:
        for x in started:
            x.stop()
    cfg = tmp / "config-w.json"  # the file the worker was pinned with
    yield s, evs, want, cfg


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_a_recorded_fleet_audits_with_zero_mismatches(bootstrap, recorded, tmp_path, jobs):
    s, evs, want, cfg = recorded
    html = tmp_path / "report.html"
    diff = tmp_path / "diff.jsonl"
    code, out = audit(
        bootstrap, s.topic_prefix, "--worker-config", str(cfg), "--diff", str(diff), "--html", str(html), "--jobs", jobs
    )
    assert code == 0, out
    assert out["events"] == len(evs)
    assert out["decisions_recorded"] == out["decisions_replayed"] == out["matched"] == len(want)
    assert (out["mismatched"], out["missing"], out["unexpected"], out["conflicting"]) == (0, 0, 0, 0)
    assert out["partial_runs"] == 0 and out["runs"] == len({e["run_id"] for e in evs})
    assert out["by_action"] == {a: Counter(d["action"] for d in want)[a] for a in ("allow", "warn", "block", "abort")}
    assert diff.read_text() == ""
    assert out["what_if"] is None
    assert "<html" in html.read_text().lower()


def test_a_run_and_a_gateway_can_be_audited_alone(bootstrap, recorded):
    s, evs, want, cfg = recorded
    run = next(d["run_id"] for d in want if d["action"] == "block")
    code, out = audit(bootstrap, s.topic_prefix, "--worker-config", str(cfg), "--run", run)
    assert code == 0 and out["runs"] == 1
    assert out["matched"] == sum(1 for d in want if d["run_id"] == run)
    gw = want[0]["gateway_id"]
    code, out = audit(bootstrap, s.topic_prefix, "--worker-config", str(cfg), "--gateway", gw)
    assert code == 0 and out["matched"] == sum(1 for d in want if d["gateway_id"] == gw)


def test_a_what_if_config_reports_what_an_offline_replay_under_it_changes(bootstrap, recorded, tmp_path):
    s, evs, want, cfg = recorded
    lower = tmp_path / "lower.json"
    lower.write_text(json.dumps(LOWER))
    code, out = audit(bootstrap, s.topic_prefix, "--worker-config", str(cfg), "--config", str(lower))
    assert code == 0  # the recorded decisions still match; the what-if is a report
    then = {d["event_id"]: d["action"] for d in want}
    now = {d["event_id"]: d["action"] for d in offline(evs, LOWER)}
    expect = Counter()
    for eid in then.keys() | now.keys():
        a, b = then.get(eid), now.get(eid)
        if a == b:
            continue
        expect["newly_warned"] += b == "warn"
        expect["newly_blocked"] += b == "block"
        expect["no_longer_warned"] += a == "warn"
        expect["no_longer_blocked"] += a == "block"
        expect["aborts_gained"] += b == "abort"
        expect["aborts_lost"] += a == "abort"
    w = out["what_if"]
    assert expect["newly_warned"] + expect["newly_blocked"] > 0  # lower thresholds do change something
    assert {k: w[k] for k in expect} == dict(expect)
    assert w["config_hash"] == DetectionConfig(LOWER).for_agent(None).config_hash


@pytest.fixture(scope="module")
def faulty(bootstrap, recorded):
    """The recorded fleet copied into fresh topics, with a second verdict for one event
    and a decision for an event that never was."""
    s, evs, want, cfg = recorded
    prefix = new_prefix()
    t = setup_topics(bootstrap, prefix)
    produce(bootstrap, t.events_topic, event_records(evs))
    produce(bootstrap, t.decisions_topic, [(d["gateway_id"].encode(), json.dumps(d).encode()) for d in want])
    victim = next(d for d in want if d["action"] == "allow")
    other = dict(victim, action="block", level="critical", detector="generic_repeat", count=99)
    ghost = dict(victim, run_id="ghost-run", seq=5, event_id="ghost-run:5")
    produce(
        bootstrap,
        t.decisions_topic,
        [
            (other["gateway_id"].encode(), json.dumps(other).encode()),
            (ghost["gateway_id"].encode(), json.dumps(ghost).encode()),
        ],
    )
    return prefix, victim


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_conflicting_and_unexpected_decisions_are_named(bootstrap, recorded, faulty, tmp_path, jobs):
    s, evs, want, cfg = recorded
    prefix, victim = faulty
    diff = tmp_path / "diff.jsonl"
    code, out = audit(bootstrap, prefix, "--worker-config", str(cfg), "--diff", str(diff), "--jobs", jobs)
    assert code == 2
    assert (out["conflicting"], out["unexpected"], out["mismatched"], out["missing"]) == (1, 1, 0, 0)
    assert out["matched"] == len(want) - 1
    lines = [json.loads(x) for x in diff.read_text().splitlines()]
    assert sorted((x["kind"], x["event_id"]) for x in lines) == sorted(
        [("conflicting", victim["event_id"]), ("unexpected", "ghost-run:5")]
    )


def test_shards_give_the_summary_and_report_of_one_process(bootstrap, recorded, faulty, tmp_path):
    s, evs, want, cfg = recorded
    prefix, _ = faulty
    lower = tmp_path / "lower.json"
    lower.write_text(json.dumps(LOWER))
    runs = {}
    for jobs in ("1", "2", "8"):
        html = tmp_path / f"report-{jobs}.html"
        diff = tmp_path / f"diff-{jobs}.jsonl"
        code, out = audit(
            bootstrap,
            prefix,
            "--worker-config",
            str(cfg),
            "--config",
            str(lower),
            "--diff",
            str(diff),
            "--html",
            str(html),
            "--jobs",
            jobs,
        )
        assert code == 2
        for timing in ("seconds", "events_per_s"):
            out.pop(timing)
        # Each flagged run's timeline, as the page shows it (shards list runs in another order).
        timelines = re.findall(r'<details class="run".*?</details>', html.read_text(), re.S)
        timelines = sorted(t.replace(" open><summary>", "><summary>") for t in timelines)
        runs[jobs] = (out, sorted(diff.read_text().splitlines()), timelines)
    assert runs["1"][0]["what_if"]["newly_warned"] > 0 and len(runs["1"][1]) > 2 and len(runs["1"][2]) > 2
    assert runs["1"] == runs["2"] == runs["8"]


def test_a_run_keyed_off_its_partition_makes_a_sharded_audit_start_again_in_one_process(bootstrap, tmp_path):
    import subprocess

    from streams.kafka.partitioner import partition_for
    from streams.tools.launch import command

    evs = events(300, seed=5)
    prefix = new_prefix()
    t = setup_topics(bootstrap, prefix)
    moved = evs[0]["run_id"]
    elsewhere = (partition_for(moved.encode(), t.partitions) + 1) % t.partitions
    topic = t.events_topic
    records = [Send(e["run_id"].encode(), json.dumps(e).encode()) for e in evs]
    produce(bootstrap, topic, [r._replace(partition=elsewhere) if r.key == moved.encode() else r for r in records])
    want = offline(evs, {})
    produce(bootstrap, t.decisions_topic, [(d["gateway_id"].encode(), json.dumps(d).encode()) for d in want])
    p = subprocess.run(
        command("audit", "--bootstrap", bootstrap, "--topic-prefix", prefix, "--json", "--jobs", "2"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "auditing again in one process" in p.stderr
    out = json.loads(p.stdout)
    assert out["matched"] == len(want) and out["missing"] == out["unexpected"] == 0


def test_events_whose_decisions_never_reached_the_topic_are_missing(bootstrap):
    evs = events(300, seed=7)
    want = offline(evs, {})
    prefix = new_prefix()
    t = setup_topics(bootstrap, prefix)
    produce(bootstrap, t.events_topic, event_records(evs))  # no worker runs
    code, out = audit(bootstrap, prefix)
    assert code == 2
    assert out["missing"] == out["decisions_replayed"] == len(want) and out["decisions_recorded"] == 0


def test_a_run_under_way_at_from_is_replayed_from_its_start_or_reported_partial(bootstrap, tmp_path):
    import time

    hour = 3_600_000
    now = int(time.time() * 1000)
    # One looping run from 3 h ago to now, its decisions recorded as a worker made them.
    evs = []
    for i in range(30):
        evs.append(
            {
                "type": "tool_call",
                "run_id": "long",
                "seq": 2 * i,
                "gateway_id": "gw-1",
                "tool_name": "read",
                "tool_call_id": f"c{i}",
                "params": {"path": "/x"},
                "ts": now - 3 * hour + i * 6 * 60_000 - 180_000,
            }
        )
        evs.append(
            {
                "type": "tool_result",
                "run_id": "long",
                "seq": 2 * i + 1,
                "gateway_id": "gw-1",
                "tool_name": "read",
                "tool_call_id": f"c{i}",
                "params": {"path": "/x"},
                "result": "same",
                "ts": now - 3 * hour + i * 6 * 60_000 - 179_000,
            }
        )
    on = {"tools": {"loopDetection": {"enabled": True}}}
    cfg = tmp_path / "on.json"
    cfg.write_text(json.dumps(on))
    want = offline(evs, on)
    assert any(d["action"] == "block" for d in want)
    prefix = new_prefix()
    t = setup_topics(bootstrap, prefix)
    records = [Send(b"long", json.dumps(e).encode(), e["ts"]) for e in evs]
    records += [Send(b"gw-1", json.dumps(d).encode(), d["ts"] + 5, topic=t.decisions_topic) for d in want]
    produce(bootstrap, t.events_topic, records)
    in_range = [d for d in want if d["ts"] >= now - hour]
    # A look-back that reaches the run's first event (at -3 h): replayed from its start.
    code, out = audit(bootstrap, prefix, "--from", "-1h", "--lookback", "24h", "--worker-config", str(cfg))
    assert code == 0 and out["partial_runs"] == 0 and out["runs"] == 1
    assert out["matched"] == len(in_range) and out["events"] == sum(1 for e in evs if e["ts"] >= now - hour)
    # One that does not (-1 h - 30 min): the run is partial, its decisions not compared.
    code, out = audit(bootstrap, prefix, "--from", "-1h", "--lookback", "30m", "--worker-config", str(cfg))
    assert code == 0 and out["partial_runs"] == 1 and out["matched"] == 0


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_audit_on_a_terminal_shows_its_bar_on_stderr_and_its_summary_on_stdout(bootstrap, recorded, jobs):
    from streams.tools.launch import command
    from tests.unit.test_progress import on_a_terminal

    s, evs, want, cfg = recorded
    cmd = command("audit", "--bootstrap", bootstrap, "--topic-prefix", s.topic_prefix, "--json", "--jobs", jobs)
    code, out, shown = on_a_terminal([*cmd, "--worker-config", str(cfg)], timeout=120)
    assert code == 0, shown
    assert json.loads(out)["matched"] == len(want)
    assert "auditing" in shown and "Traceback" not in shown


async def drain(s, start_ms: int | None, partitions: list[int] | None = None, readers: set | None = None) -> list:
    """Every record of the events topic from `start_ms` on, as the audit reads them (and
    into `readers`, the types of its connections' stream readers)."""
    from streams.audit.read import TopicRange

    r = TopicRange(s, s.events_topic)
    await r.open(start_ms, None, partitions)
    got: list = []
    try:
        while not r.finished:
            got += await r.chunk()
        if readers is not None:
            assert r.range is not None
            readers |= {type(c._reader) for c in r.range.consumer._client._conns.values()}
    finally:
        await r.close()
    return got


def test_the_audit_reads_from_a_record_inside_a_fetched_batch_leaving_out_those_before_it(bootstrap):
    """The broker hands over a whole record batch, from its first record: the reader
    leaves out those before the offset it reads from (read.py's own unpacking)."""
    import asyncio

    from streams.kafka import clients

    s = setup_topics(bootstrap, new_prefix(), partitions=1)
    t0 = 1_780_000_000_000

    async def write() -> None:
        async with clients.opened(clients.producer(s), s) as p:
            for first in (0, 10):  # two batches of ten records
                batch = p.create_batch()
                for i in range(first, first + 10):
                    assert batch.append(key=b"r", value=b"v%d" % i, timestamp=t0 + i) is not None
                await (await p.send_batch(batch, s.events_topic, partition=0))

    asyncio.run(write())
    every = asyncio.run(drain(s, None))
    assert [(m.offset, m.timestamp, m.value) for m in every] == [(i, t0 + i, b"v%d" % i) for i in range(20)]
    for start in (3, 10, 17):
        got = asyncio.run(drain(s, t0 + start))
        assert [m.offset for m in got] == list(range(start, 20)), start


def test_the_audit_reads_records_as_msgs_and_other_consumers_as_consumer_records(bootstrap, recorded):
    """The audit's reader makes a Msg of each record (streams.kafka.compat.light_records), and
    its connections read with a FrameReader (frames.py); a consumer of the same process
    that is not the audit's still gets ConsumerRecords, through asyncio's reader."""
    import asyncio

    from aiokafka.structs import ConsumerRecord

    from streams.kafka import ranges
    from streams.kafka.compat import Msg
    from streams.kafka.frames import FrameReader

    s, evs, want, _ = recorded

    readers: set = set()
    others: set = set()

    async def read() -> tuple[list, list]:
        got = await drain(s, None, readers=readers)
        rng = await ranges.open_range(s)
        other = rng.consumer
        try:
            await rng.add(s.decisions_topic)
            plain = {}
            for _ in range(10):
                plain = await other.getmany(timeout_ms=1000, max_records=10)
                if plain:
                    break
            others.update(type(c._reader) for c in other._client._conns.values())
        finally:
            await rng.close()
        return got, [m for ms in plain.values() for m in ms]

    got, plain = asyncio.run(read())
    assert len(got) == len(evs) and all(type(m) is Msg for m in got)
    for p in {m.partition for m in got}:  # each partition's records once, in offset order
        assert [m.offset for m in got if m.partition == p] == list(range(sum(m.partition == p for m in got)))
    assert sorted(json.loads(m.value)["run_id"] + f":{json.loads(m.value)['seq']}" for m in got) == sorted(
        f"{e['run_id']}:{e['seq']}" for e in evs
    )
    assert all(m.key == json.loads(m.value)["run_id"].encode() and m.timestamp > 0 for m in got)
    assert plain and all(type(m) is ConsumerRecord for m in plain)
    assert readers == {FrameReader} and others == {asyncio.StreamReader}
