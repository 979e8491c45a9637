"""Shadow mode and holdout (semantics.md section 10), and the fleet's rules (section 9):
the tool breaker's fold over failures, stop orders, and their order on a call."""

from __future__ import annotations

import hashlib
import json

import pytest

from detectors import DecodeError, DetectionConfig, decode_event, encode, replay
from detectors.config import ToolBreakerConfig
from detectors.fleet import Breaker, FleetView, StopOrder, ToolBreakerFold, decode_fleet_record
from detectors.policy import held_out
from tests.unit.test_budgets import T0, Run, decide

LOOPING = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}


def looping(r: Run, n: int = 4) -> list[dict]:
    out = []
    for _ in range(n):
        out += [r.call("x"), r.result("x", error="ENOENT")]
    return out


def test_a_shadow_agent_is_told_allow_and_what_enforcement_would_have_done():
    config = dict(
        LOOPING, agents={"list": [{"id": "main", "default": True}, {"id": "trial", "loopwarden": {"enforce": False}}]}
    )
    shadow = decide(looping(Run("s", agent="trial")), config)
    enforced = decide(looping(Run("e", agent="main")), config)
    assert [d["action"] for d in enforced] == ["allow", "allow", "warn", "block"]
    assert [d["action"] for d in shadow] == ["allow"] * 4
    assert [d["shadow_action"] for d in shadow] == ["allow", "allow", "warn", "block"]
    assert all(d["enforced"] is False for d in shadow) and all(d["enforced"] is True for d in enforced)
    assert all(d["shadow_action"] is None for d in enforced)
    # the fold is unchanged: every other field as decided
    for s, e in zip(shadow, enforced, strict=True):
        assert {
            k: v
            for k, v in s.items()
            if k not in ("run_id", "event_id", "agent_id", "action", "enforced", "shadow_action", "config_hash")
        } == {
            k: v
            for k, v in e.items()
            if k not in ("run_id", "event_id", "agent_id", "action", "enforced", "shadow_action", "config_hash")
        }


def test_only_json_false_turns_enforcement_off():
    for value, on in ((False, False), (True, True), (0, True), ("false", True), (None, True)):
        cfg = DetectionConfig({"loopwarden": {"enforce": value}})
        assert cfg.for_agent(None).enforce is on, value
    assert any("loopwarden.enforce" in w for w in DetectionConfig({"loopwarden": {"enforce": "no"}}).warnings)
    # per agent over the global value, either way
    doc = {
        "loopwarden": {"enforce": False},
        "agents": {"list": [{"id": "a", "loopwarden": {"enforce": True}}, {"id": "b"}]},
    }
    cfg = DetectionConfig(doc)
    assert cfg.for_agent("a").enforce and not cfg.for_agent("b").enforce


def test_holdout_hashes_the_run_id_as_the_spec_says():
    ids = [f"run-{i}" for i in range(400)]
    for p in (0, 20, 100):
        for run in ids:
            expect = int(hashlib.sha256(run.encode()).hexdigest()[:8], 16) % 100 < p
            assert held_out(run, p) is expect
    share = sum(held_out(r, 20) for r in ids) / len(ids)
    assert 0.1 < share < 0.3
    assert held_out("é-run", 100) and not held_out("é-run", 0)


def test_held_out_runs_are_not_enforced_and_bad_percentages_count_as_zero():
    config = dict(LOOPING, loopwarden={"holdoutPercent": 50})
    runs = [f"h{i}" for i in range(20)]
    for run in runs:
        ds = decide(looping(Run(run)), config)
        out = held_out(run, 50)
        assert [d["enforced"] for d in ds] == [not out] * 4
        assert [d["action"] for d in ds] == (["allow"] * 4 if out else ["allow", "allow", "warn", "block"])
    for bad in (101, -1, 2.5, "10", True):
        cfg = DetectionConfig({"loopwarden": {"holdoutPercent": bad}})
        assert cfg.for_agent(None).holdout_percent == 0 and any("holdoutPercent" in w for w in cfg.warnings)


