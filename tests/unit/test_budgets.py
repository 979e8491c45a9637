"""Run budgets (semantics.md section 8): usage events, per-run counters, warnings at 80
and 95 percent, abort on exhaustion, and the config's `loopwarden.budgets`."""

from __future__ import annotations

import json

import msgspec
import pytest

from detectors import DecodeError, DetectionConfig, apply, decode_event, decode_state, encode_state, replay
from detectors.config import micro_dollars
from detectors.state import EMPTY, RunState

T0 = 1_780_000_000_000


class Run:
    """Events of one run, numbered in order."""

    def __init__(self, run: str = "r", agent: str | None = None, gateway: str = "g") -> None:
        self.run, self.agent, self.gateway, self.seq = run, agent, gateway, 0

    def _ev(self, kind: str, **fields) -> dict:
        ev = {"type": kind, "run_id": self.run, "seq": self.seq, "gateway_id": self.gateway, **fields}
        if self.agent is not None:
            ev["agent_id"] = self.agent
        self.seq += 1
        return ev

    def call(self, path: str = "a", tool: str = "read", **kw) -> dict:
        return self._ev("tool_call", tool_name=tool, params={"path": path}, **kw)

    def result(self, path: str = "a", tool: str = "read", **kw) -> dict:
        return self._ev("tool_result", tool_name=tool, params={"path": path}, **kw)

    def usage(self, inp: int = 0, out: int = 0, cost: float | None = None, **kw) -> dict:
        extra = {} if cost is None else {"cost_usd": cost}
        return self._ev("usage", input_tokens=inp, output_tokens=out, **extra, **kw)

    def end(self) -> dict:
        return self._ev("run_end")


def decide(events: list[dict], config: dict) -> list[dict]:
    cfg = DetectionConfig(config)
    return [json.loads(msgspec.json.encode(d)) for d in replay([decode_event(json.dumps(e)) for e in events], cfg)]


def budgets(**b) -> dict:
    return {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"budgets": b}}


def test_tokens_warn_at_80_then_95_and_the_usage_that_spends_them_aborts():
    r = Run()
    evs = [r.usage(790), r.call("1"), r.usage(10), r.call("2"), r.call("3"), r.usage(150), r.call("4")]
    evs += [r.usage(49), r.call("5"), r.usage(1), r.call("6")]
    ds = decide(evs, budgets(runTokens=1000))
    assert [(d["action"], d["detector"], d["count"], d["warning_key"]) for d in ds] == [
        ("allow", None, None, None),  # 790: below the 80 percent mark
        ("warn", "run_budget", 80, "budget:tokens:80"),  # 800
        ("allow", None, None, None),  # the 80 mark was warned
        ("warn", "run_budget", 95, "budget:tokens:95"),  # 950
        ("allow", None, None, None),  # 999
        ("abort", "run_budget", 1000, "budget:tokens"),  # the usage event reaching 1000: its own decision
        ("abort", "run_budget", None, None),  # the run stays aborted
    ]
    usage_abort = ds[5]
    assert usage_abort["tool_name"] is None and usage_abort["args_hash"] is None and usage_abort["seq"] == 9
    assert usage_abort["event_id"] == "r:9" and usage_abort["level"] == "critical"
    assert "1000 tokens used of 1000 tokens" in usage_abort["message"]
    assert ds[6]["message"] and "budget" in ds[6]["message"]


def test_a_jump_past_both_marks_warns_the_highest_once():
    r = Run()
    ds = decide([r.usage(960), r.call("1"), r.call("2")], budgets(runTokens=1000))
    assert [(d["action"], d["count"], d["warning_key"]) for d in ds] == [
        ("warn", 96, "budget:tokens:95"),
        ("allow", None, None),
    ]


def test_calls_are_counted_before_judging_so_the_call_past_the_ceiling_aborts():
    r = Run()
    ds = decide([r.call(str(i)) for i in range(5)], budgets(runToolCalls=3))
    assert [(d["action"], d["count"], d["warning_key"]) for d in ds] == [
        ("allow", None, None),
        ("allow", None, None),
        ("warn", 100, "budget:calls:95"),  # the 3rd call: 3 of 3
        ("abort", 4, "budget:calls"),
        ("abort", None, None),
    ]


