"""An audit of a fleet whose calls were judged by breakers and stop orders (issue 25
item 5): each call is replayed with the signal its recorded decision names, so every
decision matches, and the signals applied are counted."""

from __future__ import annotations

import json

import pytest

from tests.conftest import conformance_dir
from tests.integration.harness import WorkerProcess, audit, event_records, new_prefix, produce, setup_topics
from tests.integration.test_conformance_kafka import breaker_cuts, consume_expected, offline, wait_for_signals

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["220-fleet-tool-breaker", "240-stop-order"])
def test_an_audit_replays_each_call_with_its_fleet_signal(name, bootstrap, tmp_path, workers):
    sc = json.loads((conformance_dir() / "v2" / f"{name}.json").read_text())
    expected = offline(sc)
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix)
    orders = sc.get("fleet", [])
    if orders:
        produce(bootstrap, s.fleet_topic, [(r["id"].encode(), json.dumps(r).encode()) for r in orders])
    w = WorkerProcess(bootstrap, prefix, sc["config"], tmp_path)
    workers.append(w)
    w.start()
    wait_for_signals(w, len({r["id"] for r in orders}))
    records, start = event_records(sc["events"]), 0
    for n, cut in enumerate(breaker_cuts(sc), 1):
        produce(bootstrap, s.events_topic, records[start : cut + 1])
        wait_for_signals(w, len(orders) + n)
        start = cut + 1
    produce(bootstrap, s.events_topic, records[start:])
    consume_expected(bootstrap, s.decisions_topic, expected, timeout=60)
    # the worker was pinned with --config: the audit is told the file, to know its config hash
    code, out = audit(bootstrap, prefix, "--from", "beginning", "--worker-config", str(tmp_path / "config-w.json"))
    assert code == 0, json.dumps(out)
    assert out["matched"] == out["decisions_recorded"] == len(expected)
    applied = [d for d in expected if d.get("fleet_signal")]
    kinds = {"stop" if d["detector"] == "operator_stop" else "breaker" for d in applied}
    assert (
        sum(out["fleet"]["signals_applied"].values()) == len(applied) and set(out["fleet"]["signals_applied"]) == kinds
    )
    assert out["fleet"]["judged_late"] == 0  # the harness sent each call after its worker held the signal
