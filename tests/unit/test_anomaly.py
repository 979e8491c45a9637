"""The spend anomaly watch (detectors/anomaly.py): its config, its rule, and the fold
over records that fires on a burst and not on the steady windows before it."""

from __future__ import annotations

from detectors import DetectionConfig
from detectors.anomaly import ANOMALY_CAP, AnomalyFold, anomalous, anomaly_cap
from detectors.config import AnomalyConfig
from detectors.spend import NOTHING, SpendCount, SpendRecord

W = 60_000
CFG = AnomalyConfig(window_ms=W, history=6, factor=3.0, min_windows=3, tokens=None, cost=1_000_000, calls=20)


def watch(**block: object) -> DetectionConfig:
    return DetectionConfig({"loopwarden": {"fleet": {"spendAnomaly": block}}})


def test_off_unless_enabled_and_bad_values_fall_back_with_a_warning():
    assert watch().spend_anomaly is None and watch(enabled="yes").spend_anomaly is None
    c = watch(enabled=True, windowMs=0, factor=0.5, minToolCalls=-1, minTokens=1000)
    a = c.spend_anomaly
    assert a is not None
    assert (a.window_ms, a.history, a.factor, a.min_windows) == (3_600_000, 24, 3.0, 3)
    assert (a.tokens, a.cost, a.calls) == (1000, 1_000_000, None)
    assert c.warnings == (
        "loopwarden.fleet.spendAnomaly.windowMs: 0 is not a positive integer; using the default 3600000",
        "loopwarden.fleet.spendAnomaly.factor: 0.5 is not a number of at least 1; using 3",
        "loopwarden.fleet.spendAnomaly.minToolCalls: -1 is not a positive amount; no floor, the kind is not watched",
    )
    plain = DetectionConfig({})
    assert c.global_config.config_hash == plain.global_config.config_hash  # alerts only: not in the hash


def calls(n: int) -> SpendCount:
    return SpendCount(calls=n)


def test_the_rule_needs_a_norm_a_floor_and_the_factor():
    steady = [calls(10)] * 6
    assert anomalous(CFG, "a", 0, calls(31), steady).kind == "calls"  # 31 > 3 * 10, and >= 20
    assert anomalous(CFG, "a", 0, calls(30), steady) is None  # not above 3 times the median
    assert anomalous(CFG, "a", 0, calls(19), [calls(1)] * 6) is None  # under the floor
    assert anomalous(CFG, "a", 0, calls(500), [calls(10)] * 2) is None  # two windows are no norm yet
    found = anomalous(CFG, "a", 0, calls(40), [calls(10)] * 3)  # three are: the norm of a new agent
    assert found is not None and found.norm == 10.0 and found.windows == 3
    # Windows with nothing before the agent's first spend say nothing of its norm (a new
    # agent is not measured against zeros); quiet windows after it count as 0.
    new_agent = [NOTHING] * 3 + [calls(10)] * 3
    assert anomalous(CFG, "a", 0, calls(30), new_agent) is None
    quiet = [calls(10)] * 3 + [NOTHING] * 3
    found = anomalous(CFG, "a", 0, calls(30), quiet)
    assert found is not None and found.norm == 5.0 and found.windows == 6
    assert (
        anomalous(CFG, "a", 0, SpendCount(cost_micros=4_000_000), [SpendCount(cost_micros=1_000_000)] * 6).kind
        == "cost"
    )
    assert anomalous(CFG, "a", 0, NOTHING, steady) is None


def record(key: str, ts: int, seq: int, calls: int = 1) -> SpendRecord:
    return SpendRecord(cap=ANOMALY_CAP, key=key, window_start=ts // W * W, ts=ts, event_id=f"r:{seq}", calls=calls)


def test_the_fold_fires_on_the_burst_once_and_not_on_the_steady_fleet_before_it():
    fold = AnomalyFold(CFG)
    seen = []
    seq = 0
    for window in range(10):  # ten steady windows: 12 calls each for both agents
        for i in range(12):
            for agent in ("steady", "bursty"):
                seq += 1
                found = fold.add(record(agent, window * W + i * 1000, seq))
                if found is not None:
                    seen.append(found)
    assert seen == []
    for i in range(60):  # the burst: 60 calls of one agent in the 11th window
        seq += 1
        found = fold.add(record("bursty", 10 * W + i * 500, seq))
        if found is not None:
            seen.append((i, found))
    ((at, a),) = seen
    assert at == 36 and (a.key, a.kind, a.used, a.norm) == ("bursty", "calls", 37, 12.0)  # first above 3 x 12
    assert anomaly_cap(CFG).id == ANOMALY_CAP and anomaly_cap(CFG).ceilings() == (None, None, None)
