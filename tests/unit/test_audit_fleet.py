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