def test_a_shadow_run_aborted_by_its_budget_keeps_being_told_allow():
    config = {"loopwarden": {"enforce": False, "budgets": {"runToolCalls": 1}}}
    r = Run()
    ds = decide([r.call("1"), r.call("2"), r.call("3")], config)
    assert [(d["action"], d["shadow_action"], d["detector"]) for d in ds] == [
        ("allow", "warn", "run_budget"),  # 1 of 1 call: the 95 percent mark
        ("allow", "abort", "run_budget"),
        ("allow", "abort", "run_budget"),
    ]


def stop(oid: str, **target) -> dict:
    rec = {"kind": "stop", "id": oid, "from_ts": T0, "until_ts": None, "reason": f"stopped by {oid}", "issued_by": "t"}
    return rec | target


def decide_with_fleet(events: list[dict], config: dict, fleet: list[dict]) -> list[dict]:
    recs = [decode_fleet_record(json.dumps(r)) for r in fleet]
    cfg = DetectionConfig(config)
    return [json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in events], cfg, recs)]


def test_stop_orders_are_always_enforced_even_in_shadow_and_the_smallest_id_wins():
    config = {"loopwarden": {"enforce": False}}
    r = Run("r1", agent="Batch")
    evs = [r.call("1", ts=T0 - 1), r.call("2", ts=T0 + 5), r.call("3"), r.call("4", ts=T0 + 20)]
    fleet = [stop("z-order", agent_id=" batch "), stop("a-order", run_id="r1", until_ts=T0 + 10)]
    ds = decide_with_fleet(evs, config, fleet)
    assert [(d["action"], d["shadow_action"], d["detector"], d["fleet_signal"]) for d in ds] == [
        ("allow", "allow", None, None),  # before the orders
        ("abort", None, "operator_stop", "a-order"),  # both match; the smallest id
        ("abort", None, "operator_stop", None),  # no ts: no order, but the run is aborted, by an operator: enforced
        ("abort", None, "operator_stop", "z-order"),  # a-order ended; z-order still in force
    ]
    assert ds[1]["message"] == "stopped by a-order" and ds[1]["warning_key"] == "stop:a-order"


def test_a_lift_replaces_the_order_and_does_not_revive_the_run():
    r = Run("r1")
    evs = [r.call("1", ts=T0 + 1), r.call("2", ts=T0 + 100)]
    other = Run("r2")
    evs += [other.call("1", ts=T0 + 100)]
    fleet = [stop("o", gateway_id="g"), stop("o", gateway_id="g", until_ts=T0 + 50)]
    ds = decide_with_fleet(evs, {}, fleet)
    assert [(d["run_id"], d["action"], d["fleet_signal"]) for d in ds] == [
        ("r1", "abort", "o"),
        ("r1", "abort", None),  # lifted at T0+50, still aborted
        ("r2", "allow", None),  # the lifted order no longer stops new runs
    ]


@pytest.mark.parametrize(
    "record, why",
    [
        ({"kind": "stop", "id": "x", "from_ts": 1, "reason": "r"}, "exactly one"),
        ({"kind": "stop", "id": "x", "run_id": "a", "agent_id": "b", "from_ts": 1, "reason": "r"}, "exactly one"),
        ({"kind": "pause", "id": "x"}, "kind"),
        ({"kind": "stop", "id": "x", "run_id": "a", "reason": "r"}, "from_ts"),
        ({"kind": "stop", "id": "x", "run_id": "a", "from_ts": 5, "until_ts": 4, "reason": "r"}, "before"),
        ({"kind": "breaker", "id": "x"}, "tool_name"),
    ],
)
def test_malformed_fleet_records_are_refused_with_a_reason(record, why):
    with pytest.raises(DecodeError, match=why):
        decode_fleet_record(json.dumps(record))
    with pytest.raises(DecodeError):
        decode_fleet_record(b"{not json")


