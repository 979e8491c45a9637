"""Every shared scenario published to Kafka gives, on the decisions topic, exactly what
`loopwarden replay` gives offline: the same decisions, field for field, in the same order
for each run on each gateway's partition."""

from __future__ import annotations

import json

import pytest

from detectors import DetectionConfig, decode_event, encode, replay
from tests.conftest import V2_PER_RUN, scenario_files
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
    return [json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in sc["events"]], cfg)]


def per_run(decisions: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in decisions:
        out.setdefault(d["run_id"], []).append(d)
    return out


@pytest.mark.integration
@pytest.mark.parametrize("path", scenario_files(V2_PER_RUN), ids=lambda p: p.stem)
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
    w = WorkerProcess(bootstrap, prefix, sc["config"], tmp_path)
    workers.append(w)
    w.start()
    produce(bootstrap, s.events_topic, event_records(sc["events"]))
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
