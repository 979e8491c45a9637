"""The audit's fleet part (streams/audit/fleet.py) without a broker: the view each call
is replayed against, and the calls the event-time rule would have judged otherwise."""

from __future__ import annotations

import json

from detectors import Decision, decode_event
from detectors.fleet import Breaker, StopOrder, encode_fleet_record
from streams.admin.fleet_topic import FleetLedger
from streams.audit.fleet import Signals

T0 = 1_780_000_000_000
BREAKER = Breaker(
    id="b1", tool_name="http_get", outcome="o", from_ts=T0, until_ts=T0 + 1000, runs=3, gateways=2, window_ms=9
)
ORDER = StopOrder(id="s1", run_id="r9", from_ts=T0, until_ts=None, reason="stop")


class Rec:
    def __init__(self, d: Decision) -> None:
        self.decision = d


def call(run: str, seq: int, ts: int, tool: str = "http_get"):
    return decode_event(
        json.dumps({"type": "tool_call", "run_id": run, "seq": seq, "gateway_id": "g", "ts": ts, "tool_name": tool})
    )


def decided(ev, action: str = "allow", detector: str | None = None, signal: str | None = None) -> Decision:
    return Decision(
        ev.run_id,
        ev.seq,
        "g",
        None,
        None,
        ev.tool_name,
        ev.ts,
        f"{ev.run_id}:{ev.seq}",
        action,
        "none",
        detector,
        None,
        None,
        None,
        None,
        None,
        "h",
        signal,
    )


def signals(recorded: dict) -> Signals:
    ledger = FleetLedger()
    for rec in (BREAKER, ORDER):
        ledger.add(rec.id.encode(), encode_fleet_record(rec), (), "test")
    return Signals(ledger, lambda run_id, seq: recorded.get((run_id, seq)))


def test_each_call_is_replayed_with_the_signal_its_decision_names_only():
    on_time, late = call("r1", 1, T0 + 10), call("r2", 1, T0 + 250)
    recorded = {
        ("r1", 1): Rec(decided(on_time, "block", "fleet_tool_breaker", "b1")),
        ("r2", 1): Rec(decided(late)),  # its worker had not received the breaker yet
    }
    s = signals(recorded)
    view = s.view_for(on_time)
    assert view is not None and view.breaker_for("http_get", T0 + 10) is not None and not view.orders
    assert s.view_for(late) is None and s.view_for(call("r3", 1, T0)) is None  # none named, none recorded
    for ev in (on_time, late):
        s.lag(ev, recorded[(ev.run_id, ev.seq)].decision)
    c = s.counts
    assert c.applied == {"breaker": 1} and c.late == 1 and c.late_by_signal == {"b1": 1} and c.delays_ms == [250]
    summary = c.summary()["fleet"]
    assert summary["judged_late"] == 1 and summary["lag_ms"] == {"p50": 250, "p90": 250, "max": 250}


def test_a_stop_order_comes_before_a_breaker_and_a_stopped_run_is_not_late():
    ev = call("r9", 3, T0 + 10)
    s = signals({})
    assert s.event_time(ev) == ORDER
    s.lag(ev, decided(ev, "abort", "operator_stop", None))  # a later call of the stopped run
    s.lag(call("r5", 1, T0 + 2000), decided(call("r5", 1, T0 + 2000)))  # after the breaker
    assert s.counts.late == 0


# -- spend caps (semantics.md section 11) ---------------------------------------------------

W0 = T0 // 3_600_000 * 3_600_000  # the hourly window T0 falls in
CAPS = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {"fleet": {"spendCaps": [{"id": "hourly", "per": "agent", "toolCalls": 3, "tokens": 1000}]}},
}


def spend_events() -> list[dict]:
    """Agent a's runs make 3 calls (the third reaches the cap) then 3 more, paused; agent
    b's usage reaches the cap's tokens (its fifth), and its one call is paused."""
    out = []
    seqs: dict[str, int] = {}

    def add(run: str, agent: str, ts: int, kind: str = "tool_call", **fields) -> None:
        seq = seqs[run] = seqs.get(run, -1) + 1
        e = {"type": kind, "run_id": run, "seq": seq, "gateway_id": "g", "agent_id": agent, "ts": ts, **fields}
        if kind == "tool_call":
            e |= {"tool_name": "read", "params": {"n": seq}}
        out.append(e)

    for i in range(6):
        add(f"a{i % 2}", "a", T0 + 10 * i)
        add("b1", "b", T0 + 10 * i + 1, "usage", input_tokens=150, output_tokens=50, cost_usd=0.5)
    add("b1", "b", T0 + 100)
    return out