def fold_failures(cfg: ToolBreakerConfig, failures: list[tuple[str, str, int, str, str]]) -> list[Breaker | None]:
    rule = ToolBreakerFold(cfg)
    return [rule.observe(*f) for f in failures]


def test_the_breaker_opens_at_min_runs_distinct_runs_within_the_window():
    cfg = ToolBreakerConfig(True, 3, 1000, 500)
    got = fold_failures(
        cfg,
        [
            ("t", "o", T0, "r1", "g1"),
            ("t", "o", T0 + 10, "r1", "g1"),  # the same run again: still one
            ("t", "o", T0 + 20, "r2", "g2"),
            ("t", "other", T0 + 30, "r3", "g1"),  # another outcome: its own count
            ("t", "o", T0 + 1015, "r3", "g1"),  # (T0+15, T0+1015]: r2, r3 (r1's failures left the window)
            ("t", "o", T0 + 1025, "r4", "g1"),  # (T0+25, T0+1025]: r3, r4 (r2 at T0+20 left it)
            ("t", "o", T0 + 1026, "r1", "g3"),  # r3, r4, r1: three runs
        ],
    )
    assert got[:6] == [None] * 6
    b = got[6]
    assert b is not None and b.id == f"t:o:{T0 + 1026}" and (b.from_ts, b.until_ts) == (T0 + 1026, T0 + 1526)
    assert (b.runs, b.gateways, b.window_ms) == (3, 2, 1000)


def test_no_second_breaker_while_one_is_open_and_failures_before_its_end_do_not_count_after():
    cfg = ToolBreakerConfig(True, 2, 10_000, 100)
    got = fold_failures(
        cfg,
        [
            ("t", "o", T0, "r1", "g"),
            ("t", "o", T0 + 1, "r2", "g"),  # opens [T0+1, T0+101)
            ("t", "o", T0 + 50, "r3", "g"),  # open: nothing
            ("t", "o", T0 + 101, "r4", "g"),  # closed; only failures from T0+101 on count: 1 run
            ("t", "o", T0 + 102, "r1", "g"),  # 2 runs since the end: opens again
        ],
    )
    assert [b.id if b else None for b in got] == [None, f"t:o:{T0 + 1}", None, None, f"t:o:{T0 + 102}"]


def breaker_config(**tb) -> dict:
    return {
        "tools": {"loopDetection": {"enabled": True}},
        "loopwarden": {
            "fleet": {"toolBreaker": {"enabled": True, "minRuns": 2, "windowMs": 60000, "coolDownMs": 1000} | tb}
        },
    }


def test_an_open_breaker_blocks_any_call_of_the_tool_with_a_ts_and_leaves_history_alone():
    a, b, c = Run("a", gateway="g1"), Run("b", gateway="g2"), Run("c", gateway="g1")
    evs = [a.call("1", ts=T0), a.result("1", ts=T0 + 1, error="503"), b.call("2", ts=T0 + 2)]
    evs += [b.result("2", ts=T0 + 3, error="503")]  # opens at T0+3
    evs += [c.call("9", ts=T0 + 10), c.call("9"), c.call("9", tool="read_file", ts=T0 + 11), c.call("9", ts=T0 + 1003)]
    ds = decide(evs, breaker_config())
    assert [(d["run_id"], d["action"], d["detector"], d["count"]) for d in ds] == [
        ("a", "allow", None, None),
        ("b", "allow", None, None),
        ("c", "block", "fleet_tool_breaker", 2),
        ("c", "allow", None, None),  # no ts: never judged by the fleet
        ("c", "allow", None, None),  # another tool
        ("c", "allow", None, None),  # after the cool-down
    ]
    blocked = ds[2]
    assert blocked["fleet_signal"].startswith("read:error:") and blocked["fleet_signal"].endswith(f":{T0 + 3}")
    assert blocked["warning_key"] == "fleet:read:" + blocked["fleet_signal"].split(":", 1)[1].rsplit(":", 1)[0]
    assert "2 runs on 2 gateways" in blocked["message"]


