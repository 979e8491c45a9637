"""Every shared scenario published to Kafka gives, on the decisions topic, exactly what
`loopwarden replay` gives offline: the same decisions, field for field, in the same order
for each run on each gateway's partition."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from detectors import DetectionConfig, decode_event
from detectors.ingest import Folded, fold, offline_fleet, offline_spend
from tests.conftest import V2_ALL, V3_ALL, scenario_files
from tests.events import offline, per_run
from tests.integration.harness import (
    WorkerProcess,
    consume,
    decisions_by_partition,
    event_records,
    new_prefix,
    produce,
    setup_topics,
    wait_until,
)


def beyond_expected(msgs, expected: list[dict]) -> list:
    """The messages with the repeats of a decision beyond what `expected` has of its
    event_id dropped. A worker may publish a decision again (an event folded twice after a
    re-read or a rebalance is answered identically; gateways keep the first), but never a
    different one, and never fewer than the scenario's own duplicates give."""
    want = Counter(d["event_id"] for d in expected)
    seen: Counter[str] = Counter()
    first: dict[str, dict] = {}
    out = []
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        d = json.loads(m.value)
        eid = d["event_id"]
        seen[eid] += 1
        if seen[eid] <= want[eid]:
            out.append(m)
        else:
            assert d == first[eid], f"two different decisions for {eid}"
        first.setdefault(eid, d)
    return out


def consume_expected(bootstrap: str, topic: str, expected: list[dict], timeout: float) -> list:
    """The decisions topic's messages once every expected decision is there (see
    `beyond_expected`), or time ran out."""
    deadline = time.monotonic() + timeout
    n = len(expected)
    while True:
        msgs = consume(bootstrap, topic, n, timeout=max(1.0, deadline - time.monotonic()))
        kept = beyond_expected(msgs, expected)
        if len(kept) >= len(expected) or time.monotonic() >= deadline:
            return kept
        n = len(msgs) + len(expected) - len(kept)


def breaker_cuts(sc: dict) -> list[int]:
    """The indexes of the events that open a breaker or reach a spend cap, offline (the
    harness sends what follows each only once the worker has received that signal)."""
    cfg = DetectionConfig(sc["config"])
    fleet, rule = offline_fleet(cfg)
    cuts: list[int] = []
    seen: list[str] = []
    source = ((i, None, decode_event(json.dumps(e))) for i, e in enumerate(sc["events"]))
    folds = fold(
        source,
        cfg,
        keyed=False,
        fleet=fleet,
        breakers=rule,
        opened=lambda b: seen.append(b.id),
        spend=offline_spend(cfg),
        reached=lambda s: seen.append(s.id),
    )
    for f in folds:
        while isinstance(f, Folded) and len(seen) > len(cuts):
            cuts.append(f.position)
    return cuts


def wait_for_signals(w: WorkerProcess, n: int, timeout: float = 30.0) -> None:
    """Until the worker holds `n` fleet signals (its stop orders and breakers)."""
    signals = lambda: w.metric("loopwarden_fleet_signals")  # noqa: E731
    wait_until(lambda: signals() >= n, timeout, lambda: f"{n} fleet signals (it holds {signals():g})\n{w.tail()}")


@pytest.mark.integration
@pytest.mark.parametrize("path", scenario_files(V2_ALL, V3_ALL), ids=lambda p: p.stem)
def test_scenario_through_kafka(path, bootstrap, start_worker):
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
    w = start_worker(prefix, sc["config"])
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
    msgs = consume_expected(bootstrap, s.decisions_topic, expected, timeout=60)
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