def test_cost_is_summed_in_micro_dollars_rounded_half_up():
    assert micro_dollars(0.0000005) == 1 and micro_dollars(0.0000004) == 0
    assert micro_dollars(0.1) + micro_dollars(0.2) == 300000  # no float drift: each usage is rounded once
    r = Run()
    evs = [r.usage(cost=0.1), r.usage(cost=0.2), r.call("1"), r.usage(cost=0.075), r.call("2"), r.usage(cost=0.025)]
    ds = decide(evs, budgets(runCostUsd=0.4))
    assert [(d["action"], d["count"], d["warning_key"]) for d in ds] == [
        ("allow", None, None),  # 0.3 of 0.4: 75 percent
        ("warn", 93, "budget:cost:80"),  # 0.375
        ("abort", 400000, "budget:cost"),  # the usage reaching 0.4, in micro-dollars
    ]


def test_tokens_come_before_cost_and_cost_before_calls():
    r = Run()
    ds = decide([r.usage(100, cost=1.0), r.call("1")], budgets(runTokens=100, runCostUsd=1, runToolCalls=1))
    assert [(d["action"], d["warning_key"]) for d in ds] == [("abort", "budget:tokens"), ("abort", None)]
    r = Run()
    ds = decide([r.usage(85, cost=0.9), r.call("1")], budgets(runTokens=100, runCostUsd=1, runToolCalls=1))
    assert [(d["action"], d["warning_key"]) for d in ds] == [("warn", "budget:tokens:80")]  # one kind per call


def test_a_detector_block_stands_over_a_due_budget_warning_which_waits():
    config = budgets(runTokens=100)
    config["tools"]["loopDetection"].update(warningThreshold=1, criticalThreshold=2)
    r = Run()
    evs = [r.call("x"), r.result("x", error="E"), r.call("x"), r.result("x", error="E"), r.usage(90), r.call("x")]
    evs.append(r.call("y"))
    ds = decide(evs, config)
    assert [(d["action"], d["detector"]) for d in ds] == [
        ("allow", None),
        ("warn", "generic_repeat"),
        ("block", "generic_repeat"),  # V a block: it stands, the budget warning is due
        ("warn", "run_budget"),  # the next call rule 4 allows
    ]


def test_a_duplicate_usage_changes_nothing_and_run_end_drops_the_counters():
    r = Run()
    u = r.usage(500)
    evs = [u, u, dict(u), r.call("1")]
    ds = decide(evs, budgets(runTokens=1000))
    assert [d["action"] for d in ds] == ["allow"]  # 500 counted once: below 80 percent
    evs = [r.usage(900), r.end()]
    r.seq = 0
    evs += [r.call("2")]
    assert [d["action"] for d in decide(evs, budgets(runTokens=1000))] == ["allow"]


def test_a_usage_in_an_aborted_run_yields_nothing():
    r = Run()
    ds = decide([r.usage(1000), r.usage(5), r.call("1")], budgets(runTokens=1000))
    assert [(d["action"], d["tool_name"]) for d in ds] == [("abort", None), ("abort", "read")]


def test_a_duplicate_call_is_answered_with_its_budget_decision_again():
    r = Run()
    u = r.usage(900)
    c = r.call("1")
    ds = decide([u, c, dict(c)], budgets(runTokens=1000))
    assert ds[0] == ds[1] and ds[0]["warning_key"] == "budget:tokens:80" and ds[0]["action"] == "warn"


def test_counters_survive_the_stored_form_and_old_states_decode():
    cfg = DetectionConfig(budgets(runTokens=1000))
    r = Run()
    state = None
    for e in [r.usage(700), r.call("1"), r.usage(100)]:
        state, _ = apply(state, decode_event(json.dumps(e)), cfg)
    assert state is not None and (state.tokens, state.calls) == (800, 1)
    back = decode_state(encode_state(state))
    _, (d,) = apply(back, decode_event(json.dumps(r.call("2"))), cfg)
    assert (d.action, d.warning_key) == ("warn", "budget:tokens:80")
    # A state stored before the counters existed: the fields are absent and default.
    old = msgspec.msgpack.encode({"version": 1, "last_seq": 4, "aborted": True})
    st = decode_state(old)
    assert st.tokens == 0 and st.calls == 0 and st.abort_by is None and st.aborted
    _, (d,) = apply(st, decode_event(json.dumps(Run().call("z") | {"seq": 9})), cfg)
    assert (d.action, d.detector) == ("abort", "compaction_loop_persisted")  # the only abort there was then
    assert isinstance(EMPTY, RunState)


