"""Messages name the tool as the event carried it (`Bash`, `run_shell_command`), while the
decision's `tool_name` stays normalized (semantics.md section 7: message texts are free)."""

from __future__ import annotations

import json

from detectors import decode_event, load_config, replay
from detectors.fleet import Breaker

ON = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def events(tool: str, n: int, run: str = "r") -> list[dict]:
    out = []
    for i in range(n):
        common = {"run_id": run, "gateway_id": "gw", "tool_name": tool, "params": {"command": "make"}, "ts": 1000 + i}
        out.append({"type": "tool_call", "seq": 2 * i, "tool_call_id": f"c{i}", **common})
        out.append({"type": "tool_result", "seq": 2 * i + 1, "tool_call_id": f"c{i}", "result": "same", **common})
    return out


def decide(evs: list[dict], doc: dict = ON, fleet=()) -> list:
    return replay([decode_event(json.dumps(e)) for e in evs], load_config(json.dumps(doc)), fleet)


def test_a_block_of_a_bash_call_names_bash_and_the_wire_says_exec():
    ds = decide(events("Bash", 6))
    warn, block = ds[3], ds[5]
    assert (warn.action, block.action) == ("warn", "block")
    assert warn.tool_name == block.tool_name == "exec"
    assert block.message.startswith("Blocked: Bash was called 5 times") and "exec" not in block.message
    assert warn.message.startswith("Warning: Bash was called 3 times")


def test_a_duplicate_is_answered_again_with_the_name_it_carries():
    evs = events("run_shell_command", 6)
    ds = decide(evs + [evs[-2]])  # the last call delivered again
    assert ds[-1] == ds[-2] and "run_shell_command" in ds[-1].message


def test_the_fleet_and_aborted_runs_name_it_too():
    b = Breaker(
        id="exec:o:1", tool_name="exec", outcome="o", from_ts=0, until_ts=10**12, runs=20, gateways=3, window_ms=300000
    )
    (d,) = decide(events("Bash", 1)[:1], fleet=[b])
    assert (d.action, d.detector, d.tool_name) == ("block", "fleet_tool_breaker", "exec")
    assert "Bash is failing across the fleet" in d.message
    budget = {**ON, "loopwarden": {"budgets": {"runToolCalls": 1}}}
    ds = decide(events("Bash", 3), budget)
    assert [d.action for d in ds] == ["warn", "abort", "abort"]  # 1 of 1 call: the 95 percent mark
    assert ds[2].message == "Run aborted: Bash was called after the run's budget was spent."
