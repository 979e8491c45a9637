"""An audit of a simulated fleet with runs held out and an agent in shadow mode, on a
real broker and worker: `loopwarden simulate --holdout 20` publishes the config with
`holdoutPercent` 20 and waits until the worker (following the config topic) decides
under it; the audit then reports what the runs not enforced would have been told and
what they did after their first call that would have been stopped, and its budget
counts, exactly as an offline replay of the events read back from the topic computes
them (tests/unit/test_audit_core.py's `offline_policy`, built on `detectors.replay`)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from detectors import DetectionConfig, decode_event, replay
from streams.admin.config_topic import publish_config
from streams.audit.core import agent_hashes
from streams.tools.launch import command
from tests.config_shapes import OPENCLAW_DEFAULTS
from tests.integration.harness import ROOT, WorkerProcess, audit, new_prefix, read_all, setup_topics
from tests.unit.test_audit_core import offline_policy

pytestmark = pytest.mark.integration

BASE = {
    "tools": {"loopDetection": dict(OPENCLAW_DEFAULTS)},
    "agents": {
        "list": [
            {"id": "main", "default": True},
            # the simulator's breaker agents, in shadow mode: their loops run on, as held-out ones do
            {
                "id": "no-generic",
                "tools": {"loopDetection": {"detectors": {"genericRepeat": False}}},
                "loopwarden": {"enforce": False},
            },
        ]
    },
    "loopwarden": {"budgets": {"runTokens": 30000}},
}
HELD_OUT = {**BASE, "loopwarden": {**BASE["loopwarden"], "holdoutPercent": 20}}


def configs_by_run(decisions) -> dict[str, DetectionConfig]:
    """Each run's config, by the hash its decisions name: the base (the simulator's
    probes before the workers switched) or the one with holdoutPercent 20 (a run is
    decided under one config: the simulated runs start after the switch)."""
    configs = {h: DetectionConfig(c) for c in (BASE, HELD_OUT) for h in agent_hashes(DetectionConfig(c)).values()}
    out: dict[str, DetectionConfig] = {}
    for d in decisions:
        assert out.setdefault(d["run_id"], configs[d["config_hash"]]) is configs[d["config_hash"]], d
    return out


@pytest.fixture(scope="module")
def fleet(bootstrap, tmp_path_factory):
    """A simulated fleet decided by a worker that follows the config topic, 20 percent
    of its runs held out by `simulate --holdout 20`: (prefix, events, decisions, the
    simulator's report)."""
    tmp = tmp_path_factory.mktemp("shadow")
    prefix = new_prefix()
    s = setup_topics(bootstrap, prefix)
    asyncio.run(publish_config(s, json.dumps(BASE).encode(), "base.json"))
    worker = WorkerProcess(bootstrap, prefix, None, tmp)  # no --config: it follows the topic
    worker.start()
    try:
        sim = subprocess.run(
            command(
                "simulate",
                "--bootstrap",
                bootstrap,
                "--topic-prefix",
                prefix,
                "--gateways",
                "3",
                "--runs",
                "4",
                "--seconds",
                "15",
                "--loop-share",
                "0.5",
                "--think-ms",
                "2:10",
                "--seed",
                "7",
                "--holdout",
                "20",
                "--quiet",
            ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert sim.returncode in (0, 2) and sim.stdout, sim.stderr
        events = [json.loads(m.value) for m in read_all(bootstrap, s.events_topic)]
        # Every call has a decision, a usage event only when it spends a budget: the
        # calls' decisions name each run's config, under which an offline replay says
        # how many decisions there are in all.
        worker.wait_published(len(events))
        decisions = [json.loads(m.value) for m in read_all(bootstrap, s.decisions_topic)]
        run_config = configs_by_run(decisions)
        by_run: dict[str, list] = {}
        for e in events:
            by_run.setdefault(e["run_id"], []).append(decode_event(json.dumps(e)))
        assert len(decisions) == sum(len(replay(evs, run_config[run_id])) for run_id, evs in by_run.items())
    finally:
        worker.stop()
    return prefix, events, decisions, json.loads(sim.stdout)


def test_an_audit_reports_held_out_runs_as_an_offline_replay_of_the_topic_does(bootstrap, fleet):
    prefix, events, decisions, report = fleet
    run_config = configs_by_run(decisions)
    assert any(d["config_hash"] == agent_hashes(DetectionConfig(HELD_OUT))["(default)"] for d in decisions)
    want = offline_policy(events, lambda run_id: run_config[run_id])

    code, out = audit(bootstrap, prefix)
    assert code == 0, out
    assert out["matched"] == out["decisions_recorded"] == len(decisions)
    assert {k: out[k] for k in ("budgets", "shadow")} == want
    code, sharded = audit(bootstrap, prefix, "--jobs", "3")  # shards' counts and medians add up to the same
    for timing in ("seconds", "events_per_s"):
        out.pop(timing), sharded.pop(timing)
    assert (code, sharded) == (0, out)

    # The fleet has what the report is for: held-out runs and a shadow agent's, calls
    # that would have been stopped, runs that went on and ended by themselves.
    shadow = want["shadow"]
    assert 0 < shadow["held_out_runs"] < shadow["runs"]
    assert shadow["by_shadow_action"]["block"] + shadow["by_shadow_action"]["abort"] > 0
    would = shadow["would_stop"]
    assert would["runs"] > 0 and would["ended_by_themselves"] == would["runs"]  # every simulated run ends
    assert would["calls_after"]["p90"] >= would["calls_after"]["median"] > 0
    assert would["tokens_after"]["median"] > 0
    assert want["budgets"]["warnings"] > 0
    assert report["decisions_not_enforced"] > 0 and report["tokens"] > 0