@pytest.mark.parametrize(
    "fields, what",
    [
        ({"input_tokens": -1}, "input_tokens"),
        ({"output_tokens": 1.5}, "output_tokens"),
        ({"input_tokens": 2**53}, "input_tokens"),
        ({"cost_usd": -0.01}, "cost_usd"),
        ({"cost_usd": 1e10}, "cost_usd"),
        ({"cost_usd": "1"}, "cost_usd"),
        ({"input_tokens": True}, "input_tokens"),
        ({"model": 3}, "model"),
    ],
)
def test_bad_usage_events_are_refused_naming_the_field(fields, what):
    ev = {"type": "usage", "run_id": "r", "seq": 0, "gateway_id": "g", **fields}
    with pytest.raises(DecodeError, match=what):
        decode_event(json.dumps(ev))


def test_a_non_finite_cost_is_refused():
    with pytest.raises(DecodeError, match="cost_usd"):
        decode_event(b'{"type":"usage","run_id":"r","seq":0,"gateway_id":"g","cost_usd":1e999}')
    with pytest.raises(DecodeError):
        decode_event(b'{"type":"usage","run_id":"r","seq":0,"gateway_id":"g","cost_usd":NaN}')


def test_budgets_merge_per_agent_field_by_field_and_bad_fields_are_no_ceiling():
    doc = {
        "loopwarden": {"budgets": {"runTokens": 1000, "runToolCalls": 5, "runCostUsd": 2}},
        "agents": {
            "list": [
                {"id": "main", "default": True},
                {"id": "cheap", "loopwarden": {"budgets": {"runCostUsd": 0.5, "runToolCalls": 0}}},
                {"id": "float", "loopwarden": {"budgets": {"runTokens": 10.0, "runCostUsd": 0.0000001}}},
            ]
        },
    }
    cfg = DetectionConfig(doc)
    main = cfg.for_agent("main").budgets
    assert main is not None and main.ceilings() == (1000, 2_000_000, 5)
    cheap = cfg.for_agent(" Cheap ").budgets
    assert cheap is not None and cheap.ceilings() == (1000, 500_000, None)  # 0 calls: no ceiling, not the global 5
    flt = cfg.for_agent("float").budgets
    assert flt is not None and flt.ceilings() == (10, None, 5)  # under one micro-dollar: no ceiling
    assert cfg.for_agent("unlisted").budgets == main
    assert DetectionConfig({}).for_agent(None).budgets is None
    warned = "\n".join(cfg.warnings)
    assert "agents.list[1].loopwarden.budgets.runToolCalls: 0" in warned
    assert "agents.list[2].loopwarden.budgets.runCostUsd" in warned
    assert len(cfg.warnings) == 2


def test_a_bad_global_budget_is_warned_once_not_per_agent():
    doc = {"loopwarden": {"budgets": {"runTokens": -5}}, "agents": {"list": [{"id": "a"}, {"id": "b"}]}}
    cfg = DetectionConfig(doc)
    assert [w for w in cfg.warnings if "runTokens" in w] == [
        "loopwarden.budgets.runTokens: -5 is not a positive integer; no ceiling"
    ]
    assert cfg.for_agent("a").budgets is None


def test_the_config_hash_covers_the_loopwarden_block():
    base = DetectionConfig({}).for_agent(None).config_hash
    assert (
        DetectionConfig(budgets(runTokens=5)).for_agent(None).config_hash
        != DetectionConfig({"tools": {"loopDetection": {"enabled": True}}}).for_agent(None).config_hash
    )
    assert DetectionConfig({"loopwarden": {"holdoutPercent": 10}}).for_agent(None).config_hash != base
    assert DetectionConfig({"loopwarden": {"enforce": False}}).for_agent(None).config_hash != base
    on = {"loopwarden": {"fleet": {"toolBreaker": {"enabled": True}}}}
    assert DetectionConfig(on).for_agent(None).config_hash != base
    # a bad value resolves as if absent: the same hash
    assert DetectionConfig({"loopwarden": {"budgets": {"runTokens": -1}}}).for_agent(None).config_hash == base
