"""The OpenClaw plugin in OpenClaw's own hook runner, against a real broker and worker: a
looping agent is warned, then blocked with loopwarden's message at the configured counts;
with the worker stopped, fail-open runs the calls and fail-closed blocks them. Under a
2,000-token run budget, the usage the plugin reports from OpenClaw's llm_output hook warns
the run at 80 and 95 percent and stops it at 100 percent, a shadow agent's looping run
executes every call, and every decision on the topic equals an offline replay of the events
the plugin sent (clients/openclaw/test/agent.integration.ts)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from detectors import decode_event
from tests.events import distinct, offline, per_run
from tests.integration.harness import decisions_by_partition, read_all

PLUGIN = Path(__file__).resolve().parents[2] / "clients" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}
BUDGET_CONFIG = {
    **CONFIG,
    "loopwarden": {"budgets": {"runTokens": 2000}},
    "agents": {"list": [{"id": "main", "default": True}, {"id": "trial", "loopwarden": {"enforce": False}}]},
}


def run_phase(bootstrap: str, prefix: str, phase: str) -> str:
    if not NODE.exists():
        pytest.fail(f"{NODE} is missing (tests/conftest.py installs the plugin's packages)")
    env = dict(os.environ, LW_BOOTSTRAP=bootstrap, LW_PREFIX=prefix, LW_PHASE=phase)
    out = subprocess.run(
        [str(NODE), "--test", "--test-reporter=tap", "test/agent.integration.ts"],
        cwd=PLUGIN,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    return out.stdout


@pytest.mark.integration
def test_openclaw_plugin_blocks_a_looping_agent_and_keeps_its_fail_policy(bootstrap, start_worker):
    w = start_worker(None, CONFIG)
    prefix = w.topics.topic_prefix
    out = run_phase(bootstrap, prefix, "worker")
    assert "# pass 3" in out and "# fail 0" in out, out[-3000:]
    w.stop()
    assert not w.alive()
    out = run_phase(bootstrap, prefix, "stopped")
    assert "# pass 3" in out and "# fail 0" in out, out[-3000:]


@pytest.mark.integration
def test_openclaw_plugin_reports_usage_stops_a_spent_run_and_keeps_shadow_runs_going(bootstrap, start_worker):
    w = start_worker(None, BUDGET_CONFIG)
    s = w.topics
    out = run_phase(bootstrap, s.topic_prefix, "budget")
    assert "# pass 4" in out and "# fail 0" in out, out[-3000:]
    # Everything the plugin and the client sent, in each run's order, replayed offline.
    # The plugin's process has exited: all it sent is on the topic.
    sent = sorted(read_all(bootstrap, s.events_topic), key=lambda m: (m.partition, m.offset))
    events = [decode_event(m.value) for m in sent]
    expected = offline(events, BUDGET_CONFIG)
    w.wait_published(len(events))
    msgs = read_all(bootstrap, s.decisions_topic)
    # Decisions are idempotent by event_id (a worker may publish one again); gateways keep the first.
    got = distinct([d for part in decisions_by_partition(msgs).values() for d in part])
    assert len(got) == len(expected), w.tail()
    assert per_run(got) == per_run(expected)
    runs = {run.rsplit("-", 1)[0]: ds for run, ds in per_run(expected).items()}  # oc-budget-<ms> -> oc-budget
    assert set(runs) == {"oc-budget", "oc-usage-client", "oc-shadow"}, runs.keys()

    # The plugin's run: usage only from llm_output (one per attempt), the tokens of each.
    budget_run = next(r for r in per_run(expected) if r.startswith("oc-budget-"))
    usage = [e for e in events if e.run_id == budget_run and type(e).__name__ == "Usage"]
    assert [(u.input_tokens, u.output_tokens, u.model) for u in usage] == [
        (900, 100, "test/scripted-1"),
        (500, 100, "test/scripted-1"),
        (250, 50, "test/scripted-1"),
        (60, 40, "test/scripted-1"),
    ]
    b = runs["oc-budget"]
    assert [(d["action"], d["warning_key"], d["count"]) for d in b[:6]] == [
        ("allow", None, None),
        ("allow", None, None),
        ("allow", None, None),
        ("warn", "budget:tokens:80", 80),
        ("warn", "budget:tokens:95", 95),
        ("abort", "budget:tokens", 2000),  # the usage event's own decision
    ]
    assert b[5]["tool_name"] is None and b[5]["detector"] == "run_budget"
    # Calls after it: answered by the client's remembered abort (nothing sent) or by the worker.
    assert all((d["action"], d["detector"]) == ("abort", "run_budget") for d in b[6:]) and len(b) <= 8

    c = runs["oc-usage-client"]
    assert [(d["action"], d["tool_name"], d["warning_key"]) for d in c] == [
        ("allow", "read", None),
        ("warn", "read", "budget:tokens:95"),
        ("abort", None, "budget:tokens"),
    ]

    sh = runs["oc-shadow"]
    assert [(d["action"], d["enforced"], d["shadow_action"]) for d in sh] == [
        ("allow", False, "allow"),
        ("allow", False, "allow"),
        ("allow", False, "allow"),
        ("allow", False, "warn"),
        ("allow", False, "allow"),  # the same bucket: suppressed
        ("allow", False, "block"),
        ("allow", False, "block"),
    ]
    assert w.alive()