def test_privacy_mode_failures_count_with_failed_true_and_results_of_aborted_runs_count():
    a, b = Run("a"), Run("b")
    evs = [a.usage(10), a.result("1", ts=T0, result_hash="h1", args_hash="read:x", failed=True)]
    evs += [b.result("1", ts=T0 + 1, result_hash="h1", args_hash="read:x", failed=True), b.call("1", ts=T0 + 2)]
    ok = Run("ok")
    evs2 = [ok.result("1", ts=T0, result_hash="h1", args_hash="read:x"), b.call("5", ts=T0 + 3)]
    config = breaker_config() | {"loopwarden": breaker_config()["loopwarden"] | {"budgets": {"runTokens": 10}}}
    ds = decide(evs + evs2, config)
    # a's usage aborted it; its failing result still counts for the fleet
    assert [(d["run_id"], d["action"], d["detector"]) for d in ds] == [
        ("a", "abort", "run_budget"),
        ("b", "block", "fleet_tool_breaker"),
        ("b", "block", "fleet_tool_breaker"),
    ]
    assert ds[1]["fleet_signal"] == f"read:h1:{T0 + 1}"


def test_the_breaker_is_off_by_default_and_view_lookups_are_exact():
    a, b = Run("a"), Run("b")
    evs = [a.result("1", ts=T0, error="E"), b.result("1", ts=T0, error="E"), b.call("1", ts=T0 + 1)]
    assert [d["action"] for d in decide(evs, {})] == ["allow"]
    view = FleetView(
        [Breaker(id="x", tool_name="t", outcome="o", from_ts=10, until_ts=20, runs=1, gateways=1, window_ms=5)]
    )
    assert (
        view.breaker_for("t", 9) is None and view.breaker_for("t", 10) is not None and view.breaker_for("t", 20) is None
    )
    assert view.breaker_for("t", None) is None
    order = StopOrder(id="s", run_id="r", from_ts=0, until_ts=None, reason="x")
    assert order.in_force(0) and order.in_force(10**12)


def test_fleet_for_judges_each_event_against_its_own_view():
    # An audit replays each call with the signal its recorded decision names: here the
    # order is given to the second call only, so the first is allowed although in force.
    from detectors import fold

    order = decode_fleet_record(json.dumps(stop("o1", run_id="r")))
    view = FleetView([order])
    r = Run("r")
    evs = [decode_event(json.dumps(e)) for e in (r.call("1", ts=T0 + 1), r.call("2", ts=T0 + 2))]
    out = fold(
        ((i, None, e) for i, e in enumerate(evs)),
        DetectionConfig({}),
        keyed=False,
        fleet_for=lambda ev: view if ev.seq == 1 else None,
    )
    got = [(d.action, d.fleet_signal) for f in out for d in f.decisions]
    assert got == [("allow", None), ("abort", "o1")]


def test_live_the_breaker_also_counts_a_failure_that_came_late():
    cfg = ToolBreakerConfig(True, 3, 60_000, 30_000)
    late = [("t", "o", T0 + 2100, "r3", "g1"), ("t", "o", T0 + 1100, "r2", "g2"), ("t", "o", T0 + 100, "r1", "g1")]
    assert fold_failures(cfg, late) == [None, None, None]  # offline: the order of the input is the event order
    rule = ToolBreakerFold(cfg, recheck_late=True)  # live: the order the workers folded them in
    got = [rule.observe(*f) for f in late]
    assert got[:2] == [None, None] and got[2] is not None
    assert (got[2].id, got[2].runs, got[2].gateways) == (f"t:o:{T0 + 2100}", 3, 2)  # as if they came in order
    in_order = fold_failures(cfg, sorted(late, key=lambda f: f[2]))
    assert in_order[2] is not None and in_order[2].id == got[2].id