def test_a_paused_call_replays_with_its_signal_even_after_a_lift_reached_the_topic():
    import msgspec

    from detectors import DetectionConfig
    from detectors.fleet import SpendCapSignal
    from detectors.ingest import Folded, fold, offline_fleet, offline_spend
    from streams.audit.core import Audit, ConfigBook
    from streams.audit.options import Window
    from tests.unit.test_audit_core import msgs

    events = spend_events()
    cfg = DetectionConfig(CAPS)
    fleet, _ = offline_fleet(cfg)
    reached: list[SpendCapSignal] = []
    source = ((i, None, decode_event(json.dumps(e))) for i, e in enumerate(events))
    decisions = []
    for f in fold(source, cfg, keyed=False, fleet=fleet, spend=offline_spend(cfg), reached=reached.append):
        assert isinstance(f, Folded)
        decisions += [json.loads(msgspec.json.encode(d)) for d in f.decisions]
    assert [s.id for s in reached] == [f"hourly:a:{W0}", f"hourly:b:{W0}"]
    paused = [d for d in decisions if d["detector"] == "fleet_spend_cap"]
    assert len(paused) == 4 and {d["fleet_signal"] for d in paused} == {f"hourly:a:{W0}", f"hourly:b:{W0}"}
    # the topic holds the signals, a's lifted (by an operator) before its paused calls' ts
    ledger = FleetLedger()
    for s in reached:
        ledger.add(s.id.encode(), encode_fleet_record(s), (), "test")
    lift = msgspec.structs.replace(reached[0], until_ts=reached[0].from_ts + 1)
    ledger.add(lift.id.encode(), encode_fleet_record(lift), (), "test")
    a = Audit(ConfigBook(cfg), Window(grace_ms=10_000), complete=lambda p: True, fleet=ledger)
    a.recorded(msgs(decisions, "gateway_id"))
    a.events(msgs(events, "run_id"))
    a.finish()
    s = a.summary(1.0)
    assert s["matched"] == len(decisions) == 7 and s["mismatched"] == 0 and a.clean()
    fl = s["fleet"]
    assert fl["signals_applied"] == {"spend_cap": 4}
    # on time: b's pause, and the call that reached a's cap (at the signal's from_ts) is
    # not taken for a call its worker should have paused
    assert fl["judged_late"] == 0
    caps = fl["spend_caps"]["hourly"]
    assert (caps["keys"], caps["calls"], caps["tokens"], caps["paused_calls"]) == (2, 7, 1200, 4)
    assert caps["cost_usd"] == 3.0
    assert [(k["key"], k["calls"], k["tokens"], k["cost_usd"]) for k in caps["top_keys"]] == [
        ("b", 1, 1200, 3.0),
        ("a", 6, 0, 0.0),
    ]


def test_the_event_time_rule_puts_a_spend_cap_between_stop_orders_and_breakers():
    import msgspec

    from detectors import DetectionConfig
    from detectors.fleet import SpendCapSignal

    caps = DetectionConfig(CAPS).spend_caps
    signal = SpendCapSignal(
        id=f"hourly::{W0}",
        cap="hourly",
        key="",
        window_start=W0,
        window_end=W0 + 3_600_000,
        from_ts=T0 + 5,
        until_ts=W0 + 3_600_000,
        unit="calls",
        used=3,
        ceiling=3,
    )
    ledger = FleetLedger()
    for rec in (BREAKER, ORDER, signal):
        ledger.add(rec.id.encode(), encode_fleet_record(rec), (), "test")
    s = Signals(ledger, lambda run_id, seq: None)
    ev = call("r1", 1, T0 + 10)  # no agent_id: key "" per agent
    assert s.event_time(ev, caps) == signal and s.event_time(ev) == BREAKER
    assert s.event_time(call("r9", 1, T0 + 10), caps) == ORDER
    assert s.event_time(call("r1", 2, T0 + 1), caps) == BREAKER  # before the cap was reached
    s.lag(ev, decided(ev, "abort", "fleet_spend_cap", signal.id), caps)  # on time
    allowed = call("r2", 1, T0 + 20)
    s.lag(allowed, decided(allowed), caps)  # its worker had not received the signal: late
    spent = call("r3", 1, T0 + 30)
    budget = msgspec.structs.replace(
        decided(spent, "abort", "run_budget"), level="critical", warning_key="budget:calls"
    )
    s.lag(spent, budget, caps)  # a rule above the pause took it: not late
    c = s.counts
    assert c.applied == {"spend_cap": 1} and c.late == 1 and c.late_by_signal == {signal.id: 1}
    assert c.delays_ms == [15]


def test_spend_counts_add_up_across_shards():
    from detectors import DetectionConfig
    from streams.audit.fleet import FleetCounts

    caps = DetectionConfig(CAPS).spend_caps
    one, two = FleetCounts(), FleetCounts()
    for i, e in enumerate(spend_events()):
        (one if i % 2 else two).count_spend(caps, decode_event(json.dumps(e)))
    one.paused["hourly"] += 3
    two.paused["hourly"] += 1
    one.merge(two)
    whole = FleetCounts()
    for e in spend_events():
        whole.count_spend(caps, decode_event(json.dumps(e)))
    assert one.spend == whole.spend == {("hourly", "a"): [0, 0, 6], ("hourly", "b"): [1200, 3_000_000, 1]}
    assert one.spend_summary()["hourly"]["paused_calls"] == 4
