"""Every shared scenario published to Kafka gives, on the decisions topic, exactly what
`loopwarden replay` gives offline: the same decisions, field for field, in the same order
for each run on each gateway's partition."""

from __future__ import annotations

import json
import time

import pytest

from detectors import DetectionConfig, decode_event, encode, replay
from detectors.fleet import decode_fleet_record
from detectors.ingest import Folded, fold, offline_fleet
from tests.conftest import V2_ALL, scenario_files
from tests.integration.harness import (
    WorkerProcess,
    consume,
    decisions_by_partition,
    event_records,
    new_prefix,
    produce,
    setup_topics,
)


def offline(sc: dict) -> list[dict]:
    cfg = DetectionConfig(sc["config"])
    fleet = [decode_fleet_record(json.dumps(r)) for r in sc.get("fleet", [])]
    events = [decode_event(json.dumps(e)) for e in sc["events"]]
    return [json.loads(encode(d)) for d in replay(events, cfg, fleet)]


def breaker_cuts(sc: dict) -> list[int]:
    """The indexes of the events whose failure opens a breaker, offline (the harness
    sends what follows each only once the worker has received that breaker)."""
    cfg = DetectionConfig(sc["config"])
    fleet, rule = offline_fleet(cfg)
    cuts: list[int] = []
    opened: list[str] = []
    source = ((i, None, decode_event(json.dumps(e))) for i, e in enumerate(sc["events"]))
    for f in fold(source, cfg, keyed=False, fleet=fleet, breakers=rule, opened=lambda b: opened.append(b.id)):
        if isinstance(f, Folded) and len(opened) > len(cuts):
            cuts.append(f.position)
    return cuts


def fleet_signals(w: WorkerProcess) -> int:
    for line in w.metrics().splitlines():
        if line.startswith("loopwarden_fleet_signals "):
            return int(float(line.split()[1]))
    return 0


def wait_for_signals(w: WorkerProcess, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while fleet_signals(w) < n:
        assert time.monotonic() < deadline, f"the worker holds {fleet_signals(w)} fleet signals, not {n}\n{w.tail()}"
        time.sleep(0.05)


def per_run(decisions: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in decisions:
        out.setdefault(d["run_id"], []).append(d)
    return out


@pytest.mark.integration
@pytest.mark.parametrize("path", scenario_files(V2_ALL), ids=lambda p: p.stem)
def test_scenario_through_kafka(path, bootstrap, tmp_path, workers):
    assert path.exists(), "no conformance scenarios found"
    sc = json.loads(path.read_text())
    expected = offline(sc)
    # the offline replay itself agrees with the scenario, decision for decision
    assert len(expected) == len(sc["decisions"]), (len(expected), len(sc["decisions"]))
    for i, (e, d) in enumerate(zip(sc["decisions"], expected, strict=True)):
        assert {k: d.get(k, "(absent)") for k in e} == e, f"decision {i}"
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix)
    orders = sc.get("fleet", [])
    if orders:  # stop orders are published first, as an operator would before the calls
        produce(bootstrap, s.fleet_topic, [(r["id"].encode(), json.dumps(r).encode()) for r in orders])
    w = WorkerProcess(bootstrap, prefix, sc["config"], tmp_path)
    workers.append(w)
    w.start()
    wait_for_signals(w, len({r["id"] for r in orders}))
    records = event_records(sc["events"])
    start = 0
    for n, cut in enumerate(breaker_cuts(sc), 1):
        # The calls after a breaker's failures go out once the worker holds the breaker
        # (the fleet is eventually consistent: before that, a call is judged without it).
        produce(bootstrap, s.events_topic, records[start : cut + 1])
        wait_for_signals(w, len(orders) + n)
        start = cut + 1
    produce(bootstrap, s.events_topic, records[start:])
    msgs = consume(bootstrap, s.decisions_topic, len(expected), timeout=60)
    got = [d for part in decisions_by_partition(msgs).values() for d in part]
    assert len(got) == len(expected), w.tail()
    # Each gateway reads one partition; within it, each run's decisions keep their order.
    for part, decisions in decisions_by_partition(msgs).items():
        for run, ds in per_run(decisions).items():
            assert ds == [d for d in expected if d["run_id"] == run], f"run {run} on partition {part}"
    # Decisions are keyed by gateway: one gateway's decisions all sit on one partition.
    where = {}
    for part, decisions in decisions_by_partition(msgs).items():
        for d in decisions:
            assert where.setdefault(d["gateway_id"], part) == part
    assert w.alive()
