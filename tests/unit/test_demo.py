"""`loopwarden demo`'s config and summary without a broker: the recommended config with
the demo's own spend cap (examples/config.json5 itself unchanged), one agent of the
demo's fleet capped, and the summary's account of the cap reached and the calls paused."""

from __future__ import annotations

import json

from detectors import load_config
from detectors.config import parse_document
from streams.tools.demo import DEMO_AGENTS, DEMO_CAP, EXAMPLE_CONFIG, cap_summary, demo_config
from streams.tools.simulate import agent_names


def test_the_demo_decides_with_the_recommended_config_and_a_cap_of_its_own():
    example = parse_document(EXAMPLE_CONFIG.read_bytes())
    assert "fleet" not in example.get("loopwarden", {})  # the recommended config has no cap
    doc = demo_config()
    caps = doc["loopwarden"]["fleet"].pop("spendCaps")
    assert caps == [DEMO_CAP] and doc["loopwarden"].pop("fleet") == {}
    assert doc == example
    (cap,) = load_config(json.dumps(demo_config())).spend_caps
    assert (cap.id, cap.per, cap.calls) == (DEMO_CAP["id"], "agent", DEMO_CAP["toolCalls"])
    assert cap.agents is not None and set(cap.agents) < set(agent_names(DEMO_AGENTS))  # one agent of the fleet


def test_the_summary_says_which_cap_was_reached_and_how_many_calls_were_paused():
    sig = f"{DEMO_CAP['id']}:sim-agent-0:1780002000000"
    rows = [
        {"cap": DEMO_CAP["id"], "key": "sim-agent-0", "reached": True, "signal": sig, "reached_at": 1780002001000}
        | {"paused": True, "kinds": [{"unit": "calls", "used": 270, "ceiling": 250, "percent": 108.0}]},
        {"cap": DEMO_CAP["id"], "key": "sim-agent-1", "reached": False, "signal": None, "reached_at": None}
        | {"paused": False, "kinds": [{"unit": "calls", "used": 20, "ceiling": 250, "percent": 8.0}]},
        {"cap": "other", "key": "x", "reached": True, "signal": "other:x:1", "reached_at": 1, "paused": True}
        | {"kinds": []},
    ]
    out = cap_summary(rows, {sig: 31, "other:x:1": 4})
    assert out["cap"] == DEMO_CAP["id"] and out["agents"] == DEMO_CAP["agents"]
    assert out["reached"] == [
        {
            "key": "sim-agent-0",
            "signal": sig,
            "reached_at": 1780002001000,
            "paused_now": True,
            "calls": {"used": 270, "ceiling": 250},
        }
    ]
    assert (out["calls_paused"], out["calls_paused_by_signal"]) == (31, {sig: 31})
    assert cap_summary([], {})["reached"] == [] and cap_summary([], {})["calls_paused"] == 0
