"""Fleet spend caps (semantics.md section 11): the fold that counts and reaches caps
(detectors/spend.py) and the arithmetic the live spend stage reuses, the `spend_cap`
fleet record and its lifts, and the judging of calls in section 9's order. The config's
checks are in test_config_spend_caps.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec
import pytest

from detectors import DecodeError, DetectionConfig, apply, decode_event, encode
from detectors.config import SpendCapConfig
from detectors.fleet import Breaker, FleetView, SpendCapSignal, StopOrder, decode_fleet_record, encode_fleet_record
from detectors.ingest import Folded, fold, offline_fleet, offline_spend
from detectors.policy import POLICY_NAMES, utc_text
from detectors.spend import (
    NOTHING,
    SpendFold,
    SpendRecord,
    add_spend,
    check_spend_record,
    decode_spend_record,
    encode_spend_record,
    spend_of,
)
from detectors.state import EMPTY
from tests.events import offline
from tests.unit.test_budgets import Run
from tests.unit.test_config_spend_caps import HOUR, ON, caps_config

MINUTE = 60_000
T0 = 1_780_002_000_000  # a whole hour (and minute) since the epoch


def ev(e: dict):
    return decode_event(json.dumps(e))


def view(d: dict) -> tuple:
    return d["action"], d["detector"], d["count"], d["warning_key"], d["fleet_signal"]


ALLOW = ("allow", None, None, None, None)


# -- what counts and what reaches a cap ----------------------------------------------------


def cap(**kw) -> SpendCapConfig:
    return DetectionConfig(caps_config({"id": "c", **kw})).spend_caps[0]


def test_windows_are_tumbling_and_aligned_to_the_epoch():
    c = cap(windowMs=MINUTE, toolCalls=1)
    assert c.window_of(T0) == T0 and c.window_of(T0 + MINUTE - 1) == T0 and c.window_of(T0 + MINUTE) == T0 + MINUTE
    assert c.window_of(-1) == -MINUTE and c.window_of(0) == 0
    odd = cap(windowMs=7919, toolCalls=1)
    assert odd.window_of(T0) == T0 // 7919 * 7919 != T0
    fold_ = SpendFold((c,))
    first = fold_.observe(ev(Run("a").call(ts=T0 + MINUTE - 1)))
    second = fold_.observe(ev(Run("b").call(ts=T0 + MINUTE)))
    assert [s.id for s in first] == [f"c::{T0}"] and [s.id for s in second] == [f"c::{T0 + MINUTE}"]
    assert (first[0].window_start, first[0].window_end, first[0].from_ts, first[0].until_ts) == (
        T0,
        T0 + MINUTE,
        T0 + MINUTE - 1,
        T0 + MINUTE,
    )


def test_a_cap_is_reached_once_per_key_and_window_by_the_event_that_brings_a_kind_to_its_ceiling():
    c = cap(windowMs=HOUR, tokens=1000)
    f = SpendFold((c,))
    r = Run("r", agent="a")
    got = [f.observe(ev(r.usage(400, 100, ts=T0 + i))) for i in range(4)]
    assert [len(s) for s in got] == [0, 1, 0, 0]
    (s,) = got[1]
    assert (s.id, s.cap, s.key, s.unit, s.used, s.ceiling, s.from_ts) == (
        f"c:a:{T0}",
        "c",
        "a",
        "tokens",
        1000,
        1000,
        T0 + 1,
    )
    assert f.count("c", "a", T0) == msgspec.structs.replace(NOTHING, tokens=2000, reached=True)
    # the next window starts from nothing and can reach the cap again
    assert [x.id for x in f.observe(ev(r.usage(1000, ts=T0 + HOUR)))] == [f"c:a:{T0 + HOUR}"]


def test_kinds_are_taken_in_order_tokens_cost_calls_and_cost_adds_up_in_micro_dollars():
    both = cap(tokens=10, costUsd=0.3)
    (s,) = SpendFold((both,)).observe(ev(Run().usage(10, cost=0.5, ts=T0)))
    assert (s.unit, s.used, s.ceiling) == ("tokens", 10, 10)
    # 0.1 + 0.2 is 0.30000000000000004 in doubles; in micro-dollars per event it is 300000
    f = SpendFold((cap(costUsd=0.3),))
    r = Run()
    assert f.observe(ev(r.usage(cost=0.1, ts=T0))) == []
    (s,) = f.observe(ev(r.usage(cost=0.2, ts=T0 + 1)))
    assert (s.unit, s.used, s.ceiling) == ("cost", 300000, 300000)
    # calls: toolCalls N lets N calls through; the Nth reaches the cap
    f = SpendFold((cap(toolCalls=2),))
    assert f.observe(ev(r.call(ts=T0))) == []
    (s,) = f.observe(ev(r.call(ts=T0 + 1)))
    assert (s.unit, s.used, s.ceiling) == ("calls", 2, 2)


def test_keys_per_agent_per_gateway_and_for_all():
    caps = DetectionConfig(
        caps_config(
            {"id": "ag", "per": "agent", "toolCalls": 2},
            {"id": "gw", "per": "gateway", "toolCalls": 2},
            {"id": "all", "per": "all", "toolCalls": 3},
        )
    ).spend_caps
    f = SpendFold(caps)
    reached: list[str] = []
    events = [
        Run("1", agent=" Alice", gateway="G1").call(ts=T0),
        Run("2", agent="alice", gateway="G2").call(ts=T0 + 1),  # alice's second call: ag reached
        Run("3", agent="bob", gateway="G1").call(ts=T0 + 2),  # G1's second: gw reached; third call: all reached
        Run("4", gateway="G2").call(ts=T0 + 3),  # no agent: key "" for ag; G2's second
    ]
    for e in events:
        reached += [s.id for s in f.observe(ev(e))]
    assert reached == [f"ag:alice:{T0}", f"gw:G1:{T0}", f"all::{T0}", f"gw:G2:{T0}"]
    assert f.count("ag", "", T0).calls == 1 and f.count("ag", "bob", T0).calls == 1


def test_an_agents_list_limits_a_cap_to_those_agents():
    (c,) = DetectionConfig(
        caps_config({"id": "g", "per": "all", "agents": ["writer", "SEO"], "toolCalls": 2})
    ).spend_caps
    assert c.key_of(" Writer ", "g") == "" and c.key_of("seo", "g") == ""
    assert c.key_of("other", "g") is None and c.key_of(None, "g") is None
    f = SpendFold((c,))
    assert f.observe(ev(Run("o", agent="other").call(ts=T0))) == []
    assert f.observe(ev(Run("n").call(ts=T0))) == []  # no agent_id: matches none
    assert f.observe(ev(Run("w", agent="WRITER").call(ts=T0))) == []
    assert [s.id for s in f.observe(ev(Run("s", agent="seo ").call(ts=T0)))] == [f"g::{T0}"]


def test_events_without_ts_and_events_of_other_types_count_for_nothing():
    c = cap(toolCalls=1, tokens=1)
    r = Run()
    for e in (r.call(), r.usage(50), r.result(ts=T0), {**r.end(), "ts": T0}):
        assert spend_of((c,), ev(e)) == []
    assert SpendFold((c,)).observe(ev(r.usage(0, 0, ts=T0))) == []  # matches, adds nothing
    # and a call without ts is not judged by a cap in force either
    config = caps_config({"id": "c", "toolCalls": 1})
    q = Run("q")
    ds = offline([q.call("1", ts=T0), q.call("2"), q.call("3", ts=T0 + 1)], config)
    assert [d["action"] for d in ds] == ["allow", "allow", "abort"]


def test_duplicates_count_once_and_a_duplicate_call_is_answered_again_identically():
    config = caps_config({"id": "c", "toolCalls": 2, "tokens": 100})
    r = Run("r", agent="a")
    u = r.usage(60, ts=T0)
    first = r.call("1", ts=T0 + 1)
    events = [u, u, first, first]  # a usage and a call delivered twice: each counts once
    second = r.call("2", ts=T0 + 2)  # the second call reaches calls 2 (judged before: allowed)
    third = r.call("3", ts=T0 + 3)
    events += [second, third, third]
    ds = offline(events, config)
    assert [view(d) for d in ds] == [
        ALLOW,
        ALLOW,  # the duplicate, answered again
        ALLOW,
        ("abort", "fleet_spend_cap", 2, "spend:c:calls", f"c:a:{T0}"),
        ("abort", "fleet_spend_cap", 2, "spend:c:calls", f"c:a:{T0}"),
    ]
    assert ds[3] == ds[4]  # message and signal remembered with the answer
    assert "spend cap c is reached for agent a" in ds[3]["message"]


# -- judging ------------------------------------------------------------------------------


def test_a_paused_call_names_the_cap_the_key_the_kind_used_ceiling_and_the_window_end():
    config = caps_config({"id": "agent-hourly", "costUsd": 0.5})
    r = Run("r", agent="Batch")
    ds = offline([r.call("1", ts=T0 + 5), r.usage(cost=0.75, ts=T0 + 6), r.call("2", ts=T0 + 7)], config)
    d = ds[1]
    assert view(d) == ("abort", "fleet_spend_cap", 750000, "spend:agent-hourly:cost", f"agent-hourly:batch:{T0}")
    assert (d["level"], d["paired_tool_name"], d["enforced"], d["shadow_action"]) == ("critical", None, True, None)
    m = d["message"]
    for part in ("agent-hourly", "agent batch", "cost", "$0.75", "$0.5", utc_text(T0 + HOUR), "2026-05-28T22:00:00Z"):
        assert part in m, (part, m)


def test_utc_text_is_the_calendar_date_of_the_milliseconds():
    for ms in (0, T0, T0 + HOUR + 123, 951_782_400_000, 4_107_542_400_000, -1, -86_400_000 * 365 * 10 - 7):
        t = datetime.fromtimestamp(ms / 1000, UTC)
        expect = t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms % 1000:03d}" if ms % 1000 else "") + "Z"
        assert utc_text(ms) == expect, ms


def test_a_pause_is_not_an_abort_the_run_goes_on_after_the_window():
    config = caps_config(
        {"id": "m", "windowMs": MINUTE, "toolCalls": 1},
        tools={"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}},
    )
    r = Run("r", agent="a")
    events = [r.call("x", ts=T0)] + [r.call("x", ts=T0 + 1 + i) for i in range(5)] + [r.call("x", ts=T0 + MINUTE)]
    ds = offline(events, config)
    assert [d["action"] for d in ds] == ["allow"] + ["abort"] * 5 + ["allow"]
    assert all(d["detector"] == "fleet_spend_cap" for d in ds[1:6])
    # the paused calls were not recorded: the call in the next window is its run's second, not seventh
    cfg = DetectionConfig(config)
    fleet, _ = offline_fleet(cfg)
    states = [
        f.after
        for f in fold(
            ((i, None, ev(e)) for i, e in enumerate(events)), cfg, keyed=False, fleet=fleet, spend=offline_spend(cfg)
        )
        if isinstance(f, Folded)
    ]
    assert [len(s.history) for s in states] == [1, 1, 1, 1, 1, 1, 2]
    assert not any(s.aborted for s in states) and states[-1].calls == 7


def test_a_paused_call_leaves_the_warning_memory_as_it_was():
    config = caps_config(
        {"id": "m", "windowMs": MINUTE, "toolCalls": 2},
        tools={"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 9}},
    )
    r = Run("r", agent="a")
    events = [r.call("x", ts=T0), r.call("x", ts=T0 + 1), r.call("x", ts=T0 + 2)]  # the third: V a warning, paused
    events += [r.call("x", ts=T0 + MINUTE)]  # the same warning, in the next window
    ds = offline(events, config)
    assert [(d["action"], d["detector"], d["count"]) for d in ds] == [
        ("allow", None, None),
        ("allow", None, None),
        ("abort", "fleet_spend_cap", 2),
        ("warn", "generic_repeat", 2),  # shown: the pause did not remember the warning as shown
    ]


def test_a_budget_warning_due_on_a_paused_call_waits_for_the_next_allowed_call():
    config = caps_config({"id": "m", "windowMs": MINUTE, "toolCalls": 7}, loopwarden={"budgets": {"runToolCalls": 10}})
    r = Run("r", agent="a")
    events = [r.call(str(i), ts=T0 + i) for i in range(8)]  # the 8th: 80 percent, and paused
    events += [r.call("9", ts=T0 + MINUTE)]
    ds = offline(events, config)
    assert [view(d) for d in ds[6:]] == [
        ALLOW,
        ("abort", "fleet_spend_cap", 7, "spend:m:calls", f"m:a:{T0}"),
        ("warn", "run_budget", 90, "budget:calls:80", None),
    ]


SIGNAL = SpendCapSignal(
    id=f"c:a:{T0}",
    cap="c",
    key="a",
    window_start=T0,
    window_end=T0 + HOUR,
    from_ts=T0,
    until_ts=T0 + HOUR,
    unit="calls",
    used=3,
    ceiling=3,
)


def judged(state, e: dict, config: dict, *records) -> dict:
    _after, (d,) = apply(state, ev(e), DetectionConfig(config), FleetView(records))
    return json.loads(encode(d))


def test_the_order_on_a_call_stop_order_aborted_run_budget_then_the_cap_then_blocks_and_breakers():
    config = caps_config({"id": "c", "toolCalls": 3})
    r = Run("r", agent="a")
    call = r.call("1", ts=T0 + 10)
    stop = StopOrder(id="s", agent_id="A", from_ts=T0, reason="stop")
    assert view(judged(None, call, config, SIGNAL, stop)) == ("abort", "operator_stop", None, "stop:s", "s")
    aborted = msgspec.structs.replace(EMPTY, aborted=True, abort_by="run_budget", last_seq=-1)
    assert view(judged(aborted, call, config, SIGNAL)) == ("abort", "run_budget", None, None, None)
    spent = caps_config({"id": "c", "toolCalls": 3}, loopwarden={"budgets": {"runToolCalls": 1}})
    one_call = msgspec.structs.replace(EMPTY, calls=1)
    assert view(judged(one_call, call, spent, SIGNAL)) == ("abort", "run_budget", 2, "budget:calls", None)
    paused = ("abort", "fleet_spend_cap", 3, "spend:c:calls", SIGNAL.id)
    assert view(judged(None, call, config, SIGNAL)) == paused
    breaker = Breaker(
        id="b", tool_name="read", outcome="o", from_ts=T0, until_ts=T0 + HOUR, runs=5, gateways=2, window_ms=1
    )
    assert view(judged(None, call, config, SIGNAL, breaker)) == paused
    assert view(judged(None, call, config, breaker))[:2] == ("block", "fleet_tool_breaker")
    # V a block (a repeat past criticalThreshold) is paused too
    blocking = caps_config(
        {"id": "c", "toolCalls": 3},
        tools={"loopDetection": {"enabled": True, "warningThreshold": 1, "criticalThreshold": 2}},
    )
    state = None
    q = Run("q", agent="a")
    for _ in range(2):
        e = q.call("same", ts=T0 - 10)
        state, _ = apply(state, ev(e), DetectionConfig(blocking))
        state, _ = apply(state, ev(q.result("same", ts=T0 - 9, result="same")), DetectionConfig(blocking))
    block_call = q.call("same", ts=T0 + 10)
    assert judged(state, block_call, blocking)["action"] == "block"
    assert view(judged(state, block_call, blocking, SIGNAL)) == paused


def test_a_signal_applies_to_calls_of_its_key_under_a_cap_the_config_has_in_its_interval():
    config = caps_config({"id": "c", "toolCalls": 3})
    assert judged(None, Run("r", agent="b").call(ts=T0 + 1), config, SIGNAL)["action"] == "allow"  # another key
    assert judged(None, Run("r", agent="a").call(ts=T0 - 1), config, SIGNAL)["action"] == "allow"  # before it
    assert judged(None, Run("r", agent="a").call(ts=T0 + HOUR), config, SIGNAL)["action"] == "allow"  # window over
    assert judged(None, Run("r", agent="a").call(), config, SIGNAL)["action"] == "allow"  # no ts
    other = caps_config({"id": "d", "toolCalls": 3})
    assert judged(None, Run("r", agent="a").call(ts=T0 + 1), other, SIGNAL)["action"] == "allow"  # not its cap
    # among several in force, the smallest id in code-point order
    second = msgspec.structs.replace(SIGNAL, id=f"B:a:{T0}", cap="B", unit="tokens", used=9, ceiling=9)
    both = caps_config({"id": "c", "toolCalls": 3}, {"id": "B", "tokens": 9})
    assert judged(None, Run("r", agent="a").call(ts=T0 + 1), both, SIGNAL, second)["fleet_signal"] == second.id


def test_shadow_mode_and_holdout_apply_to_a_pause():
    config = caps_config(
        {"id": "c", "toolCalls": 3},
        agents={"list": [{"id": "main", "default": True}, {"id": "a", "loopwarden": {"enforce": False}}]},
    )
    d = judged(None, Run("r", agent="a").call(ts=T0 + 1), config, SIGNAL)
    assert (d["action"], d["shadow_action"], d["enforced"], d["detector"], d["fleet_signal"]) == (
        "allow",
        "abort",
        False,
        "fleet_spend_cap",
        SIGNAL.id,
    )
    held = caps_config({"id": "c", "toolCalls": 3}, loopwarden={"holdoutPercent": 100})
    d = judged(None, Run("r", agent="a").call(ts=T0 + 1), held, SIGNAL)
    assert (d["action"], d["shadow_action"], d["enforced"]) == ("allow", "abort", False)


# -- the fleet record and lifts ---------------------------------------------------------------


def test_a_spend_cap_record_is_checked_when_read():
    raw = json.loads(encode_fleet_record(SIGNAL))
    assert raw["kind"] == "spend_cap" and decode_fleet_record(json.dumps(raw)) == SIGNAL
    nulled = decode_fleet_record(json.dumps({**raw, "until_ts": None}))
    assert isinstance(nulled, SpendCapSignal) and nulled.until_ts == T0 + HOUR  # lifts nothing
    early = decode_fleet_record(json.dumps({**raw, "from_ts": T0 + 5, "until_ts": T0 + 1}))
    assert isinstance(early, SpendCapSignal) and not any(early.in_force(t) for t in range(T0, T0 + 10))
    for bad, why in (
        ({"id": "c:a:1"}, "its id is not"),
        ({"window_end": T0}, "window_end"),
        ({"from_ts": T0 + HOUR}, "from_ts"),
        ({"unit": "dollars"}, "unit"),
        ({"ceiling": 0}, "ceiling"),
        ({"used": -1}, "used"),
    ):
        with pytest.raises(DecodeError, match=why):
            decode_fleet_record(json.dumps({**raw, **bad}))


def lifted(until: int | None) -> dict:
    return {**json.loads(encode_fleet_record(SIGNAL)), "until_ts": until}


def test_records_of_one_id_keep_the_earliest_end_in_whatever_order_they_come():
    lift = decode_fleet_record(json.dumps(lifted(T0 + 100)))
    assert isinstance(lift, SpendCapSignal)
    for order in ((SIGNAL, lift), (lift, SIGNAL)):
        v = FleetView(order)
        (held,) = v.spend[("c", "a")].values()
        assert held.end() == T0 + 100
    v = FleetView([SIGNAL, lift, SIGNAL])  # published again: does not undo the lift
    assert v.spend[("c", "a")][SIGNAL.id].until_ts == T0 + 100
    # offline, a lift read first pauses nothing by itself, and ends the signal reached later
    off = FleetView()
    off.lift(lift)
    assert not off.spend
    off.put(SIGNAL)
    assert off.spend[("c", "a")][SIGNAL.id].until_ts == T0 + 100


def test_replay_reads_lifts_beside_stop_orders_and_a_lifted_cap_is_not_reached_again_in_its_window():
    config = caps_config({"id": "c", "toolCalls": 3})
    r = Run("r", agent="a")
    events = [r.call(str(i), ts=T0 + i) for i in range(5)]  # the third reaches; 4 and 5 paused
    events += [r.call("late", ts=T0 + 200)]  # after the lift at T0 + 100
    events += [r.call(str(i), ts=T0 + 300 + i) for i in range(3)]  # more calls: not reached again
    events += [r.call("next", ts=T0 + HOUR + i) for i in range(4)]  # the next window reaches anew
    stop = {"kind": "stop", "id": "s", "run_id": "elsewhere", "from_ts": T0, "reason": "x"}
    ds = offline(events, config, [stop, lifted(T0 + 100)])
    actions = [d["action"] for d in ds]
    assert actions == ["allow"] * 3 + ["abort"] * 2 + ["allow"] * 4 + ["allow"] * 3 + ["abort"]
    assert ds[-1]["fleet_signal"] == f"c:a:{T0 + HOUR}"
    # a lift that ends before the cap is reached: nothing is paused in that window
    assert [d["action"] for d in offline(events, config, [lifted(T0 + 1)])][:12] == ["allow"] * 12
    # a lift with a null until_ts lifts nothing; one after the window's end neither
    for until in (None, T0 + 2 * HOUR):
        assert [d["action"] for d in offline(events, config, [lifted(until)])][:9] == ["allow"] * 3 + ["abort"] * 6


def test_replay_with_caps_is_deterministic_and_invalid_caps_change_nothing():
    r1, r2 = Run("r1", agent="a", gateway="g1"), Run("r2", agent="b", gateway="g2")
    events = []
    for i in range(30):
        events += [r1.call(str(i % 4), ts=T0 + 1000 * i), r1.usage(100, cost=0.01, ts=T0 + 1000 * i + 1)]
        events += [r2.call(str(i % 3), ts=T0 + 1000 * i + 2)]
    config = caps_config(
        {"id": "tok", "per": "agent", "windowMs": 10_000, "tokens": 500},
        {"id": "gw", "per": "gateway", "windowMs": 7_000, "toolCalls": 4},
        {"id": "all", "per": "all", "costUsd": 0.2},
    )
    lines = [json.dumps(e).encode() for e in events]
    runs = [offline(lines, config) for _ in range(2)]
    assert runs[0] == runs[1] and sum(d["detector"] == "fleet_spend_cap" for d in runs[0]) > 10
    assert {d["warning_key"] for d in runs[0] if d["detector"]} == {
        "spend:tok:tokens",
        "spend:gw:calls",
        "spend:all:cost",
    }
    plain = offline(lines, ON)
    assert offline(lines, caps_config({"id": "x"}, {"id": "y", "per": "team", "tokens": 1})) == plain


# -- the spend topic's records: what the live stage reuses ---------------------------------------


def test_spend_records_round_trip_and_are_checked():
    rec = SpendRecord(cap="c", key="a", window_start=T0, ts=T0 + 5, event_id="r:3", tokens=7, cost_micros=9, calls=0)
    raw = json.loads(encode_spend_record(rec))
    assert raw == {
        "cap": "c",
        "key": "a",
        "window_start": T0,
        "ts": T0 + 5,
        "event_id": "r:3",
        "tokens": 7,
        "cost_micros": 9,
        "calls": 0,
    }
    assert decode_spend_record(json.dumps(raw)) == rec and rec.topic_key() == "c:a"
    for bad in ({"tokens": -1}, {"ts": T0 - 1}, {"event_id": ""}, {"cap": 3}, {"calls": 2**63}):
        with pytest.raises(DecodeError):
            decode_spend_record(json.dumps({**raw, **bad}))
    with pytest.raises(DecodeError):
        decode_spend_record(b"{")
    c = cap(windowMs=MINUTE, tokens=5)
    assert check_spend_record(rec, c) is None
    assert "window_start" in (check_spend_record(msgspec.structs.replace(rec, ts=T0 + MINUTE), c) or "")
    assert "cap" in (check_spend_record(msgspec.structs.replace(rec, cap="d"), c) or "")


def test_the_live_stages_arithmetic_reaches_what_the_offline_fold_reaches():
    """A stage that keeps one SpendCount per cap, key and window and adds each forwarded
    record with add_spend publishes exactly the signals the offline fold reaches."""
    caps = DetectionConfig(
        caps_config(
            {"id": "tok", "windowMs": 10_000, "tokens": 150, "costUsd": 0.015},
            {"id": "gw", "per": "gateway", "windowMs": 7_000, "toolCalls": 3},
        )
    ).spend_caps
    by_id = {c.id: c for c in caps}
    runs = [Run(f"r{i}", agent=f"a{i % 2}", gateway=f"g{i % 3}") for i in range(4)]
    events = []
    for i in range(40):
        r = runs[i % 4]
        events.append(ev(r.call(str(i), ts=T0 + 900 * i)))
        tokens, cost = (40, 0.001) if i % 2 == 0 else (5, 0.004)  # agent a0 spends tokens, a1 dollars
        events.append(ev(r.usage(tokens, cost=cost, ts=T0 + 900 * i + 1)))
    f = SpendFold(caps)
    offline_signals = [s for e in events for s in f.observe(e)]
    table: dict[tuple[str, str, int], object] = {}
    published = []
    for e in events:
        for rec in spend_of(caps, e):  # what a worker forwards
            rec = decode_spend_record(encode_spend_record(rec))  # through the topic
            where = (rec.cap, rec.key, rec.window_start)
            count, signal = add_spend(by_id[rec.cap], table.get(where, NOTHING), rec)  # type: ignore[arg-type]
            table[where] = count
            if signal is not None:
                published.append(decode_fleet_record(encode_fleet_record(signal)))
    assert published == offline_signals and len(published) > 10
    assert {(s.cap, s.unit) for s in published} == {("tok", "tokens"), ("tok", "cost"), ("gw", "calls")}


def test_the_fold_drops_old_windows_and_never_reaches_a_dropped_window_twice():
    c = cap(windowMs=1000, toolCalls=1)
    f = SpendFold((c,))
    first = f.observe(ev(Run("r").call(ts=0)))
    assert [s.id for s in first] == ["c::0"]
    for w in range(1, 20):
        f.observe(ev(Run("r").call(ts=w * 1000)))
    assert f.count("c", "", 0) is None  # dropped
    assert f.observe(ev(Run("late").call(ts=5))) == []  # not reached again


def test_fleet_spend_cap_is_one_of_the_policy_detectors():
    assert "fleet_spend_cap" in POLICY_NAMES


def test_the_replay_command_reads_lifts_from_its_fleet_file_and_writes_the_same_bytes_each_time(tmp_path):
    import io

    from streams.replay import read_fleet_file, run_replay

    config = caps_config({"id": "c", "agents": ["a"], "toolCalls": 3}, {"id": "g", "per": "gateway", "tokens": 500})
    r, q = Run("r", agent="a"), Run("q", agent="b", gateway="g2")
    events = []
    for i in range(8):
        events += [r.call(str(i), ts=T0 + 10 * i), q.usage(100, ts=T0 + 10 * i + 1), q.call(str(i), ts=T0 + 10 * i + 2)]
    lift = lifted(T0 + 45)
    (tmp_path / "fleet.jsonl").write_text(json.dumps(lift) + "\n\n")
    records = read_fleet_file(str(tmp_path / "fleet.jsonl"))
    src = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    outs = []
    for _ in range(2):
        dst = io.BytesIO()
        run_replay(DetectionConfig(config), io.BytesIO(src), dst, io.StringIO(), fleet_records=records)
        outs.append(dst.getvalue())
    assert outs[0] == outs[1]
    got = [json.loads(line) for line in outs[0].splitlines()]
    assert got == offline(events, config, [lift])
    a = [d["action"] for d in got if d["run_id"] == "r"]
    assert a == ["allow"] * 3 + ["abort"] * 2 + ["allow"] * 3  # paused from the 4th call until the lift at T0 + 45
    b = [(d["action"], d["fleet_signal"]) for d in got if d["run_id"] == "q"]
    assert b[:4] == [("allow", None)] * 4 and set(b[4:]) == {("abort", f"g:g2:{T0}")}  # the 5th usage reaches it
