"""A fleet spend cap operated on a real broker (semantics.md section 11): a worker whose
config has a small per-agent calls cap, calls that reach it, `loopwarden spend --json`
showing the key reached with what it used of its ceiling (from the spend stage's table and
the fleet topic), `top --once --json` carrying it, `loopwarden stop --lift ID` lifting it
(the worker then allows the agent's next call, with the lift's alert on the alerts topic),
and `stop --list` listing it as lifted."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from streams.tools.launch import command
from tests.integration.harness import ROOT, consume, produce, wait_until

pytestmark = pytest.mark.integration

CAP = "ops-calls"
WINDOW_MS = 30 * 86_400_000  # far wider than the test: its calls fall in one window
CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {"fleet": {"spendCaps": [{"id": CAP, "per": "agent", "windowMs": WINDOW_MS, "toolCalls": 5}]}},
}


def call(agent: str, run: str, seq: int) -> tuple[bytes, bytes]:
    ev = {"type": "tool_call", "run_id": run, "seq": seq, "gateway_id": "gw-1", "agent_id": agent}
    ev |= {"ts": int(time.time() * 1000), "tool_name": "read", "params": {"path": f"/f/{seq}"}}
    return run.encode(), json.dumps(ev).encode()


def loopwarden(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run(command(*args), cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def spend(kafka: tuple[str, ...], *extra: str) -> dict:
    p = loopwarden("spend", *kafka, "--json", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def rows_by_key(rep: dict) -> dict[str, dict]:
    return {r["key"]: r for r in rep["rows"]}


def decisions(bootstrap: str, topic: str, n: int) -> dict[tuple[str, int], dict]:
    got = [json.loads(m.value) for m in consume(bootstrap, topic, n)]
    assert len(got) == n, got
    return {(d["run_id"], d["seq"]): d for d in got}


def test_a_cap_reached_is_shown_by_spend_and_top_and_lifted_by_stop(bootstrap, tmp_path, start_worker):
    w = start_worker(None, CONFIG, partitions=4)
    s = w.topics
    kafka = ("--bootstrap", bootstrap, "--topic-prefix", s.topic_prefix)
    pinned = ("--config", str(tmp_path / "config-w.json"))  # the file the worker was started with
    # No config on the config topic, and none given: no caps, said so.
    bare = spend(kafka)
    assert bare["caps"] == [] and bare["rows"] == [] and "no spend caps in the config" in bare["notes"][0]

    produce(bootstrap, s.events_topic, [call("Alice", "alice-r1", i) for i in range(5)] + [call("bob", "bob-r1", 0)])
    (reached,) = [json.loads(m.value) for m in consume(bootstrap, s.fleet_topic, 1)]
    sig = reached["id"]
    start = reached["window_start"]
    assert sig == f"{CAP}:alice:{start}" and (reached["unit"], reached["used"], reached["ceiling"]) == ("calls", 5, 5)
    wait_until(lambda: w.metric("loopwarden_fleet_signals") >= 1, 10, "the cap on the worker")
    produce(bootstrap, s.events_topic, [call("alice", "alice-r1", 5), call("bob", "bob-r1", 1)])
    got = decisions(bootstrap, s.decisions_topic, 8)
    sixth = got["alice-r1", 5]
    assert (sixth["action"], sixth["detector"], sixth["fleet_signal"]) == ("abort", "fleet_spend_cap", sig)
    assert got["bob-r1", 1]["action"] == "allow" and got["alice-r1", 4]["action"] == "allow"

    # `loopwarden spend`: the key reached first, with its signal, used of the ceiling, paused.
    def counted() -> dict | None:
        rep = spend(kafka, *pinned)
        rows = rows_by_key(rep)
        return rep if rows.get("alice", {}).get("kinds", [{}])[0].get("used") == 6 and "bob" in rows else None

    rep = wait_until(counted, 60, "the spend stage's table to hold alice's sixth call", every=0.5)
    assert [r["key"] for r in rep["rows"]] == ["alice", "bob"]  # reached first
    alice, bob = rep["rows"]
    assert alice["kinds"] == [{"unit": "calls", "used": 6, "ceiling": 5, "percent": 120.0}]
    assert (alice["reached"], alice["signal"], alice["paused"], alice["lifted"]) == (True, sig, True, False)
    end = start + WINDOW_MS
    assert (alice["window_start"], alice["window_end"], alice["paused_until"]) == (start, end, end)
    assert 0 < alice["time_left_s"] <= WINDOW_MS / 1000
    assert bob["kinds"] == [{"unit": "calls", "used": 2, "ceiling": 5, "percent": 40.0}] and not bob["reached"]
    (cap,) = rep["caps"]
    assert (cap["id"], cap["keys"], cap["reached"]) == (CAP, 2, 1)
    assert cap["table"] == f"{s.app_id}-spend-{WINDOW_MS}-changelog" and rep["notes"] == []
    text = loopwarden("spend", *kafka, *pinned).stdout
    assert "REACHED, paused until" in text and f"[{sig}]" in text and "6 of 5 calls" in text

    # `top --once --json` carries the caps nearest to their ceiling, from the same table.
    p = loopwarden("top", *kafka, "--once", "--json")
    assert p.returncode == 0, p.stderr
    top = json.loads(p.stdout)
    assert [(r["key"], r["signal"], r["paused"], r["percent"]) for r in top["spend_caps"]] == [
        ("alice", sig, True, 120.0),
        ("bob", None, False, 40.0),
    ]

    # Lifted: the worker allows alice's next call; the cap is listed as lifted.
    p = loopwarden("stop", *kafka, "--lift", sig, "--issued-by", "oncall")
    assert p.returncode == 0 and p.stdout.strip() == sig, p.stderr
    wait_until(lambda: w.metric("loopwarden_fleet_records_read") >= 2, 10, "the lift on the worker")
    produce(bootstrap, s.events_topic, [call("alice", "alice-r2", 0)])
    assert decisions(bootstrap, s.decisions_topic, 9)["alice-r2", 0]["action"] == "allow"
    lifted = rows_by_key(spend(kafka, *pinned))["alice"]
    assert (lifted["reached"], lifted["paused"], lifted["lifted"]) == (True, False, True)
    listed = json.loads(loopwarden("stop", *kafka, "--list", "--json").stdout)
    assert [(r["id"], r["kind"], r["state"], r["lifted"]) for r in listed] == [(sig, "spend_cap", "lifted", True)]
    again = loopwarden("stop", *kafka, "--lift", sig)
    assert again.returncode == 1 and "lifted already" in again.stderr
    alerts = [json.loads(m.value) for m in consume(bootstrap, s.alerts_topic, 4)]
    assert [(a["kind"], a["subject"]) for a in alerts if a["kind"] != "spend_cap_warning"] == [
        ("spend_cap_reached", sig),
        ("spend_cap_lifted", sig),
    ]
    (lift,) = [a for a in alerts if a["kind"] == "spend_cap_lifted"]
    assert lift["issued_by"] == "oncall" and lift["until_ts"] < start + WINDOW_MS

    # Without --config, the caps are the config topic's current config's.
    assert loopwarden("config", "publish", *kafka, str(tmp_path / "config-w.json")).returncode == 0
    published = spend(kafka)
    assert [c["id"] for c in published["caps"]] == [CAP] and rows_by_key(published)["alice"]["lifted"]
